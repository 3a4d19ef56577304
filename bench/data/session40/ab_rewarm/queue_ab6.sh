#!/bin/bash
while pgrep -f "queue_ab5.sh" > /dev/null; do sleep 5; done
R=/tmp/s40/suites/run_one.sh
for r in 3 4; do
  $R /tmp/s40/new on2_r$r megatron
  $R /tmp/s40/new off2_r$r megatron 1
done
