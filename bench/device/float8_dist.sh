# Float8 training on two GPUs (Session 33): bench/patterns/float8_dist.py with FSDP2's float8
# all-gather and with torchao's float8 TP styles, twice each. torchao is carried in .whl/.
# Usage on the device: bash bench/device/float8_dist.sh   Out: $OUT/float8_dist_real_<gpu>x2_round{1,2}.json, $OUT/env.txt
export PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .whl/torchao-0.18.0-*.whl \
  && export PYTHONPATH=/tmp/site:. || exit 1
gpu=h100; nvidia-smi --query-gpu=name --format=csv,noheader | grep -q H200 && gpu=h200
{ date -u; nvidia-smi --query-gpu=name,driver_version,power.limit --format=csv,noheader; nvidia-smi topo -m | head -3
  python3 -c "import torch, torchao; print(torch.__version__, torch.cuda.nccl.version(), 'torchao', torchao.__version__)"; } > $OUT/env.txt 2>&1
for round in 1 2; do
  python3 bench/workloads.py real --set patterns --only float8-fsdp2-allgather,float8-tp --timeout 240 \
    --out $OUT/float8_dist_real_${gpu}x2_round$round.json 2>&1 | cut -c1-300
done
date -u >> $OUT/env.txt
