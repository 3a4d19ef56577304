#!/bin/bash
# Same-host check without DTensor: a host-bound single-GPU GPT step (gpt2-350m, 2 x 128 tokens),
# real on the GPU and under phantom on this host's CPU with --host-speed 1.0, then the TP step's
# phantom report (dispatch entries, overhead taken off, charged host time). Results under $OUT.
set -u
phantom() { python -c "import sys; from phantom.cli import main; sys.exit(main())" "$@"; }
P="--preset gpt2-350m --seq-len 128 --batch-size 2 --steps 12 --warmup 4"
python -m phantom.engine.host > $OUT/host_reference.json 2>&1
for round in 1 2; do
  echo "== plain | real | round $round"; python examples/gpt_train.py $P 2>&1 | grep -E "^summary"
  echo "== plain | phantom --host-speed 1.0 | round $round"
  phantom run --gpu H200 --host-speed 1.0 --report $OUT/plain_$round.json examples/gpt_train.py $P 2>&1 | grep -E "^summary"
done
echo "== tp | phantom --host-speed 1.0, report"
phantom run --nproc-per-node 2 --gpu H200 --host-speed 1.0 --report $OUT/tp.json examples/dist_train.py --parallel tp $P 2>&1 | grep -E "^summary"
python - <<'PY'
import json, os
for name in ("plain_1", "plain_2", "tp"):
    r = json.load(open(os.path.join(os.environ["OUT"], name + ".json")))
    g, it = r["simulation"]["host_gaps"], r["iterations"]
    print(name, "iters", it["count"], "median_ms", round(it["median_ms"], 1), "entries", g["dispatch_entries"],
          "overhead_ns", round(g["dispatch_overhead_ns"]), "user_host_s", round(g["user_host_ns"] / 1e9, 3))
PY
