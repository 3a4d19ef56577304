#!/bin/bash
# Session 24: bench/flex_attention.py on one GPU (compiled FlexAttention, four masks, two
# shapes), then bench/ddp_compile.py on two: eager, DDP(torch.compile(model)) and
# torch.compile(DDP(model)), batch 48 and 8. Usage on a 2-GPU machine:
# bash bench/device/h200x2_flex_ddp_compile.sh
source bench/device/call_lib.sh
record_env
step flex
CUDA_VISIBLE_DEVICES=0 timeout $(left 300) python bench/flex_attention.py --out $W/flex_real.jsonl >> $log 2>&1
step ddp
for b in 48 8; do for c in "" "--compile" "--compile --wrap-first"; do
  timeout $(left 90) torchrun --standalone --nproc-per-node 2 bench/ddp_compile.py --batch $b $c 2>&1 | grep "^summary" | tee -a $W/ddp_compile.txt >> $log
done; done
step done
