"""One GPU, fp16 autocast with a GradScaler (unscale, clip, step, update), a GPT built on the
CPU and moved with .cuda() after its optimizer was made (accelerate's order)."""
import argparse

import torch
import torch.nn.functional as F

from _common import GPT, StepTimer, model_args

p = argparse.ArgumentParser()
model_args(p, d=1024, layers=12, heads=16, seq=1024, batch=16)
a = p.parse_args()
torch.manual_seed(0)
model = GPT(a.vocab, a.d, a.layers, a.heads, a.seq)
model.head.weight = model.wte.weight  # tied, as GPT-2
opt = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=True)  # fused needs CUDA params at step()
model.cuda()
scaler = torch.amp.GradScaler("cuda")
timer = StepTimer()
for step in range(a.steps):
    timer.start()
    x = torch.randint(0, a.vocab, (a.batch, a.seq), device="cuda")
    with torch.autocast("cuda", dtype=torch.float16):
        loss = F.cross_entropy(model(x).flatten(0, 1).float(), x.flatten())
    scaler.scale(loss).backward()
    scaler.unscale_(opt)
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    scaler.step(opt)
    scaler.update()
    opt.zero_grad(set_to_none=True)
    print(f"step {step} {timer.stop():.1f} ms", flush=True)
print(timer.summary(a.warmup), flush=True)
