# Session 6 (2026-11-23), one call on the 2 x H200 machine: (1) how this host runs DTensor and
# FSDP2 host code relative to phantom's reference step (bench/host_torch_versions.py, twice);
# (2) what is allocated at DDP's peak (bench/mem_snapshot.py on dist_train.py ddp-1b-s2k).
# Usage on the device: bash bench/device/host_versions_ddp_memory.sh
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONPATH=.
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > $OUT/info.log
python -c "import torch, sys; print(torch.__version__, sys.version)" >> $OUT/info.log
python bench/host_torch_versions.py --out $OUT/host_torch_versions_a.json > $OUT/host_versions.log 2>&1
python bench/host_torch_versions.py --out $OUT/host_torch_versions_b.json >> $OUT/host_versions.log 2>&1
torchrun --standalone --nproc-per-node 2 bench/mem_snapshot.py --out $OUT/ddp_mem -- \
    examples/dist_train.py --parallel ddp --preset 1b --seq-len 2048 --batch-size 8 --steps 4 --warmup 1 \
    > $OUT/ddp_mem.log 2>&1
grep -v Warning $OUT/host_versions.log; tail -20 $OUT/ddp_mem.log
