#!/bin/bash
# Session 23: bench/ddp_compile.py on 2 GPUs, eager and DDP(torch.compile(model)), two batch
# sizes, each twice. Usage on a 2-GPU machine: bash bench/device/h100x2_ddp_compile.sh.
source bench/device/call_lib.sh
record_env
step runs
for r in 1 2; do for b in 48 8; do for c in "" "--compile"; do
  timeout $(left 120) torchrun --standalone --nproc-per-node 2 bench/ddp_compile.py --batch $b $c 2>&1 | grep "^summary" | tee -a $W/ddp_compile.txt
done; done; done
step done
