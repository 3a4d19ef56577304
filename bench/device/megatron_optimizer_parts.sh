# Megatron-Core's optimizer step in parts (bench/megatron_phases.py: gradient copy, norm, clip,
# torch AdamW, parameter copy) on the host-bound 1.7B-rank config, twice, and the host cost of a
# blocking scalar read (bench/host_sync_cost.py), twice, with the host reference step before
# and after. Needs the megatron-core 0.16.1 cp312 wheel in .whl (carry it).
#   bash bench/device/megatron_optimizer_parts.sh      Out: $OUT/call.tgz
source bench/device/call_lib.sh
record_env
A="--preset gpt-1.7b --micro-batch-size 1 --global-batch-size 4 --train-iters 10 --use-distributed-optimizer --core-attention sdpa --seq-length 512 --hidden-size 256 --ffn-hidden-size 1024 --num-attention-heads 4 --vocab-size 4096"
step host_reference_1; python -m phantom.engine.host > $W/host_reference_1.json 2>> $log
for round in 1 2; do
  step sync_cost_round$round
  timeout $(left 60) python bench/host_sync_cost.py --out $W/sync_cost_round$round.json >> $log 2>&1
  step phases_round$round
  timeout $(left 150) python -m torch.distributed.run --nproc-per-node 1 bench/megatron_phases.py \
    --out $W/phases_round$round.json -- $A >> $log 2>&1
done
step host_reference_2; python -m phantom.engine.host > $W/host_reference_2.json 2>> $log
step done
grep -h "phases (ms" $log
grep -h us_per_call $log
