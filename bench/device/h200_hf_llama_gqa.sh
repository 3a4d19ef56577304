#!/bin/bash
# Session 19, lent 2 x H200 (one GPU used), sixth call: Hugging Face Llama 3.2 1B's shape on one
# GPU, grouped-query (32/8) against full multi-head (32/32) attention, each step's time, and the
# kernels of the GQA run (bench/profile_real.py): an out-of-framework check of phantom's SDPA
# rule for grouped K/V heads (cuDNN on Hopper). Usage on the device:
# bash bench/device/h200_hf_llama_gqa.sh. Out: $OUT/call.tgz.
CALL_BUDGET_S=200 source bench/device/call_lib.sh
export CUDA_VISIBLE_DEVICES=0
{ date -u; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; python -c "import transformers; print('transformers', transformers.__version__)"; } > $W/env.txt 2>&1
shape="--hidden-size 2048 --layers 16 --heads 32 --intermediate-size 8192 --vocab-size 128256 --seq-len 4096 --batch-size 2 --steps 12 --warmup 4"
for kv in 8 32; do
  step "hf llama kv$kv"
  timeout $(left 60) python examples/hf_llama_train.py $shape --kv-heads $kv > $W/hf_llama_kv$kv.log 2>&1
  tail -3 $W/hf_llama_kv$kv.log >> $log
done
step "profile kv8"
timeout $(left 60) python bench/profile_real.py --step 6 --active 2 --sync --out $W/prof_hf_llama_kv8.json -- \
  examples/hf_llama_train.py $shape --kv-heads 8 >> $log 2>&1
step done
