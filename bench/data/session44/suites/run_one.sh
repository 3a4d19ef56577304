#!/bin/bash
# usage: run_one.sh TREE CACHE LABEL SUITE
TREE=$1; CACHE=$2; LABEL=$3; SUITE=$4
cd $TREE; export PYTHONPATH=$TREE PHANTOM_CACHE_DIR=$CACHE
export PATH=/work/main/.venv/bin:$PATH
O=/tmp/s44/suites/$LABEL; mkdir -p $O
F=/work/main/bench/data/session19/h200x2_call2_followup
G=/work/main/bench/data/session19/h200x2_call1_ground_truth
echo "== $LABEL $SUITE $(date -u +%T) $(git -C $TREE rev-parse --short HEAD) dirty=$(git -C $TREE status --short | wc -l)"
case $SUITE in
  megatron) python bench/megatron.py sim --gpu H200 --configs tp2-sp,dp2-distopt,tp2-sp-sdpa --real $G/megatron_real_h200x2.json --out $O/megatron_sim_h200x2 > $O/megatron.log 2>&1 ;;
  deepspeed) python bench/deepspeed.py sim --gpu H200 --real $F/deepspeed_real_h200x2.json --out $O/deepspeed_sim_h200x2 > $O/deepspeed.log 2>&1 ;;
  distributed) python bench/distributed.py sim --gpu H200 --real $G/real_distributed_h200x2.json --out $O/sim_distributed_h200x2.md > $O/distributed.log 2>&1 ;;
  nonllm) python bench/nonllm.py sim --real $G/real_nonllm_h200x2.json --out $O/sim_nonllm_h200x2.md > $O/nonllm.log 2>&1 ;;
esac
echo "== done $LABEL $SUITE $(date -u +%T)"
