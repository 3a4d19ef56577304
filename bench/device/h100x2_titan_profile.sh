#!/bin/bash
# Session 34: 5 of Llama 3.1 8B's blocks (torchtitan's 2024 code) under FSDP2 on 2 GPUs, local
# batch 2, selective AC, blocks compiled (loss not): float8 and bf16, 20 steps each, with
# torchtitan's profiler tracing step 15 (rank 0's trace kept): where the step's time goes when
# FSDP's collectives overlap compiled and float8 compute.
# Usage on the device (carry bench/torchtitan_wheels and .whl): bash bench/device/h100x2_titan_profile.sh
# NPROC=4 CONFIG=llama3_8b LBS=1: all 32 blocks under FSDP2 on 4 GPUs, local batch 1.
source bench/device/call_lib.sh
record_env
setup_torchtitan
for cfg in float8 bf16; do
  step $cfg
  patch_flags=""; [ $cfg = float8 ] && patch_flags="--float8"
  timeout $(left 240) torchrun --standalone --nproc-per-node ${NPROC:-2} bench/torchtitan_entry.py --patches bench/torchtitan_2024.py \
    $patch_flags --dump_folder /tmp/tt_$cfg --module examples.torchtitan --config ${CONFIG:-llama3_8b_5layers} \
    --training.local_batch_size ${LBS:-2} --training.steps 20 \
    --training.disable_cuda_graphs --compile.enable --compile.components model --profiler.enable_profiling \
    --profiler.profile_freq 15 activation-checkpoint:selective > $W/$cfg.log 2>&1
  grep -a "step:" $W/$cfg.log | sed 's/\x1b\[[0-9;]*m//g' >> $log
  find /tmp/tt_$cfg/profiling -type f >> $log 2>&1
  f=$(find /tmp/tt_$cfg/profiling -type f -name "*rank0*" | head -1)
  case "$f" in *.gz) cp "$f" $OUT/trace_${cfg}_rank0.json.gz ;; ?*) gzip -c "$f" > $OUT/trace_${cfg}_rank0.json.gz ;; esac
done
step done
