#!/bin/bash
R=/tmp/s42/run_one.sh
for round in 1 2; do
  for s in megatron deepspeed distributed; do
    $R /tmp/s42/old old_r$round $s /tmp/s42/cache_oldarm
    $R /tmp/s42/new new_r$((round + 3)) $s
  done
done
