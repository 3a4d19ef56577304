"""Host time of each Megatron-Core transformer layer's forward, unprofiled, real or under phantom.

    torchrun --nproc-per-node 2 bench/layer_host_times.py examples/megatron/pretrain_gpt.py ARGS...
    phantom run --nproc-per-node 2 bench/layer_host_times.py examples/megatron/pretrain_gpt.py ARGS...

Runs the script unchanged, with the forward of its layer class (`LAYER_CLASS=module:Class`,
default Megatron-Core's `TransformerLayer`) wrapped to read
`time.perf_counter` before and after each call (no synchronisation). A layer's forward only
enqueues kernels, so on a GPU host this is the host's time to issue the layer, as long as the
launch queue does not fill; under phantom `perf_counter` is the simulated host clock, so the
same wrapper reads what phantom charges. The profiler, whose per-op records add host time of
their own, is not involved. At exit rank 0 prints one line,
`LAYER_FWD_US {...}`: the median and quartiles of the layer forwards after the first third
of the calls (warm-up), and how many; and `BACKWARD_US {...}`, the same for the script's
backward calls (`torch.autograd.backward`, or Megatron's `schedules.custom_backward`), and
`OPTIMIZER_STEP_US {...}` for torch.optim's step (between torch's global optimizer step hooks;
phantom before session 41's last commit also fired them around DeepSpeed's `_take_model_step`,
so the session's simulated z3-1b / z2-1b rows show that step there), and for DeepSpeed scripts
`ENGINE_STEP_US {...}`, `DeepSpeedEngine._take_model_step`.

    python bench/layer_host_times.py real --out DIR [--configs A,B] [--rounds N]   # torchrun, on GPUs
    python bench/layer_host_times.py sim --real DIR --out OUT [--configs A,B] [--rounds N]

runs CONFIGS (issue 8's tp2-sp and tp2-sp-sdpa rows, the 1-GPU host-bound replica, and
issue 4's DTensor tp-1b-s2k row, whose layers are examples/gpt_train.py's Block: `LAYER_CLASS`;
issue 9's ZeRO-3 z3-1b row, timed per Hugging Face `LlamaDecoderLayer`) under phantom and writes OUT.md / OUT.json against the real logs in DIR (`NAME_ROUND.log`, as
`real` writes them): layer forward, backward call, optimizer step and iteration times (median of
iterations 3+), each real round and each phantom round.
"""
from __future__ import annotations

import atexit
import json
import os
import re
import runpy
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
MEGATRON = "examples/megatron/pretrain_gpt.py"
_GPT = ("--preset", "gpt-1.7b", "--seq-length", "2048", "--micro-batch-size", "2",
        "--global-batch-size", "8", "--train-iters", "6")
# The layer class whose forward is timed (LAYER_CLASS=module:Class): Megatron-Core's, or the
# Block of examples/gpt_train.py, which examples/dist_train.py's tensor-parallel GPT is made of.
DEFAULT_LAYER = "megatron.core.transformer.transformer_layer:TransformerLayer"
GPT_BLOCK = "gpt_train:Block"
# DTensor tensor parallelism (issue 4's tp-1b-s2k row), timed per Block: torch's own Python
DTENSOR_TP = ("examples/dist_train.py", ("--parallel", "tp", "--preset", "1b", "--seq-len", "2048",
                                         "--batch-size", "8", "--steps", "10", "--warmup", "3"))
# DeepSpeed ZeRO-3 and ZeRO-2 (issue 9's z3-1b and z2-1b rows), timed per Hugging Face Llama
# decoder layer; the example's JSON config for the stage, FusedAdam (which must be built)
DEEPSPEED = "examples/deepspeed/train.py"
_LLAMA_1B = ("--model", "llama-1b", "--seq-len", "2048", "--micro-batch", "4", "--grad-accum", "1",
             "--steps", "8", "--warmup", "3")
HF_LLAMA_LAYER = "transformers.models.llama.modeling_llama:LlamaDecoderLayer"
WARMUP_ITERATIONS = 2  # as bench/megatron.py: the median of iterations 3+
CONFIGS = {  # name: (ranks, script, its arguments, LAYER_CLASS); as in the device scripts
    "tp2-sp": (2, MEGATRON, _GPT + ("--tp", "2", "--sequence-parallel"), DEFAULT_LAYER),
    "tp2-sp-sdpa": (2, MEGATRON, _GPT + ("--tp", "2", "--sequence-parallel", "--core-attention", "sdpa"),
                    DEFAULT_LAYER),
    "replica": (1, MEGATRON, ("--preset", "gpt-1.7b", "--seq-length", "512", "--micro-batch-size", "1",
                              "--global-batch-size", "4", "--train-iters", "8", "--use-distributed-optimizer",
                              "--core-attention", "sdpa", "--hidden-size", "256", "--ffn-hidden-size", "1024",
                              "--num-attention-heads", "4", "--vocab-size", "4096"), DEFAULT_LAYER),
    "tp-1b-s2k": (2, *DTENSOR_TP, GPT_BLOCK),
    "z3-1b": (2, DEEPSPEED, ("--deepspeed_config", "examples/deepspeed/zero3.json", *_LLAMA_1B), HF_LLAMA_LAYER),
    "z2-1b": (2, DEEPSPEED, ("--deepspeed_config", "examples/deepspeed/zero2.json", *_LLAMA_1B), HF_LLAMA_LAYER),
}
ENV = {"CUDA_DEVICE_MAX_CONNECTIONS": "1", "NCCL_NVLS_ENABLE": "0"}


def parse(text: str) -> dict:
    """The wrapper's layer line and Megatron's iteration times from a run's output."""
    layer = re.search(r"LAYER_FWD_US (\{.*\})", text)
    iters = [float(x) for x in re.findall(r"elapsed time per iteration \(ms\): ([0-9.]+)", text)]
    kept = iters[WARMUP_ITERATIONS:]
    summary = re.search(r"summary: median_iter_ms=([0-9.]+)", text)  # examples/dist_train.py
    iter_ms = round(statistics.median(kept), 1) if kept else float(summary.group(1)) if summary else None
    backward = re.search(r"BACKWARD_US (\{.*\})", text)
    step = re.search(r"OPTIMIZER_STEP_US (\{.*\})", text)
    engine = re.search(r"ENGINE_STEP_US (\{.*\})", text)
    return {"layer_us": json.loads(layer.group(1))["median"] if layer else None, "iter_ms": iter_ms,
            "backward_us": json.loads(backward.group(1))["median"] if backward else None,
            "optimizer_step_us": json.loads(step.group(1))["median"] if step else None,
            "engine_step_us": json.loads(engine.group(1))["median"] if engine else None}


def _chosen(configs: str | None) -> list[str]:
    names = configs.split(",") if configs else list(CONFIGS)
    unknown = [n for n in names if n not in CONFIGS]
    if unknown:
        raise SystemExit(f"unknown config(s) {', '.join(unknown)}; known: {', '.join(CONFIGS)}")
    return [n for n in CONFIGS if n in names]  # in CONFIGS' order


def _run(launcher: list[str], name: str, timeout: float) -> subprocess.CompletedProcess:
    """CONFIGS[name] through this wrapper, started by `launcher` (phantom run or torchrun, each
    followed by its --nproc-per-node)."""
    ranks, script, script_args, layer = CONFIGS[name]
    cmd = [*launcher, str(ranks), __file__, script, *script_args]
    print("$", " ".join(cmd), flush=True)
    return subprocess.run(cmd, cwd=REPO, env={**os.environ, **ENV, "LAYER_CLASS": layer},
                          capture_output=True, text=True, timeout=timeout)


def run_real(argv: list[str]) -> None:
    """`real --out DIR`: CONFIGS on this machine's GPUs under torchrun, rounds outermost, each
    run's output in DIR/NAME_ROUND.log (what `sim --real DIR` reads)."""
    import argparse

    ap = argparse.ArgumentParser(prog="layer_host_times.py real")
    ap.add_argument("--out", required=True, help="folder for NAME_ROUND.log")
    ap.add_argument("--rounds", type=int, default=1)
    ap.add_argument("--configs", help="comma-separated names of CONFIGS (default: all)")
    ap.add_argument("--timeout", type=float, default=120, help="seconds a run may take")
    args = ap.parse_args(argv)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    torchrun = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node"]
    for k in range(1, args.rounds + 1):
        for name in _chosen(args.configs):
            try:
                p = _run(torchrun, name, args.timeout)
                text = p.stdout + p.stderr
            except subprocess.TimeoutExpired as e:  # its captured output comes as bytes
                text = "".join((b or b"").decode(errors="replace") for b in (e.stdout, e.stderr))
                text += f"\ntimed out after {args.timeout} s"
            (out / f"{name}_{k}.log").write_text(text)
            print(f"  {name} round {k}: {parse(text)}", flush=True)


def compare(argv: list[str]) -> None:
    import argparse

    ap = argparse.ArgumentParser(prog="layer_host_times.py sim")
    ap.add_argument("--real", required=True, help="folder of the real runs' NAME_ROUND.log")
    ap.add_argument("--out", required=True)
    ap.add_argument("--gpu", default="H200")
    ap.add_argument("--rounds", type=int, default=1)
    ap.add_argument("--configs", help="comma-separated names of CONFIGS (default: all)")
    args = ap.parse_args(argv)
    phantom = [sys.executable, "-m", "phantom.cli", "run", "--gpu", args.gpu, "--quiet", "--nproc-per-node"]
    rows = {}
    for name in _chosen(args.configs):
        real = [parse(p.read_text()) for p in sorted(Path(args.real).glob(f"{name}_[0-9]*.log"))]
        if not real:
            print(f"{name}: no real runs in {args.real}, skipped", flush=True)
            continue
        sim = []
        for _ in range(args.rounds):
            p = _run(phantom, name, 1200)
            if p.returncode:
                raise SystemExit(f"{name}: exit {p.returncode}\n{p.stderr[-3000:]}")
            sim.append(parse(p.stdout))
        rows[name] = {"real": real, "phantom": sim}
    date = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    Path(args.out + ".json").write_text(json.dumps({"date": date, "gpu": args.gpu, "rows": rows}, indent=1))
    fmt = lambda runs, key: ", ".join(str(r.get(key) or "-") for r in runs)  # noqa: E731
    lines = [f"`layer_host_times.py sim` ({date}, phantom `--gpu {args.gpu}`; real: `{args.real}`)", "",
             "| config | layer forward us, real | phantom | phantom / real median | backward call us, real | "
             "phantom | optimizer step us, real | phantom | DeepSpeed engine step us, real | phantom | "
             "iteration ms, real | phantom |", "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for name, row in rows.items():
        ratio = statistics.median(r["layer_us"] for r in row["phantom"]) / \
            statistics.median(r["layer_us"] for r in row["real"])
        lines.append(f"| {name} | {fmt(row['real'], 'layer_us')} | {fmt(row['phantom'], 'layer_us')} | "
                     f"{ratio:.2f} | {fmt(row['real'], 'backward_us')} | {fmt(row['phantom'], 'backward_us')} | "
                     f"{fmt(row['real'], 'optimizer_step_us')} | {fmt(row['phantom'], 'optimizer_step_us')} | "
                     f"{fmt(row['real'], 'engine_step_us')} | {fmt(row['phantom'], 'engine_step_us')} | "
                     f"{fmt(row['real'], 'iter_ms')} | {fmt(row['phantom'], 'iter_ms')} |")
    Path(args.out + ".md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


def real_rows(argv: list[str]) -> None:
    """`real-rows DIR`: each real round's iteration medians of the 2-GPU rows as
    DIR/megatron_real_r{N}.json, in `megatron.py real`'s format (bench/ground_truth_spread.py
    reads them as samples of issue 8's rows; the wrapper adds two clock reads a layer)."""
    folder = Path(argv[0])
    env = (folder / "env.txt").read_text() if (folder / "env.txt").exists() else ""
    for k in (1, 2, 3, 4):
        results = {}
        for name in ("tp2-sp", "tp2-sp-sdpa"):
            log = folder / f"{name}_{k}.log"
            iter_ms = parse(log.read_text())["iter_ms"] if log.exists() else None
            if iter_ms:
                results[name] = {"median_ms": iter_ms}
        if results:
            out = folder / f"megatron_real_r{k}.json"
            out.write_text(json.dumps({"device": env, "source": "bench/layer_host_times.py (wrapped "
                                       "TransformerLayer.forward)", "results": results}, indent=1))
            print(out, results)


def _timed(fn, durations: list[float]):
    """`fn`, appending each call's host time (perf_counter, no synchronisation) to `durations`."""
    def timed(*args, **kwargs):
        t0 = time.perf_counter()
        out = fn(*args, **kwargs)
        durations.append(time.perf_counter() - t0)
        return out
    return timed


def _summary(durations: list[float]) -> dict:
    kept = sorted(durations[len(durations) // 3:])  # past the first iterations (warm-up, compile)
    q1, median, q3 = statistics.quantiles(kept, n=4) if len(kept) > 1 else (kept[0],) * 3
    return {"median": round(median * 1e6, 1), "q1": round(q1 * 1e6, 1), "q3": round(q3 * 1e6, 1),
            "mean": round(statistics.mean(kept) * 1e6, 1), "calls": len(kept), "all_calls": len(durations)}


def main() -> None:
    # As `python SCRIPT` would: the script's folder first on the path, not bench/ (whose
    # megatron.py would shadow the package).
    script = os.path.abspath(sys.argv[1])
    here = os.path.dirname(os.path.abspath(__file__))
    sys.path[:] = [os.path.dirname(script)] + [p for p in sys.path if os.path.abspath(p or ".") != here]
    import importlib

    import torch

    module, _, name = os.environ.get("LAYER_CLASS", DEFAULT_LAYER).partition(":")
    layer_class = getattr(importlib.import_module(module), name)
    forwards: list[float] = []
    layer_class.forward = _timed(layer_class.forward, forwards)
    # The backward pass as the script calls it: torch.autograd.backward (Tensor.backward), or
    # Megatron's schedules.custom_backward, which calls the engine directly. It returns once
    # every backward kernel is enqueued, so it is host time unless the launch queue fills.
    backwards: list[float] = []
    torch.autograd.backward = _timed(torch.autograd.backward, backwards)
    if module.startswith("megatron"):
        from megatron.core.pipeline_parallel import schedules
        schedules.custom_backward = _timed(schedules.custom_backward, backwards)

    # DeepSpeed's engine step (gradient clipping, overflow check, the ZeRO optimizer's step and,
    # under ZeRO-3, the parameter partitions' bookkeeping), which wraps torch.optim's
    engine_steps: list[float] = []
    if "deepspeed" in script:
        from deepspeed.runtime.engine import DeepSpeedEngine
        DeepSpeedEngine._take_model_step = _timed(DeepSpeedEngine._take_model_step, engine_steps)
    # The optimizer's own step (torch.optim's, which Megatron's and DeepSpeed's wrappers call
    # inside theirs), between torch's global step hooks: host time, as above.
    from torch.optim.optimizer import register_optimizer_step_post_hook, register_optimizer_step_pre_hook
    steps: list[float] = []
    started: list[float] = []
    register_optimizer_step_pre_hook(lambda *_: started.append(time.perf_counter()))
    register_optimizer_step_post_hook(lambda *_: steps.append(time.perf_counter() - started.pop()))

    def report() -> None:
        if os.environ.get("RANK", "0") != "0" or len(forwards) < 8:
            return
        print("LAYER_FWD_US " + json.dumps(_summary(forwards)), flush=True)
        if len(backwards) >= 2:
            print("BACKWARD_US " + json.dumps(_summary(backwards)), flush=True)
        if len(steps) >= 2:
            print("OPTIMIZER_STEP_US " + json.dumps(_summary(steps)), flush=True)
        if len(engine_steps) >= 2:
            print("ENGINE_STEP_US " + json.dumps(_summary(engine_steps)), flush=True)

    atexit.register(report)
    sys.argv = sys.argv[1:]
    runpy.run_path(script, run_name="__main__")


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "sim":
        compare(sys.argv[2:])
    elif len(sys.argv) > 1 and sys.argv[1] == "real":
        run_real(sys.argv[2:])
    elif len(sys.argv) > 1 and sys.argv[1] == "real-rows":
        real_rows(sys.argv[2:])
    else:
        main()
