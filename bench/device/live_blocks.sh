#!/bin/bash
# Session 27: live_blocks.py (live device memory by allocation site between cuda_graphs.py's
# rows), batch 2 and 16. Usage: bash bench/device/live_blocks.sh
source bench/device/call_lib.sh
record_env
for b in 2 16; do
  step live_blocks_b$b
  timeout $(left 120) python bench/live_blocks.py --batch $b --out $W/live_blocks_b$b.json >> $log 2>&1
done
step done
