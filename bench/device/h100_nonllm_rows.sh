#!/bin/bash
# Session 18, lent 1 x H100: the H100 rows of issue 10's workloads (the shipped H100 database had
# 3 of GAT's 158 signatures, 77 of ResNet-50's 434 and 10 of the UNet's 1,146; the H200's has
# all), a kernel profile and a re-run of the real ResNet-50 step (session 17's H100 run was 11%
# slower than phantom, cause not located), and this host's reference step and pure-Python flicker
# (the host-speed presets). Usage on the device: bash bench/device/h100_nonllm_rows.sh
CALL_BUDGET_S=560 source bench/device/call_lib.sh
{ date -u; nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit --format=csv,noheader
  python -c "import torch; print(torch.__version__, torch.version.cuda)"; lscpu | grep "Model name"; } > $W/env.txt 2>&1
python -m phantom.engine.host > $W/host_reference_before.json 2>> $log
step flicker
timeout 40 python bench/host_flicker.py --seconds 15 --out $W/flicker_h100_1core.json >> $log 2>&1
step resnet50-real
timeout $(left 90) python bench/nonllm.py real --only resnet50 --gpus 1 --out $W/real_resnet50_h100.json >> $log 2>&1
step resnet50-profile
timeout $(left 60) python -m torch.distributed.run --standalone --nproc-per-node 1 bench/profile_real.py --step 6 --active 3 \
  --sync --out $W/prof_resnet50_h100.json -- examples/vision/resnet50_ddp.py --batch-size 256 --steps 10 --warmup 4 >> $log 2>&1
step time-records
cp phantom/cost/data/db/H100.json $W/H100.json
recs=(); for f in bench/profile/records/nonllm-*.json; do recs+=(--records "$f"); done
timeout $(left 400) python -m phantom.cost.profile.timing --db $W/H100.json --budget-s $(( $(left 400) - 40 )) \
  --report $W/timing_report_H100.json "${recs[@]}" > $W/timing_H100.log 2>&1
grep -v "^  " $W/timing_H100.log | tail -8 >> $log
python -m phantom.engine.host > $W/host_reference_after.json 2>> $log
step done
