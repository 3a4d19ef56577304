#!/bin/bash
# Session 18: the 2-GPU training suite (distributed.py real, six configs) once more, on another
# 2 x H100 machine: session 17's single real run is what the simulation was checked against.
# Usage on the device: bash bench/device/h100x2_training_again.sh
CALL_BUDGET_S=330 source bench/device/call_lib.sh
{ date -u; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; } > $W/env.txt 2>&1
python -m phantom.engine.host > $W/host_reference_before.json 2>> $log
step training-suite
timeout $(left 300) python bench/distributed.py real --out $W/real_distributed_h100x2.json >> $log 2>&1
python -m phantom.engine.host > $W/host_reference_after.json 2>> $log
step done
