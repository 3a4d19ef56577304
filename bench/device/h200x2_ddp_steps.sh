#!/bin/bash
# Session 38, lent 2 x H200: why the real DDP 1B step (issue 4's ddp-1b-s2k) alternates between
# ~226 and ~245 ms within a run while phantom gives 224 ms every step. The plain step 20 times
# with nvidia-smi's SM clock and power every 20 ms (is it the power limit?), then 6 steps under
# the profiler (per-step kernel sums and rank 0's trace), and FSDP2's step as a control.
# Usage on the device: bash bench/device/h200x2_ddp_steps.sh. Out: $OUT/call.tgz.
CALL_BUDGET_S=400 source bench/device/call_lib.sh
record_env
A="examples/dist_train.py --preset 1b --seq-len 2048 --batch-size 8 --warmup 3"
T="python -m torch.distributed.run --standalone --nproc-per-node 2"
nvidia-smi --query-gpu=timestamp,index,clocks.sm,power.draw,temperature.gpu,clocks_throttle_reasons.active \
  --format=csv,noheader -lms 20 > $W/smi.csv 2>> $log &
smi=$!
for parallel in ddp fsdp; do
  step "plain-$parallel"
  echo "== plain $parallel $(date -u +%T.%N)" >> $W/steps.log
  timeout $(left 100) $T $A --parallel $parallel --steps 20 >> $W/steps.log 2>&1
done
kill $smi
step profiled-ddp
timeout $(left 150) $T bench/profile_real.py --step 5 --active 6 --out $W/prof_ddp_6steps.json --trace $W/trace_ddp.json \
  -- $A --parallel ddp --steps 12 >> $log 2>&1
gzip -f $W/trace_ddp.json 2>/dev/null
step done
