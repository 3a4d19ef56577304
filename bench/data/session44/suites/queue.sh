#!/bin/bash
R=/tmp/s44/suites/run_one.sh
for r in 1 2; do
  for s in deepspeed megatron distributed; do
    $R /tmp/s44/base /tmp/s44/cacheA base_r$r $s
    $R /tmp/s44/cand /tmp/s44/cacheP cand_r$r $s
  done
done
for s in nonllm; do
  $R /tmp/s44/base /tmp/s44/cacheA base_r1 $s
  $R /tmp/s44/cand /tmp/s44/cacheP cand_r1 $s
done
