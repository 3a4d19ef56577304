#!/bin/bash
# Session 23: Llama 3.1 8B (all 32 blocks, torchtitan's 2024 model code, selective AC, local
# batch 1, seq 8192) under FSDP2 on 2 GPUs, eager and with each block torch.compile'd.
# Usage on a 2 x H200 (carry bench/torchtitan_wheels): bash bench/device/h200x2_titan_compile.sh.
source bench/device/call_lib.sh
export HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1
record_env
step titan
timeout $(left 540) python bench/torchtitan.py real --timeout 260 \
  --configs 8B-fsdp2-bs1-sac-dec2024,8B-fsdp2-bs1-sac-dec2024-compile \
  --out $W/titan_fsdp2_compile_real.json --log $W/titan_fsdp2_compile_real.log >> $log 2>&1
step done
