#!/bin/bash
# Session 26, second call: bench/wgrad_fusion.py with 10 calls back to back per sample (the
# kernel database's way of timing), twice. Usage: bash bench/device/wgrad_fusion_again.sh
source bench/device/call_lib.sh
record_env
for round in 1 2; do
  step wgrad_round$round
  timeout $(left 200) python bench/wgrad_fusion.py run --out $W/wgrad_real_round$round.json >> $log 2>&1
done
step done
