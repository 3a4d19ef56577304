#!/bin/bash
# Session 38: three phantom sweeps of bench/collectives.py on this VM, replaying session 19's
# 2 x H200 sweep (its ops, sizes and loop counts); read by ground_truth_spread.py --collective-sims.
set -x
cd "$(dirname "$0")/../../../.."
export PATH=$PWD/.venv/bin:$PATH
O=bench/data/session38/collectives
for i in 1 2 3; do
  date
  python bench/collectives.py sim --gpu H200 --real bench/data/session19/h200x2_call1_ground_truth/real_collectives_h200x2.json \
    --json $O/sim_collectives_h200x2_r$i.json --out $O/sim_collectives_h200x2_r$i.md
done
date
