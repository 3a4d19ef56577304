#!/bin/bash
R=/tmp/s42/run_one.sh
for round in 1 2 3; do
  for s in megatron deepspeed distributed; do
    $R /tmp/s42/new new_r$round $s
  done
done
$R /tmp/s42/new new_r1 nonllm
