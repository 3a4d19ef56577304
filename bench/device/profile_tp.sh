export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONPATH=.
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > $OUT/log.txt
python -c "import torch;print(torch.__version__)" >> $OUT/log.txt
python -c "from phantom.engine.host import _probe_ns; print('probe_ns', min(_probe_ns() for _ in range(30)))" >> $OUT/log.txt 2>&1
run() { name=$1; shift; echo "== $name" >> $OUT/log.txt; python -m torch.distributed.run --standalone --nproc-per-node 2 bench/profile_real.py "$@" >> $OUT/log.txt 2>&1; }
T="examples/dist_train.py --seq-len 2048 --steps 8 --warmup 3"
run tp3b --step 6 --out $OUT/prof_tp_3b.json -- $T --parallel tp --preset 3b --batch-size 4
run tp1b --step 6 --out $OUT/prof_tp_1b.json -- $T --parallel tp --preset 1b --batch-size 8
run ddp1b --step 6 --out $OUT/prof_ddp_1b.json -- $T --parallel ddp --preset 1b --batch-size 8
run tp3bcpu --step 6 --cpu --trace /tmp/tp3b_trace.json --out $OUT/prof_tp_3b_cpu.json -- $T --parallel tp --preset 3b --batch-size 4
gzip -c /tmp/tp3b_trace.json > $OUT/tp3b_trace.json.gz
ls -la $OUT
