#!/bin/bash
# Session 38: Megatron tp2-sp (issue 8's 2 x H200 row) under phantom, `--ranks all` (the default
# for 2 ranks) and `--ranks auto` (one process for both equivalent TP ranks), interleaved, with
# each run's report: is the run-to-run swing the two rank processes sharing this VM's cores?
# (--disable-gloo-process-groups in both modes: --ranks auto cannot run real gloo groups.)
cd "$(dirname "$0")/../../../.."
O=bench/data/session38/tp2sp_ranks
A="examples/megatron/pretrain_gpt.py --preset gpt-1.7b --seq-length 2048 --micro-batch-size 2 --global-batch-size 8 --train-iters 6 --tp 2 --sequence-parallel --disable-gloo-process-groups"
for i in 1 2 3; do
  for mode in all auto; do
    date -u +%T
    .venv/bin/phantom run --nproc-per-node 2 --gpu H200 --ranks $mode --report $O/report_${mode}_$i.json $A 2>&1 \
      | grep -E "elapsed time per iteration|^  host|caution" | sed "s/^/$mode $i: /" | cut -c1-200
  done
done
