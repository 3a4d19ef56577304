#!/usr/bin/env bash
# bench/kernels/gemm_clock.py on the lent GPU, with nvidia-smi sampling (reading only).
source bench/device/call_lib.sh
record_env
step gemm_clock
timeout $(left 400) python bench/kernels/gemm_clock.py --out $W/gemm_clock.json --smi $W/smi.csv >> $log 2>&1
cp $W/gemm_clock.json $OUT/ 2>/dev/null; gzip -c $W/smi.csv > $OUT/smi.csv.gz 2>/dev/null; cp $W/env.txt $OUT/
