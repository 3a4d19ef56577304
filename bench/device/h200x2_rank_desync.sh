#!/bin/bash
# Session 19, lent 2 x H200, third call: how independently two ranks' hosts run. The raw speed
# probe series of both cores at once (bench/host_flicker.py --series-out: the host's flicker over
# time, and whether the two cores' slow spells coincide), then each rank's host marks through a
# tensor-parallel step (bench/tp_rank_desync.py) for a GPU-bound-ish and a host-bound size.
# Usage on the device: bash bench/device/h200x2_rank_desync.sh. Out: $OUT/call.tgz.
CALL_BUDGET_S=280 source bench/device/call_lib.sh
{ date -u; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; lscpu | grep "Model name"; nproc; } > $W/env.txt 2>&1
step flicker-2cores
timeout 40 python bench/host_flicker.py --seconds 10 --cores 2 --out $W/flicker_2cores.json --series-out $W/flicker_2cores_series.json.gz > /dev/null 2>> $log
for cfg in "1b 2048 8" "gpt2-350m 128 2" "3b 2048 4"; do
  set -- $cfg
  step "tp desync $1 s$2"
  timeout $(left 80) python -m torch.distributed.run --standalone --nproc-per-node 2 bench/tp_rank_desync.py \
    --preset $1 --seq-len $2 --batch-size $3 --steps 12 --out $W/desync_$1_s$2.json >> $log 2>&1
done
step flicker-1core
timeout 20 python bench/host_flicker.py --seconds 8 --out $W/flicker_1core.json --series-out $W/flicker_1core_series.json.gz > /dev/null 2>> $log
step done
