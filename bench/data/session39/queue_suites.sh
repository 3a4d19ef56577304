#!/bin/bash
# Session 39: two more runs of the DeepSpeed and Megatron 2 x H200 suites with this session's
# code (queued together before either ran; both are kept, whatever they give), for
# ground_truth_spread.py beside session 38's three (DeepSpeed code unchanged since then).
cd "$(dirname "$0")/../../.."
export PATH=$PWD/.venv/bin:$PATH
F=bench/data/session19/h200x2_call2_followup
G=bench/data/session19/h200x2_call1_ground_truth
for r in 4 5; do
  O=bench/data/session39/sim_suites_r$r
  mkdir -p $O
  date -u
  python bench/deepspeed.py sim --gpu H200 --real $F/deepspeed_real_h200x2.json --out $O/deepspeed_sim_h200x2
  date -u
  python bench/megatron.py sim --gpu H200 --configs tp2-sp,dp2-distopt,tp2-sp-sdpa --real $G/megatron_real_h200x2.json --out $O/megatron_sim_h200x2
done
date -u
