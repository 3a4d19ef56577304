#!/bin/bash
# Session 27, lent 4-GPU machine: the distributed training suite (DDP, FSDP2, TP, PP of
# examples/dist_train.py) with 4 ranks on one host, the first ground truth beyond 2 GPUs, with
# the reference step before and after. Usage on the device: bash bench/device/distributed_x4.sh
CALL_BUDGET_S=540 source bench/device/call_lib.sh
{ date -u; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; nvidia-smi topo -m; lscpu | grep "Model name"; nproc;
  python -c "import torch; print(torch.__version__, torch.cuda.nccl.version())"; } > $W/env.txt 2>&1
python -m phantom.engine.host > $W/host_reference_before.json 2>> $log
step "distributed training suite x4"
timeout $(left 480) python bench/distributed.py real --nproc 4 --suite training --timeout 90 --out $W/real_distributed_x4.json >> $log 2>&1
python -m phantom.engine.host > $W/host_reference_after.json 2>> $log
step done
