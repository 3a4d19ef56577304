#!/bin/bash
# Session 39: the TE stand-in's new RoPE under phantom, against its real run on a lent H200
# (device_te_rope_h200/), then the published Megatron rows twice (this VM, one run at a time).
cd "$(dirname "$0")/../../.."
export PATH=$PWD/.venv/bin:$PATH
O=bench/data/session39
date -u
python bench/megatron.py sim --gpu H200 --configs pub-1.7b-1gpu-host-s512-te,pub-1.7b-1gpu-host-s512,pub-1.7b-1gpu-te \
  --real $O/device_te_rope_h200/megatron_te_rope_round1.json --out $O/megatron_sim_te_rope_h200
for r in 1 2; do
  date -u
  python bench/megatron.py published --out $O/megatron_published_r$r
done
date -u
