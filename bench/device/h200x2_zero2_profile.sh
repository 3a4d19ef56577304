#!/bin/bash
# Session 19, lent 2 x H200, fourth call: where DeepSpeed ZeRO-2's step goes on real GPUs.
# phantom is 4-8% over the real ZeRO-2 rows on every machine measured (two 2 x H200 samples,
# one 2 x H100), and those steps are GPU-bound, so the model, not host noise, is off somewhere.
# Kernel classes, NCCL kernel time and compute/NCCL overlap of two steps of z2-1b and z2-3b-ac
# (bench/profile_real.py), and z3-1b's for contrast. Carry .whl.
# Usage on the device: bash bench/device/h200x2_zero2_profile.sh. Out: $OUT/call.tgz.
CALL_BUDGET_S=330 source bench/device/call_lib.sh
{ date -u; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; } > $W/env.txt 2>&1
arch=${TORCH_CUDA_ARCH_LIST:-}; [ -n "$arch" ] && export TORCH_CUDA_ARCH_LIST=$(echo "$arch" | sed -E 's/([0-9]+\.[0-9]+)[a-z]+/\1/g')
step build-fused-adam
timeout $(left 120) python -c "from deepspeed.ops.op_builder import FusedAdamBuilder; FusedAdamBuilder().load(verbose=False)" >> $log 2>&1
ds="examples/deepspeed/train.py --deepspeed_config examples/deepspeed/zero2.json --seq-len 2048 --micro-batch 4 --grad-accum 1 --steps 8 --warmup 3"
step z2-1b
timeout $(left 80) python -m torch.distributed.run --standalone --nproc-per-node 2 bench/profile_real.py --step 5 --active 2 --sync \
  --out $W/prof_z2-1b.json -- $ds --model llama-1b >> $log 2>&1
step z2-3b-ac
timeout $(left 100) python -m torch.distributed.run --standalone --nproc-per-node 2 bench/profile_real.py --step 5 --active 2 --sync \
  --out $W/prof_z2-3b-ac.json -- $ds --model llama-3b --ac >> $log 2>&1
step z3-1b
timeout $(left 80) python -m torch.distributed.run --standalone --nproc-per-node 2 bench/profile_real.py --step 5 --active 2 --sync \
  --out $W/prof_z3-1b.json -- ${ds/zero2.json/zero3.json} --model llama-1b >> $log 2>&1
step done
