#!/bin/bash
# Session 17, lent 2 x H100, third call: the DeepSpeed ZeRO-3 rows the second call's time limit
# cut off, the non-LLM workloads on 1 and 2 GPUs (issue 10), phantom's pipeline-parallel run on
# this host's torch 2.11 after the send/recv signature fix, and the host-bound suite once more
# (the real steps' spread between runs of one machine). Wheels in .whl (deepspeed and its
# pydantic/hjson, diffusers). Usage on the device: bash bench/device/h100x2_followup.sh.
CALL_BUDGET_S=540 source bench/device/call_lib.sh
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
