"""The benchmark harness: every suite real on GPUs, simulated under phantom, compared, reported.

    python bench/bench.py list
    python bench/bench.py real SUITE [--setup TAG]       # on a GPU machine: writes bench/results/SUITE/
    python bench/bench.py sim SUITE [--setup TAG]        # anywhere: phantom run of the same configs
    python bench/bench.py compare SUITE [--setup TAG]    # the table, from the committed results
    python bench/bench.py report [--out FILE] [--readme README.md]

A suite is a script in bench/suites/ with `real` and `sim` modes (its own measurement code); the
harness runs it, reads its output (`Suite.read`) and writes one results file per run under
bench/results/<suite>/: the suite, the setup (which machine), whether it ran on GPUs or under
phantom, the device, the software, the date, the command, and one value per row. `compare` sets
the median of the phantom runs of a row against the median of its real runs (a row measured
more than once varies between lent machines of one kind; the least error any single prediction
can have against all of them is shown beside it). `report` writes bench/README.md from the
results, and with --readme the short accuracy table between the markers of that file.

Standard library only: the GPU work and phantom run in the suites' subprocesses.
"""
from __future__ import annotations

import argparse
import datetime
import json
import re
import shlex
import statistics
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

BENCH = Path(__file__).resolve().parent
REPO = BENCH.parent
RESULTS = BENCH / "results"
BEGIN, END = "<!-- accuracy-table:begin -->", "<!-- accuracy-table:end -->"


# -- reading the suites' own output ---------------------------------------------------------------

def md_column(text: str, column: int, key: Callable[[list[str]], str] = lambda c: c[0]) -> dict[str, float]:
    """Rows of a markdown table a suite writes: {key(cells): float(cells[column])}."""
    out = {}
    for line in text.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) > column and line.lstrip().startswith("|"):
            try:
                out[key(cells)] = float(cells[column].rstrip("%").replace(",", ""))
            except ValueError:
                continue
    return out


def _median_tail(values: list[float], skip: int) -> float:
    return statistics.median(values[skip:])


def read_single_gpu(native: dict) -> dict[str, float]:
    if "results" in native:  # real mode's JSON
        return {n: r["median_iter_ms"] for n, r in native["results"].items() if r.get("median_iter_ms")}
    return {r["config"]: r["sim"]["median_iter_ms"] for r in native["rows"] if r["sim"].get("median_iter_ms")}


def read_host_bound(native: dict) -> dict[str, float]:
    if "results" in native:
        return {n: r["median_iter_ms"] for n, r in native["results"].items() if r.get("median_iter_ms")}
    return md_column(native["table"], 2)


def read_distributed(native: dict) -> dict[str, float]:
    """Real: the median of the steps after the 3 warm-up ones; sim: its table's `sim ms`."""
    if "table" in native:
        return md_column(native["table"], 3)
    results = native["results"]
    items = results.items() if isinstance(results, dict) else ((r["name"], r) for r in results)
    return {name: _median_tail(r["iter_ms"], 3) for name, r in items
            if isinstance(r, dict) and isinstance(r.get("iter_ms"), list) and len(r["iter_ms"]) > 3}


def read_collectives(native: dict) -> dict[str, float]:
    return {f"{r['op']} {r['size']}": r["time_us"] for r in native["results"] if r.get("time_us")}


def read_deepspeed(native: dict) -> dict[str, float]:
    """Runs with DeepSpeed's own fused optimizers (as simulated)."""
    return {r["config"]["name"]: r["median_iter_ms"] for r in native["results"]
            if r.get("median_iter_ms") and r.get("optimizer", "fused_adam") == "fused_adam"}


def read_megatron(native: dict) -> dict[str, float]:
    return {name: r["median_ms"] for name, r in native["results"].items() if r.get("median_ms")}


def read_nonllm(native: dict) -> dict[str, float]:
    if "table" in native:
        return md_column(native["table"], 3, lambda c: f"{c[0]} x{c[1]}")
    return {f"{r['workload']} x{r['gpus']}": r["summary"]["median_iter_ms"] for r in native["runs"]
            if r.get("summary") and r["summary"].get("median_iter_ms")}


def read_torchtitan(native: dict) -> dict[str, float]:
    return {r["name"]: r["summary"]["tps"] for r in native["results"] if (r.get("summary") or {}).get("tps")}


def read_cuda_graphs(native: dict) -> dict[str, float]:
    """The `step` rows of the JSON lines the script prints: ms per training or inference step."""
    return {r["name"]: r["ms"] for r in native["lines"] if r.get("kind") == "step" and r.get("ms")}


def read_sweep(native: dict) -> dict[str, float]:
    """Tokens/s per GPU of each point of the sweep spec (a point that did not finish: 0, ranking
    last)."""
    return {label: row.get("tokens_per_s_per_gpu") or 0.0 for label, row in native["rows"].items()}


def read_workloads(native: dict) -> dict[str, float]:
    if "runs" in native:
        return {r["workload"]: r["summary"]["median_iter_ms"] for r in native["runs"] if r.get("summary")}
    return {r["workload"]: r["sim"]["median_iter_ms"] for r in native["rows"]}


# -- suites ---------------------------------------------------------------------------------------

@dataclass
class Setup:
    tag: str  # the machine: h100, h200x2, ...
    gpu: str  # phantom's preset
    real: list[str]  # the suite's `real` arguments (the harness adds the output path)
    sim: list[str]  # its `sim` arguments (the harness adds the real file and the output)


@dataclass
class Suite:
    name: str
    title: str
    measures: str
    script: str  # in bench/suites/
    read: Callable[[dict], dict[str, float]]
    setups: list[Setup]
    metric: str = "ms per iteration"
    sim_out: str = "json"  # how the suite's sim mode writes: json (--json FILE), prefix (--out P: P.json), md (--out FILE)
    sim_needs_real: bool = True
    row_label: str = "config"
    one_script: bool = False  # the same script on the GPU (python) and under `phantom run`, JSON lines out


SUITES = [
    Suite("single_gpu", "Single-GPU GPT training", "examples/gpt_train.py (bf16 autocast, SDPA, fused AdamW, "
          "optional activation checkpointing and torch.compile), 124M-3B parameters, 2k-8k tokens: median "
          "iteration time of the steps after the warm-up.", "single_gpu.py", read_single_gpu,
          [Setup("h100", "H100", [], ["--gpu", "H100"]), Setup("h200", "H200", [], ["--gpu", "H200"]),
           Setup("h200-compile", "H200",
                 ["--steps", "12", "--warmup", "4", "--configs", "124m-s2k,124m-s2k-compile,350m-s4k,350m-s4k-compile,"
                  "350m-s4k-ac,350m-s4k-ac-compile,1b-s2k,1b-s2k-compile"],
                 ["--gpu", "H200", "--steps", "12", "--warmup", "4", "--configs", "124m-s2k,124m-s2k-compile,350m-s4k,"
                  "350m-s4k-compile,350m-s4k-ac,350m-s4k-ac-compile,1b-s2k,1b-s2k-compile"])],
          sim_needs_real=False),
    Suite("host_bound", "Host-bound steps", "Small GPT and Hugging Face Llama steps where the CPU's Python and "
          "launch overhead, not the GPU, sets the iteration time: phantom's host-time model.", "host_bound.py",
          read_host_bound, [Setup("h100", "H100", [], ["--gpu", "H100", "--repeat", "1"]),
                            Setup("h200", "H200", [], ["--gpu", "H200", "--repeat", "1"])], sim_out="md",
          row_label="workload"),
    Suite("distributed", "DDP, FSDP2, TP and PP on 2 GPUs", "examples/dist_train.py under torchrun on 2 GPUs "
          "(NVLink): GPT 1B-3B with DDP, FSDP2, tensor and pipeline parallelism.", "distributed.py",
          read_distributed, [Setup("h200x2", "H200", [], ["--gpu", "H200"])], sim_out="md", sim_needs_real=False),
    Suite("collectives", "NCCL collectives", "nccl-tests-style sweeps through torch.distributed on 2 GPUs: "
          "all_reduce, all_gather, reduce_scatter, all_to_all, broadcast, send/recv, 4 KiB to 1 GiB, "
          "microseconds per op.", "collectives.py", read_collectives,
          [Setup("h200x2", "H200", [], ["--gpu", "H200"])], metric="us per op", row_label="op and bytes"),
    Suite("deepspeed", "DeepSpeed ZeRO", "examples/deepspeed/train.py (Hugging Face Llama + deepspeed.initialize) "
          "with ZeRO-2 and ZeRO-3 and DeepSpeed's FusedAdam on 2 GPUs; on one GPU the same ZeRO paths, the "
          "pipeline engine and the FusedLion / FusedLamb optimizers.", "deepspeed.py", read_deepspeed,
          [Setup("h200x2", "H200", [], ["--gpu", "H200"]),
           Setup("h200", "H200", ["--nproc", "1", "--configs", "z2-1b-lion,z0-1b-lamb,z2-1b"],
                 ["--gpu", "H200", "--configs", "z2-1b-lion,z0-1b-lamb,z2-1b"])], sim_out="prefix"),
    Suite("megatron", "Megatron-Core", "examples/megatron/pretrain_gpt.py (Megatron-Core 0.16, GPT 1.7B) on "
          "2 GPUs: TP 2 with sequence parallelism (local and SDPA attention), DP 2 with the distributed "
          "optimizer.", "megatron.py", read_megatron, [Setup("h200x2", "H200", [], ["--gpu", "H200"])],
          sim_out="prefix", sim_needs_real=False),
    Suite("nonllm", "Vision, diffusion and graph models", "Plain-PyTorch DDP scripts on 1 and 2 GPUs: "
          "torchvision ResNet-50, torch_geometric GAT, diffusers' Stable Diffusion UNet.", "nonllm.py",
          read_nonllm, [Setup("h200x2", "H200", [], ["--gpu", "H200"])], sim_out="md", row_label="workload x GPUs"),
    Suite("torchtitan", "TorchTitan", "torchtitan 0.3.0's own trainer, Llama 3.1 8B: 5 of its blocks on one "
          "GPU (compiled, float8), FSDP on 2 and 4 GPUs, TP on 2; torchtitan's tokens/s per GPU.",
          "torchtitan.py", read_torchtitan,
          [Setup("h100", "H100", ["--configs", "8B-5layers-1gpu-dec2024-sac-compile,8B-5layers-1gpu-dec2024-sac-compile-model,"
                                  "8B-5layers-1gpu-dec2024-sac-compile-model-float8,8B-5layers-1gpu-jun2025-sac-compile-float8"],
                 ["--gpu", "H100", "--configs", "8B-5layers-1gpu-dec2024-sac-compile,8B-5layers-1gpu-dec2024-sac-compile-model,"
                  "8B-5layers-1gpu-dec2024-sac-compile-model-float8,8B-5layers-1gpu-jun2025-sac-compile-float8"]),
           Setup("h100x4", "H100", ["--configs", "8B-fsdp4-bs1-sac-dec2024,8B-fsdp4-bs1-sac-dec2024-compile-model,"
                                    "8B-fsdp4-bs1-sac-dec2024-compile-model-float8"],
                 ["--gpu", "H100", "--configs", "8B-fsdp4-bs1-sac-dec2024,8B-fsdp4-bs1-sac-dec2024-compile-model,"
                  "8B-fsdp4-bs1-sac-dec2024-compile-model-float8"]),
           Setup("h200x2", "H200", ["--configs", "8B-fsdp2-bs1-sac,8B-fsdp2-bs2-full,8B-tp2-bs1-full"],
                 ["--gpu", "H200", "--configs", "8B-fsdp2-bs1-sac,8B-fsdp2-bs2-full,8B-tp2-bs1-full"])],
          metric="tokens/s per GPU", sim_out="prefix", sim_needs_real=False),
    Suite("workloads", "Library workloads", "Scripts written the way each library's users write them, never "
          "tuned against phantom: the Hugging Face Trainer, timm with fp16 and a GradScaler, PyTorch Lightning; "
          "and training patterns (fp16 tied weights, DDP no_sync, FSDP1, TP + loss_parallel, pipelining, "
          "generate, torchao float8) on 1 and 2 GPUs.", "workloads.py", read_workloads,
          [Setup("h100", "H100", [], []), Setup("h200", "H200", [], []),
           Setup("h100x2-patterns", "H100", ["--set", "patterns", "--only", "amp-fp16-tied,ddp-accum4,fsdp1-full,"
                                             "fsdp1-grad-op-ac,tp-sp-loss-parallel,pp-1f1b,pp-interleaved,"
                                             "float8-fsdp2-allgather,float8-tp"], []),
           Setup("h100-patterns", "H100", ["--set", "patterns", "--only", "hf-generate,float8-bf16-compile,"
                                           "float8-tensorwise-compile,float8-rowwise-compile,float8-rowwise-gw-hp-compile,"
                                           "float8-tensorwise-eager"], [])],
          sim_out="prefix", row_label="workload"),
    Suite("sweep", "Layout ranking", "`phantom sweep` over the points of a sweep spec against the same points run "
          "for real: GPT 1B at batch 2, 8, 16 with and without activation checkpointing on one GPU "
          "(examples/sweeps/gpt_1b_h200.toml), torchtitan's trainer on 5 of Llama 3.1 8B's blocks at local "
          "batch 1, 2, 4 with each activation-checkpointing mode on one "
          "(examples/sweeps/torchtitan_8b_5layers_h200.toml), DDP, FSDP2, TP and PP on two "
          "(examples/sweeps/dist_train_2gpu.toml, the distributed suite's runs); tokens/s per GPU, and "
          "how well the sweep orders the points (Kendall's tau, the real best point's place).", "sweep.py",
          read_sweep, [Setup("h200", "H200", ["--spec", "examples/sweeps/gpt_1b_h200.toml"],
                             ["--spec", "examples/sweeps/gpt_1b_h200.toml"]),
                       Setup("h200-torchtitan", "H200", ["--spec", "examples/sweeps/torchtitan_8b_5layers_h200.toml"],
                             ["--spec", "examples/sweeps/torchtitan_8b_5layers_h200.toml"]),
                       Setup("h200x2", "H200", ["--spec", "examples/sweeps/dist_train_2gpu.toml"],
                             ["--spec", "examples/sweeps/dist_train_2gpu.toml"])],
          metric="tokens/s per GPU", sim_needs_real=False, row_label="point"),
    Suite("cuda_graphs", "CUDA graphs and torch.compile", "A small GPT (4 layers, width 512, bf16, 256 tokens) at "
          "batch 2 (host-bound) and 16, training and inference steps: eager, captured whole in a CUDA graph, "
          "through make_graphed_callables, and compiled with and without mode=\"reduce-overhead\".",
          "cuda_graphs.py", read_cuda_graphs, [Setup("h100", "H100", [], [])], metric="ms per step",
          sim_needs_real=False, one_script=True, row_label="step"),
]
BY_NAME = {s.name: s for s in SUITES}


# -- results files --------------------------------------------------------------------------------

def _sh(cmd: list[str]) -> str:
    try:
        return subprocess.run(cmd, capture_output=True, text=True, timeout=60).stdout.strip()
    except (OSError, subprocess.TimeoutExpired):
        return ""


def software_here() -> dict:
    """torch and the frameworks a suite uses, as this machine has them (absent ones left out)."""
    code = ("import importlib.metadata as m, json\nout = {}\nfor d in ('torch', 'deepspeed', 'megatron-core', "
            "'torchtitan', 'transformers', 'diffusers', 'torchvision', 'torch_geometric', 'torchao', 'timm', "
            "'accelerate', 'pytorch-lightning'):\n    try:\n        out[d] = m.version(d)\n    except m.PackageNotFoundError:\n"
            "        pass\nprint(json.dumps(out))")
    try:
        sw = json.loads(_sh([sys.executable, "-c", code]) or "{}")
    except ValueError:
        sw = {}
    smi = _sh(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"])
    if smi:
        sw["driver"] = smi.splitlines()[0]
    sw["python"] = sys.version.split()[0]
    sw["phantom"] = _sh(["git", "-C", str(REPO), "rev-parse", "--short", "HEAD"]) or "unknown"
    return sw


def device_here() -> str:
    names = _sh(["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"]).splitlines()
    return f"{len(names)} x {names[0]}" if names else "unknown"


def results_files(suite: str, setup: str | None = None, kind: str | None = None) -> list[Path]:
    files = sorted((RESULTS / suite).glob("*.json"))
    out = []
    for f in files:
        d = json.loads(f.read_text())
        if (setup is None or d["setup"] == setup) and (kind is None or d["kind"] == kind):
            out.append(f)
    return out


def write_result(suite: Suite, setup: Setup, kind: str, rows: dict[str, float], device: str, software: dict,
                 command: str, native: dict | None, date: str | None = None, extra: dict | None = None) -> Path:
    date = date or datetime.date.today().isoformat()
    folder = RESULTS / suite.name
    folder.mkdir(parents=True, exist_ok=True)
    n = 1
    while (path := folder / f"{kind}-{setup.tag}-{date}-{n}.json").exists():
        n += 1
    data = {"suite": suite.name, "setup": setup.tag, "kind": kind, "device": device, "software": software,
            "date": date, "command": command, "metric": suite.metric, **(extra or {}),
            "rows": {k: round(v, 3) for k, v in rows.items()}}
    if native is not None:
        data["native"] = native
    path.write_text(json.dumps(data, indent=1) + "\n")
    return path


def load(path: Path) -> dict:
    return json.loads(path.read_text())


# -- real and sim ---------------------------------------------------------------------------------

def _run(cmd: list[str]) -> None:
    print("$", shlex.join(cmd), flush=True)
    code = subprocess.run(cmd, cwd=REPO).returncode
    if code != 0:
        sys.exit(f"bench: the suite's command failed with exit status {code} (its output is above); "
                 "no results were written")


def _setup(suite: Suite, tag: str | None) -> Setup:
    if tag is None:
        return suite.setups[0]
    for s in suite.setups:
        if s.tag == tag:
            return s
    sys.exit(f"{suite.name}: no setup {tag!r}; known: {', '.join(s.tag for s in suite.setups)}")


def cmd_real(args: argparse.Namespace) -> None:
    suite = BY_NAME[args.suite]
    setup = _setup(suite, args.setup)
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "real.json"
        mode = [] if suite.one_script else ["real"]
        cmd = [sys.executable, f"bench/suites/{suite.script}", *mode, *setup.real, "--out", str(out), *args.extra]
        _run(cmd)
        native = _json_lines(out) if suite.one_script else json.loads(out.read_text())
    rows = suite.read(native)
    path = write_result(suite, setup, "real", rows, device_here(), software_here(),
                        f"python bench/bench.py real {suite.name} --setup {setup.tag}", native)
    print(f"{len(rows)} rows -> {path.relative_to(REPO)}")


def _json_lines(path: Path) -> dict:
    return {"lines": [json.loads(line) for line in path.read_text().splitlines() if line.strip()]}


def _phantom() -> list[str]:
    return [sys.executable, "-c", "import sys; from phantom.cli import main; sys.exit(main())"]


def cmd_sim(args: argparse.Namespace) -> None:
    suite = BY_NAME[args.suite]
    setup = _setup(suite, args.setup)
    if suite.one_script:
        with tempfile.TemporaryDirectory() as tmp:
            out = Path(tmp) / "sim.jsonl"
            _run([*_phantom(), "run", "--gpu", setup.gpu, "--quiet", *shlex.split(args.run_args),
                  f"bench/suites/{suite.script}", *setup.sim, "--out", str(out), *args.extra])
            native = _json_lines(out)
        return _finish_sim(suite, setup, args, native)
    reals = [Path(p) for p in args.real] if args.real else results_files(suite.name, setup.tag, "real")
    with tempfile.TemporaryDirectory() as tmp:
        cmd = [sys.executable, f"bench/suites/{suite.script}", "sim", *setup.sim]
        if reals:
            real = replayed_real(reals)
            print(f"replaying the configs of {real.relative_to(REPO) if real.is_relative_to(REPO) else real}",
                  flush=True)
            real_native = Path(tmp) / "real.json"
            native = load(real).get("native")
            if native is None:
                sys.exit(f"{real} keeps no native record of the run; pass --real with one that does")
            real_native.write_text(json.dumps(native))
            cmd += ["--real", str(real_native)]
        elif suite.sim_needs_real:
            sys.exit(f"{suite.name} {setup.tag}: the sim mode replays a real run's configs; none in bench/results")
        out = Path(tmp) / "sim"
        if suite.sim_out == "json":
            cmd += ["--json", f"{out}.json"]
        elif suite.sim_out == "md":
            cmd += ["--out", f"{out}.md"]
        else:
            cmd += ["--out", str(out)]
        if args.run_args:
            flag = {"single_gpu": "--run-args", "host_bound": "--run-args", "distributed": "--phantom-args"}.get(suite.name)
            if not flag:
                sys.exit(f"{suite.name}: --run-args is not passed through by this suite")
            cmd += [flag, args.run_args]
        _run(cmd + args.extra)
        if suite.sim_out == "md":
            native = {"table": Path(f"{out}.md").read_text()}
        else:
            native = json.loads(Path(f"{out}.json").read_text())
    _finish_sim(suite, setup, args, native)


def replayed_real(reals: list[Path]) -> Path:
    """The real run whose configs a sim replays: the one with the most rows (a later sample may
    repeat only some of them), the newest of those."""
    runs = {p: load(p) for p in reals}
    return max(reals, key=lambda p: (len(runs[p]["rows"]), runs[p]["date"], p.name))


def _finish_sim(suite: Suite, setup: Setup, args: argparse.Namespace, native: dict) -> None:
    rows = suite.read(native)
    flags = f" --run-args {shlex.quote(args.run_args)}" if args.run_args else ""
    extra = f" -- {shlex.join(args.extra)}" if args.extra else ""
    command = f"python bench/bench.py sim {suite.name} --setup {setup.tag}{flags}{extra}"
    if args.no_write:
        print(json.dumps(rows, indent=1))
        return
    software = software_here()
    superseded = supersede(suite, setup, set(rows), software["phantom"])
    path = write_result(suite, setup, "sim", rows, f"phantom --gpu {setup.gpu} (simulated, no GPU)",
                        software, command, None)
    print(f"{len(rows)} rows -> {path.relative_to(REPO)}"
          + (f"; replaced older phantom's rows in {', '.join(superseded)}" if superseded else ""))


def supersede(suite: Suite, setup: Setup, rows: set[str], commit: str) -> list[str]:
    """Results are current only: a sim run replaces the same rows simulated by another phantom
    commit (a file left without rows goes). Runs of this commit stay, pooled with this one."""
    touched = []
    for path in results_files(suite.name, setup.tag, "sim"):
        data = load(path)
        if data["software"].get("phantom") == commit or not rows & set(data["rows"]):
            continue
        data["rows"] = {k: v for k, v in data["rows"].items() if k not in rows}
        if data["rows"]:
            path.write_text(json.dumps(data, indent=1) + "\n")
        else:
            path.unlink()
        touched.append(path.name)
    return touched


# -- compare --------------------------------------------------------------------------------------

def least_error_pct(values: list[float]) -> float:
    """The least relative error one value can have against every one of `values` (in %):
    (max - min) / (max + min), reached at 2 max min / (max + min)."""
    return 100 * (max(values) - min(values)) / (max(values) + min(values))


@dataclass
class Row:
    name: str
    real: list[float] = field(default_factory=list)
    sim: list[float] = field(default_factory=list)

    def error_pct(self) -> float | None:
        """phantom's median against the real median, in % (for tokens/s as for times: sim / real - 1)."""
        if not self.real or not self.sim:
            return None
        return 100 * (statistics.median(self.sim) / statistics.median(self.real) - 1)


def pool(real: list[dict], sim: list[dict]) -> list[Row]:
    """Every row of the given results files, real and simulated values pooled by row name, in the
    order the rows first appear."""
    rows: dict[str, Row] = {}
    for kind, files in (("real", real), ("sim", sim)):
        for f in files:
            for name, value in f["rows"].items():
                getattr(rows.setdefault(name, Row(name)), kind).append(value)
    return list(rows.values())


def summary(rows: list[Row]) -> tuple[float, float, int] | None:
    errs = [abs(e) for r in rows if (e := r.error_pct()) is not None]
    return (statistics.mean(errs), max(errs), len(errs)) if errs else None


def _fmt(values: list[float]) -> str:
    if not values:
        return "-"
    med = statistics.median(values)
    text = f"{med:,.1f}" if med < 1e5 else f"{med:,.0f}"
    return text if len(values) == 1 else f"{text} ({len(values)})"


def setup_files(suite: Suite, setup: Setup) -> tuple[list[dict], list[dict]]:
    files = [load(f) for f in results_files(suite.name, setup.tag)]
    return [f for f in files if f["kind"] == "real"], [f for f in files if f["kind"] == "sim"]


def collective_groups(rows: list[Row]) -> dict[str, list[Row]]:
    """Collectives by op and message size (below 1 MiB, from 1 MiB), the rows with an error."""
    groups: dict[str, list[Row]] = {}
    for r in rows:
        if r.error_pct() is None:
            continue
        op, size = r.name.rsplit(" ", 1)
        groups.setdefault(f"{op}, {'below 1 MiB' if int(size) < 1 << 20 else 'from 1 MiB'}", []).append(r)
    return groups


def errors(suite: Suite, rows: list[Row]) -> tuple[list[float], list[float]]:
    """The |errors| a suite's mean is taken over, and those its max is: its rows' for most
    suites; for collectives each (op, size range) group's mean |error| for the mean, as the
    per-op target reads, and every point for the max."""
    points = [abs(e) for r in rows if (e := r.error_pct()) is not None]
    if suite.name != "collectives":
        return points, points
    groups = collective_groups(rows).values()
    return [statistics.mean(abs(r.error_pct()) for r in g) for g in groups], points


def kendall_tau_b(a: list[float], b: list[float]) -> float:
    """Kendall's tau-b of paired values: +1 the same order, -1 reversed (ties on one side count
    as neither)."""
    concordant = discordant = ties_a = ties_b = 0
    for i in range(len(a)):
        for j in range(i + 1, len(a)):
            da, db = a[i] - a[j], b[i] - b[j]
            if da == 0 and db == 0:
                continue
            if da == 0:
                ties_a += 1
            elif db == 0:
                ties_b += 1
            elif (da > 0) == (db > 0):
                concordant += 1
            else:
                discordant += 1
    denom = ((concordant + discordant + ties_a) * (concordant + discordant + ties_b)) ** 0.5
    return (concordant - discordant) / denom if denom else 0.0


@dataclass
class Ranking:
    """How a sweep orders its points against the real order (tokens/s: higher is better)."""
    points: int
    tau: float
    real_best: str
    sweep_best: str
    short_pct: float
    """How far the sweep's best point is below the real best, for real (0 when they agree)."""


def ranking(rows: list[Row]) -> Ranking | None:
    both = [r for r in rows if r.real and r.sim]
    if len(both) < 2:
        return None
    real = [statistics.median(r.real) for r in both]
    sim = [statistics.median(r.sim) for r in both]
    real_best = max(range(len(both)), key=lambda i: real[i])
    sim_best = max(range(len(both)), key=lambda i: sim[i])
    return Ranking(len(both), kendall_tau_b(real, sim), both[real_best].name, both[sim_best].name,
                   100 * (1 - real[sim_best] / real[real_best]))


def ranking_lines(rows: list[Row]) -> list[str]:
    r = ranking(rows)
    if r is None:
        return []
    return [f"Ranking over {r.points} points: Kendall's tau {r.tau:.2f}; the real best `{r.real_best}`, "
            f"the sweep's best `{r.sweep_best}`"
            + ("." if r.sweep_best == r.real_best else f", {r.short_pct:.1f}% below the real best for real.")]


def sweep_readme_lines(suite: Suite) -> list[str]:
    """The sweep suite in the README: one row per setup (its per-point table: `compare sweep`)."""
    lines = ["| setup | points | Kendall's tau | real best | sweep's best | mean \\|error\\| | max \\|error\\| | data |",
             "|---|---|---|---|---|---|---|---|"]
    for setup in suite.setups:
        real, sim = setup_files(suite, setup)
        r, s = ranking(pool(real, sim)), setup_summary(suite, setup)
        if r is None or s is None:
            continue
        lines.append(f"| {setup.tag} | {r.points} | {r.tau:.2f} | `{r.real_best}` | `{r.sweep_best}` | "
                     f"{s[0]:.1f}% | {s[1]:.1f}% | {_provenance(real + sim)} |")
    return lines + ["", "Each point's tokens/s against its real run: `python bench/bench.py compare sweep`.", ""]


def compare_lines(suite: Suite, setup: Setup) -> list[str]:
    real, sim = setup_files(suite, setup)
    rows = pool(real, sim)
    head = (f"| {suite.row_label} | real {suite.metric} (samples) | phantom (runs) | error | least error "
            "against every real sample | reproduce |")
    lines = [head, "|---|---|---|---|---|---|"]
    if suite.name == "collectives":
        return collectives_lines(rows, setup)
    for r in rows:
        e = r.error_pct()
        floor = f"{least_error_pct(r.real):.1f}%" if len(r.real) > 1 else "-"
        lines.append(f"| {r.name} | {_fmt(r.real)} | {_fmt(r.sim)} | {'-' if e is None else f'{e:+.1f}%'} | "
                     f"{floor} | {reproduce(suite, setup, r.name)} |")
    if suite.name == "sweep":
        lines += [""] + ranking_lines(rows)
    return lines


def collectives_lines(rows: list[Row], setup: Setup) -> list[str]:
    lines = ["| op, message size | points | mean \\|error\\| | max \\|error\\| | least error against every real "
             "sample (mean) | reproduce |", "|---|---|---|---|---|---|"]
    for name, rs in collective_groups(rows).items():
        errs = [abs(r.error_pct()) for r in rs]
        floors = [least_error_pct(r.real) for r in rs if len(r.real) > 1]
        floor = f"{statistics.mean(floors):.1f}%" if floors else "-"
        # the sim replays the real sweep's ops and sizes whole: one command for every row
        lines.append(f"| {name} | {len(rs)} | {statistics.mean(errs):.1f}% | {max(errs):.1f}% | {floor} | "
                     f"`python bench/bench.py sim collectives --setup {setup.tag}` |")
    return lines


def reproduce(suite: Suite, setup: Setup, row: str) -> str:
    """The command that re-runs one row's phantom side (the suite's own row filter after --)."""
    only = {"workloads": "--only", "nonllm": "--only", "host_bound": "--only", "collectives": None,
            "cuda_graphs": "--only", "sweep": None}.get(suite.name, "--configs")
    name = row.split(" x")[0] if suite.name == "nonllm" else row
    if suite.name == "cuda_graphs":
        name = row.split("_")[0]  # the script's row groups: train, infer
    tail = f" -- {only} {name}" if only else ""
    return f"`python bench/bench.py sim {suite.name} --setup {setup.tag}{tail}`"


def setup_summary(suite: Suite, setup: Setup) -> tuple[float, float, int] | None:
    real, sim = setup_files(suite, setup)
    for_mean, for_max = errors(suite, pool(real, sim))
    return (statistics.mean(for_mean), max(for_max), len(for_mean)) if for_mean else None


def cmd_compare(args: argparse.Namespace) -> None:
    suite = BY_NAME[args.suite]
    for setup in ([_setup(suite, args.setup)] if args.setup else suite.setups):
        print(f"\n{suite.name} {setup.tag}:\n")
        print("\n".join(compare_lines(suite, setup)))
        s = setup_summary(suite, setup)
        if s:
            print(f"\nmean |error| {s[0]:.1f}%, max {s[1]:.1f}% over {s[2]} rows")


# -- report ---------------------------------------------------------------------------------------

def _provenance(files: list[dict]) -> str:
    real = [f for f in files if f["kind"] == "real"]
    sim = [f for f in files if f["kind"] == "sim"]

    def span(fs: list[dict]) -> str:
        dates = sorted({f["date"] for f in fs})
        return dates[0] if len(dates) == 1 else f"{dates[0]} to {dates[-1]}"
    torch = sorted({str(f["software"].get("torch")) for f in real if isinstance(f["software"], dict)})
    out = f"real: {len(real)} run(s), {'; '.join(sorted({f['device'] for f in real}))}, torch {', '.join(torch)}, {span(real)}"
    return out + (f"; phantom: {len(sim)} run(s), {span(sim)}" if sim else "; phantom: none")


def anchor(suite: Suite) -> str:
    return re.sub(r"[^a-z0-9 -]", "", suite.title.lower()).replace(" ", "-")


def suite_summary(suite: Suite) -> tuple[float, float, int, list[str]] | None:
    """Every setup's rows of a suite: mean and max |error|, the row count, the real devices."""
    for_mean, for_max, devices = [], [], []
    for setup in suite.setups:
        real, sim = setup_files(suite, setup)
        setup_mean, setup_max = errors(suite, pool(real, sim))
        for_mean += setup_mean
        for_max += setup_max
        devices += [real[0]["device"]] if real and sim else []
    return (statistics.mean(for_mean), max(for_max), len(for_mean), devices) if for_mean else None


def accuracy_rows(link: str = "bench/README.md") -> list[str]:
    """The short headline table: one row per suite."""
    lines = ["| workload | devices | mean \\|error\\| | max \\|error\\| | details |", "|---|---|---|---|---|"]
    for suite in SUITES:
        s = suite_summary(suite)
        if s:
            devices = ", ".join(dict.fromkeys(d.replace("NVIDIA ", "").replace(" 80GB HBM3", "") for d in s[3]))
            lines.append(f"| {suite.title} ({suite.metric}) | {devices} | {s[0]:.1f}% | {s[1]:.1f}% | "
                         f"[{suite.name}]({link}#{anchor(suite)}) |")
    return lines


def readme() -> str:
    lines = ["# Benchmarks", "",
             "Each suite runs the same unmodified scripts on lent GPUs (`real`) and under `phantom run` on a "
             "machine without one (`sim`), and compares the two. Every table below is generated from "
             "the results in `bench/results/<suite>/` (one file per run, with its device, software and date "
             "inside) by `python bench/bench.py report`; do not edit this file by hand.", "",
             "```bash",
             "python bench/bench.py list                          # suites and their setups",
             "python bench/bench.py real SUITE --setup TAG        # on the GPU machine (bench/device/SUITE.sh)",
             "python bench/bench.py sim SUITE --setup TAG         # here: phantom run of the same configs",
             "python bench/bench.py compare SUITE                 # the table from the results",
             "python bench/bench.py report                        # rewrite this file",
             "```", "",
             "The error of a row is phantom's median over its runs against the median of the real runs "
             "(sim / real - 1). A row measured on several lent machines of one kind spreads; the least "
             "error any single prediction could have against all of its real samples, "
             "(max - min) / (max + min), is given beside it. What the numbers say: "
             "[docs/benchmarks/](../docs/benchmarks/).", "",
             "## Summary", "", *accuracy_rows(""), ""]
    for suite in SUITES:
        lines += [f"## {suite.title}", "", f"`bench/suites/{suite.script}`: {suite.measures}", ""]
        if suite.name == "sweep":
            lines += sweep_readme_lines(suite)
            continue
        for setup in suite.setups:
            real, sim = setup_files(suite, setup)
            if not real and not sim:
                continue
            s = setup_summary(suite, setup)
            total = f" Mean \\|error\\| {s[0]:.1f}%, max {s[1]:.1f}% over {s[2]} rows." if s else ""
            lines += [f"**{setup.tag}** ({_provenance(real + sim)}).{total}", "", *compare_lines(suite, setup), ""]
    lines += ["## Calibration data", "",
              "What phantom's fits and tests read stays here, one folder per kind, each file with its provenance "
              "inside: `kernels/` (kernel microbenchmarks, `kernels/measure.py` and the sweeps beside it, results in "
              "`kernels/results/`, fitted by `python -m phantom.cost.calibrate*`); `profile/` (op records of "
              "framework runs and their `phantom profile` timings, the kernel database's sources); `host/` (the "
              "lent GPU hosts' reference step, Python speed, flicker and per-rank host time, and the scripts that "
              "turn them into `phantom/hardware/gpus.py`'s constants); `probes/` (the scripts that measured single "
              "constants phantom cites). `suites/scale.py` measures the simulator itself (wall time and RAM from "
              "8 to 1,024 simulated GPUs); it has no real side.", "",
              "## Older measurements", "",
              "The measurement notebook this folder grew from (every earlier run, probe and analysis, with "
              f"its data) is kept in git: `git checkout notebook-archive` (commit {ARCHIVE_COMMIT}).", ""]
    return "\n".join(lines)


# The last commit with the development-era measurements, probes and write-ups (tagged
# notebook-archive): written as a hash, so that a clone without tags regenerates the same README.
ARCHIVE_COMMIT = "97dee69c2651"


def write_accuracy_table(path: Path) -> None:
    text = path.read_text()
    if BEGIN not in text or END not in text:
        sys.exit(f"{path}: no {BEGIN} ... {END} markers")
    head, rest = text.split(BEGIN, 1)
    _, tail = rest.split(END, 1)
    path.write_text(head + BEGIN + "\n" + "\n".join(accuracy_rows()) + "\n" + END + tail)


def cmd_report(args: argparse.Namespace) -> None:
    out = Path(args.out) if args.out else BENCH / "README.md"
    out.write_text(readme())
    if args.readme:
        write_accuracy_table(Path(args.readme))


def cmd_list(args: argparse.Namespace) -> None:
    for suite in SUITES:
        print(f"{suite.name:12} {', '.join(s.tag for s in suite.setups):40} {suite.title}")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="mode", required=True)
    sub.add_parser("list")
    for mode in ("real", "sim", "compare"):
        q = sub.add_parser(mode)
        q.add_argument("suite", choices=list(BY_NAME))
        q.add_argument("--setup")
        if mode == "sim":
            q.add_argument("--real", nargs="*", help="results files of real runs (default: the setup's)")
            q.add_argument("--run-args", default="", help="extra `phantom run` options, e.g. '--host-time off'")
            q.add_argument("--no-write", action="store_true", help="print the rows, write no results file")
    q = sub.add_parser("report")
    q.add_argument("--out", help="write the benchmark README here (default: bench/README.md)")
    q.add_argument("--readme", help="also write the accuracy table between the markers of this file")
    argv = sys.argv[1:]
    cut = argv.index("--") if "--" in argv else len(argv)  # after --: the suite's own options
    args = p.parse_args(argv[:cut])
    args.extra = argv[cut + 1:]
    {"list": cmd_list, "real": cmd_real, "sim": cmd_sim, "compare": cmd_compare, "report": cmd_report}[args.mode](args)


if __name__ == "__main__":
    main()
