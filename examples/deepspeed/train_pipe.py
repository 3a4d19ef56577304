"""Train a Hugging Face Llama with DeepSpeed's pipeline engine (deepspeed.pipe), from a config.

The model is cut into a list of layers for `PipelineModule`: the embedding, the
`LlamaDecoderLayer`s (each recomputes its rotary cos/sin), and the final norm with the output layer; DeepSpeed partitions them over the stages by parameter count and runs
its 1F1B schedule over `gradient_accumulation_steps` micro-batches per `train_batch()`. The
data-parallel degree is world / stages. Random tokens; the JSON config sets precision,
micro-batch size, micro-batches and optimizer (ZeRO stage 0 or 1: the pipeline engine does not
support 2 or 3).

    deepspeed --num_gpus 2 examples/deepspeed/train_pipe.py --deepspeed_config examples/deepspeed/pipe.json --stages 2
"""
import argparse
import os
import statistics
import time

import deepspeed
import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from deepspeed.pipe import LayerSpec, PipelineModule
from transformers import LlamaConfig
from transformers.models.llama.modeling_llama import LlamaDecoderLayer, LlamaRMSNorm, LlamaRotaryEmbedding

from train import MODELS, PEAK_BF16_FLOPS  # noqa: E402 (examples/deepspeed/train.py)

GIB = 2**30


class EmbeddingPipe(nn.Module):
    def __init__(self, config: LlamaConfig):
        super().__init__()
        self.embed_tokens = nn.Embedding(config.vocab_size, config.hidden_size)

    def forward(self, input_ids):
        return self.embed_tokens(input_ids)


class DecoderLayerPipe(LlamaDecoderLayer):
    """A decoder layer that takes and returns the hidden states only (the pipeline engine
    sends every floating-point activation between stages and expects a gradient for each):
    the rotary cos/sin are recomputed here, a few small kernels per layer."""

    def __init__(self, config: LlamaConfig, layer_idx: int):
        super().__init__(config, layer_idx)
        self.rotary_emb = LlamaRotaryEmbedding(config)

    def forward(self, hidden):
        positions = torch.arange(hidden.shape[1], device=hidden.device).unsqueeze(0)
        cos, sin = self.rotary_emb(hidden, positions)
        out = super().forward(hidden, attention_mask=None, position_embeddings=(cos, sin))
        return out[0] if isinstance(out, tuple) else out


class HeadPipe(nn.Module):
    def __init__(self, config: LlamaConfig):
        super().__init__()
        self.norm = LlamaRMSNorm(config.hidden_size, eps=config.rms_norm_eps)
        self.lm_head = nn.Linear(config.hidden_size, config.vocab_size, bias=False)

    def forward(self, hidden):
        return self.lm_head(self.norm(hidden))


def causal_lm_loss(logits, labels):
    return F.cross_entropy(logits[:, :-1].flatten(0, 1).float(), labels[:, 1:].flatten())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="tiny", help=f"a Llama config: {', '.join(m for m in MODELS if 'llama' in m or m == 'tiny')}")
    parser.add_argument("--layers", type=int, help="override the config's number of layers")
    parser.add_argument("--stages", type=int, default=2, help="pipeline stages")
    parser.add_argument("--seq-len", type=int, default=512)
    parser.add_argument("--steps", type=int, default=6)
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--ac", action="store_true", help="recompute every decoder layer in backward")
    parser.add_argument("--local_rank", type=int, default=int(os.environ.get("LOCAL_RANK", 0)))
    parser = deepspeed.add_config_arguments(parser)
    args = parser.parse_args()

    deepspeed.init_distributed()
    torch.cuda.set_device(args.local_rank)
    torch.manual_seed(1337)
    kwargs = dict(MODELS[args.model], tie_word_embeddings=False, use_cache=False)
    if args.layers:
        kwargs["num_hidden_layers"] = args.layers
    kwargs["max_position_embeddings"] = max(kwargs["max_position_embeddings"], args.seq_len)
    config = LlamaConfig(**kwargs)
    config._attn_implementation = "sdpa"

    layers = [LayerSpec(EmbeddingPipe, config)]
    layers += [LayerSpec(DecoderLayerPipe, config, i) for i in range(config.num_hidden_layers)]
    layers += [LayerSpec(HeadPipe, config)]
    model = PipelineModule(layers=layers, num_stages=args.stages, loss_fn=causal_lm_loss,
                           partition_method="parameters",
                           activation_checkpoint_interval=1 if args.ac else 0,
                           # Only the decoder layers: checkpointing the embedding (its input, the
                           # token ids, needs no grad) would leave the loss without a grad_fn, and
                           # DeepSpeed's backward then asserts "loss must be a scalar tensor".
                           checkpointable_layers=["DecoderLayerPipe"])
    engine, _, _, _ = deepspeed.initialize(model=model, model_parameters=[p for p in model.parameters()],
                                           config=args.deepspeed_config)

    micro, accum = engine.train_micro_batch_size_per_gpu(), engine.gradient_accumulation_steps()
    rank, world = dist.get_rank(), dist.get_world_size()
    dp = world // args.stages
    tokens_per_step = micro * accum * args.seq_len * dp
    n_params = config.num_hidden_layers * sum(p.numel() for p in LlamaDecoderLayer(config, 0).parameters()) \
        + 2 * config.vocab_size * config.hidden_size
    flops_per_token = 6 * (n_params - config.vocab_size * config.hidden_size) + \
        12 * config.num_hidden_layers * config.hidden_size * args.seq_len
    device_name = torch.cuda.get_device_name()
    peak = next((f for k, f in PEAK_BF16_FLOPS if k in device_name), 989e12) * world

    def batches():
        while True:
            ids = torch.randint(config.vocab_size, (micro, args.seq_len), device=engine.device)
            yield ids, ids

    data = batches()
    if rank == 0:
        print(f"device: {device_name} x {world} | deepspeed {deepspeed.__version__} | {args.model} "
              f"{n_params / 1e9:.2f}B params | {args.stages} stages x dp {dp} | micro {micro} x {accum} "
              f"micro-batches x seq {args.seq_len} | ac {args.ac}")
    times_ms = []
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for step in range(args.steps):
        loss = engine.train_batch(data_iter=data)
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
    times_ms = times_ms or [dt * 1e3]
    peaks = [None] * world
    dist.all_gather_object(peaks, torch.cuda.max_memory_allocated() / GIB)
    median_ms = statistics.median(times_ms)
    tok_s = tokens_per_step / (median_ms / 1e3)
    if rank == 0:
        print(f"summary: median_iter_ms={median_ms:.2f} tokens_per_s={tok_s:.0f} "
              f"tokens_per_s_per_gpu={tok_s / world:.0f} mfu={flops_per_token * tok_s / peak:.4f} "
              f"peak_alloc_gib={peaks[0]:.2f} max_peak_alloc_gib={max(peaks):.2f}")


if __name__ == "__main__":
    main()
