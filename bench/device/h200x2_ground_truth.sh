#!/bin/bash
# Session 19, lent 2 x H200 (one host), first call: a second real sample of the 2-GPU benchmarks
# that issues 4, 8 and 10 name as acceptance (their first 2 x H200 runs date from 2026-11-22):
#   collectives.py real    nccl-tests-style sweep through torch.distributed, at the start and end
#   distributed.py real    DDP / FSDP2 / TP / PP training suite
#   megatron.py real       Megatron-Core 0.16.1 TP2+SP, DP2 distributed optimizer (wheel in .whl)
#   nonllm.py real         ResNet-50, GAT, SD UNet on 1 and 2 GPUs (diffusers wheel in .whl)
# plus the host's reference step and flicker, which say how fast this host runs Python.
# Usage on the device, carrying .whl: bash bench/device/h200x2_ground_truth.sh. Out: $OUT/call.tgz.
CALL_BUDGET_S=560 source bench/device/call_lib.sh
{ date -u; nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit --format=csv,noheader
  nvidia-smi topo -m; python -c "import torch; print(torch.__version__, torch.version.cuda, torch.cuda.nccl.version())"
  lscpu | grep "Model name"; nproc; } > $W/env.txt 2>&1
python -m phantom.engine.host > $W/host_reference_before.json 2>> $log
step flicker-before
timeout 20 python bench/host_flicker.py --seconds 8 --out $W/flicker_before.json > /dev/null 2>> $log
step collectives
timeout $(left 60) python bench/collectives.py real --out $W/real_collectives_h200x2.json --log $W/real_collectives_h200x2.log >> $log 2>&1
step distributed
timeout $(left 170) python bench/distributed.py real --steps 10 --out $W/real_distributed_h200x2.json >> $log 2>&1
step megatron
timeout $(left 130) python bench/megatron.py real --configs tp2-sp,dp2-distopt,tp2-sp-sdpa --out $W/megatron_real_h200x2.json >> $log 2>&1
step nonllm
timeout $(left 180) python bench/nonllm.py real --out $W/real_nonllm_h200x2.json >> $log 2>&1
step collectives-again
timeout $(left 45) python bench/collectives.py real --out $W/real_collectives_h200x2_b.json --log $W/real_collectives_h200x2_b.log >> $log 2>&1
step flicker-after
timeout 15 python bench/host_flicker.py --seconds 8 --out $W/flicker_after.json > /dev/null 2>> $log
python -m phantom.engine.host > $W/host_reference_after.json 2>> $log
step done
