"""Train a Hugging Face Llama, built from a config (no download), on random tokens.

The model is `LlamaForCausalLM` with SDPA attention. Precision follows what the Hugging Face
Trainer does with `bf16=True`: fp32 weights and optimizer state, bf16 autocast for the forward
pass. `--pure-bf16` instead casts the whole model to bf16 (weights, grads and AdamW state),
as memory-starved fine-tuning scripts often do.

    python examples/hf_llama_train.py                      # tiny default, runs in seconds
    python examples/hf_llama_train.py --hidden-size 2048 --layers 16 --heads 32 --kv-heads 8 \
        --intermediate-size 8192 --vocab-size 128256 --seq-len 4096 --batch-size 2
"""
import argparse
import statistics
import time

import torch
from transformers import AutoModelForCausalLM, LlamaConfig

# Dense bf16 tensor-core peak by device name; the first matching substring wins.
PEAK_BF16_FLOPS = [("H100 PCIe", 756e12), ("H100", 989e12), ("H200", 989e12), ("A100", 312e12)]


def peak_flops(device_name: str) -> float:
    for key, flops in PEAK_BF16_FLOPS:
        if key in device_name:
            return flops
    print(f"note: no bf16 peak known for {device_name!r}; MFU assumes 989 TFLOP/s (H100)")
    return 989e12


def get_batch(batch_size: int, seq_len: int, vocab_size: int) -> torch.Tensor:
    # Hugging Face causal LMs shift the labels themselves, so inputs double as labels
    tokens = torch.randint(vocab_size, (batch_size, seq_len)).pin_memory()
    return tokens.cuda(non_blocking=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--hidden-size", type=int, default=512)
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--heads", type=int, default=8)
    parser.add_argument("--kv-heads", type=int, default=4, help="fewer than --heads gives grouped-query attention")
    parser.add_argument("--intermediate-size", type=int, default=1408)
    parser.add_argument("--vocab-size", type=int, default=32000)
    parser.add_argument("--seq-len", type=int, default=512)
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--steps", type=int, default=10, help="training iterations in total")
    parser.add_argument("--warmup", type=int, default=3, help="first iterations left out of the averages")
    parser.add_argument("--ac", action="store_true", help="activation checkpointing per decoder layer")
    parser.add_argument("--pure-bf16", action="store_true", help="bf16 weights and optimizer state, no autocast")
    parser.add_argument("--lr", type=float, default=3e-4)
    parser.add_argument("--seed", type=int, default=1337)
    args = parser.parse_args()

    config = LlamaConfig(
        hidden_size=args.hidden_size,
        num_hidden_layers=args.layers,
        num_attention_heads=args.heads,
        num_key_value_heads=args.kv_heads,
        intermediate_size=args.intermediate_size,
        vocab_size=args.vocab_size,
        max_position_embeddings=max(args.seq_len, 2048),
        tie_word_embeddings=False,
        use_cache=False,  # training: no KV cache
    )
    torch.manual_seed(args.seed)
    torch.backends.cuda.matmul.allow_tf32 = True

    with torch.device("cuda"):  # build and initialise on the GPU, no fp32 copy on the host
        model = AutoModelForCausalLM.from_config(config, attn_implementation="sdpa")
    if args.pure_bf16:
        model.to(torch.bfloat16)
    if args.ac:
        # the long-standing name; transformers 5.2x also offers activation_checkpointing_enable
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    model.train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=args.lr, betas=(0.9, 0.95), weight_decay=0.1, fused=True)

    device_name = torch.cuda.get_device_name()
    n_params = sum(p.numel() for p in model.parameters())
    n_matmul = n_params - model.get_input_embeddings().weight.numel()  # the lookup table does no flops
    tokens_per_iter = args.batch_size * args.seq_len
    flops_per_token = 6 * n_matmul + 12 * args.layers * args.hidden_size * args.seq_len
    peak = peak_flops(device_name)
    print(f"device: {device_name} | torch {torch.__version__} | params {n_params / 1e6:.2f}M | "
          f"{config.num_hidden_layers} layers, hidden {config.hidden_size}, heads {args.heads}/{args.kv_heads} | "
          f"batch {args.batch_size} x seq {args.seq_len} | ac {args.ac} | "
          f"{'pure bf16' if args.pure_bf16 else 'bf16 autocast'}")

    times_ms = []
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for it in range(args.steps):
        input_ids = get_batch(args.batch_size, args.seq_len, args.vocab_size)
        with torch.autocast("cuda", dtype=torch.bfloat16, enabled=not args.pure_bf16):
            loss = model(input_ids=input_ids, labels=input_ids).loss
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)

        torch.cuda.synchronize()
        t1 = time.perf_counter()
        dt = t1 - t0
        t0 = t1
        if it >= args.warmup:
            times_ms.append(dt * 1e3)
        tok_s = tokens_per_iter / dt
        print(f"iter {it} | loss {loss.item():.4f} | {dt * 1e3:.2f} ms | {tok_s:,.0f} tok/s | "
              f"MFU {flops_per_token * tok_s / peak * 100:.1f}% | "
              f"peak {torch.cuda.max_memory_allocated() / 2**30:.2f} GiB")

    if not times_ms:  # fewer steps than warmup: report the last iteration
        times_ms = [dt * 1e3]
    median_ms = statistics.median(times_ms)
    tok_s = tokens_per_iter / (median_ms / 1e3)
    print(f"summary: median_iter_ms={median_ms:.2f} mean_iter_ms={statistics.mean(times_ms):.2f} "
          f"tokens_per_s={tok_s:.0f} mfu={flops_per_token * tok_s / peak:.4f} "
          f"peak_alloc_gib={torch.cuda.max_memory_allocated() / 2**30:.2f} "
          f"peak_reserved_gib={torch.cuda.max_memory_reserved() / 2**30:.2f} "
          f"params={n_params / 1e6:.2f}M")


if __name__ == "__main__":
    main()
