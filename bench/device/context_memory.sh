# Device memory outside PyTorch's allocator (bench/kernels/context_memory.py): library by library,
# then at the exit of a plain GPT training script (no NCCL) and of the Megatron-Core one-GPU
# config (NCCL process groups). Needs the megatron-core wheel in .whl (carry it).
# Usage on the device: bash bench/device/context_memory.sh
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .whl/megatron_core-*.whl \
  && export PYTHONPATH=/tmp/site:. || exit 1
export PYTHONUNBUFFERED=1 CUDA_DEVICE_MAX_CONNECTIONS=1
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
python bench/kernels/context_memory.py stages --out $OUT/context_memory_stages.json 2>&1 | grep -v Warning
python bench/kernels/context_memory.py script --out $OUT/context_memory_gpt.json -- \
  examples/gpt_train.py --preset gpt2-350m --steps 4 2>&1 | tail -2
python -m torch.distributed.run --nproc-per-node 1 bench/kernels/context_memory.py script \
  --out $OUT/context_memory_megatron.json -- examples/megatron/pretrain_gpt.py --preset gpt-1.7b \
  --seq-length 4096 --micro-batch-size 1 --global-batch-size 4 --train-iters 4 \
  --use-distributed-optimizer --core-attention sdpa 2>&1 | grep -E "context_memory|memory \(rank"
