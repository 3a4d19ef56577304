#!/bin/bash
# Session 39, lent 2 x H200: where the real steps of two rows phantom misses leave the GPU idle.
# DeepSpeed ZeRO-2 z2-1b (issue 9; phantom -5.2%, steady, GPU-bound: real profile 21.7 ms idle a
# step against phantom's 7.8) and Megatron tp2-sp (issue 8; host-bound under phantom). Each: the
# bench's real run (one more sample), then two steps under the profiler with CPU ops and rank 0's
# Chrome trace (bench/profile_real.py --cpu --trace), gzipped. Carry .whl.
# Usage on the device: bash bench/device/h200x2_traces.sh. Out: $OUT/call.tgz.
CALL_BUDGET_S=540 source bench/device/call_lib.sh
record_env
arch=${TORCH_CUDA_ARCH_LIST:-}; [ -n "$arch" ] && export TORCH_CUDA_ARCH_LIST=$(echo "$arch" | sed -E 's/([0-9]+\.[0-9]+)[a-z]+/\1/g')
T="python -m torch.distributed.run --standalone --nproc-per-node 2"
step build-fused-adam
timeout $(left 120) python -c "from deepspeed.ops.op_builder import FusedAdamBuilder; FusedAdamBuilder().load(verbose=False)" >> $log 2>&1
step z2-1b-real
timeout $(left 100) python bench/deepspeed.py real --configs z2-1b --out $W/deepspeed_real_h200x2.json >> $log 2>&1
step z2-1b-trace
ds="examples/deepspeed/train.py --deepspeed_config examples/deepspeed/zero2.json --seq-len 2048 --micro-batch 4 --grad-accum 1 --steps 8 --warmup 3 --model llama-1b"
timeout $(left 100) $T bench/profile_real.py --step 5 --active 2 --cpu --out $W/prof_z2-1b.json --trace $W/trace_z2-1b.json -- $ds >> $log 2>&1
gzip -f $W/trace_z2-1b.json 2>/dev/null
step tp2-sp-real
timeout $(left 100) python bench/megatron.py real --configs tp2-sp --out $W/megatron_real_h200x2.json >> $log 2>&1
step tp2-sp-trace
export CUDA_DEVICE_MAX_CONNECTIONS=1
timeout $(left 120) $T bench/profile_real.py --step 4 --active 2 --cpu --out $W/prof_tp2-sp.json --trace $W/trace_tp2-sp.json \
  -- examples/megatron/pretrain_gpt.py --preset gpt-1.7b --seq-length 2048 --micro-batch-size 2 --global-batch-size 8 --train-iters 6 --tp 2 --sequence-parallel >> $log 2>&1
gzip -f $W/trace_tp2-sp.json 2>/dev/null
step done
grep -h "elapsed time per iteration\|step time\|ms/step" $log | cut -c1-160 | tail -20
