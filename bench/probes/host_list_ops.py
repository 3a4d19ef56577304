"""Host time of ops that take lists of tensors: foreach ops, `torch.cat`, an optimizer step.

    python bench/probes/host_list_ops.py --out list_ops_real.json                       # on a GPU host
    phantom run --gpu H200 bench/probes/host_list_ops.py --out list_ops_sim.json        # simulated
    python bench/probes/host_list_ops.py --compare list_ops_real.json list_ops_sim.json # the table

An optimizer step is a dozen foreach calls over every parameter: on a GPU host each costs a
fraction of a microsecond per tensor (multi_tensor_apply packs ~36 tensors per launch), while
under phantom every tensor of the list crosses into Python and back for the fake dispatch. The
per-entry dispatch overhead phantom takes off each gap does not see that per-tensor cost, and a
UNet's AdamW step (686 parameters) came out 34-36 ms of host time against 13-20 ms on the real
hosts. Each case is timed as host microseconds per call:
blocks of calls with no synchronisation inside (tiny tensors, so the GPU never holds the host
back through the launch queue), a synchronize between blocks, the median of the blocks. Under
phantom `perf_counter` is the simulated host clock, so the same numbers come out simulated.
"""
from __future__ import annotations

import argparse
import json
import statistics
import time

import torch

SIZES = (1, 16, 128, 686)  # 686: the SD 1.5 UNet's parameter count


def _tensors(n: int, numel: int = 256) -> list[torch.Tensor]:
    return [torch.zeros(numel, device="cuda") for _ in range(n)]


def _time(fn, calls: int, blocks: int = 7, warmup: int = 1) -> float:
    """Median host µs per call of `fn` over `blocks` blocks of `calls` calls (after `warmup`
    calls)."""
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    per_call = []
    for _ in range(blocks):
        t0 = time.perf_counter()
        for _ in range(calls):
            fn()
        per_call.append((time.perf_counter() - t0) / calls * 1e6)
        torch.cuda.synchronize()
    return statistics.median(per_call)


def _optimizer_case(n: int, **adamw) -> tuple:
    params = [torch.nn.Parameter(t) for t in _tensors(n)]
    for p in params:
        p.grad = torch.zeros_like(p)
    opt = torch.optim.AdamW(params, lr=1e-4, weight_decay=0.01, **adamw)
    return params, opt


def cases(n: int) -> dict:
    xs, ys = _tensors(n), _tensors(n)
    calls = max(3, 2048 // n)
    out = {
        "foreach_mul_": _time(lambda: torch._foreach_mul_(xs, 0.9), calls),
        "foreach_add": _time(lambda: torch._foreach_add(xs, 1.0), calls),
        "foreach_addcmul_": _time(lambda: torch._foreach_addcmul_(xs, ys, ys, 0.1), calls),
        "cat": _time(lambda: torch.cat(xs), calls),
    }
    params, opt = _optimizer_case(n, foreach=True)
    out["adamw_foreach_step"] = _time(opt.step, max(3, 256 // n))
    params, fused = _optimizer_case(n, fused=True)
    out["adamw_fused_step"] = _time(fused.step, max(3, 256 // n))
    grads = [p.grad for p in params]
    out["clip_grad_norm"] = _time(lambda: torch.nn.utils.clip_grad_norm_(params, 1.0), max(3, 256 // n))

    def drop_grads() -> None:  # zero_grad(set_to_none=True) after fresh gradients
        for p, g in zip(params, grads):
            p.grad = g
        fused.zero_grad(set_to_none=True)
    out["zero_grad_set_to_none"] = _time(drop_grads, max(3, 512 // n))
    return out


def compare(real_path: str, sim_path: str) -> str:
    real, sim = json.loads(open(real_path).read()), json.loads(open(sim_path).read())
    lines = [f"real: {real['device']}, torch {real['torch']}; simulated: {sim['device']}, torch {sim['torch']}", "",
             "| case | tensors | real µs/call | phantom µs/call | error |", "|---|---|---|---|---|"]
    for n in real["results"]:
        for case, r in real["results"][n].items():
            s = sim["results"].get(n, {}).get(case)
            if s is not None:
                lines.append(f"| {case} | {n} | {r:.1f} | {s:.1f} | {100 * (s - r) / r:+.1f}% |")
    return "\n".join(lines)


def host_bench_cli(doc: str, measure, compare_files) -> None:
    """The command line of a host-time microbenchmark (this one, host_cuda_api.py): `--out F`
    runs `measure()` on one intra-op thread and writes its results with the device and torch
    version; `--compare REAL SIM` prints `compare_files(REAL, SIM)`."""
    ap = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out")
    ap.add_argument("--compare", nargs=2, metavar=("REAL", "SIM"))
    args = ap.parse_args()
    if args.compare:
        print(compare_files(*args.compare))
        return
    torch.set_num_threads(1)
    record = {"device": torch.cuda.get_device_name(), "torch": torch.__version__, "results": measure()}
    if args.out:
        with open(args.out, "w") as f:
            json.dump(record, f, indent=1)


def measure_all() -> dict:
    results = {}
    for n in SIZES:
        results[str(n)] = cases(n)
        print(n, {k: round(v, 1) for k, v in results[str(n)].items()}, flush=True)
    return results


def main() -> None:
    host_bench_cli(__doc__, measure_all, compare)


if __name__ == "__main__":
    main()
