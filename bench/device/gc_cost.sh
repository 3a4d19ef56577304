#!/bin/bash
# What Python's cyclic garbage collector costs a host-bound training step on a GPU host: each
# config real on one GPU (tp_one_gpu.py run: dist_train.py as rank 0 of a fake 2-rank group,
# or gpt_train.py), with the collector on and off, interleaved; collections per generation and
# their time per steady step (the `gc:` line); then two of them under phantom on this host
# (--host-speed 1.0), where the same hook times phantom's own process. Results under $OUT.
set -u
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
phantom() { python -c "import sys; from phantom.cli import main; sys.exit(main())" "$@"; }
one() { python bench/tp_one_gpu.py run "$@" 2>&1 | grep -E "^(summary|gc):|Error|error" | head -4; }
python -m phantom.engine.host > $OUT/host_reference.json 2>&1
S="--steps 14 --warmup 4"
GPT="--script examples/gpt_train.py --"
for round in 1 2; do
  for cfg in "$GPT --preset gpt2-350m --seq-len 128 --batch-size 2" \
             "$GPT --preset gpt2-124m --seq-len 512 --batch-size 1" \
             "-- --parallel fsdp --preset gpt2-350m --seq-len 128 --batch-size 8" \
             "-- --parallel tp --preset gpt2-350m --seq-len 128 --batch-size 2" \
             "-- --parallel tp --preset 3b --seq-len 2048 --batch-size 4"; do
    for g in on off; do
      echo "== round $round | gc $g | $cfg"; one --gc $g $cfg $S
    done
  done
done
echo "== phantom (this host, --host-speed 1.0) | gpt2-350m s128 b2"
phantom run --gpu H200 --host-speed 1.0 bench/tp_one_gpu.py run $GPT --preset gpt2-350m --seq-len 128 --batch-size 2 $S 2>&1 | grep -E "^(summary|gc):|Error"
echo "== phantom (this host, --host-speed 1.0) | fsdp-350m-s128, 2 ranks"
phantom run --gpu H200 --host-speed 1.0 --nproc-per-node 2 bench/tp_one_gpu.py run --real-group -- --parallel fsdp --preset gpt2-350m --seq-len 128 --batch-size 8 $S 2>&1 | grep -E "^(summary|gc):|Error"
python -m phantom.engine.host > $OUT/host_reference_after.json 2>&1
