#!/bin/bash
# Session 24: FlexAttention's calibration grid (bench/kernels/flex_sweep.py) and the held-out
# benchmark (bench/flex_attention.py) on one GPU. Usage: bash bench/device/flex_sweep.sh
source bench/device/call_lib.sh
record_env
step sweep
timeout $(left 330) python bench/kernels/flex_sweep.py --out $W/flex_sweep.json >> $log 2>&1
step bench
timeout $(left 200) python bench/flex_attention.py --out $W/flex_real.jsonl >> $log 2>&1
step done
