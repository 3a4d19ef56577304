#!/bin/bash
# Session 22, lent 2 x H200: the first real MoE runs (issue 8's Mixtral and Qwen3 presets, cut to
# 4 layers; bench/megatron.py's moe-* configs), each MoE router's real token counts per expert
# (bench/moe_routing.py, separate short runs: the probe copies the counts at the end), and the
# kernel rows of those configs' recorded signatures (bench/profile/records/megatron-moe-*).
# Usage on the device, carrying .whl (megatron-core wheel): bash bench/device/h200x2_moe.sh
# Out: $OUT/call.tgz.
CALL_BUDGET_S=570 source bench/device/call_lib.sh
export CUDA_DEVICE_MAX_CONNECTIONS=1
{ date -u; nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit --format=csv,noheader
  nvidia-smi topo -m; python -c "import torch; print(torch.__version__, torch.version.cuda, torch.cuda.nccl.version())"
  python -c "import megatron.core; print('megatron-core', megatron.core.__version__)"
  lscpu | grep "Model name"; nproc; } > $W/env.txt 2>&1
python -m phantom.engine.host > $W/host_reference_before.json 2>> $log
step megatron-moe
timeout $(left 330) python bench/megatron.py real --timeout 150 \
  --configs moe-mixtral-ep2,moe-mixtral-ep2-balanced,moe-qwen3-ep2,moe-mixtral-tp2-sp \
  --out $W/megatron_moe_real_h200x2.json >> $log 2>&1
moe=(--num-layers 4 --seq-length 4096 --micro-batch-size 1 --global-batch-size 8 --train-iters 3 --use-distributed-optimizer --core-attention sdpa)
for m in mixtral-8x7b qwen3-30b-a3b; do
  step routing-$m
  timeout $(left 70) python -m torch.distributed.run --nproc-per-node 2 bench/moe_routing.py \
    --out $W/routing_${m}_ep2.json -- examples/megatron/pretrain_gpt.py --preset $m --ep 2 "${moe[@]}" \
    > $W/routing_${m}_ep2.log 2>&1
  python bench/moe_routing.py --summary $W/routing_${m}_ep2.json >> $log 2>&1
done
python -m phantom.engine.host > $W/host_reference_after.json 2>> $log
[ -n "${SKIP_ROWS:-}" ] && { step done; exit 0; }   # SKIP_ROWS=1: the runs only
step kernel-rows
cp phantom/cost/data/db/H200.json $W/H200.json
recs=(); for f in bench/profile/records/megatron-moe-*.json*; do recs+=(--records "$f"); done
timeout $(left 200) python -m phantom.cost.profile.timing --db $W/H200.json --budget-s $(( $(left 200) - 15 )) \
  --report $W/timing_report_H200.json "${recs[@]}" > $W/timing_H200.log 2>&1
step done
