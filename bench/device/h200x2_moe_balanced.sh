#!/bin/bash
# Session 22, lent 2 x H200, after h200x2_moe.sh: the MoE configs with Megatron's forced load
# balancing (random router logits: what phantom's uniform-dispatch policy stands for), the
# Mixtral EP2 one a second time, and the natural-routing Mixtral TP2 + SP one again.
# Usage on the device, carrying .whl: bash bench/device/h200x2_moe_balanced.sh. Out: $OUT/call.tgz.
CALL_BUDGET_S=420 source bench/device/call_lib.sh
export CUDA_DEVICE_MAX_CONNECTIONS=1
{ date -u; nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit --format=csv,noheader
  python -c "import torch; print(torch.__version__, torch.version.cuda, torch.cuda.nccl.version())"
  lscpu | grep "Model name"; nproc; } > $W/env.txt 2>&1
python -m phantom.engine.host > $W/host_reference_before.json 2>> $log
step megatron-moe-balanced
timeout $(left 400) python bench/megatron.py real --timeout 150 \
  --configs moe-qwen3-ep2-balanced,moe-mixtral-tp2-sp-balanced,moe-mixtral-ep2-balanced,moe-mixtral-tp2-sp \
  --out $W/megatron_moe_balanced_real_h200x2.json >> $log 2>&1
python -m phantom.engine.host > $W/host_reference_after.json 2>> $log
step done
