#!/bin/bash
# Session 43, lent 1 x H200 (no 2-GPU machine lent): DeepSpeed ZeRO-3 on ONE GPU, real, to check
# phantom's host time for ZeRO-3's Python (the per-module fetch/release hooks run the same code
# with one partition) without the second rank: two rounds of the host-bound rows (z3-1b,
# z3-3b-ac, z3-1b-ga2) with z2-1b and z3-1b-s4k (GPU-bound controls) in the first, ZeRO-3's
# host path function by function (zero3_host_phases.py) between them, and the reference CPU
# step (python -m phantom.engine.host) between every two. Carry .whl (deepspeed 0.19.8, hjson,
# pydantic). Usage on the device: bash bench/device/h200_zero3_1gpu_s43.sh. Out: $OUT/call.tgz
CALL_BUDGET_S=560 source bench/device/call_lib.sh
record_env
reference() { step "reference $1"; python -m phantom.engine.host > $W/host_reference_$1.json 2>> $log; }
reference before
build_fused_adam
step round1
timeout $(left 260) python bench/deepspeed.py real --nproc 1 --configs z3-1b,z3-3b-ac,z3-1b-ga2,z2-1b,z3-1b-s4k \
  --out $W/zero3_1gpu_real_r1.json --log $W/round1.log >> $log 2>&1
reference mid
step phases
timeout $(left 80) python -m torch.distributed.run --standalone --nproc-per-node 1 bench/zero3_host_phases.py \
  --out $W/z3-1b_phases_1gpu.json -- examples/deepspeed/train.py --deepspeed_config examples/deepspeed/zero3.json \
  --model llama-1b --seq-len 2048 --micro-batch 4 --grad-accum 1 --steps 8 --warmup 3 > $W/phases.log 2>&1
reference mid2
step round2
timeout $(left 160) python bench/deepspeed.py real --nproc 1 --configs z3-1b,z3-3b-ac,z3-1b-ga2 \
  --out $W/zero3_1gpu_real_r2.json --log $W/round2.log >> $log 2>&1
reference after
step done
grep -h "^summary" $W/round*.log $W/phases.log | cut -c1-100
