"""Hugging Face `generate()`: greedy decoding of a Llama built from a config (no weights to
download), bf16, under torch.inference_mode; one GPU. The summary's step is one generate call
(prefill and `--new-tokens` decode steps)."""
import argparse
import os
import statistics
import time

os.environ.setdefault("HF_HUB_OFFLINE", "1")
import torch
from transformers import LlamaConfig, LlamaForCausalLM

p = argparse.ArgumentParser()
p.add_argument("--layers", type=int, default=16)
p.add_argument("--batch", type=int, default=8)
p.add_argument("--prompt", type=int, default=512)
p.add_argument("--new-tokens", type=int, default=32)
p.add_argument("--calls", type=int, default=4)
p.add_argument("--profile", default="", help="real GPU only: torch.profiler table of one more call to this file")
a = p.parse_args()
cfg = LlamaConfig(vocab_size=32000, hidden_size=2048, intermediate_size=5632, num_hidden_layers=a.layers,
                  num_attention_heads=32, num_key_value_heads=8, max_position_embeddings=4096)
torch.manual_seed(0)
with torch.device("cuda"):
    model = LlamaForCausalLM(cfg).to(torch.bfloat16).eval()
ids = torch.randint(0, cfg.vocab_size, (a.batch, a.prompt)).cuda()
times = []
for call in range(a.calls):
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    with (torch.no_grad() if os.environ.get("GEN_NO_GRAD") else torch.inference_mode()):
        out = model.generate(input_ids=ids, attention_mask=torch.ones_like(ids), max_new_tokens=a.new_tokens,
                             min_new_tokens=a.new_tokens, do_sample=False, pad_token_id=0)
    torch.cuda.synchronize()
    times.append((time.perf_counter() - t0) * 1e3)
    print(f"call {call} {times[-1]:.1f} ms, {tuple(out.shape)}", flush=True)
if a.profile:  # where a real call's host time goes
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof, torch.inference_mode():
        model.generate(input_ids=ids, attention_mask=torch.ones_like(ids), max_new_tokens=a.new_tokens,
                       min_new_tokens=a.new_tokens, do_sample=False, pad_token_id=0)
    with open(a.profile, "w") as f:
        f.write(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=60))
print(f"summary: median_iter_ms={statistics.median(times[1:]):.2f} "
      f"peak_alloc_gib={torch.cuda.max_memory_allocated() / 2**30:.3f}", flush=True)
