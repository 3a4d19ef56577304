#!/bin/bash
# Session 17, lent 2 x H100, third call: the DeepSpeed ZeRO-3 rows the second call's time limit
# cut off, the non-LLM workloads on 1 and 2 GPUs (issue 10), phantom's pipeline-parallel run on
# this host's torch 2.11 after the send/recv signature fix, and the host-bound suite once more
# (the real steps' spread between runs of one machine). Wheels in .whl (deepspeed and its
# pydantic/hjson, diffusers). Usage on the device: bash bench/device/h100x2_followup.sh.
set -u
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site:. PYTHONUNBUFFERED=1
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
W=$(mktemp -d); log=$W/log.txt
trap 'tar czf $OUT/call.tgz -C $W . ; tail -30 $log' EXIT
step() { echo "== $1 $(date -u +%T)" >> $log; }
end=$((SECONDS + 540))
left() { local l=$((end - SECONDS)); echo $(( l < $1 ? (l > 5 ? l : 5) : $1 )); }  # min(cap, time left)
python -m phantom.engine.host > $W/host_reference_before.json 2>> $log
step deepspeed-zero3
timeout $(left 170) python bench/deepspeed.py real --configs z3-3b-ac,z3-1b-ga2 --out $W/deepspeed_real_h100x2_zero3.json \
  --log $W/deepspeed_real_h100x2_zero3.log >> $log 2>&1
step nonllm
timeout $(left 200) python bench/nonllm.py real --out $W/real_nonllm_h100x2.json >> $log 2>&1
step phantom-pp-same-host
timeout $(left 60) python bench/distributed.py sim --suite host-bound --configs pp-350m-s128 --steps 12 --gpu H100 \
  --phantom-args "--host-speed 1.0" --out $W/samehost_sim_pp.md >> $log 2>&1
step host-bound-again
timeout $(left 130) python bench/distributed.py real --suite host-bound --steps 12 --out $W/real_host_bound_h100x2_b.json >> $log 2>&1
python -m phantom.engine.host > $W/host_reference_after.json 2>> $log
step done
