# Session 8 on the lent H200: the drawn GEMM hold-out (bench/fallback_holdout.py --set random),
# the host's speed over time (host_flicker.py) and its reference step, and the host-bound
# benchmark's real steps, in one call. Usage on the device: bash bench/device/session8_h200.sh
export PYTHONPATH=. PYTHONUNBUFFERED=1
log=$OUT/log.txt
{ date -u; nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit --format=csv,noheader; python -c "import torch; print(torch.__version__)"; nproc; } > $log 2>&1
python bench/fallback_holdout.py --set random --out $OUT/holdout_random_H200.json >> $log 2>&1
python bench/host_flicker.py --seconds 10 --out $OUT/flicker_h200_s8.json > /dev/null 2>> $log
python -m phantom.engine.host > $OUT/host_reference_h200_s8.json 2>> $log
python bench/host_bound.py real --out $OUT/host_bound_h200_s8.json >> $log 2>&1
python bench/host_flicker.py --seconds 10 --out $OUT/flicker_h200_s8_after.json > /dev/null 2>> $log
date -u >> $log
tail -25 $log
