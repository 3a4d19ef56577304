# Per-step kernel profiles of examples/dist_train.py configs on the 2-GPU machine
# (bench/profile_real.py, synchronised windows of 3 steps), plus this host's reference step.
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONPATH=.
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > $OUT/log.txt
python -m phantom.engine.host > $OUT/host_reference_h200x2.json 2>> $OUT/log.txt
run() { name=$1; shift; echo "== $name" >> $OUT/log.txt
  python -m torch.distributed.run --standalone --nproc-per-node 2 bench/profile_real.py --step 5 --active 3 --sync \
    --out $OUT/prof_$name.json -- examples/dist_train.py --seq-len 2048 --steps 10 --warmup 3 "$@" >> $OUT/log.txt 2>&1; }
run tp-1b --parallel tp --preset 1b --batch-size 8
run tp-3b --parallel tp --preset 3b --batch-size 4
run ddp-1b --parallel ddp --preset 1b --batch-size 8
run fsdp-1b --parallel fsdp --preset 1b --batch-size 8
python -m phantom.engine.host > $OUT/host_reference_h200x2_after.json 2>> $OUT/log.txt
cd $OUT && tar czf profiles.tgz prof_*.json && rm prof_*.json
