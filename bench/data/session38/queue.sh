#!/bin/bash
# Session 38: every 2-GPU acceptance suite of issues 4, 8, 9, 10 on this VM, with the code of the
# commit checked out (real sides: 2 x H200 sample (a) of Session 19, as in Session 30).
set -x
cd "$(dirname "$0")/../../.."
export PATH=$PWD/.venv/bin:$PATH
G=bench/data/session19/h200x2_call1_ground_truth
F=bench/data/session19/h200x2_call2_followup
O=${1:-bench/data/session38/sim_suites}
mkdir -p $O
date
python bench/distributed.py sim --gpu H200 --real $G/real_distributed_h200x2.json --out $O/sim_distributed_h200x2.md
date
python bench/deepspeed.py sim --gpu H200 --real $F/deepspeed_real_h200x2.json --out $O/deepspeed_sim_h200x2
date
python bench/nonllm.py sim --real $G/real_nonllm_h200x2.json --out $O/sim_nonllm_h200x2.md
date
python bench/megatron.py sim --gpu H200 --configs tp2-sp,dp2-distopt,tp2-sp-sdpa --real $G/megatron_real_h200x2.json --out $O/megatron_sim_h200x2
date
if [ -z "${SKIP_PUBLISHED:-}" ]; then
  python bench/megatron.py published --out $O/megatron_published
  date
fi
