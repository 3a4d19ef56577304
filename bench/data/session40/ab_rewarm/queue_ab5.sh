#!/bin/bash
R=/tmp/s40/suites/run_one.sh
for r in 1 2; do
  $R /tmp/s40/new on2_r$r megatron
  $R /tmp/s40/new off2_r$r megatron 1
done
for r in 1 2 3; do
  $R /tmp/s40/new on2_r$r deepspeed
  $R /tmp/s40/new off2_r$r deepspeed 1
done
for r in 1 2; do
  $R /tmp/s40/new on2_r$r distributed
  $R /tmp/s40/new off2_r$r distributed 1
done
$R /tmp/s40/new on2_r1 published
$R /tmp/s40/new off2_r1 published 1
