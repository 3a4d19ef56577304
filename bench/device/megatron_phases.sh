# Megatron-Core's host phases on one GPU host (bench/megatron_phases.py) for the published 1.7B
# rank's ops at host-bound shapes, three rounds, with the host reference step before and after.
# Needs the megatron-core 0.16.1 cp312 wheel in .whl. Usage on the device:
#   bash bench/device/megatron_phases.sh      Out: $OUT/call.tgz
source bench/device/call_lib.sh
record_env
A="--preset gpt-1.7b --micro-batch-size 1 --global-batch-size 4 --train-iters 10 --use-distributed-optimizer --core-attention sdpa --seq-length 512 --hidden-size 256 --ffn-hidden-size 1024 --num-attention-heads 4 --vocab-size 4096"
step host_reference_1; python -m phantom.engine.host > $W/host_reference_1.json 2>> $log
for round in 1 2 3; do
  step phases_round$round
  timeout $(left 120) python -m torch.distributed.run --nproc-per-node 1 bench/megatron_phases.py \
    --out $W/phases_round$round.json -- $A >> $log 2>&1
done
step host_reference_2; python -m phantom.engine.host > $W/host_reference_2.json 2>> $log
step done
grep -h "phases (ms" $log
grep -h host_step_ns $W/host_reference_*.json
