#!/bin/bash
# One rank's real TP step and phantom's simulation of it on the same GPU host, minutes apart, so
# no conversion between machines enters the comparison (bench/README, distributed.py, session 13).
# Real: bench/tp_one_gpu.py (rank 0 of a fake 2-rank group, one GPU). phantom: 2 simulated ranks
# on this host's CPU (phantom leaves the real GPU alone), once with --host-speed 1.0 (this host is the simulated
# host) and once measuring the host speed against the H200 preset. Results under $OUT.
set -u
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
phantom() { python -c "import sys; from phantom.cli import main; sys.exit(main())" "$@"; }
python -m phantom.engine.host > $OUT/host_reference.json 2>&1
for cfg in "--preset gpt2-350m --seq-len 128 --batch-size 2" "--preset 3b --seq-len 128 --batch-size 2"; do
  T="--parallel tp $cfg --steps 12 --warmup 4"
  echo "== $cfg | real, 1 rank, no-op group"
  python bench/tp_one_gpu.py run -- $T 2>&1 | grep -E "^summary"
  echo "== $cfg | phantom, 2 ranks, --host-speed 1.0"
  phantom run --nproc-per-node 2 --gpu H200 --host-speed 1.0 examples/dist_train.py $T 2>&1 | grep -E "^summary|caution|host  |GPU busy|Error|error" | head -8
  echo "== $cfg | phantom, 2 ranks, measured host speed"
  phantom run --nproc-per-node 2 --gpu H200 examples/dist_train.py $T 2>&1 | grep -E "^summary|caution|host  |GPU busy|Error|error" | head -8
  echo "== $cfg | real again"
  python bench/tp_one_gpu.py run -- $T 2>&1 | grep -E "^summary"
done
python -m phantom.engine.host > $OUT/host_reference_after.json 2>&1
