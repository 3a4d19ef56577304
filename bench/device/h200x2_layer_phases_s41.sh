#!/bin/bash
# Session 41, lent 2 x H200: the host time of each phase of a step, unprofiled
# (bench/layer_host_times.py real: the layer forward, the backward call, torch.optim's step and,
# for DeepSpeed, DeepSpeedEngine._take_model_step, each between two perf_counter reads), with
# DeepSpeed's FusedAdam built first and the reference step before and after. Carry .whl.
# Usage on the device: [CONFIGS=A,B] bash bench/device/h200x2_layer_phases_s41.sh
# (default: Megatron tp2-sp and the 1-GPU replica, DTensor tp-1b-s2k, ZeRO-3 z3-1b; the
# session's second call ran CONFIGS=z3-1b,z2-1b). Out: $OUT/call.tgz.
CONFIGS=${CONFIGS:-tp2-sp,replica,tp-1b-s2k,z3-1b}
CALL_BUDGET_S=560 source bench/device/call_lib.sh
record_env
python -m phantom.engine.host > $W/host_reference_before.json 2>> $log
build_fused_adam
step layers
timeout $(left 400) python bench/layer_host_times.py real --out $W --configs $CONFIGS --rounds 1 >> $log 2>&1
python -m phantom.engine.host > $W/host_reference_after.json 2>> $log
step done
grep -h "round" $log | cut -c1-250 | tail -20
