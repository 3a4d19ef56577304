#!/bin/bash
# Session 22, lent 2 x H200: kernel profiles (bench/profile_real.py) of two balanced MoE configs,
# to set against phantom's per-op times. A first try with --step 7 --active 4 (two torch
# optimizers an iteration assumed: Megatron's dense and expert ones) recorded nothing, so the
# hook fires fewer times; --step 3 --active 2 records two hooks, and the JSON says how many the
# run saw (optimizer_step_hooks) to turn per-hook numbers into per-iteration ones.
# Usage on the device, carrying .whl: bash bench/device/h200x2_moe_profile.sh. Out: $OUT/call.tgz.
CALL_BUDGET_S=300 source bench/device/call_lib.sh
export CUDA_DEVICE_MAX_CONNECTIONS=1
{ date -u; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; } > $W/env.txt 2>&1
moe=(--num-layers 4 --seq-length 4096 --micro-batch-size 1 --global-batch-size 8 --train-iters 6 --use-distributed-optimizer --core-attention sdpa --moe-router-force-load-balancing)
for c in "mixtral-ep2:--preset mixtral-8x7b --ep 2" "mixtral-tp2-sp:--preset mixtral-8x7b --tp 2 --sequence-parallel"; do
  name=${c%%:*}; step $name
  timeout $(left 130) python -m torch.distributed.run --standalone --nproc-per-node 2 bench/profile_real.py --step 3 --active 2 --sync \
    --out $W/prof_moe-$name-balanced.json -- examples/megatron/pretrain_gpt.py ${c#*:} "${moe[@]}" >> $log 2>&1
done
step done
