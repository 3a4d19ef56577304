#!/bin/bash
# Session 34: 5 of Llama 3.1 8B's blocks with torchtitan's 2024 model code on one GPU, blocks
# torch.compile'd as the published Dec 2024 rows (loss not compiled): float8 (tensorwise, FSDP
# float8 all-gather on a 1-rank mesh, scales precomputed after each step) and bf16; then the
# June 2025 H200 rows' setting (loss compiled, e7c0cae's save list) in float8, and bf16 with the
# loss compiled (0.3.0's default).
# Usage on the device (carry bench/torchtitan_wheels and .whl): bash bench/device/h100_titan_float8.sh
source bench/device/call_lib.sh
export HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1
record_env
step titan
timeout $(left 560) python bench/torchtitan.py real --timeout 200 \
  --configs ${CONFIGS:-8B-5layers-1gpu-dec2024-sac-compile-model-float8,8B-5layers-1gpu-dec2024-sac-compile-model,8B-5layers-1gpu-jun2025-sac-compile-float8,8B-5layers-1gpu-dec2024-sac-compile} \
  --out $W/titan_float8_real.json --log $W/titan_float8_real.log >> $log 2>&1
cp $W/titan_float8_real.json $OUT/ 2>/dev/null
step done
