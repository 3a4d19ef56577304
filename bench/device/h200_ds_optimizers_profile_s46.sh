#!/bin/bash
# Session 46, lent 1 x H200, second call: what the first call's DeepSpeed optimizer rows leave
# open. Profiles (torch.profiler) of FusedLion on 2000 x 16K fp32 tensors (26.6 ms a step,
# where 64 / 512 x 1K tensors took 0.22 / 1.75 ms of host time), on 100M bf16 and on 100M fp32
# elements (the same time for both); then kernel profiles of two steps of z2-1b-lion and
# z0-1b-lamb (ZeRO-2 + FusedLion, fp16 + FusedLamb on one GPU; bench/profile_real.py --sync),
# GPU busy against phantom's. Carry .whl. Usage: bash bench/device/h200_ds_optimizers_profile_s46.sh
CALL_BUDGET_S=420 source bench/device/call_lib.sh
record_env
build_ds_ops FusedAdamBuilder FusedLionBuilder FusedLambBuilder
for c in 2000x16K bf16-flat-100M flat-100M; do
  step "profile lion $c"
  timeout $(left 60) python bench/kernels/deepspeed_optimizers.py profile lion $c --out $W/prof_lion_$c.json > $W/prof_lion_$c.log 2>&1
done
for name in z2-1b-lion z0-1b-lamb; do
  step "profile $name"
  cfg=$(python bench/deepspeed.py args $name --dir $W)
  timeout $(left 120) python -m torch.distributed.run --standalone --nproc-per-node 1 bench/profile_real.py --step 5 --active 2 --sync \
    --out $W/prof_$name.json -- $cfg > $W/prof_$name.log 2>&1
done
step done
for f in $W/prof_lion_*.json; do python -c "import json,sys; d=json.load(open('$f')); print(d['case'], 'host', round(d['host_ms'],2), 'wall', round(d['wall_ms'],2), 'busy', round(d['gpu_busy_ms'],3), 'span', round(d['gpu_span_ms'],3), {k: (v['count'], round(v['median_us'],1)) for k, v in d['kernels'].items()})"; done
grep -h "^summary\|gpu_idle_ms\|compute_busy_ms" $W/prof_z*.log | cut -c1-140
