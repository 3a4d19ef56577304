# The lent 2 x H200 host's speed over time (bench/host_flicker.py, one core alone and two at
# once), its reference step, and the SD-UNet DDP step on 1 and 2 GPUs, plain and under
# bench/profile_real.py (3 synchronised steps from step 5): where the 2-GPU step's extra time goes.
python -c "import diffusers" 2>/dev/null || python -m pip install -q --no-deps --no-index .whl/*.whl  # carried: the image has no diffusers
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONPATH=.
log=$OUT/log.txt
{ date -u; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; python -c "import torch, diffusers; print(torch.__version__, diffusers.__version__)"; nproc; } > $log 2>&1
if [ "${1:-}" != unet-only ]; then
  python bench/host_flicker.py --seconds 15 --out $OUT/flicker_1core.json > /dev/null 2>> $log
  python bench/host_flicker.py --seconds 15 --cores 2 --out $OUT/flicker_2cores.json > /dev/null 2>> $log
  python -m phantom.engine.host > $OUT/host_reference.json 2>> $log
fi
unet() { n=$1; shift; echo "== unet $n GPU $*" >> $log
  timeout 240 python -m torch.distributed.run --standalone --nproc-per-node $n "$@" examples/diffusion/unet_ddp.py --steps 10 --warmup 3 >> $log 2>&1; }
unet 1
unet 2
unet 1
unet 2
unet 1 bench/profile_real.py --step 5 --active 3 --sync --out $OUT/prof_unet_1gpu.json --
unet 2 bench/profile_real.py --step 5 --active 3 --sync --out $OUT/prof_unet_2gpu.json --
[ "${1:-}" = unet-only ] || python bench/host_flicker.py --seconds 10 --out $OUT/flicker_1core_after.json > /dev/null 2>> $log
date -u >> $log
