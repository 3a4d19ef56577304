#!/bin/bash
# Session 18: is a 2-GPU data-parallel step's extra host time (the SD UNet: 1 GPU 197 ms, 2 GPUs
# 246 ms on one 2 x H100 machine) contention between the two rank processes on the host, or the
# data-parallel work itself? On one machine, in one call: each script alone on GPU 0, then two
# independent copies at once (GPU 0 and GPU 1, no communication between them), then the 2-GPU
# DDP run; the UNet (host-bound) and a host-bound GPT step. Carry .whl (diffusers).
# Usage on the device: bash bench/device/rank_contention.sh
CALL_BUDGET_S=560 source bench/device/call_lib.sh
{ date -u; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; lscpu | grep -E "Model name|^CPU\(s\)|Thread"; } > $W/env.txt 2>&1
python -m phantom.engine.host > $W/host_reference_before.json 2>> $log
one() {  # one 1-GPU copy: one GPU index, output file, script and arguments
  local gpu=$1 out=$2; shift 2
  CUDA_VISIBLE_DEVICES=$gpu timeout $(left 120) python -m torch.distributed.run --standalone --nproc-per-node 1 "$@" > $out 2>&1
}
UNET=(examples/diffusion/unet_ddp.py --batch-size 8 --steps 8 --warmup 3)
GPT=(examples/gpt_train.py --preset gpt2-350m --seq-len 1024 --batch-size 2 --steps 12 --warmup 3)
for name in gpt unet; do
  if [ $name = unet ]; then args=("${UNET[@]}"); else args=("${GPT[@]}"); fi
  step "$name alone"; one 0 $W/${name}_alone.log "${args[@]}"
  step "$name two copies"; one 0 $W/${name}_pair_gpu0.log "${args[@]}" & one 1 $W/${name}_pair_gpu1.log "${args[@]}"; wait
  step "$name alone again"; one 0 $W/${name}_alone_again.log "${args[@]}"
done
step "unet ddp 2 GPUs"
timeout $(left 120) python -m torch.distributed.run --standalone --nproc-per-node 2 "${UNET[@]}" > $W/unet_ddp2.log 2>&1
grep -H "summary:\|median" $W/*.log | grep -v "log.txt" >> $log
python -m phantom.engine.host > $W/host_reference_after.json 2>> $log
step done
