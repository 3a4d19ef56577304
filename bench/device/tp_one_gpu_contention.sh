#!/bin/bash
# Host contention probe for bench/tp_one_gpu.py (run on a 1-GPU host; results under $OUT).
# A host-bound tp-350m-s128 step (rank 0 of a fake 2-rank group): alone, with a second copy of
# itself running on the same GPU at the same time, and next to a pure-Python CPU burner.
set -u
A="--parallel tp --preset gpt2-350m --seq-len 128 --batch-size 2 --steps 12 --warmup 4"
run() { python bench/tp_one_gpu.py run -- $A 2>&1 | grep -E "^(summary|gc):"; }
echo "== alone";      run
echo "== two copies"; run > $OUT/copy2.txt & run; wait; echo "-- second copy:"; cat $OUT/copy2.txt
echo "== with a CPU burner"; python -c "while True: pass" & B=$!; run; kill $B
echo "== with two CPU burners"; python -c "while True: pass" & B1=$!; python -c "while True: pass" & B2=$!; run; kill $B1 $B2
echo "== alone again"; run
