"""One GPU, float8 training with torchao (`convert_to_float8_training`, the path torchtitan's
Float8 converter takes): a bf16 GPT whose block Linears compute in float8 (the output head
stays bf16, as torchtitan filters it), under torch.compile (how float8 is meant to run: the
scaling casts fuse) or eager. `--recipe none` is the bf16 baseline of the same model."""
import argparse

import torch
import torch.nn.functional as F

from _common import GPT, StepTimer, model_args

p = argparse.ArgumentParser()
model_args(p, d=2048, layers=8, heads=16, seq=2048, batch=8)
p.add_argument("--recipe", default="tensorwise", choices=["none", "tensorwise", "rowwise", "rowwise_with_gw_hp"])
p.add_argument("--eager", action="store_true", help="no torch.compile")
a = p.parse_args()
torch.manual_seed(0)
model = GPT(a.vocab, a.d, a.layers, a.heads, a.seq).cuda().to(torch.bfloat16)
if a.recipe != "none":
    from torchao.float8 import Float8LinearConfig, convert_to_float8_training

    convert_to_float8_training(model, config=Float8LinearConfig.from_recipe_name(a.recipe),
                               module_filter_fn=lambda mod, fqn: fqn != "head")
if not a.eager:
    for block in model.blocks:
        block.compile()
opt = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=True)
timer = StepTimer()
for step in range(a.steps):
    timer.start()
    x = torch.randint(0, a.vocab, (a.batch, a.seq), device="cuda")
    loss = F.cross_entropy(model(x).flatten(0, 1).float(), x.flatten())
    loss.backward()
    opt.step()
    opt.zero_grad(set_to_none=True)
    print(f"step {step} {timer.stop():.1f} ms", flush=True)
print(timer.summary(a.warmup), flush=True)
