#!/bin/bash
# Session 21, lent 2 x H200: where a real DeepSpeed ZeRO-3 step's host time goes, function by
# function (bench/zero3_host_phases.py), for z3-1b and z3-1b-ga2 of bench/deepspeed.py (FusedAdam,
# as the real rows), and the plain z3-1b step without the timers (their own cost). phantom's
# ZeRO-3 rows are 14-28% under the real ones, which are host-bound. Carry .whl.
# Usage on the device: bash bench/device/h200x2_zero3_host.sh. Out: $OUT/call.tgz.
CALL_BUDGET_S=420 source bench/device/call_lib.sh
{ date -u; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; python -c "import torch; print(torch.__version__)"; lscpu | grep "Model name"; } > $W/env.txt 2>&1
arch=${TORCH_CUDA_ARCH_LIST:-}; [ -n "$arch" ] && export TORCH_CUDA_ARCH_LIST=$(echo "$arch" | sed -E 's/([0-9]+\.[0-9]+)[a-z]+/\1/g')
step "reference before"
timeout $(left 60) python -m phantom.engine.host > $W/host_reference_before.json 2>> $log
step build-fused-adam
timeout $(left 120) python -c "from deepspeed.ops.op_builder import FusedAdamBuilder; FusedAdamBuilder().load(verbose=False)" >> $log 2>&1
ds="examples/deepspeed/train.py --deepspeed_config examples/deepspeed/zero3.json --model llama-1b --seq-len 2048 --steps 8 --warmup 3"
tr="python -m torch.distributed.run --standalone --nproc-per-node 2"
for round in 1 2; do
  step "z3-1b round $round"
  timeout $(left 70) $tr bench/zero3_host_phases.py --out $W/z3-1b_round$round.json -- $ds --micro-batch 4 --grad-accum 1 >> $log 2>&1
  step "z3-1b-ga2 round $round"
  timeout $(left 80) $tr bench/zero3_host_phases.py --out $W/z3-1b-ga2_round$round.json -- $ds --micro-batch 2 --grad-accum 2 >> $log 2>&1
done
step "z3-1b plain"
timeout $(left 70) $tr $ds --micro-batch 4 --grad-accum 1 >> $log 2>&1
step "reference after"
timeout $(left 60) python -m phantom.engine.host > $W/host_reference_after.json 2>> $log
step done
