#!/bin/bash
# Session 25: CUDA graphs on one GPU (bench/cuda_graphs.py): replay cost, and a small GPT's
# training and inference steps eager, captured whole, make_graphed_callables and
# torch.compile default / reduce-overhead. Usage: bash bench/device/cuda_graphs.sh
source bench/device/call_lib.sh
record_env
step launch
timeout $(left 90) python bench/cuda_graphs.py --only launch --out $W/real.jsonl >> $log 2>&1
step train_infer
timeout $(left 420) python bench/cuda_graphs.py --only train --only infer --out $W/real.jsonl >> $log 2>&1
step done
