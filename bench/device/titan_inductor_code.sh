#!/bin/bash
# Inductor's generated code of a compiled torchtitan step: 5 of Llama 3.1 8B's blocks (the 2024
# model code), one GPU, local batch 1, selective AC, blocks compiled, float8 and bf16; 20 steps
# with torchtitan's profiler tracing step 15. Keeps each compiled graph's output code (the
# wrapper module with every kernel's source and call sizes) to read what each generated kernel
# loads and stores, beside the kernel times of the trace. Carry bench/torchtitan_wheels and .whl.
source bench/device/call_lib.sh
record_env
setup_torchtitan
for cfg in float8 bf16; do
  step $cfg
  export TORCHINDUCTOR_CACHE_DIR=$W/cache_$cfg
  patch_flags=""; [ $cfg = float8 ] && patch_flags="--float8"
  timeout $(left 240) torchrun --standalone --nproc-per-node 1 bench/torchtitan_entry.py --patches bench/torchtitan_2024.py \
    $patch_flags --dump_folder /tmp/tt_$cfg --module examples.torchtitan --config llama3_8b_5layers \
    --training.local_batch_size 1 --training.steps 20 \
    --training.disable_cuda_graphs --compile.enable --compile.components model --profiler.enable_profiling \
    --profiler.profile_freq 15 activation-checkpoint:selective > $W/$cfg.log 2>&1
  grep -a "step:" $W/$cfg.log | sed 's/\x1b\[[0-9;]*m//g' >> $log
  f=$(find /tmp/tt_$cfg/profiling -type f -name "*rank0*" | head -1)
  case "$f" in *.gz) cp "$f" $OUT/trace_${cfg}_rank0.json.gz ;; ?*) gzip -c "$f" > $OUT/trace_${cfg}_rank0.json.gz ;; esac
  # the wrapper modules (they define `call`), one tarball per config
  grep -rl --include=*.py "async_compile.wait" $W/cache_$cfg | tar czf $OUT/output_code_$cfg.tgz -T - 2>> $log
  ls -la $OUT >> $log
done
cp $W/env.txt $OUT/
step done
