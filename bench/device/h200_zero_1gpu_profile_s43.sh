#!/bin/bash
# Session 43, lent 1 x H200: kernel profiles (bench/profile_real.py, 2 steps, synchronized) of
# DeepSpeed z2-1b and z3-1b on ONE GPU. h200_zero3_1gpu_s43.sh found z2-1b at 226.5 ms there,
# steady step to step (GPU-bound), against phantom's 201.7 (on 2 GPUs the same row is within
# 2%): which kernels take the extra ~20 ms. A plain z2-1b run and the reference step again.
# Carry .whl. Usage on the device: bash bench/device/h200_zero_1gpu_profile_s43.sh. Out: $OUT/call.tgz
CALL_BUDGET_S=300 source bench/device/call_lib.sh
record_env
reference() { step "reference $1"; python -m phantom.engine.host > $W/host_reference_$1.json 2>> $log; }
reference before
build_fused_adam
ds="examples/deepspeed/train.py --deepspeed_config examples/deepspeed/zero2.json --model llama-1b --seq-len 2048 --micro-batch 4 --grad-accum 1 --steps 8 --warmup 3"
for z in 2 3; do
  step "profile z$z-1b"
  timeout $(left 70) python -m torch.distributed.run --standalone --nproc-per-node 1 bench/profile_real.py --step 5 --active 2 --sync \
    --out $W/prof_z$z-1b_1gpu.json -- ${ds/zero2.json/zero$z.json} > $W/prof_z$z-1b.log 2>&1
done
step "plain z2-1b"
timeout $(left 60) python -m torch.distributed.run --standalone --nproc-per-node 1 $ds > $W/z2-1b_plain.log 2>&1
reference after
step done
grep -h "^summary" $W/*.log | cut -c1-100
