#!/bin/bash
# Session 34: all 32 blocks of Llama 3.1 8B (torchtitan's 2024 model code) under FSDP2 on 4 GPUs
# of one host, local batch 1, selective AC: eager, blocks compiled (loss not, as the published Dec
# 2024 rows), and compiled with float8 (tensorwise, FSDP float8 all-gather, precomputed scales).
# Usage on the device (carry bench/torchtitan_wheels and .whl): bash bench/device/h100x4_titan_fsdp4.sh
source bench/device/call_lib.sh
export HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1
record_env
nvidia-smi topo -m >> $W/env.txt 2>&1
step titan
timeout $(left 570) python bench/torchtitan.py real --timeout 240 \
  --configs ${CONFIGS:-8B-fsdp4-bs1-sac-dec2024-compile-model-float8,8B-fsdp4-bs1-sac-dec2024-compile-model,8B-fsdp4-bs1-sac-dec2024} \
  --out $W/titan_fsdp4_real.json --log $W/titan_fsdp4_real.log >> $log 2>&1
cp $W/titan_fsdp4_real.json $OUT/ 2>/dev/null
step done
