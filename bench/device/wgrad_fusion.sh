#!/bin/bash
# Session 26: Megatron's gradient-accumulation fusion on one GPU. (1) bench/wgrad_fusion.py: the
# wgrad GEMM alone, GEMM + add into fp32 main_grad, and the fused GEMM accumulating into it, at
# the published GPT rows' layer shapes; (2) bench/megatron.py real: one published 1.7B TP1 rank's
# work without and with --gradient-accumulation-fusion (Apex's extension stood in for by
# bench/device/apex_shim, the same cuBLAS call), twice. Needs the megatron-core 0.16.1 cp312
# wheel in .whl (carried). Usage: bash bench/device/wgrad_fusion.sh
source bench/device/call_lib.sh
export PYTHONPATH=$PYTHONPATH:$PWD/bench/device/apex_shim
record_env
step wgrad
timeout $(left 120) python bench/wgrad_fusion.py run --out $W/wgrad_real.json >> $log 2>&1
for round in 1 2; do
  step megatron_round$round
  timeout $(left 200) python bench/megatron.py real --configs pub-1.7b-1gpu,pub-1.7b-1gpu-gaf \
    --out $W/megatron_round$round.json >> $log 2>&1
  grep -h "elapsed time per iteration" $W/megatron_round$round.*.log | cut -c1-150 | tail -4 >> $log
done
step done
