#!/bin/bash
# Session 17, lent 2 x H100 (one host): the host-bound 2-rank steps that phantom under-predicts,
# taken apart on one machine in one call (bench/README, distributed.py, session 17):
#   real, 2 ranks      bench/distributed.py real --suite host-bound (torchrun, NCCL over NVLink)
#   real, 1 rank       bench/tp_one_gpu.py: the same script as rank 0 of a no-op 2-rank group
#   phantom, 2 ranks   the same suite under phantom on this host's CPU with --host-speed 1.0
#                      (this host is the simulated host: no conversion between machines)
# plus the TP training rows under phantom the same way, a kernel profile of one real 2-rank TP
# step, and this host's reference step before and after. Everything lands in $OUT/call.tgz.
source bench/device/call_lib.sh
phantom() { python -c "import sys; from phantom.cli import main; sys.exit(main())" "$@"; }
{ date -u; nvidia-smi; nvidia-smi topo -m; python -c "import torch; print(torch.__version__, torch.version.cuda, torch.cuda.nccl.version())";
  nproc; lscpu | grep -E "Model name|MHz|Thread|Socket"; } > $W/env.txt 2>&1
python -m phantom.engine.host > $W/host_reference_before.json 2>> $log
echo "== real 2 ranks, host-bound suite $(date -u +%T)" >> $log
timeout 220 python bench/distributed.py real --suite host-bound --steps 12 --out $W/real_host_bound_h100x2.json >> $log 2>&1
for cfg in "tp --preset gpt2-350m" "tp --preset 3b" "fsdp --preset gpt2-350m"; do
  echo "== real 1 rank, no-op group: $cfg $(date -u +%T)" >> $log
  timeout 60 python bench/tp_one_gpu.py run -- --parallel $cfg --seq-len 128 --batch-size 2 --steps 12 --warmup 3 2>&1 \
    | grep -E "^summary" >> $log
done
echo "== phantom 2 ranks on this host, --host-speed 1.0, host-bound suite $(date -u +%T)" >> $log
timeout 240 python bench/distributed.py sim --suite host-bound --steps 12 --gpu H100 --phantom-args "--host-speed 1.0" \
  --real $W/real_host_bound_h100x2.json --json $W/samehost_sim_host_bound.json --out $W/samehost_sim_host_bound.md >> $log 2>&1
echo "== phantom 2 ranks on this host, --host-speed 1.0, TP training rows $(date -u +%T)" >> $log
timeout 100 python bench/distributed.py sim --configs tp-1b-s2k,tp-3b-s2k --gpu H100 --phantom-args "--host-speed 1.0" \
  --json $W/samehost_sim_tp.json --out $W/samehost_sim_tp.md >> $log 2>&1
echo "== profile, real 2 ranks tp-350m-s128 $(date -u +%T)" >> $log
timeout 60 python -m torch.distributed.run --standalone --nproc-per-node 2 bench/profile_real.py --step 5 --active 3 --sync \
  --out $W/prof_tp-350m-s128.json --trace $W/trace_tp-350m-s128.json -- examples/dist_train.py --parallel tp \
  --preset gpt2-350m --seq-len 128 --batch-size 2 --steps 10 --warmup 3 >> $log 2>&1
python -m phantom.engine.host > $W/host_reference_after.json 2>> $log
echo "== done $(date -u +%T)" >> $log
