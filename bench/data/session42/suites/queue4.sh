#!/bin/bash
cd /tmp/s42/new; export PYTHONPATH=/tmp/s42/new; export PATH=/work/main/.venv/bin:$PATH
O=/tmp/s42/suites
for r in 1 2; do
  echo "== published r$r $(date -u +%T)"
  python bench/megatron.py published --out $O/new_pub_r$r/megatron_published > $O/published_r$r.log 2>&1
done
echo "== layer phases $(date -u +%T)"
python bench/layer_host_times.py sim --real /work/main/bench/data/session41/device_layer_phases_h200x2 --out $O/layer_phases_sim --configs tp2-sp,replica,tp-1b-s2k,z3-1b > $O/layer_phases.log 2>&1
echo "== contention $(date -u +%T)"
cd /work/main && python bench/calibration_contention.py --rounds 3 --busy 1 --out $O/calibration_contention.md > $O/contention.log 2>&1
echo "== done $(date -u +%T)"
