#!/bin/bash
# Session 22: host cost of a torch.compile'd call on a lent GPU host, twice, with the host's
# reference step. Usage on the device: bash bench/device/host_compiled_call.sh. Out: $OUT/*.json.
export PYTHONPATH=. PYTHONUNBUFFERED=1
{ date -u; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; lscpu | grep "Model name"; } > $OUT/env.txt 2>&1
python -m phantom.engine.host > $OUT/host_reference.json
for r in 1 2; do timeout 200 python bench/host_compiled_call.py --out $OUT/compiled_call_round$r.json; done
