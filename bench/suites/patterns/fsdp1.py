"""FSDP1 (FullyShardedDataParallel) with bf16 mixed precision, one unit per block,
optionally activation checkpointing; torchrun."""
import argparse, functools, os

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.distributed.algorithms._checkpoint.checkpoint_wrapper import (
    CheckpointImpl, apply_activation_checkpointing, checkpoint_wrapper)
from torch.distributed.fsdp import FullyShardedDataParallel as FSDP, MixedPrecision, ShardingStrategy
from torch.distributed.fsdp.wrap import ModuleWrapPolicy

from _common import GPT, Block, StepTimer, model_args

p = argparse.ArgumentParser()
model_args(p, d=2048, layers=12, heads=16, seq=2048, batch=4)
p.add_argument("--strategy", default="FULL_SHARD", choices=["FULL_SHARD", "SHARD_GRAD_OP", "NO_SHARD"])
p.add_argument("--ac", action="store_true")
a = p.parse_args()
dist.init_process_group("nccl")
torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
torch.manual_seed(0)
model = FSDP(GPT(a.vocab, a.d, a.layers, a.heads, a.seq), auto_wrap_policy=ModuleWrapPolicy({Block}),
             sharding_strategy=ShardingStrategy[a.strategy], device_id=torch.cuda.current_device(),
             mixed_precision=MixedPrecision(param_dtype=torch.bfloat16, reduce_dtype=torch.float32),
             use_orig_params=True)
if a.ac:
    apply_activation_checkpointing(model, check_fn=lambda m: isinstance(m, Block), checkpoint_wrapper_fn=functools.partial(
        checkpoint_wrapper, checkpoint_impl=CheckpointImpl.NO_REENTRANT))
opt = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=True)
timer = StepTimer()
for step in range(a.steps):
    timer.start()
    x = torch.randint(0, a.vocab, (a.batch, a.seq), device="cuda")
    loss = F.cross_entropy(model(x).flatten(0, 1).float(), x.flatten())
    loss.backward()
    model.clip_grad_norm_(1.0)
    opt.step()
    opt.zero_grad(set_to_none=True)
    ms = timer.stop()
    if dist.get_rank() == 0:
        print(f"step {step} {ms:.1f} ms", flush=True)
if dist.get_rank() == 0:
    print(timer.summary(a.warmup), flush=True)
dist.destroy_process_group()
