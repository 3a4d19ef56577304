#!/bin/bash
# Session 45, lent 1 x H200, second call: the pipeline engine on one stage again, after the
# example's fix (train_pipe.py --ac checkpoints the decoder layers only; the first call's
# pp1-3b-ac hit DeepSpeed's "loss must be a scalar tensor" assert, as phantom did). pp1-3b-ac
# twice, a kernel profile of two pp1-1b-m1 steps (GPU work against host), and pp1-1b-m1 once
# more, with the pace log beside. Carry .whl. Usage: bash bench/device/h200_pipe_1gpu_s45b.sh
CALL_BUDGET_S=480 source bench/device/call_lib.sh
record_env
reference() { step "reference $1"; python -m phantom.engine.host > $W/host_reference_$1.json 2>> $log; }
reference before
python bench/pace_log.py $W/pace_log.jsonl 2>> $log &
PACE=$!
build_fused_adam
step round3
timeout $(left 200) python bench/deepspeed.py real --nproc 1 --configs pp1-3b-ac,pp1-1b-m1 \
  --no-adam-kernels --out $W/pipe_1gpu_real_r3.json --log $W/round3.log >> $log 2>&1
step profile
cfg=$(python -c "import sys; sys.path.insert(0,'bench'); import deepspeed as d; c=d.select('pp1-1b-m1',1)[0]; print(' '.join(c.args(d.ds_config(c,'fused_adam','$W'))))")
timeout $(left 90) python -m torch.distributed.run --standalone --nproc-per-node 1 bench/profile_real.py --step 5 --active 2 --sync \
  --out $W/prof_pp1-1b-m1.json -- $cfg > $W/prof_pp1-1b-m1.log 2>&1
step round4
timeout $(left 120) python bench/deepspeed.py real --nproc 1 --configs pp1-3b-ac \
  --no-adam-kernels --out $W/pipe_1gpu_real_r4.json --log $W/round4.log >> $log 2>&1
kill $PACE
reference after
step done
grep -h "^summary" $W/round*.log $W/prof*.log | cut -c1-110
