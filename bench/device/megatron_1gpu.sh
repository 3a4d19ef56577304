# Megatron-Core on one GPU: bench/megatron.py's one-GPU configs, real, twice each (run-to-run
# spread). Needs the megatron-core 0.16.1 cp312 wheel carried in .whl (README of the device tool).
# Usage on the device: bash bench/device/megatron_1gpu.sh
# Out: $OUT/megatron_real_1gpu.tgz (per round: the JSON bench/megatron.py writes, its log and
# each config's full output).
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .whl/megatron_core-*.whl \
  && export PYTHONPATH=/tmp/site:. || exit 1
export PYTHONUNBUFFERED=1
d=/tmp/megatron_real_1gpu; mkdir -p $d
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit --format=csv,noheader > $d/device.txt
for round in 1 2; do
  python bench/megatron.py real --configs pub-1.7b-1gpu,pub-1.7b-1gpu-local \
    --out $d/round$round.json > $d/round$round.log 2>&1
done
tar -czf $OUT/megatron_real_1gpu.tgz -C /tmp megatron_real_1gpu
grep -h "elapsed time per iteration\|memory (rank 0)" $d/round*.log | cut -c1-170 | tail -12
