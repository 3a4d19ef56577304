#!/bin/bash
# Session 18: does a lent host's pure-Python flicker predict how slowly it runs real host-bound
# steps? On one machine, in one call: the reference CPU step and the flicker probe before and
# after, the single-GPU host-bound suite, the 2-GPU one where there are two GPUs, and the SD UNet
# step (issue 10's host-bound workload). The host-speed presets take one typical slowdown for
# every machine kind (phantom/hardware/gpus.py); this is the data that choice can be checked on.
# Carry .whl (diffusers). Usage on the device: bash bench/device/host_pairs.sh
CALL_BUDGET_S=560 source bench/device/call_lib.sh
ngpu=$(nvidia-smi -L | wc -l)
{ date -u; nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit --format=csv,noheader
  python -c "import torch; print(torch.__version__, torch.version.cuda)"; lscpu | grep "Model name"; nproc; } > $W/env.txt 2>&1
python -m phantom.engine.host > $W/host_reference_before.json 2>> $log
step flicker-before
timeout 30 python bench/host_flicker.py --seconds 10 --out $W/flicker_before.json > /dev/null 2>> $log
step host-bound-1gpu
timeout $(left 150) python bench/host_bound.py real --out $W/host_bound_1gpu.json >> $log 2>&1
if [ "$ngpu" -ge 2 ]; then
  step host-bound-2gpu
  timeout $(left 150) python bench/distributed.py real --suite host-bound --steps 12 --out $W/host_bound_2gpu.json >> $log 2>&1
fi
step unet
gpus=1; [ "$ngpu" -ge 2 ] && gpus=1,2
timeout $(left 150) python bench/nonllm.py real --only unet --gpus $gpus --out $W/unet.json >> $log 2>&1
step flicker-after
timeout 30 python bench/host_flicker.py --seconds 10 --out $W/flicker_after.json > /dev/null 2>> $log
python -m phantom.engine.host > $W/host_reference_after.json 2>> $log
step done
