#!/bin/bash
# Session 39, lent 1 x H200: Megatron's host-bound replica of the published 1.7B rank (local spec,
# hidden 256, seq 512) and a plain GPT host-bound step, each run for real and under phantom on
# the same host minutes apart, phantom with --host-speed 1.0 (this host at its best is the node):
# no conversion between machines enters. Does phantom's gap accounting charge Megatron's Python
# more than it costs? Rounds interleaved. Carry .whl. Usage: bash bench/device/same_host_megatron.sh
CALL_BUDGET_S=480 source bench/device/call_lib.sh
record_env
PH="python -m phantom.cli"
M="examples/megatron/pretrain_gpt.py --preset gpt-1.7b --seq-length 512 --micro-batch-size 1 --global-batch-size 4 --train-iters 8 --use-distributed-optimizer --core-attention sdpa --hidden-size 256 --ffn-hidden-size 1024 --num-attention-heads 4 --vocab-size 4096"
G="examples/gpt_train.py --preset gpt2-124m --seq-len 512 --batch-size 1 --steps 12 --warmup 4"
step host_reference_before; python -m phantom.engine.host > $W/host_reference_before.json 2>> $log
for round in 1 2; do
  step "megatron real $round"
  timeout $(left 60) python -m torch.distributed.run --nproc-per-node 1 $M > $W/megatron_real_$round.log 2>&1
  step "megatron phantom $round"
  timeout $(left 90) $PH run --nproc-per-node 1 --gpu H200 --host-speed 1.0 --report $W/megatron_sim_$round.json $M > $W/megatron_sim_$round.log 2>&1
  step "gpt real $round"
  timeout $(left 40) python $G > $W/gpt_real_$round.log 2>&1
  step "gpt phantom $round"
  timeout $(left 60) $PH run --gpu H200 --host-speed 1.0 --report $W/gpt_sim_$round.json $G > $W/gpt_sim_$round.log 2>&1
done
step host_reference_after; python -m phantom.engine.host > $W/host_reference_after.json 2>> $log
step done
for f in $W/megatron_*.log; do echo "== $f"; grep "elapsed time per iteration" $f | cut -c60-130 | tail -6; done
for f in $W/gpt_*.log; do echo "== $f"; grep -E "^summary" $f | cut -c1-120; done
