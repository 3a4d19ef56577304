#!/bin/bash
# Inductor's float8 casts fused with their producers, transposed stores (kernels/inductor_sweep.py
# --only fp8_fused): time per call, each kernel's time, grid and registers, and Inductor's
# generated source (its cache folder) to read what each kernel loads and stores. One GPU, ~3 min.
source bench/device/call_lib.sh
record_env
export TORCHINDUCTOR_CACHE_DIR=$W/inductor_cache
step sweep
timeout $(left 500) python bench/kernels/inductor_sweep.py --only ${ONLY:-fp8_fused,cast.fp8_t} \
    --out $W/inductor_fp8_fused.json >> $log 2>&1
cp $W/inductor_fp8_fused.json $W/env.txt $OUT/ 2>/dev/null
grep -rl --include=*.py "async_compile.wait" $W/inductor_cache | tar czf $OUT/output_code.tgz -T - 2>> $log
rm -rf $W/inductor_cache
step done
