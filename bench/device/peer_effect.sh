#!/bin/bash
# What a real NCCL peer adds to a host-bound tensor-parallel rank (bench/README, distributed.py,
# session 13). Per functional all-reduce call: host wall time and the calling thread's CPU time
# (bench/tp_one_gpu.py --time-collectives), with a real 2-rank NCCL group when the machine has
# two GPUs, and on one GPU with a no-op group, alone and with a real one-rank NCCL group beside.
# Results under $OUT. NVLink multicast off, as every run of this project.
set -u
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
keep() { grep -E "^(summary|gc|all_reduce host)" ; }
for cfg in "--preset gpt2-350m --seq-len 128 --batch-size 2" "--preset 3b --seq-len 2048 --batch-size 4"; do
  T="--parallel tp $cfg --steps 12 --warmup 4"
  if [ "$(nvidia-smi -L | wc -l)" -ge 2 ]; then
    echo "== $cfg | 2 ranks, NCCL"
    python -m torch.distributed.run --standalone --nproc-per-node 2 bench/tp_one_gpu.py run --real-group --time-collectives -- $T 2>&1 | keep
    echo "== $cfg | 2 ranks, NCCL, flight recorder off"
    TORCH_NCCL_TRACE_BUFFER_SIZE=0 TORCH_FR_BUFFER_SIZE=0 python -m torch.distributed.run --standalone --nproc-per-node 2 \
        bench/tp_one_gpu.py run --real-group --time-collectives -- $T 2>&1 | keep
  fi
  echo "== $cfg | 1 rank, no-op group";  python bench/tp_one_gpu.py run --time-collectives -- $T 2>&1 | keep
  echo "== $cfg | 1 rank, no-op group + one-rank NCCL"; python bench/tp_one_gpu.py run --time-collectives --shadow-nccl -- $T 2>&1 | keep
done
