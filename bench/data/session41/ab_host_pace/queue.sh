#!/bin/bash
R=/tmp/s41/suites/run_one.sh
for r in 1 2 3; do
  for s in megatron deepspeed distributed nonllm; do
    $R /tmp/s41/base base_r$r $s
    $R /tmp/s41/cand cand_r$r $s
  done
done
$R /tmp/s41/base base_r1 published
$R /tmp/s41/cand cand_r1 published
