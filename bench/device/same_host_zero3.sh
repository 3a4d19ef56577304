#!/bin/bash
# Session 39, lent 2 x H200: DeepSpeed ZeRO-3 z3-1b (issue 9's row phantom is furthest over on
# the development VM) for real and under phantom on the same host, phantom with --host-speed 1.0
# (this host at its best is the node), interleaved, two rounds: is the excess in phantom's gap
# accounting or in carrying it between CPUs (as for Megatron, same_host_megatron.sh)? Carry .whl.
# Usage on the device: bash bench/device/same_host_zero3.sh. Out: $OUT/call.tgz
CALL_BUDGET_S=420 source bench/device/call_lib.sh
record_env
arch=${TORCH_CUDA_ARCH_LIST:-}; [ -n "$arch" ] && export TORCH_CUDA_ARCH_LIST=$(echo "$arch" | sed -E 's/([0-9]+\.[0-9]+)[a-z]+/\1/g')
step build-fused-adam
timeout $(left 120) python -c "from deepspeed.ops.op_builder import FusedAdamBuilder; FusedAdamBuilder().load(verbose=False)" >> $log 2>&1
A="examples/deepspeed/train.py --deepspeed_config examples/deepspeed/zero3.json --model llama-1b --seq-len 2048 --micro-batch 4 --grad-accum 1 --steps 8 --warmup 3"
for round in 1 2; do
  step "real $round"
  timeout $(left 60) python -m torch.distributed.run --standalone --nproc-per-node 2 $A > $W/z3_real_$round.log 2>&1
  step "phantom $round"
  timeout $(left 100) python -m phantom.cli run --nproc-per-node 2 --gpu H200 --host-speed 1.0 --report $W/z3_sim_$round.json -- $A > $W/z3_sim_$round.log 2>&1
done
step host_reference; python -m phantom.engine.host > $W/host_reference.json 2>> $log
step done
grep -h "^summary" $W/z3_*.log | cut -c1-80
