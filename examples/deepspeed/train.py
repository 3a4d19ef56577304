"""Train a Hugging Face causal LM with DeepSpeed (ZeRO 1/2/3), built from a config (no download).

A plain DeepSpeed training script: the model comes from its Hugging Face config with random
weights, the batch is random tokens, and the DeepSpeed JSON config decides the ZeRO stage,
precision, micro-batch size, gradient accumulation and optimizer. Launch it the usual way:

    deepspeed --num_gpus 2 examples/deepspeed/train.py --deepspeed_config examples/deepspeed/zero3.json
    torchrun --nproc-per-node 2 examples/deepspeed/train.py --deepspeed_config examples/deepspeed/zero2.json \
        --model llama-1b --seq-len 2048

--model names a config (the published architecture hyper-parameters; see MODELS):
  tiny          4 layers, hidden 256 (seconds on any machine)
  llama-1b      Llama 3.2 1B shape (16 layers, hidden 2048, GQA 32/8, vocab 128256)
  llama-3b      Llama 3.2 3B shape (28 layers, hidden 3072, GQA 24/8, vocab 128256)
  llama2-7b, llama2-13b, llama2-70b, llama3-8b, llama3-70b
  gpt-oss-20b   OpenAI gpt-oss 20B: MoE, 32 experts top-4 in each of 24 layers; every rank
                runs all experts on its own tokens (no expert parallelism)

With ZeRO-3 the model is built inside `deepspeed.zero.Init`, so no rank ever holds the full
model. `--ac` turns on activation
checkpointing of every decoder layer (transformers' gradient checkpointing, non-reentrant).
`--micro-batch` and `--grad-accum` override the JSON's values. Rank 0 prints one line per
optimizer step and a final `summary:` line.
"""
import argparse
import json
import os
import statistics
import time

import deepspeed
import torch
import torch.distributed as dist
from transformers import AutoModelForCausalLM, GptOssConfig, LlamaConfig

GIB = 2**30
# Dense bf16 tensor-core peak by device name; the first matching substring wins.
PEAK_BF16_FLOPS = [("H100 PCIe", 756e12), ("H100", 989e12), ("H200", 989e12), ("A100", 312e12)]

LLAMA2 = dict(vocab_size=32000, rope_theta=10000.0, rms_norm_eps=1e-5, max_position_embeddings=4096)
LLAMA3 = dict(vocab_size=128256, rope_theta=500000.0, rms_norm_eps=1e-5, max_position_embeddings=8192)
MODELS = {
    "tiny": dict(hidden_size=256, num_hidden_layers=4, num_attention_heads=8, num_key_value_heads=4,
                 intermediate_size=704, vocab_size=8192, max_position_embeddings=2048),
    "llama-1b": dict(LLAMA3, hidden_size=2048, num_hidden_layers=16, num_attention_heads=32,
                     num_key_value_heads=8, intermediate_size=8192),
    "llama-3b": dict(LLAMA3, hidden_size=3072, num_hidden_layers=28, num_attention_heads=24,
                     num_key_value_heads=8, intermediate_size=8192),
    "llama2-7b": dict(LLAMA2, hidden_size=4096, num_hidden_layers=32, num_attention_heads=32,
                      num_key_value_heads=32, intermediate_size=11008),
    "llama2-13b": dict(LLAMA2, hidden_size=5120, num_hidden_layers=40, num_attention_heads=40,
                       num_key_value_heads=40, intermediate_size=13824),
    "llama2-70b": dict(LLAMA2, hidden_size=8192, num_hidden_layers=80, num_attention_heads=64,
                       num_key_value_heads=8, intermediate_size=28672),
    "llama3-8b": dict(LLAMA3, hidden_size=4096, num_hidden_layers=32, num_attention_heads=32,
                      num_key_value_heads=8, intermediate_size=14336),
    "llama3-70b": dict(LLAMA3, hidden_size=8192, num_hidden_layers=80, num_attention_heads=64,
                       num_key_value_heads=8, intermediate_size=28672),
    # openai/gpt-oss-20b config.json
    "gpt-oss-20b": dict(hidden_size=2880, num_hidden_layers=24, num_attention_heads=64,
                        num_key_value_heads=8, head_dim=64, intermediate_size=2880,
                        num_local_experts=32, num_experts_per_tok=4, vocab_size=201088,
                        sliding_window=128, rope_theta=150000.0, max_position_embeddings=131072,
                        rope_scaling={"rope_type": "yarn", "factor": 32.0, "beta_fast": 32.0,
                                      "beta_slow": 1.0, "truncate": False,
                                      "original_max_position_embeddings": 4096}),
}


def peak_flops(device_name: str) -> float:
    for key, flops in PEAK_BF16_FLOPS:
        if key in device_name:
            return flops
    return 989e12


def build_config(name: str, seq_len: int, layers: int | None = None):
    if name not in MODELS:
        raise SystemExit(f"unknown --model {name!r}; choose one of {', '.join(MODELS)}")
    kwargs = dict(MODELS[name], tie_word_embeddings=False, use_cache=False)
    if layers:
        kwargs["num_hidden_layers"] = layers
    if name.startswith("gpt-oss"):
        return GptOssConfig(**kwargs)
    kwargs["max_position_embeddings"] = max(kwargs["max_position_embeddings"], seq_len)
    return LlamaConfig(**kwargs)


def numel(p: torch.nn.Parameter) -> int:
    return getattr(p, "ds_numel", p.numel())  # ZeRO-3 partitions: the full size is ds_numel


def matmul_params_per_token(model, config) -> float:
    """Parameters each token multiplies through: all but the embedding table, and for an MoE
    only the experts it is routed to."""
    total = 0.0
    experts = getattr(config, "num_local_experts", 0)
    for name, p in model.named_parameters():
        if "embed_tokens" in name:
            continue
        share = config.num_experts_per_tok / experts if experts and ".experts." in name else 1.0
        total += numel(p) * share
    return total


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="tiny", help=f"one of {', '.join(MODELS)}")
    parser.add_argument("--layers", type=int, help="override the config's number of layers")
    parser.add_argument("--seq-len", type=int, default=512)
    parser.add_argument("--steps", type=int, default=8, help="optimizer steps in total")
    parser.add_argument("--warmup", type=int, default=3, help="first steps left out of the averages")
    parser.add_argument("--micro-batch", type=int, help="override train_micro_batch_size_per_gpu")
    parser.add_argument("--grad-accum", type=int, help="override gradient_accumulation_steps")
    parser.add_argument("--ac", action="store_true", help="activation checkpointing per decoder layer")
    parser.add_argument("--local_rank", type=int, default=int(os.environ.get("LOCAL_RANK", 0)),
                        help="set by the deepspeed launcher")
    parser = deepspeed.add_config_arguments(parser)
    args = parser.parse_args()
    if not args.deepspeed_config:
        raise SystemExit("--deepspeed_config PATH (a DeepSpeed JSON config) is required")

    with open(args.deepspeed_config) as f:
        ds_config = json.load(f)
    if args.micro_batch:
        ds_config["train_micro_batch_size_per_gpu"] = args.micro_batch
    if args.grad_accum:
        ds_config["gradient_accumulation_steps"] = args.grad_accum
    ds_config.pop("train_batch_size", None)  # derived from the two above and the world size

    deepspeed.init_distributed()
    torch.cuda.set_device(args.local_rank)
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(1337)

    config = build_config(args.model, args.seq_len, args.layers)
    zero_stage = ds_config.get("zero_optimization", {}).get("stage", 0)
    attn = "eager" if args.model.startswith("gpt-oss") else "sdpa"  # gpt-oss's sinks: no SDPA
    if zero_stage == 3:
        # each parameter is partitioned over the ranks as soon as its module is built
        with deepspeed.zero.Init(config_dict_or_path=ds_config):
            model = AutoModelForCausalLM.from_config(config, attn_implementation=attn)
    else:
        with torch.device("cuda"):
            model = AutoModelForCausalLM.from_config(config, attn_implementation=attn)
    if args.ac:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    model.train()

    engine, _, _, _ = deepspeed.initialize(model=model, model_parameters=model.parameters(), config=ds_config)
    micro, accum = engine.train_micro_batch_size_per_gpu(), engine.gradient_accumulation_steps()
    dp = world  # no model parallelism here: every rank is a data-parallel replica
    tokens_per_step = micro * accum * args.seq_len * dp
    n_params = sum(numel(p) for p in model.parameters())
    flops_per_token = 6 * matmul_params_per_token(model, config) + \
        12 * config.num_hidden_layers * config.num_attention_heads * config.head_dim * args.seq_len
    device_name = torch.cuda.get_device_name()
    peak = peak_flops(device_name) * world
    if rank == 0:
        print(f"device: {device_name} x {world} | torch {torch.__version__} | deepspeed {deepspeed.__version__} | "
              f"{args.model} {n_params / 1e9:.2f}B params | ZeRO-{zero_stage} | micro {micro} x accum {accum} x "
              f"seq {args.seq_len} | ac {args.ac} | optimizer {type(engine.optimizer).__name__}")

    times_ms = []
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for step in range(args.steps):
        for _ in range(accum):
            input_ids = torch.randint(config.vocab_size, (micro, args.seq_len), device=engine.device)
            loss = engine(input_ids=input_ids, labels=input_ids).loss
            engine.backward(loss)
            engine.step()  # steps the optimizer at the accumulation boundary only
        torch.cuda.synchronize()
        t1 = time.perf_counter()
        dt, t0 = t1 - t0, t1
        if step >= args.warmup:
            times_ms.append(dt * 1e3)
        if rank == 0:
            tok_s = tokens_per_step / dt
            print(f"step {step} | loss {loss.item():.4f} | {dt * 1e3:.2f} ms | {tok_s:,.0f} tok/s | "
                  f"MFU {flops_per_token * tok_s / peak * 100:.1f}% | "
                  f"peak {torch.cuda.max_memory_allocated() / GIB:.2f} GiB", flush=True)

    if not times_ms:
        times_ms = [dt * 1e3]
    peak_mem = torch.tensor([torch.cuda.max_memory_allocated()], dtype=torch.float64, device=engine.device)
    dist.all_reduce(peak_mem, op=dist.ReduceOp.MAX)
    median_ms = statistics.median(times_ms)
    tok_s = tokens_per_step / (median_ms / 1e3)
    if rank == 0:
        print(f"summary: median_iter_ms={median_ms:.2f} mean_iter_ms={statistics.mean(times_ms):.2f} "
              f"tokens_per_s={tok_s:.0f} tokens_per_s_per_gpu={tok_s / world:.0f} "
              f"mfu={flops_per_token * tok_s / peak:.4f} "
              f"peak_alloc_gib={torch.cuda.max_memory_allocated() / GIB:.2f} "
              f"max_peak_alloc_gib={peak_mem.item() / GIB:.2f} "
              f"peak_reserved_gib={torch.cuda.max_memory_reserved() / GIB:.2f} params={n_params / 1e6:.2f}M")


if __name__ == "__main__":
    main()
