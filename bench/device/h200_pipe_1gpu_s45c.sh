#!/bin/bash
# Session 45, lent 1 x H200, third call: a kernel profile of two steps of pp1-3b-ac (the
# pipeline engine on one stage, Llama 3B, activation checkpointing), which the first two calls
# found GPU-bound and steady (1145-1149 ms) where phantom's GPU time is 1074 ms: which kernel
# classes are short. Carry .whl. Usage: bash bench/device/h200_pipe_1gpu_s45c.sh
CALL_BUDGET_S=300 source bench/device/call_lib.sh
record_env
build_fused_adam
step profile
cfg=$(python -c "import sys; sys.path.insert(0,'bench'); import deepspeed as d; c=d.select('pp1-3b-ac',1)[0]; print(' '.join(c.args(d.ds_config(c,'fused_adam','$W'))))")
timeout $(left 200) python -m torch.distributed.run --standalone --nproc-per-node 1 bench/profile_real.py --step 5 --active 2 --sync \
  --out $W/prof_pp1-3b-ac.json -- $cfg > $W/prof_pp1-3b-ac.log 2>&1
step done
grep -h "^summary" $W/prof*.log | cut -c1-110
