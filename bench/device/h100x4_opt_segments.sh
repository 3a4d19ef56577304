#!/bin/bash
# Session 34: the caching allocator's segments before and after the first two optimizer steps of
# Llama 3.1 8B (torchtitan's 2024 code) under FSDP2 on 4 GPUs, local batch 1, selective AC,
# eager (bench/opt_step_segments.py): where AdamW's states land. Phantom's side: the same
# command under `phantom run --nproc-per-node 4 --gpu H100`.
# Usage on the device (carry bench/torchtitan_wheels): bash bench/device/h100x4_opt_segments.sh
source bench/device/call_lib.sh
record_env
setup_torchtitan
step segments
timeout $(left 300) torchrun --standalone --nproc-per-node 4 bench/opt_step_segments.py --out $W/seg_eager --big-allocs ${BIG_MIB:-500} --trace-step ${TRACE_STEP:-2} -- \
  bench/torchtitan_entry.py --patches bench/torchtitan_2024.py --dump_folder /tmp/tt --module examples.torchtitan \
  --config llama3_8b --training.local_batch_size 1 --training.steps 3 --training.disable_cuda_graphs \
  activation-checkpoint:selective >> $log 2>&1
cp $W/seg_eager/segments.json $OUT/segments_eager_real.json 2>/dev/null
step done
