# Time recorded op signatures on this machine's GPU, adding the rows missing from the shipped
# database: by default the Megatron-Core and DeepSpeed ones of bench/profile/record_frameworks.sh,
# RECORDS='bench/profile/records/nonllm-*.json' (a glob) for others.
# Usage on the device: bash bench/profile/time_records.sh H100   (or H200)
# Out: $OUT/<GPU>.json (the shipped database plus the new rows), $OUT/timing_<GPU>.log,
# $OUT/timing_report_<GPU>.json (skipped and failed keys).
export PYTHONPATH=. PYTHONUNBUFFERED=1
gpu=$1
log=$OUT/timing_$gpu.log
{ date -u; nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit --format=csv,noheader
  python -c "import torch; print(torch.__version__, torch.version.cuda)"; } > $log 2>&1
cp phantom/cost/data/db/$gpu.json $OUT/$gpu.json
recs=()
for f in ${RECORDS:-bench/profile/records/megatron-*.json* bench/profile/records/ds-*.json*}; do recs+=(--records "$f"); done
python -m phantom.cost.profile.timing --db $OUT/$gpu.json --budget-s ${BUDGET_S:-420} \
  --report $OUT/timing_report_$gpu.json "${recs[@]}" >> $log 2>&1
date -u >> $log
grep -v "^  " $log | tail -15
