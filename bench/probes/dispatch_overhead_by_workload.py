"""phantom's per-entry dispatch overhead, measured on several training steps instead of one.

phantom takes a fixed cost per handler entry off every measured host gap
(`phantom.host.calibration.calibrate`): the difference between a tiny training step on fake
CUDA tensors and the same step on real CPU tensors, spread over the fake step's handler entries.
In a host-bound run that subtraction is most of the measured gap (hf-llama-small: ~8,250
entries a step x ~19.5 µs against ~185 ms of gaps), so a 10% error in it moves the step by
~50%. This asks whether the calibration step is representative: the same measurement (one
intra-op thread, alternating blocks of 4 steps, median of the pairs' differences) on other
steps, with and without their optimizer, and the entries counted by kind.

    phantom run --gpu H200 bench/probes/dispatch_overhead_by_workload.py [--workloads calib,gpt6_no,...]

A diagnostic that finds the running Simulation through its `gc.callbacks` hook and uses the
calibration's own pieces (`measure_raw_gaps`, `paired_blocks`); run it alone, not inside a
training script. Rows are in this machine's raw ns at the moment of the run:
compare rows of one run (`per_calib`), not runs.
"""
from __future__ import annotations

import argparse
import collections
import importlib.util
import statistics
import sys
from pathlib import Path
from typing import Callable

import torch
from torch._subclasses.fake_tensor import unset_fake_temporarily

from phantom.host import calibration
from phantom.host.calibration import CALIBRATION_SHAPE
from phantom.host.machine import training_step
from phantom.interception import current_simulation
from phantom.interception import mode as phantom_mode

ROOT = Path(__file__).resolve().parents[2]
STEPS = 4  # calls per block, as the calibration
ENTRIES: collections.Counter = collections.Counter()


def _count_entries() -> None:
    """Count top-level handler entries by kind, as PhantomMode.__torch_dispatch__ sorts them."""
    handler = phantom_mode.PhantomMode.__torch_dispatch__

    def counting(self, func, types, args=(), kwargs=None):
        if not self._depth:
            if func in phantom_mode._METADATA_OPS:
                kind = "meta"
            elif phantom_mode._has_subclass_arg(types):
                kind = "subclass"
            elif not phantom_mode._touches_cuda(args, kwargs or {}):
                kind = "cpu"
            else:
                kind = "op"
            ENTRIES[kind] += 1
        return handler(self, func, types, args, kwargs)

    phantom_mode.PhantomMode.__torch_dispatch__ = counting


def _load_example(name: str):
    spec = importlib.util.spec_from_file_location(name, ROOT / "examples" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _train(model: torch.nn.Module, batch, loss_of) -> Callable[[], None]:
    opt = torch.optim.AdamW(model.parameters(), foreach=True)

    def step() -> None:
        loss_of(model, batch()).backward()
        opt.step()
        opt.zero_grad(set_to_none=True)

    return step


def _loss(out):
    return out[1] if isinstance(out, tuple) else out


def gpt(device: str, n_layer: int) -> Callable[[], None]:
    """examples/gpt_train.py's GPT at width 64 (fp32, no autocast: both sides run the same ops)."""
    gt = _load_example("gpt_train")
    cfg = gt.GPTConfig(n_layer=n_layer, n_embd=64, n_head=4, vocab_size=256, block_size=64)
    model = gt.GPT(cfg).to(device)
    idx = lambda: torch.randint(0, 256, (2, 32), device=device)  # noqa: E731
    return _train(model, idx, lambda m, x: _loss(m(x, x)))


def llama(device: str, layers: int = 2, width: int = 64, batch: int = 2, tokens: int = 32) -> Callable[[], None]:
    """A Hugging Face Llama (`layers` x `width`, vocabulary 4 x width and at least 64, GQA 2:1), SDPA attention."""
    from transformers import AutoModelForCausalLM, LlamaConfig

    vocab, heads = max(64, 4 * width), max(2, width // 16)
    cfg = LlamaConfig(vocab_size=vocab, hidden_size=width, intermediate_size=2 * width,
                      num_hidden_layers=layers, num_attention_heads=heads,
                      num_key_value_heads=heads // 2, max_position_embeddings=64)
    cfg._attn_implementation = "sdpa"
    model = AutoModelForCausalLM.from_config(cfg).to(device)
    idx = lambda: torch.randint(0, vocab, (batch, tokens), device=device)  # noqa: E731
    return _train(model, idx, lambda m, x: m(input_ids=x, labels=x).loss)


def mlp(device: str, layers: int) -> Callable[[], None]:
    """host_torch_versions.py's MLP blocks (layer norm, two linears, GELU) at width 64."""
    sys.path.insert(0, str(ROOT / "bench"))
    import host_torch_versions as workloads

    model = workloads._model(layers, 64).to(device)
    x = lambda: torch.randn(16, 64, device=device)  # noqa: E731
    return _train(model, x, lambda m, inp: m(inp).float().pow(2).mean())


def without_optimizer(make):
    """The same step with AdamW replaced by a stand-in that only drops the gradients: the
    optimizer's CPU side does real arithmetic per tensor, its CUDA side different Python."""
    class NoStep:
        def __init__(self, params, **_):
            self.params = list(params)

        def step(self) -> None:
            pass

        def zero_grad(self, set_to_none: bool = True) -> None:
            for p in self.params:
                p.grad = None

    def build(device: str):
        real_adamw, torch.optim.AdamW = torch.optim.AdamW, NoStep
        try:
            return make(device)
        finally:
            torch.optim.AdamW = real_adamw

    return build


WORKLOADS = {"calib": training_step, "calib_tiny": lambda d: training_step(d, *CALIBRATION_SHAPE),
             "mlp": lambda d: mlp(d, 4), "mlp16": lambda d: mlp(d, 16),
             "gpt2": lambda d: gpt(d, 2), "gpt6": lambda d: gpt(d, 6), "llama": llama,
             # 16 layers at width 8 (little arithmetic on the CPU side), 8 tokens
             "llama16": lambda d: llama(d, layers=16, width=8, batch=1, tokens=8)}
WORKLOADS.update({f"{k}_no": without_optimizer(v) for k, v in list(WORKLOADS.items())})


def measure(sim, make, pairs: int) -> dict:
    """The calibration's measurement (`Simulation.paired_blocks`) on `make`'s step."""
    fake = make("cuda")
    with unset_fake_temporarily():
        real = make("cpu")
        for _ in range(3):
            real()
    for _ in range(3):
        fake()
    ENTRIES.clear()
    rows = []
    for fake_ns, real_ns, _ in calibration.paired_blocks(sim.host, fake, real, pairs, STEPS):
        rows.append((fake_ns / STEPS, real_ns / STEPS, {k: v / STEPS for k, v in ENTRIES.items()}))
        ENTRIES.clear()  # the counts of one fake block at a time
    entries = rows[-1][2]
    n = sum(entries.values())
    diff = statistics.median(f - r for f, r, _ in rows)
    return {"fake_us": statistics.median(r[0] for r in rows) / 1e3, "real_us": statistics.median(r[1] for r in rows) / 1e3,
            "entries": n, "meta_share": entries.get("meta", 0) / n, "per_entry_us": diff / n / 1e3, "by_kind": entries}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--workloads", default="calib,calib_no,mlp_no,mlp16_no,gpt2_no,gpt6_no,llama_no,gpt6,llama,mlp16")
    parser.add_argument("--pairs", type=int, default=11)
    args = parser.parse_args()
    sim = current_simulation()
    _count_entries()
    torch.set_num_threads(1)
    sim.host.measure_raw_gaps()  # as the calibration measures
    # ... net of freed storages, as the calibration measures (a run takes each freed storage's
    # cost off on its own, and deeper models free more storages per entry)
    sim.host.release_overhead_ns = calibration._measure_release_cost(sim.host, args.pairs)[0]
    calib = None
    print("| workload | fake µs/step | CPU µs/step | entries | metadata share | overhead µs/entry | per_calib |")
    print("|---|---|---|---|---|---|---|")
    for name in args.workloads.split(","):
        r = measure(sim, WORKLOADS[name], args.pairs)
        calib = r["per_entry_us"] if name == "calib" else calib
        ratio = f"{r['per_entry_us'] / calib:.2f}" if calib else "-"
        print(f"| {name} | {r['fake_us']:.0f} | {r['real_us']:.0f} | {r['entries']:.0f} | {r['meta_share']:.2f} | "
              f"{r['per_entry_us']:.2f} | {ratio} |", flush=True)


if __name__ == "__main__":
    main()
