# Session 8 on a lent single-GPU machine: the drawn GEMM hold-out (bench/fallback_holdout.py
# --set random), on the H100 the hand-picked hold-out once more, the host's speed over time
# (host_flicker.py) and its reference step, and the host-bound benchmark's real steps.
# Usage on the device: bash bench/device/session8.sh H100   (or H200)
export PYTHONPATH=. PYTHONUNBUFFERED=1
gpu=$1; tag=$(echo "$gpu" | tr A-Z a-z)
log=$OUT/log.txt
{ date -u; nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit --format=csv,noheader; python -c "import torch; print(torch.__version__)"; nproc; } > $log 2>&1
python bench/fallback_holdout.py --set random --out $OUT/holdout_random_$gpu.json >> $log 2>&1
[ "$gpu" = H100 ] && python bench/fallback_holdout.py --out $OUT/holdout_H100_rerun2.json >> $log 2>&1
python bench/host_flicker.py --seconds 10 --out $OUT/flicker_${tag}_s8.json > /dev/null 2>> $log
python -m phantom.engine.host > $OUT/host_reference_${tag}_s8.json 2>> $log
python bench/host_bound.py real --out $OUT/host_bound_${tag}_s8.json >> $log 2>&1
python bench/host_flicker.py --seconds 10 --out $OUT/flicker_${tag}_s8_after.json > /dev/null 2>> $log
date -u >> $log
tail -25 $log
