#!/bin/bash
# usage: run_one.sh TREE LABEL SUITE [CACHE_DIR]
TREE=$1; LABEL=$2; SUITE=$3
if [ -n "$4" ]; then export PHANTOM_CACHE_DIR=$4; fi
cd $TREE; export PYTHONPATH=$TREE
export PATH=/work/main/.venv/bin:$PATH
O=/tmp/s42/suites/$LABEL; mkdir -p $O
F=/work/main/bench/data/session19/h200x2_call2_followup
G=/work/main/bench/data/session19/h200x2_call1_ground_truth
echo "== $LABEL $SUITE $(date -u +%T) $(git -C $TREE rev-parse --short HEAD) cache=${PHANTOM_CACHE_DIR:-default}"
case $SUITE in
  megatron) python bench/megatron.py sim --gpu H200 --configs tp2-sp,dp2-distopt,tp2-sp-sdpa --real $G/megatron_real_h200x2.json --out $O/megatron_sim_h200x2 > $O/megatron.log 2>&1 ;;
  deepspeed) python bench/deepspeed.py sim --gpu H200 --real $F/deepspeed_real_h200x2.json --out $O/deepspeed_sim_h200x2 > $O/deepspeed.log 2>&1 ;;
  distributed) python bench/distributed.py sim --gpu H200 --real $G/real_distributed_h200x2.json --out $O/sim_distributed_h200x2.md > $O/distributed.log 2>&1 ;;
  nonllm) python bench/nonllm.py sim --real $G/real_nonllm_h200x2.json --out $O/sim_nonllm_h200x2.md > $O/nonllm.log 2>&1 ;;
esac
echo "== done $LABEL $SUITE $(date -u +%T)"
