# The ecosystem workloads of bench/workloads.py on this machine's one GPU: real runs (twice,
# for the run-to-run spread), then the kernel rows of their recorded op signatures
# (bench/profile/records/workloads-*.json, from `python bench/workloads.py record`).
# Needs the timm and peft wheels carried in .whl (the image has transformers, accelerate and
# pytorch-lightning, not those). ONLY=name,... limits the real runs to those workloads.
# Usage on the device: bash bench/device/workloads.sh real     then   bash ... timing
# (the GPU, H100 or H200, is read from nvidia-smi)
# Out: $OUT/real_<gpu>_round{1,2}.json, $OUT/<GPU>.json (the shipped database plus the new
# rows), $OUT/timing_<GPU>.log, $OUT/timing_report_<GPU>.json.
phase=$1
gpu=H100; nvidia-smi --query-gpu=name --format=csv,noheader | grep -q H200 && gpu=H200
for pkg in timm peft; do
  python3 -c "import $pkg" 2>/dev/null || python3 -m pip install -q --no-index --no-deps --no-compile \
    --no-cache-dir --target /tmp/site .whl/$pkg-*.whl
done
export PYTHONPATH=/tmp/site:. PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1
lower=$(echo $gpu | tr A-Z a-z)
if [ "$phase" = real ]; then
  for round in 1 2; do
    python3 bench/workloads.py real --only "${ONLY:-}" --out $OUT/real_${lower}_round$round.json 2>&1 | cut -c1-300
  done
  exit 0
fi
log=$OUT/timing_$gpu.log
{ date -u; nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit --format=csv,noheader
  python3 -c "import torch; print(torch.__version__, torch.version.cuda)"; } > $log 2>&1
cp phantom/cost/data/db/$gpu.json $OUT/$gpu.json
recs=()
for f in bench/profile/records/workloads-*.json*; do recs+=(--records "$f"); done
python3 -m phantom.cost.profile.timing --db $OUT/$gpu.json --budget-s ${BUDGET_S:-240} \
  --report $OUT/timing_report_$gpu.json "${recs[@]}" >> $log 2>&1
date -u >> $log
grep -v "^  " $log | tail -8
