# bench/workloads.py's training patterns (bench/patterns/) on this 2-GPU machine, twice (the
# run-to-run spread), with the host's reference CPU step before and after.
# Usage on the device: bash bench/device/patterns.sh
# Out: $OUT/patterns_real_<gpu>_round{1,2}.json, $OUT/host_reference_{before,after}.json, $OUT/env.txt
export PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0
gpu=h100; nvidia-smi --query-gpu=name --format=csv,noheader | grep -q H200 && gpu=h200
{ date -u; nvidia-smi --query-gpu=name,driver_version,power.limit --format=csv,noheader; nvidia-smi topo -m | head -4
  python3 -c "import torch; print(torch.__version__, torch.version.cuda, torch.cuda.nccl.version())"; } > $OUT/env.txt 2>&1
python3 -m phantom.engine.host > $OUT/host_reference_before.json 2>/dev/null
for round in 1 2; do
  python3 bench/workloads.py real --set patterns --only "${ONLY:-}" --timeout 240 \
    --out $OUT/patterns_real_${gpu}x2_round$round.json 2>&1 | cut -c1-300
done
python3 -m phantom.engine.host > $OUT/host_reference_after.json 2>/dev/null
date -u >> $OUT/env.txt
