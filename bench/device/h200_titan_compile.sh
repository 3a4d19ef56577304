#!/bin/bash
# Session 23: 5 of Llama 3.1 8B's blocks with torchtitan's 2024 model code (the published H100
# rows'), selective AC, one GPU: eager and with each block torch.compile'd, back to back.
# Usage on the device (carry bench/torchtitan_wheels): bash bench/device/h200_titan_compile.sh.
source bench/device/call_lib.sh
export HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1
record_env
step titan
timeout $(left 540) python bench/torchtitan.py real --timeout 260 \
  --configs 8B-5layers-1gpu-dec2024-sac-compile,8B-5layers-1gpu-dec2024-sac-40 \
  --out $W/titan_compile_real.json --log $W/titan_compile_real.log >> $log 2>&1
step done
