#!/bin/bash
# Session 34: the caching allocator's segments before and after the first two optimizer steps of
# Llama 3.1 8B (torchtitan's 2024 code) under FSDP2 on 4 GPUs, local batch 1, selective AC,
# eager (bench/opt_step_segments.py): where AdamW's states land. Phantom's side: the same
# command under `phantom run --nproc-per-node 4 --gpu H100`.
# Usage on the device (carry bench/torchtitan_wheels): bash bench/device/h100x4_opt_segments.sh
source bench/device/call_lib.sh
export HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1
record_env
# torchtitan and its light dependencies from the carried wheels (bench/torchtitan.py WHEEL_SPECS)
python -m pip install -q --no-deps --no-index --find-links bench/torchtitan_wheels torchtitan==0.3.0 tyro==1.0.17 \
  docstring-parser==0.18.0 typeguard==4.6.0 rich==15.0.0 pygments==2.21.0 markdown-it-py==4.3.0 mdurl==0.1.2 \
  spmd-types==0.2.3 torchdata==0.11.0 tokenizers==0.23.3 >> $log 2>&1
step segments
timeout $(left 300) torchrun --standalone --nproc-per-node 4 bench/opt_step_segments.py --out $W/seg_eager --big-allocs ${BIG_MIB:-500} --trace-step ${TRACE_STEP:-2} -- \
  bench/torchtitan_entry.py --patches bench/torchtitan_2024.py --dump_folder /tmp/tt --module examples.torchtitan \
  --config llama3_8b --training.local_batch_size 1 --training.steps 3 --training.disable_cuda_graphs \
  activation-checkpoint:selective >> $log 2>&1
cp $W/seg_eager/segments.json $OUT/segments_eager_real.json 2>/dev/null
step done
