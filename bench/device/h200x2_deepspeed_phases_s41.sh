#!/bin/bash
# Session 41, lent 2 x H200: DeepSpeed's step by phase, unprofiled (bench/layer_host_times.py
# real: the Llama decoder layer's forward, the backward call, torch.optim's step and
# DeepSpeedEngine._take_model_step, each between two perf_counter reads), ZeRO-3 z3-1b and
# ZeRO-2 z2-1b, FusedAdam built first, the reference step before and after. Carry .whl.
# Usage on the device: bash bench/device/h200x2_deepspeed_phases_s41.sh. Out: $OUT/call.tgz.
CALL_BUDGET_S=400 source bench/device/call_lib.sh
record_env
arch=${TORCH_CUDA_ARCH_LIST:-}; [ -n "$arch" ] && export TORCH_CUDA_ARCH_LIST=$(echo "$arch" | sed -E 's/([0-9]+\.[0-9]+)[a-z]+/\1/g')
python -m phantom.engine.host > $W/host_reference_before.json 2>> $log
step build-fused-adam
timeout $(left 120) python -c "from deepspeed.ops.op_builder import FusedAdamBuilder; FusedAdamBuilder().load(verbose=False)" >> $log 2>&1
step layers
timeout $(left 250) python bench/layer_host_times.py real --out $W --configs z3-1b,z2-1b --rounds 1 >> $log 2>&1
python -m phantom.engine.host > $W/host_reference_after.json 2>> $log
step done
grep -h "round" $log | cut -c1-250 | tail -20
