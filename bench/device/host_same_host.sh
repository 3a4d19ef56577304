# Same-host check of host time (docs/host-time.md): host-bound steps run for real and under
# `phantom run` on the same lent GPU machine's host, where this machine's ratio to the node is
# about 1, so what is compared is the host-cost table and the torch-call boundary. The GPU is
# hidden from phantom's runs (CUDA_VISIBLE_DEVICES=), which fake it as on any machine.
# Writes $OUT/same_host.json (copy it to bench/host/data/same_host_h200.json).
#   bash bench/device/host_same_host.sh
source bench/device/call_lib.sh
record_env
WORKLOADS=(
  "gpt-124m-s512-b1|examples/gpt_train.py --preset gpt2-124m --seq-len 512 --batch-size 1 --steps 12 --warmup 3"
  "gpt-124m-s128-b1|examples/gpt_train.py --preset gpt2-124m --seq-len 128 --batch-size 1 --steps 12 --warmup 3"
  "hf-llama-tiny|examples/hf_llama_train.py --steps 12 --warmup 3"
)
for w in "${WORKLOADS[@]}"; do
  name=${w%%|*}; cmd=${w#*|}
  step "real $name"
  timeout $(left 90) python $cmd > $W/real_$name.txt 2>> $log
done
step calibrate
mkdir -p $W/cache
CUDA_VISIBLE_DEVICES= PHANTOM_CACHE_DIR=$W/cache timeout $(left 120) python -m phantom.cli calibrate --force >> $log 2>&1
for w in "${WORKLOADS[@]}"; do
  name=${w%%|*}; cmd=${w#*|}
  step "phantom $name"
  CUDA_VISIBLE_DEVICES= PHANTOM_CACHE_DIR=$W/cache timeout $(left 150) python -m phantom.cli run --gpu H200 --quiet \
    --report $W/report_$name.json $cmd > $W/sim_$name.txt 2>> $log
done
python - "$W" > $OUT/same_host.json <<'PY'
import json, re, sys
from pathlib import Path
w = Path(sys.argv[1])
rows = {}
for real in sorted(w.glob("real_*.txt")):
    name = real.stem[5:]
    def median(path):
        m = re.search(r"median_iter_ms=([\d.]+)", path.read_text()) if path.exists() else None
        return float(m.group(1)) if m else None
    report = w / f"report_{name}.json"
    host = json.loads(report.read_text())["simulation"]["host_time"] if report.exists() else None
    rows[name] = {"real_ms": median(real), "phantom_ms": median(w / f"sim_{name}.txt"), "host_time": host}
env = (w / "env.txt").read_text() if (w / "env.txt").exists() else ""
cal = w / "cache" / "host_calibration.json"
print(json.dumps({"env": env, "calibration": json.loads(cal.read_text()) if cal.exists() else None,
                  "script": "bench/device/host_same_host.sh", "rows": rows}, indent=1))
PY
