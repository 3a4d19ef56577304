#!/bin/bash
# Session 23: examples/gpt_train.py eager against torch.compile (the whole model, as nanoGPT),
# four configs, back to back on one lent GPU; and the host cost of a compiled training step.
# Usage on the device: bash bench/device/h100_compile.sh. Out: $OUT/call.tgz.
source bench/device/call_lib.sh
record_env
step host
timeout $(left 60) python -m phantom.engine.host > $W/host_reference.json 2>>$log
timeout $(left 90) python bench/host_compiled_call.py --training --out $W/compiled_training.json >> $log 2>&1
step configs
timeout $(left 470) python bench/single_gpu.py real --timeout 200 --steps 12 --warmup 4 \
  --configs 124m-s2k,124m-s2k-compile,350m-s4k,350m-s4k-compile,350m-s4k-ac,350m-s4k-ac-compile,1b-s2k,1b-s2k-compile \
  --out $W/real_compile.json >> $log 2>&1
step done
