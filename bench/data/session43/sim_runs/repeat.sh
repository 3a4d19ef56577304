cd /work/main
A="examples/deepspeed/train.py --deepspeed_config /tmp/s43/z3.json --model llama-1b --seq-len 2048 --micro-batch 4 --grad-accum 1 --steps 8 --warmup 3"
for i in 1 2 3 4 5; do
  .venv/bin/phantom run --quiet --nproc-per-node 1 --gpu H200 --report /tmp/s43/rep_x1_$i.json -- $A 2>&1 | grep summary | cut -c1-40
  .venv/bin/phantom run --quiet --nproc-per-node 2 --gpu H200 --report /tmp/s43/rep_x2_$i.json -- $A 2>&1 | grep summary | cut -c1-40
done
