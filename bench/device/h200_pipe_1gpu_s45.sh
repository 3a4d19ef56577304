#!/bin/bash
# Session 45, lent 1 x H200 (no 2-GPU machine lent): DeepSpeed's pipeline engine on ONE stage
# and one GPU, real, for phantom's `deepspeed.py sim --nproc 1` of the same rows: the engine's
# TrainSchedule interpreter, its per-micro-batch host path (LoadMicroBatch, ForwardPass,
# BackwardPass, ReduceGrads, OptimizerStep) and ZeRO-1 with one partition, without the
# stage-to-stage sends a 2-stage run adds. Two rounds of pp1-1b, pp1-1b-m1 and pp1-3b-ac with
# the pace log (bench/pace_log.py: the node's host state) running beside them, then a kernel
# profile of two pp1-1b steps (profile_real.py --sync) to split the step into GPU work and
# host. Carry .whl. Usage on the device: bash bench/device/h200_pipe_1gpu_s45.sh. Out: $OUT/call.tgz
CALL_BUDGET_S=540 source bench/device/call_lib.sh
record_env
reference() { step "reference $1"; python -m phantom.engine.host > $W/host_reference_$1.json 2>> $log; }
reference before
python bench/pace_log.py $W/pace_log.jsonl 2>> $log &
PACE=$!
build_fused_adam
for r in 1 2; do
  step round$r
  timeout $(left 170) python bench/deepspeed.py real --nproc 1 --configs pp1-1b,pp1-1b-m1,pp1-3b-ac \
    --no-adam-kernels --out $W/pipe_1gpu_real_r$r.json --log $W/round$r.log >> $log 2>&1
done
step profile
cfg=$(python -c "import sys; sys.path.insert(0,'bench'); import deepspeed as d; c=d.select('pp1-1b',1)[0]; print(' '.join(c.args(d.ds_config(c,'fused_adam','$W'))))")
timeout $(left 90) python -m torch.distributed.run --standalone --nproc-per-node 1 bench/profile_real.py --step 5 --active 2 --sync \
  --out $W/prof_pp1-1b.json -- $cfg > $W/prof_pp1-1b.log 2>&1
kill $PACE
reference after
step done
grep -h "^summary" $W/round*.log | cut -c1-110
