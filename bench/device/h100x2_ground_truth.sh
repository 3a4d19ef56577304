#!/bin/bash
# Session 17, lent 2 x H100 (one host): ground truth for the 2-GPU benchmarks of issues 4, 8, 9,
# the same runs that bench/README records for 2 x H200:
#   collectives.py real       nccl-tests-style sweep through torch.distributed (float32, 2^k bytes)
#   phantom.network.calibrate the measured collective table for this node type (bf16, 3 x 2^k)
#   distributed.py real       DDP / FSDP2 / TP / PP training suite
#   megatron.py real          Megatron-Core 0.16.1 TP2+SP, DP2 distributed optimizer (wheel in .whl)
#   deepspeed.py real         DeepSpeed 0.19.8 ZeRO-2/3 with FusedAdam (wheels in .whl)
# Usage on the device, carrying .whl: bash bench/device/h100x2_ground_truth.sh. Out: $OUT/call.tgz.
source bench/device/call_lib.sh
python -m phantom.engine.host > $W/host_reference_before.json 2>> $log
step collectives
timeout $(left 90) python bench/collectives.py real --out $W/real_collectives_h100x2.json --log $W/real_collectives_h100x2.log >> $log 2>&1
step calibrate
timeout $(left 90) python -m torch.distributed.run --standalone --nproc-per-node 2 -m phantom.network.calibrate \
  --out $W/collectives_H100x2.json >> $log 2>&1
step distributed
timeout $(left 200) python bench/distributed.py real --steps 10 --out $W/real_distributed_h100x2.json >> $log 2>&1
step megatron
timeout $(left 120) python bench/megatron.py real --configs tp2-sp,dp2-distopt,tp2-sp-sdpa --out $W/megatron_real_h100x2.json >> $log 2>&1
step deepspeed
timeout $(left 200) python bench/deepspeed.py real --out $W/deepspeed_real_h100x2.json --log $W/deepspeed_real_h100x2.log >> $log 2>&1
python -m phantom.engine.host > $W/host_reference_after.json 2>> $log
step done
