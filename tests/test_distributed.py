"""Multi-rank runs end to end: `phantom run --nproc-per-node 2` on real scripts."""
from __future__ import annotations

import math
import re
import socket

import pytest

from conftest import REPO, run_phantom
from phantom.engine.timeline import Timeline

COLLECTIVES = """
import os, time, torch, torch.distributed as dist
dist.init_process_group("nccl")
rank, world = dist.get_rank(), dist.get_world_size()
torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
assert dist.get_backend() == "nccl" and world == 2
assert os.environ["LOCAL_WORLD_SIZE"] == "2" and os.environ["MASTER_ADDR"]
x = torch.randn(16 * 2**20, device="cuda")  # 64 MiB of fp32
dist.all_reduce(x); torch.cuda.synchronize()
times = []
for _ in range(5):  # the fastest of a few: one call's host gap on a busy machine is noise
    t0 = time.perf_counter(); dist.all_reduce(x); torch.cuda.synchronize()
    times.append(time.perf_counter() - t0)
print(f"rank{rank} allreduce_us={min(times) * 1e6:.1f}")
w = dist.all_reduce(x, async_op=True); w.wait()
out = torch.empty(2 * x.numel(), device="cuda")
dist.all_gather_into_tensor(out, x)
dist.reduce_scatter_tensor(torch.empty(x.numel() // 2, device="cuda"), x)
dist.all_to_all_single(torch.empty_like(x), x)
dist.broadcast(x, src=0)
if rank == 0:
    dist.send(x, dst=1); dist.recv(x, src=1)
else:
    dist.recv(x, src=0); dist.send(x, dst=0)
# NCCL matches element counts, not shapes: a 0-d send into a (1,) receive is fine on a GPU
if rank == 0:
    dist.send(torch.zeros((), device="cuda"), dst=1)
else:
    dist.recv(torch.empty(1, device="cuda"), src=0)
# objects holding tensors: torch 2.11's pipelining sends its outputs' meta tensors this way;
# real CPU tensors beside them keep their values, parameters stay parameters
if rank == 0:
    dist.send_object_list([{"meta": torch.ones(3, 4, device="cuda").to("meta"),
                            "cuda": torch.ones(2, device="cuda"), "cpu": torch.arange(3.0),
                            "param": torch.nn.Parameter(torch.ones(5, device="cuda"))}], dst=1)
else:
    got = [None]
    dist.recv_object_list(got, src=0)
    m, c, p = got[0]["meta"], got[0]["cuda"], got[0]["param"]
    assert m.device.type == "meta" and m.shape == (3, 4) and c.device.type == "cuda" and c.shape == (2,)
    assert got[0]["cpu"].tolist() == [0.0, 1.0, 2.0]
    assert isinstance(p, torch.nn.Parameter) and p.requires_grad and p.device.type == "cuda"
# the same element count in different shapes reduces element-wise, as NCCL's flat buffers do
r = torch.arange(4.0).reshape(4, 1) if rank == 0 else 10 * torch.arange(4.0).reshape(2, 2)
dist.all_reduce(r)
assert r.flatten().tolist() == [0.0, 11.0, 22.0, 33.0] and r.shape == ((4, 1) if rank == 0 else (2, 2))
peer = 1 - rank
reqs = dist.batch_isend_irecv([dist.P2POp(dist.isend, x, peer), dist.P2POp(dist.irecv, torch.empty_like(x), peer)])
for r in reqs: r.wait()
sub = dist.new_group([0, 1])
dist.all_reduce(torch.ones(8, device="cuda"), group=sub)
objs = [None, None]
dist.all_gather_object(objs, {"rank": rank})
# objects of different sizes: every rank's bytes are resized to the largest
sized = [None, None]
dist.all_gather_object(sized, "x" * (10 + 100 * rank))
gathered = [None, None] if rank == 0 else None
dist.gather_object("y" * (5 + 50 * rank), gathered, dst=0)
assert [len(o) for o in sized] == [10, 110] and (rank == 1 or [len(o) for o in gathered] == [5, 55])
b = [f"from{rank}"]
dist.broadcast_object_list(b, src=1)
t = torch.tensor([rank + 1.0])
dist.all_reduce(t)
flag = torch.tensor([rank + 10], device="cuda")
dist.all_reduce(flag, op=dist.ReduceOp.MAX)
dist.barrier()
print(f"rank{rank} objs={objs} bcast={b} cpu_sum={t.item()} flag={flag.item()}")
dist.destroy_process_group()
"""


def _run(tmp_path, text, *options, name="s.py"):
    path = tmp_path / name
    path.write_text(text)
    return run_phantom(["run", "--nproc-per-node", "2", *options, str(path)], cwd=tmp_path,
                       timeout=300)


def test_collectives_carry_values_and_take_network_time(tmp_path):
    proc = _run(tmp_path, COLLECTIVES, "--gpu", "H200", "--tee", "all")
    assert proc.returncode == 0, proc.stderr[-3000:]
    for rank in (0, 1):
        assert (f"rank{rank} objs=[{{'rank': 0}}, {{'rank': 1}}] bcast=['from1'] "
                f"cpu_sum=3.0 flag=11") in proc.stdout
    # The script's own timing of one 64 MiB all-reduce (the fastest of 5) against NCCL's on two
    # real H200s: 249.85-251.72 us in three runs (bench/results/collectives/real-h200x2-
    # 2026-11-22-1.json, -11-25-1, -11-25-2). Below: 5%, the collectives suite's error at this
    # size is under 1% and the real runs spread 0.7%. Above: 5% plus up to 150 us of host time
    # (launch, synchronize and perf_counter on the simulating machine, measured here). A
    # network half as fast (500 us) fails either way.
    measured = float(re.search(r"rank0 allreduce_us=([\d.]+)", proc.stdout).group(1))
    real_us = 251.72
    assert 0.95 * 249.85 < measured < 1.05 * real_us + 150


PACED = """
import os, time, torch, torch.distributed as dist
dist.init_process_group("nccl")
torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
x = torch.ones(64, device="cuda")
t0 = time.perf_counter()
for _ in range(200):  # host-bound: tiny kernels
    x = x * 1.0001
torch.cuda.synchronize()
print(f"rank{dist.get_rank()} host_us={(time.perf_counter() - t0) * 1e6:.1f}")
dist.barrier()
"""


def test_ranks_run_at_their_nodes_slowest_ranks_pace(tmp_path):
    import json

    from phantom.hardware.gpus import HOST_RANK_SPREAD

    # Two ranks whose log host speeds are N(0, spread^2) run at the slower one's pace:
    # E[max of two] = spread / sqrt(pi), a textbook order statistic (docs/host-time.md).
    def pace_of_two(spread: float) -> float:
        return math.exp(spread / math.sqrt(math.pi))

    for spread, expected in ((None, pace_of_two(HOST_RANK_SPREAD)), ("0", 1.0), ("0.2", pace_of_two(0.2))):
        report = tmp_path / f"r{spread}.json"
        options = ["--rank-spread", spread] if spread is not None else []
        proc = _run(tmp_path, PACED, "--gpu", "H200", "--report", str(report), *options)
        assert proc.returncode == 0, proc.stderr[-3000:]
        sim = json.loads(report.read_text())["simulation"]
        assert sim["rank_pace"] == pytest.approx(expected)
        assert sim["rank_spread"] == pytest.approx(HOST_RANK_SPREAD if spread is None else float(spread))
        # 200 ops at 4 us each at least (the node's table), charged at the pace
        host_us = float(re.search(r"rank0 host_us=([\d.]+)", proc.stdout).group(1))
        assert host_us >= 200 * 4.0 * expected
    assert 1.0 < pace_of_two(HOST_RANK_SPREAD) < 1.1
    # one rank on each of two nodes: how far apart separate hosts run was not measured
    path, report = tmp_path / "s.py", tmp_path / "nodes.json"
    proc = run_phantom(["run", "--cluster", "h200-ib", "--nnodes", "2", "--nproc-per-node", "1", "--report",
                        str(report), str(path)], cwd=tmp_path, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert json.loads(report.read_text())["simulation"]["rank_pace"] == 1.0


def test_rendezvous_port_is_outside_the_ephemeral_range():
    """A port the kernel hands out for bind(0) can be taken by any outgoing connection before
    rank 0 listens on it (CI saw EADDRINUSE with two runs in parallel)."""
    from phantom.launcher.launch import _ephemeral_range, free_port

    low, high = _ephemeral_range()
    ports = {free_port() for _ in range(20)}
    assert all(not low <= p <= high for p in ports), ports
    assert all(p >= 20_000 for p in ports), ports  # clear of Ray's worker ports (10,002-19,999)
    assert len(ports) > 1  # drawn at random: two runs starting together rarely agree
    for port in ports:
        with socket.socket() as s:
            s.bind(("", port))


def test_rank_spread_is_checked(tmp_path):
    proc = _run(tmp_path, PACED, "--rank-spread", "2")
    assert proc.returncode != 0 and "--rank-spread must be a number from 0 to 1, got 2" in proc.stderr


def test_a_failing_rank_ends_the_run_with_its_traceback(tmp_path):
    proc = _run(tmp_path, """
import torch.distributed as dist, torch
dist.init_process_group("nccl")
if dist.get_rank() == 1:
    raise ValueError("boom on rank one")
dist.all_reduce(torch.ones(4, device="cuda"))
""")
    assert proc.returncode != 0
    assert "rank 1 failed" in proc.stderr and "boom on rank one" in proc.stderr


@pytest.mark.parametrize("parallel", ["ddp", "fsdp", "tp", "pp"])
def test_dist_train_example_runs_every_parallelism(parallel):
    proc = run_phantom(["run", "--nproc-per-node", "2", "--gpu", "H200", "examples/dist_train.py",
                        "--parallel", parallel, "--preset", "gpt2-124m",
                        "--seq-len", "256", "--batch-size", "4", "--steps", "3", "--warmup", "1"],
                       cwd=REPO, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    summary = re.search(r"summary: median_iter_ms=([\d.]+).*max_peak_alloc_gib=([\d.]+)", proc.stdout)
    assert summary and float(summary.group(1)) > 0 and float(summary.group(2)) > 0


def test_compute_overlapping_nccl_runs_on_the_sms_left():
    tl = Timeline(sm_count=100)
    tl.comm_kernel(stream_id=5, start=0.0, end=1_000_000.0, channels=20)
    start, end = tl.launch(0, gpu_ns=80_000.0, host_ns=0.0)
    assert end - start == pytest.approx(80_000.0 / 0.8)  # 20 of 100 SMs are NCCL's
    tl2 = Timeline(sm_count=100)
    s2, e2 = tl2.launch(0, gpu_ns=80_000.0, host_ns=0.0)
    assert e2 - s2 == pytest.approx(80_000.0)


VARIANTS = """
import os, sys, torch, torch.distributed as dist
mode = sys.argv[1]
if mode == "mixed":
    dist.init_process_group("cuda:nccl,cpu:gloo")
elif mode == "none":
    dist.init_process_group()
else:
    dist.init_process_group("nccl", device_id=torch.device("cuda", int(os.environ["LOCAL_RANK"])))
rank = dist.get_rank()
x = torch.ones(4, device="cuda")
outs = [torch.empty(4, device="cuda") for _ in range(2)]
dist.all_gather(outs, x)
dist.gather(x, outs if rank == 0 else None, dst=0)
dist.scatter(x, outs if rank == 0 else None, src=0)
dist.reduce(x, dst=1)
dist.all_to_all([torch.empty(4, device="cuda") for _ in range(2)], [x, x])
with dist._coalescing_manager(device=torch.device("cuda")):
    dist.all_reduce(x); dist.all_reduce(x)
if mode == "device_id":  # split_group needs a bound device, as with real NCCL
    solo = dist.split_group(split_ranks=[[0], [1]])
    assert dist.get_world_size(solo) == 1
    dist.all_reduce(x, group=solo)
t = torch.tensor([float(rank)])
dist.all_reduce(t)
objs = [None, None]; dist.all_gather_object(objs, rank)
print(rank, "ok", t.item(), objs, flush=True)
dist.destroy_process_group()
"""


@pytest.mark.parametrize("mode", ["mixed", "none", "device_id"])
def test_init_variants_and_other_collectives(tmp_path, mode):
    path = tmp_path / "v.py"
    path.write_text(VARIANTS)
    proc = run_phantom(["run", "--nproc-per-node", "2", "--quiet", str(path), mode], cwd=tmp_path,
                       timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "0 ok 1.0 [0, 1]" in proc.stdout


DTENSOR_OPTIMIZER = """
import os, torch, torch.distributed as dist
from torch.distributed.fsdp import fully_shard
from torch.distributed.device_mesh import init_device_mesh
dist.init_process_group("nccl")
torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
mesh = init_device_mesh("cuda", (2,), mesh_dim_names=("fsdp",))
with torch.device("meta"):
    m = torch.nn.Sequential(*[torch.nn.Linear(4096, 4096, bias=False) for _ in range(4)])
for layer in m:
    fully_shard(layer, mesh=mesh)
fully_shard(m, mesh=mesh)
m.to_empty(device="cuda")
for p in m.parameters():
    torch.nn.init.normal_(p)  # a random op on a DTensor: DTensor's RNG tracker copies state to CUDA
opt = torch.optim.AdamW(m.parameters(), fused=True)
m(torch.randn(8, 4096, device="cuda")).sum().backward()
gib = lambda k: torch.cuda.memory_stats()[k] / 2**30
torch.cuda.reset_peak_memory_stats()
before = gib("allocated_bytes.all.current")
opt.step()  # creates the sharded exp_avg / exp_avg_sq
print(f"rank{dist.get_rank()} before={before:.3f} after={gib('allocated_bytes.all.current'):.3f} "
      f"peak={gib('allocated_bytes.all.peak'):.3f}")
dist.destroy_process_group()
"""


def test_dtensor_random_init_and_first_fused_adamw_step(tmp_path):
    """DTensor ops run with phantom's mode active (its RNG tracker can copy state to the
    simulated GPU), and DTensor's global-shape propagation is not simulated as device work:
    the first fused AdamW step allocates the sharded states only (0.25 GiB per rank), not
    global-size temporaries."""
    proc = _run(tmp_path, DTENSOR_OPTIMIZER, "--quiet")
    assert proc.returncode == 0, proc.stderr[-3000:]
    m = re.search(r"rank0 before=([\d.]+) after=([\d.]+) peak=([\d.]+)", proc.stdout)
    assert m, proc.stdout
    before, after, peak = map(float, m.groups())
    shard = 4 * 4096 * 4096 * 4 / 2 / 2**30  # 0.125 GiB of fp32 parameters per rank
    # cuBLAS workspaces, 32 MiB each: the forward's thread's and the backward's (autograd engine)
    workspaces = 2 * 32 / 1024
    assert before == pytest.approx(2 * shard + workspaces, abs=0.01)  # parameters + gradients
    assert after == pytest.approx(4 * shard + workspaces, abs=0.01)  # + exp_avg + exp_avg_sq
    assert peak < after + 0.05


DDP_COMPILE = """
import time, torch, torch.nn as nn, torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP
dist.init_process_group("nccl")
rank = dist.get_rank(); torch.cuda.set_device(rank)
class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.norm, self.fc, self.proj = nn.LayerNorm(1024), nn.Linear(1024, 4096), nn.Linear(4096, 1024)
    def forward(self, x):
        return x + self.proj(torch.nn.functional.gelu(self.fc(self.norm(x))))
model = nn.Sequential(Block(), Block()).cuda()
order = ORDER
if order == "eager":
    ddp = DDP(model)
else:
    ddp = DDP(torch.compile(model)) if order == "inner" else torch.compile(DDP(model))
x = torch.randn(128, 1024, 1024, device="cuda")  # GPU-bound: host noise stays hidden
for step in range(3):
    torch.cuda.synchronize(); t0 = time.perf_counter()
    with torch.autocast("cuda", dtype=torch.bfloat16):  # bf16 GEMMs: the fused work shows
        loss = ddp(x).float().pow(2).mean()
    loss.backward()
    torch.cuda.synchronize()
print(f"rank{rank} {order} step_ms={(time.perf_counter() - t0) * 1e3:.2f}")
dist.destroy_process_group()
"""


def test_ddp_and_torch_compile_in_either_order(tmp_path):
    # DDP(torch.compile(model)) (nanoGPT's order) and torch.compile(DDP(model)) (the order
    # PyTorch's DDP docs show) are both simulated as compiled, with Dynamo's DDP graph split.
    # The second feeds one compiled graph's output to the next frame, which Dynamo re-fakes.
    def step_ms(order: str) -> float:
        out = _run(tmp_path, DDP_COMPILE.replace("ORDER", repr(order)), "--tee", "all",
                   name=f"{order}.py")
        assert out.returncode == 0, out.stderr[-3000:]
        assert "running it eagerly" not in out.stderr
        assert f"rank1 {order} step_ms=" in out.stdout
        return float(re.search(rf"rank0 {order} step_ms=([0-9.]+)", out.stdout).group(1))

    eager, inner, outer = step_ms("eager"), step_ms("inner"), step_ms("outer")
    # the compiled steps fuse the LayerNorm and GeLU work; either order gives the same plan
    assert inner < eager and outer < eager, (eager, inner, outer)
    assert abs(outer - inner) / inner < 0.1, (inner, outer)


FSDP2_CPU_BUILT = """
import torch, torch.nn as nn, torch.distributed as dist
from torch.distributed.fsdp import fully_shard
dist.init_process_group("nccl")
rank = dist.get_rank(); torch.cuda.set_device(rank)
model = nn.Sequential(*[nn.Linear(1024, 1024) for _ in range(4)])  # built on the CPU
for layer in model:
    fully_shard(layer)
fully_shard(model)  # moves the states to the GPU: tensor.data = tensor.to(device)
opt = torch.optim.AdamW(model.parameters())
for _ in range(2):
    model(torch.randn(8, 1024, device="cuda")).sum().backward()
    opt.step(); opt.zero_grad()
print(f"rank{rank} ok device={next(model.parameters()).device.type}")
dist.destroy_process_group()
"""


def test_fsdp2_shards_a_model_built_on_the_cpu(tmp_path):
    proc = _run(tmp_path, FSDP2_CPU_BUILT, "--tee", "all")
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "rank0 ok device=cuda" in proc.stdout and "rank1 ok device=cuda" in proc.stdout


FSDP1 = """
import os, sys, torch, torch.nn as nn, torch.distributed as dist
from torch.distributed.fsdp import FullyShardedDataParallel as FSDP, MixedPrecision, ShardingStrategy
from torch.distributed.fsdp import StateDictType, FullStateDictConfig
from torch.distributed.fsdp.wrap import ModuleWrapPolicy
dist.init_process_group("nccl")
torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
block = lambda: nn.Sequential(nn.Linear(256, 1024), nn.GELU(), nn.Linear(1024, 256))
model = FSDP(nn.Sequential(*[block() for _ in range(4)]), auto_wrap_policy=ModuleWrapPolicy({nn.Sequential}),
             sharding_strategy=ShardingStrategy[sys.argv[1]], device_id=torch.cuda.current_device(),
             mixed_precision=MixedPrecision(param_dtype=torch.bfloat16, reduce_dtype=torch.float32))
opt = torch.optim.AdamW(model.parameters())
for _ in range(3):
    model(torch.randn(8, 256, device="cuda")).float().pow(2).mean().backward()
    model.clip_grad_norm_(1.0)
    opt.step(); opt.zero_grad()
with FSDP.state_dict_type(model, StateDictType.FULL_STATE_DICT,
                          FullStateDictConfig(offload_to_cpu=sys.argv[2] == "offload", rank0_only=True)):
    sd = model.state_dict()
if dist.get_rank() == 0:
    print(f"fsdp1 params={sum(v.numel() for v in sd.values())} state={len(opt.state)}")
dist.destroy_process_group()
"""


def test_fsdp1_trains_and_refuses_what_it_cannot_simulate(tmp_path):
    path = tmp_path / "fsdp1.py"
    path.write_text(FSDP1)
    args = ["run", "--quiet", "--nproc-per-node", "2", str(path)]
    proc = run_phantom([*args, "SHARD_GRAD_OP", "gpu"], cwd=tmp_path, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert f"fsdp1 params={4 * (2 * 256 * 1024 + 1024 + 256)} state=" in proc.stdout
    # a state dict offloaded to the CPU moves the flat parameter that the module's
    # parameters view: a clear refusal naming the setting, not torch's use_count error
    proc = run_phantom([*args, "FULL_SHARD", "offload"], cwd=tmp_path, timeout=300)
    assert proc.returncode != 0
    assert "offload_to_cpu=False" in proc.stderr and "use_count" not in proc.stderr


FIRST_OP = """
import os, torch, torch.distributed as dist
from phantom.interception.cuda_api import _sim
dist.init_process_group("nccl")
torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
torch.ones(1, device="cuda")
print(f"rank{dist.get_rank()} script_host_ms={_sim().host.script_host_ns / 1e6:.1f}")
dist.destroy_process_group()
"""


def test_no_rank_is_charged_its_start_up_as_script_time(tmp_path):
    # The ranks that wait for another's measure of this machine had the script's first gap begin at
    # their start-up: their first op was charged 0.6-1.1 s that the measuring rank was not.
    proc = _run(tmp_path, FIRST_OP, "--quiet", "--tee", "all")
    assert proc.returncode == 0, proc.stderr[-3000:]
    times = [float(x) for x in re.findall(r"script_host_ms=([\d.]+)", proc.stdout)]
    assert len(times) == 2 and max(times) < 200, times


CHECKPOINTED_COLLECTIVE = """
import os, torch, torch.distributed as dist
from torch.utils.checkpoint import checkpoint
dist.init_process_group("nccl")
torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
w = torch.randn(64, 64, device="cuda", requires_grad=True)
calls = [0]
def block(x):
    calls[0] += 1
    if calls[0] % 2 == 0:  # in the recomputation only, as ZeRO-3 gathers released parameters again
        full = torch.empty(2 * x.shape[0], x.shape[1], device="cuda")
        dist.all_gather_into_tensor(full, x)
    return torch.tanh(x @ w).sum()
x = torch.randn(8, 64, device="cuda", requires_grad=True)
for _ in range(2):
    checkpoint(block, x, use_reentrant=False).backward()
torch.cuda.synchronize()
print(f"rank{dist.get_rank()} ok grad={tuple(w.grad.shape)}")
"""


def test_a_collective_inside_a_checkpointed_recompute_runs(tmp_path):
    # A collective inside a recomputation (ZeRO-3 gathers parameters there): whatever phantom
    # does around it must save nothing for backward, or checkpoint's count of saved tensors
    # no longer matches the forward's.
    proc = _run(tmp_path, CHECKPOINTED_COLLECTIVE, "--tee", "all")
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "rank0 ok grad=(64, 64)" in proc.stdout and "rank1 ok grad=(64, 64)" in proc.stdout
