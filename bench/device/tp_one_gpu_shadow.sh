#!/bin/bash
# bench/tp_one_gpu.py with and without --shadow-nccl (each functional all-reduce also issued on a
# real one-rank ProcessGroupNCCL), interleaved, on a 1-GPU host; results under $OUT.
set -u
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
one() { python bench/tp_one_gpu.py run "$@" 2>&1 | grep -E "^(summary|gc):|Error|error" | head -3; }
for cfg in "--preset gpt2-350m --seq-len 128 --batch-size 2" "--preset 3b --seq-len 2048 --batch-size 4" "--preset 3b --seq-len 128 --batch-size 2"; do
  for round in 1 2; do
    echo "== $cfg | plain | round $round";  one -- --parallel tp $cfg --steps 12 --warmup 4
    echo "== $cfg | shadow | round $round"; one --shadow-nccl -- --parallel tp $cfg --steps 12 --warmup 4
  done
done
echo "== profile: tp-3b-s2k shadow"
one --shadow-nccl --profile $OUT/prof_tp-3b-s2k_shadow.txt -- --parallel tp --preset 3b --seq-len 2048 --batch-size 4 --steps 10 --warmup 4
