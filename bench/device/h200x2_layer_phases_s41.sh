#!/bin/bash
# Session 41, lent 2 x H200: the host time of each phase of a step, unprofiled
# (bench/layer_host_times.py real: the layer forward, the backward call and torch.optim's step,
# each between two perf_counter reads): Megatron tp2-sp and the 1-GPU replica, DTensor
# tp-1b-s2k and DeepSpeed ZeRO-3 z3-1b (FusedAdam built first), with the reference step before
# and after. Carry .whl. Usage on the device: bash bench/device/h200x2_layer_phases_s41.sh.
# Out: $OUT/call.tgz.
CALL_BUDGET_S=560 source bench/device/call_lib.sh
record_env
arch=${TORCH_CUDA_ARCH_LIST:-}; [ -n "$arch" ] && export TORCH_CUDA_ARCH_LIST=$(echo "$arch" | sed -E 's/([0-9]+\.[0-9]+)[a-z]+/\1/g')
python -m phantom.engine.host > $W/host_reference_before.json 2>> $log
step build-fused-adam
timeout $(left 120) python -c "from deepspeed.ops.op_builder import FusedAdamBuilder; FusedAdamBuilder().load(verbose=False)" >> $log 2>&1
step layers
timeout $(left 400) python bench/layer_host_times.py real --out $W --configs tp2-sp,replica,tp-1b-s2k,z3-1b --rounds 1 >> $log 2>&1
python -m phantom.engine.host > $W/host_reference_after.json 2>> $log
step done
grep -h "round" $log | cut -c1-200 | tail -20
