#!/bin/bash
# Session 39: two more runs of the published Megatron rows with the final code (queued together
# before either ran; both kept whatever they give), beside megatron_published_r{0,1,2}.
cd "$(dirname "$0")/../../.."
export PATH=$PWD/.venv/bin:$PATH
for r in 3 4; do
  date -u
  python bench/megatron.py published --out bench/data/session39/megatron_published_r$r
done
date -u
