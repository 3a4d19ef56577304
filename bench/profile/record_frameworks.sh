#!/usr/bin/env bash
# Record the op signatures of the Megatron-Core and DeepSpeed benchmark configs under simulation
# (no GPU needed), for `phantom profile --from-records` to time on a real GPU
# (bench/profile/time_records.sh). The shapes are the benchmarks' own:
#   megatron-pub-*   bench/suites/megatron.py's published H100 rows (seq 4096, micro batch 1, DP 48,
#                    --ranks auto: one representative rank per class runs)
#   megatron-*       bench/suites/megatron.py's 2-GPU configs (GPT 1.7B, seq 2048, micro batch 2)
#   ds-*             bench/suites/deepspeed.py's 2-GPU configs (HF Llama 1B/3B, seq 2048)
# Two iterations are enough: a training loop repeats its signatures.
# Usage: bash bench/profile/record_frameworks.sh [NAME_FILTER]
set -uo pipefail
cd "$(dirname "$0")/../.."
out=bench/profile/records
filter="${1:-}"
mg=examples/megatron/pretrain_gpt.py
pub=(--seq-length 4096 --micro-batch-size 1 --global-batch-size 192 --use-distributed-optimizer
     --overlap-grad-reduce --overlap-param-gather --core-attention sdpa --train-iters 2
     --disable-gloo-process-groups)
two=(--preset gpt-1.7b --seq-length 2048 --micro-batch-size 2 --global-batch-size 8 --train-iters 2)
export CUDA_DEVICE_MAX_CONNECTIONS=1  # as bench/suites/megatron.py runs them

rec() {  # name, phantom profile options..., --, script args...
  local name=$1; shift
  [[ -n "$filter" && "$name" != *"$filter"* ]] && return 0
  echo "== $name" >&2
  local t0=$SECONDS
  phantom profile --record-only "$out/$name.json" "$@" >/dev/null || echo "!! $name failed" >&2
  echo "   $((SECONDS - t0)) s" >&2
}

# GPU preset H200 for the recording: its memory holds the 2-GPU layouts of these models; the
# signatures (shapes, dtypes, layouts, SDPA backend on Hopper) are the same as on H100.
rec megatron-pub-1.7b-tp1 --gpu H200 --cluster h100-ib --nnodes 6 --ranks auto -- $mg --preset gpt-1.7b --tp 1 "${pub[@]}"
rec megatron-pub-7.1b-tp2 --gpu H200 --cluster h100-ib --nnodes 12 --ranks auto -- $mg --preset gpt-7.1b --tp 2 --sequence-parallel "${pub[@]}"
rec megatron-pub-16b-tp4 --gpu H200 --cluster h100-ib --nnodes 24 --ranks auto -- $mg --preset gpt-16b --tp 4 --sequence-parallel "${pub[@]}"
rec megatron-tp2-sp --gpu H200 --nproc-per-node 2 -- $mg "${two[@]}" --tp 2 --sequence-parallel
rec megatron-dp2-distopt --gpu H200 --nproc-per-node 2 -- $mg "${two[@]}" --use-distributed-optimizer --overlap-grad-reduce --overlap-param-gather
rec megatron-tp2-sp-sdpa --gpu H200 --nproc-per-node 2 -- $mg "${two[@]}" --tp 2 --sequence-parallel --core-attention sdpa
ds=(examples/deepspeed/train.py --seq-len 2048 --steps 2 --warmup 0)
rec ds-z2-1b --gpu H200 --nproc-per-node 2 -- "${ds[@]}" --deepspeed_config examples/deepspeed/zero2.json --model llama-1b --micro-batch 4
rec ds-z3-1b --gpu H200 --nproc-per-node 2 -- "${ds[@]}" --deepspeed_config examples/deepspeed/zero3.json --model llama-1b --micro-batch 4
rec ds-z2-3b-ac --gpu H200 --nproc-per-node 2 -- "${ds[@]}" --deepspeed_config examples/deepspeed/zero2.json --model llama-3b --micro-batch 4 --ac
rec ds-z3-3b-ac --gpu H200 --nproc-per-node 2 -- "${ds[@]}" --deepspeed_config examples/deepspeed/zero3.json --model llama-3b --micro-batch 4 --ac
rec ds-z3-1b-ga2 --gpu H200 --nproc-per-node 2 -- "${ds[@]}" --deepspeed_config examples/deepspeed/zero3.json --model llama-1b --micro-batch 2 --grad-accum 2
# README presets on 8 H100 (one node, --ranks auto): per-GPU shapes of the Llama models users run.
rec megatron-llama2-7b-tp2 --gpu H100 --nproc-per-node 8 --ranks auto -- $mg --preset llama2-7b --tp 2 --sequence-parallel --use-distributed-optimizer --overlap-grad-reduce --overlap-param-gather --core-attention sdpa --global-batch-size 32 --train-iters 2 --disable-gloo-process-groups
rec megatron-llama3-8b-tp2 --gpu H100 --nproc-per-node 8 --ranks auto -- $mg --preset llama3-8b --tp 2 --sequence-parallel --recompute-granularity selective --use-distributed-optimizer --overlap-grad-reduce --core-attention sdpa --global-batch-size 16 --train-iters 2 --disable-gloo-process-groups
rec ds-llama3-8b-z3 --gpu H100 --nproc-per-node 8 --ranks auto -- examples/deepspeed/train.py --deepspeed_config examples/deepspeed/zero3.json --model llama3-8b --seq-len 8192 --micro-batch 1 --ac --steps 2 --warmup 0
rec ds-llama2-7b-z3 --gpu H100 --nproc-per-node 8 --ranks auto -- examples/deepspeed/train.py --deepspeed_config examples/deepspeed/zero3.json --model llama2-7b --seq-len 4096 --micro-batch 1 --ac --steps 2 --warmup 0
# bench/suites/megatron.py's one-GPU configs (one published 1.7B rank's work, sdpa and local attention).
one=(--preset gpt-1.7b --seq-length 4096 --micro-batch-size 1 --global-batch-size 4 --train-iters 2 --use-distributed-optimizer)
rec megatron-pub-1.7b-1gpu --gpu H100 --nproc-per-node 1 -- $mg "${one[@]}" --core-attention sdpa
rec megatron-pub-1.7b-1gpu-local --gpu H100 --nproc-per-node 1 -- $mg "${one[@]}" --core-attention local
# bench/suites/megatron.py's MoE configs (Mixtral and Qwen3 cut to 4 layers, seq 4096, EP2 or TP2 + SP).
moe=(--num-layers 4 --seq-length 4096 --micro-batch-size 1 --global-batch-size 8 --train-iters 2 --use-distributed-optimizer --core-attention sdpa)
rec megatron-moe-mixtral-ep2 --gpu H200 --nproc-per-node 2 -- $mg --preset mixtral-8x7b --ep 2 "${moe[@]}"
rec megatron-moe-qwen3-ep2 --gpu H200 --nproc-per-node 2 -- $mg --preset qwen3-30b-a3b --ep 2 "${moe[@]}"
rec megatron-moe-mixtral-tp2-sp --gpu H200 --nproc-per-node 2 -- $mg --preset mixtral-8x7b --tp 2 --sequence-parallel "${moe[@]}"
