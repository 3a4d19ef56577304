#!/bin/bash
# Session 43, lent 1 x H200: ZeRO-3 on ONE GPU, each run bracketed by the reference CPU step
# (python -m phantom.engine.host) just before and just after it, so each real step comes with
# the host's pace at that moment (the hosts change pace within minutes: h200_zero3_1gpu_s43.sh
# timed 742, 1208, 1131 and 741 us over 9 minutes). z3-1b and z3-3b-ac alternating. Compared
# with phantom at that pace by bench/host_speed_curve.py. Carry .whl.
# Usage on the device: bash bench/device/h200_zero3_paced_s43.sh. Out: $OUT/call.tgz
CALL_BUDGET_S=540 source bench/device/call_lib.sh
record_env
build_fused_adam
reference() { python -m phantom.engine.host > $W/host_reference_$1.json 2>> $log; }
i=0
reference 0
for config in z3-1b z3-3b-ac z3-1b z3-3b-ac z3-1b z3-3b-ac z3-1b; do
  i=$((i + 1)); step "run $i $config"
  [ $(left 100) -lt 70 ] && break
  timeout $(left 90) python bench/deepspeed.py real --nproc 1 --configs $config \
    --no-adam-kernels --out $W/paced_${i}_$config.json --log $W/paced_$i.log >> $log 2>&1
  reference $i
done
step done
grep -h "^summary" $W/paced_*.log | cut -c1-60
