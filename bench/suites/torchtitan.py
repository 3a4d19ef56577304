"""TorchTitan end-to-end benchmark: torchtitan 0.3.0's own trainer under phantom, against published
numbers and against real runs.

    python bench/suites/torchtitan.py list
    python bench/suites/torchtitan.py published [--rows NAME,...] [--out /tmp/torchtitan_published]
    python bench/suites/torchtitan.py wheels                      # on a machine with network: bench/torchtitan_wheels/
    python bench/suites/torchtitan.py real --out /tmp/torchtitan_real_h200x2.json     # on the 2-GPU machine
    python bench/suites/torchtitan.py sim --gpu H200 --real /tmp/torchtitan_real_h200x2.json \\
        --out /tmp/torchtitan_sim_h200x2
    python bench/suites/torchtitan.py compare --sim /tmp/torchtitan_sim_h200x2.json \\
        --real /tmp/torchtitan_real_h200x2.json --out /tmp/torchtitan_sim_h200x2

`published` simulates the rows torchtitan published (../shared/reference/public-ground-truth.md):
Llama 3.1 8B with FSDP on 8 and 128 H100 (benchmarks/llama3_h100_202412_torchtitan.md) and
Llama 2 13B/70B and Llama 3 8B/70B with FSDP on 64 A100 (docs/performance.md, April 2024), and
writes `<out>.md` and `<out>.json`. Rows of 64 and more GPUs need `phantom run --ranks auto`
(one process per class of equivalent ranks); without it they are reported as not run.

`real` runs `torchrun --nproc-per-node 2 bench/suites/torchtitan_entry.py` (torchtitan's trainer with
phantom's torch-version patches only) for each 2-GPU config and records torchtitan's own step
lines (tokens/s per GPU, memory). It needs torch with CUDA and torchtitan 0.3.0; without network,
`bench/torchtitan_wheels/` (made by `wheels`) is installed with `pip install --no-deps --no-index`
first. `sim` runs the same configs under `phantom run --nproc-per-node 2` and compares.
Standard library only: the work happens in the subprocesses.
"""
from __future__ import annotations

import argparse
import json
import re
import statistics
import subprocess
import sys
from dataclasses import asdict, dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from collectives import environment, phantom_cmd, run_streaming, torchrun_cmd, write_json  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
WHEELS = REPO / "bench" / "torchtitan_wheels"
ENTRY = "bench/suites/torchtitan_entry.py"
PRESETS = ["--module", "examples.torchtitan"]
# torchtitan's step line: "step:  5  loss: ... memory: 81.47GiB(85.60%)  tps: 5,779  tflops: 334.68  mfu: 33.84%"
STEP_RE = re.compile(r"step:\s*(\d+).*?memory:\s*([\d.]+)GiB\(([\d.]+)%\).*?tps:\s*([\d,]+)"
                     r".*?tflops:\s*([\d.]+).*?mfu:\s*(N/A|[\d.]+%)")  # N/A with float8 (no single peak)
ANSI_RE = re.compile(r"\x1b\[[0-9;]*m")
OOM_RE = re.compile(r"OutOfMemoryError|CUDA out of memory")

# What torchtitan 0.3.0's trainer imports beyond torch and what a torch install brings (numpy,
# typing-extensions, jinja2, ...): found by running bench/suites/torchtitan_entry.py under phantom in a
# fresh environment holding only these. All are pure Python or abi3 wheels (any Python >= 3.10).
# Versions: those this repository's simulated runs used. `datasets` and TensorBoard are replaced
# by stand-ins when missing (bench/suites/torchtitan_entry.py), which keeps pyarrow, pandas, aiohttp,
# protobuf and grpc out.
WHEEL_SPECS = ["torchtitan==0.3.0", "tyro==1.0.17", "docstring-parser==0.18.0", "typeguard==4.6.0",
               "rich==15.0.0", "pygments==2.21.0", "markdown-it-py==4.3.0", "mdurl==0.1.2",
               "spmd-types==0.2.3", "torchdata==0.11.0", "tokenizers==0.23.3"]


@dataclass
class Row:
    """One published number and the phantom command that reproduces it."""
    name: str
    source: str
    model: str  # preset function in examples/torchtitan/config_registry.py
    gpu: str
    nodes: int
    cluster: str | None  # phantom cluster preset for multi-node rows
    local_batch: int
    ac: str  # selective | full | none
    tps: float | None  # published tokens/s/GPU; None: the row OOMs
    mem_gib: float | None = None
    mfu: float | None = None
    seq_len: int | None = None  # None: the preset's
    steps: int = 5
    note: str = ""
    extra: tuple[str, ...] = ()  # further torchtitan flags
    entry: str | None = None  # a script run instead of `-m torchtitan.train` (see its docstring)
    entry_args: tuple[str, ...] = ()  # its own flags, before torchtitan's

    @property
    def gpus(self) -> int:
        return self.nodes * 8

    def torchtitan_args(self) -> list[str]:
        a = [*PRESETS, "--config", self.model, "--training.local_batch_size", str(self.local_batch),
             "--training.steps", str(self.steps)]
        if self.seq_len:
            a += ["--training.seq_len", str(self.seq_len)]
        return a + list(self.extra) + [f"activation-checkpoint:{self.ac}"]

    def phantom_args(self, ranks_auto: bool) -> list[str]:
        a = ["run", "--gpu", self.gpu]
        if self.nodes == 1:
            a += ["--nproc-per-node", "8"]
        else:
            a += ["--cluster", self.cluster, "--nnodes", str(self.nodes)]
        if ranks_auto and self.gpus > 8:
            a += ["--ranks", "auto"]
        return a + ([self.entry, *self.entry_args] if self.entry else ["-m", "torchtitan.train"])


# The published rows ran torchtitan's 2024 Llama code, which launched other kernels than 0.3.0's
# (the script says which); the April 13B and 8B tomls set the fused norm, the others the Python one.
TT2024 = str(Path(__file__).resolve().parent / "torchtitan_2024.py")
FUSED_NORM = ("--rmsnorm=fused",)
COMPILE_2024 = ("--compile.enable", "--compile.components", "model")
H100_SRC = "torchtitan benchmarks/llama3_h100_202412_torchtitan.md (Dec 2024), Tables 1-3"
H200_SRC = "torchtitan benchmarks/llama3-8b_h200_202506_trainy-whitefiber.md (June 2025)"
A100_SRC = "torchtitan docs/performance.md (April 2024), 64x A100 80GB, FSDP"
ROWS = [
    Row("8B-fsdp8-h100", H100_SRC, "llama3_8b", "H100-96GB", 1, None, 2, "selective", 5762, 82.4,
        entry=TT2024),
    Row("8B-fsdp128-h100", H100_SRC, "llama3_8b", "H100-96GB", 16, "h100-ib", 2, "selective", 5605, 67.0,
        entry=TT2024),
    # The same two with torch.compile: each transformer block, as 9dec370's apply_compile, and
    # not the loss (9dec370's train.py has `loss_fn = torch.compile(loss_fn)` commented out;
    # 0.3.0 compiles both by default, and a compiled loss never holds the fp32 logits)
    Row("8B-fsdp8-h100-compile", H100_SRC, "llama3_8b", "H100-96GB", 1, None, 2, "selective", 6667, 77.0,
        extra=COMPILE_2024, entry=TT2024),
    Row("8B-fsdp128-h100-compile", H100_SRC, "llama3_8b", "H100-96GB", 16, "h100-ib", 2, "selective", 6514,
        62.0, extra=COMPILE_2024, entry=TT2024),
    # ... and with float8 (tensorwise, FSDP float8 all-gather, precomputed scales: the script says why)
    Row("8B-fsdp8-h100-compile-float8", H100_SRC, "llama3_8b", "H100-96GB", 1, None, 2, "selective", 8532,
        76.8, extra=COMPILE_2024, entry=TT2024, entry_args=("--float8",)),
    Row("8B-fsdp128-h100-compile-float8", H100_SRC, "llama3_8b", "H100-96GB", 16, "h100-ib", 2, "selective",
        8380, 61.8, extra=COMPILE_2024, entry=TT2024, entry_args=("--float8",)),
    # Table 2's first row: one 32k-token sequence per GPU, full AC (FSDP 8, no context parallelism)
    Row("8B-fsdp8-h100-seq32k-full-compile-float8", H100_SRC, "llama3_8b", "H100-96GB", 1, None, 1, "full",
        3890, 83.9, seq_len=32768, extra=COMPILE_2024, entry=TT2024, entry_args=("--float8",)),
    # Llama 3.1 8B on 4 and 8 nodes of 8 x H200, compiled blocks and loss, float8 with FSDP float8
    # all-gather (torchtitan e7c0cae, June 2025)
    Row("8B-fsdp32-h200-compile-float8", H200_SRC, "llama3_8b", "H200", 4, "h200-ib", 2, "selective", 10938,
        47.96, extra=("--compile.enable",), entry=TT2024, entry_args=("--june-2025", "--float8")),
    Row("8B-fsdp64-h200-compile-float8", H200_SRC, "llama3_8b", "H200", 8, "h200-ib", 2, "selective", 10753,
        46.97, extra=("--compile.enable",), entry=TT2024, entry_args=("--june-2025", "--float8")),
    Row("llama2-13B-bs2-noac-a100", A100_SRC, "llama2_13b", "A100", 8, "a100-ib", 2, "none", 2162, mfu=61.1,
        entry=TT2024, entry_args=FUSED_NORM),
    Row("llama2-13B-bs2-sac-a100", A100_SRC, "llama2_13b", "A100", 8, "a100-ib", 2, "selective", 1904, mfu=53.8,
        entry=TT2024, entry_args=FUSED_NORM),
    Row("llama2-70B-bs1-sac-a100", A100_SRC, "llama2_70b", "A100", 8, "a100-ib", 1, "selective", 355, mfu=50.8,
        entry=TT2024),
    Row("llama2-70B-bs2-full-a100", A100_SRC, "llama2_70b", "A100", 8, "a100-ib", 2, "full", 353, mfu=50.5,
        entry=TT2024),
    Row("llama2-70B-bs2-sac-a100", A100_SRC, "llama2_70b", "A100", 8, "a100-ib", 2, "selective", None,
        note="published: OOM", entry=TT2024),
    Row("llama3-8B-bs1-sac-a100", A100_SRC, "llama3_8b", "A100", 8, "a100-ib", 1, "selective", 2973, mfu=58.2,
        entry=TT2024, entry_args=FUSED_NORM),
    Row("llama3-70B-bs1-full-a100", A100_SRC, "llama3_70b", "A100", 8, "a100-ib", 1, "full", 331, mfu=51.7,
        note="FSDP 64 only (the preset's TP 8 switched off)",
        extra=("--parallelism.tensor_parallel_degree", "1"), entry=TT2024),
]
# Published rows torchtitan 0.3.0 cannot express: "selective layer" AC (every second block fully
# checkpointed) is gone from 0.3.0, which has op-level selective AC only.
NOT_EXPRESSIBLE = ["Llama2 13B bs2 selective layer (1914)", "Llama3 8B bs1 selective layer (2904)"]


@dataclass
class RealConfig:
    """A config run for real and simulated (same torchtitan command line, same GPU count)."""
    name: str
    args: list[str]
    ac: str  # selective | full | none (a tyro subcommand: it goes last)
    steps: int = 12
    skip: int = 4  # steps left out of the median: compile/autotune of FlexAttention, warm-up
    gpus: int = 2
    model_2024: bool = False  # the 2024 Llama model code with the Python norm (bench/suites/torchtitan_2024.py)
    patch_args: tuple[str, ...] = ()  # that script's own flags (--float8, --june-2025)

    def torchtitan_args(self) -> list[str]:
        # CUDA graphs off on both sides: torchtitan 0.3.0 captures the step by default, which
        # phantom does not simulate (its adapter turns them off), and the capture fails on
        # the tiny dataset's changing document masks (cudagraph.py: "BlockMask structure
        # must remain constant").
        return [*PRESETS, *self.args, "--training.steps", str(self.steps),
                "--training.disable_cuda_graphs", f"activation-checkpoint:{self.ac}"]


REAL = [
    RealConfig("8B-fsdp2-bs1-sac", ["--config", "llama3_8b", "--training.local_batch_size", "1"],
               "selective"),
    RealConfig("8B-fsdp2-bs2-full", ["--config", "llama3_8b", "--training.local_batch_size", "2"],
               "full"),
    RealConfig("8B-tp2-bs1-full", ["--config", "llama3_8b", "--training.local_batch_size", "1",
                                   "--parallelism.tensor_parallel_degree", "2",
                                   "--parallelism.data_parallel_shard_degree", "1"], "full"),
    # One GPU, the December 2024 model code of the published H100 rows on 5 of the 8B's 32
    # blocks, for long enough (~60 s) that the board reaches its steady power and temperature
    # (the published numbers are taken at step 90).
    RealConfig("8B-5layers-1gpu-dec2024-sac", ["--config", "llama3_8b_5layers"], "selective",
               steps=100, skip=20, gpus=1, model_2024=True),
    # The same blocks with torchtitan 0.3.0's own model code (compiled FlexAttention, fused
    # norm and QKV): what `-m torchtitan.train` runs.
    RealConfig("8B-5layers-1gpu-sac", ["--config", "llama3_8b_5layers"], "selective",
               steps=100, skip=20, gpus=1),
    RealConfig("8B-5layers-1gpu-dec2024-sac-bs1", ["--config", "llama3_8b_5layers",
                                                    "--training.local_batch_size", "1"], "selective",
               steps=100, skip=20, gpus=1, model_2024=True),
    # The published compile rows' blocks: the 2024 code with each block torch.compile'd, and
    # its eager twin run beside it (shorter: the pair measures the compile speed-up).
    RealConfig("8B-5layers-1gpu-dec2024-sac-40", ["--config", "llama3_8b_5layers"], "selective",
               steps=40, skip=15, gpus=1, model_2024=True),
    RealConfig("8B-5layers-1gpu-dec2024-sac-compile", ["--config", "llama3_8b_5layers",
                                                        "--compile.enable"], "selective",
               steps=40, skip=15, gpus=1, model_2024=True),
    # The published Dec 2024 compile rows' setting (blocks compiled, the loss not: COMPILE_2024),
    # in bf16 and in float8 (tensorwise, FSDP float8 all-gather on a 1-rank mesh), and the June
    # 2025 H200 rows' (loss compiled too, e7c0cae's save list).
    RealConfig("8B-5layers-1gpu-dec2024-sac-compile-model", ["--config", "llama3_8b_5layers",
                                                              *COMPILE_2024], "selective",
               steps=40, skip=15, gpus=1, model_2024=True),
    RealConfig("8B-5layers-1gpu-dec2024-sac-compile-model-float8", ["--config", "llama3_8b_5layers",
                                                                     *COMPILE_2024], "selective",
               steps=40, skip=15, gpus=1, model_2024=True, patch_args=("--float8",)),
    RealConfig("8B-5layers-1gpu-jun2025-sac-compile-float8", ["--config", "llama3_8b_5layers",
                                                               "--compile.enable"], "selective",
               steps=40, skip=15, gpus=1, model_2024=True, patch_args=("--june-2025", "--float8")),
    # All 32 blocks under FSDP2 on 4 GPUs of one host, local batch 1: the published 8-GPU rows'
    # setting (2024 code; blocks compiled, loss not; bf16 and float8) at a size a lent 4-GPU
    # machine runs, to see whether their gap opens with more ranks on NVLink.
    RealConfig("8B-fsdp4-bs1-sac-dec2024", ["--config", "llama3_8b", "--training.local_batch_size", "1"],
               "selective", steps=20, skip=8, gpus=4, model_2024=True),
    RealConfig("8B-fsdp4-bs1-sac-dec2024-compile-model", ["--config", "llama3_8b", "--training.local_batch_size",
                                                          "1", *COMPILE_2024], "selective",
               steps=20, skip=8, gpus=4, model_2024=True),
    RealConfig("8B-fsdp4-bs1-sac-dec2024-compile-model-float8", ["--config", "llama3_8b",
                                                                 "--training.local_batch_size", "1",
                                                                 *COMPILE_2024], "selective",
               steps=20, skip=8, gpus=4, model_2024=True, patch_args=("--float8",)),
    # All 32 blocks under FSDP2 on 2 GPUs (H200: ~100 GiB), eager and compiled: the published
    # compile rows' setting at a size one lent machine runs.
    RealConfig("8B-fsdp2-bs1-sac-dec2024", ["--config", "llama3_8b", "--training.local_batch_size", "1"],
               "selective", model_2024=True),
    RealConfig("8B-fsdp2-bs1-sac-dec2024-compile", ["--config", "llama3_8b", "--training.local_batch_size",
                                                     "1", "--compile.enable"], "selective", model_2024=True),
]


# -- parsing ---------------------------------------------------------------------------------------

@dataclass
class Result:
    rc: int
    wall_s: float
    steps: list[dict] = field(default_factory=list)
    oom: bool = False
    error: str = ""

    def summary(self, skip: int) -> dict:
        steady = [s for s in self.steps if s["step"] > skip] or self.steps[-1:]
        if not steady:
            return {}
        return {"tps": statistics.median(s["tps"] for s in steady),
                "mfu": (statistics.median(s["mfu"] for s in steady)
                        if all(s["mfu"] is not None for s in steady) else None),
                "mem_gib": max(s["mem_gib"] for s in self.steps),
                "steps_used": [s["step"] for s in steady]}


def parse_steps(output: str) -> list[dict]:
    steps = []
    for line in ANSI_RE.sub("", output).splitlines():
        if m := STEP_RE.search(line):
            steps.append({"step": int(m.group(1)), "mem_gib": float(m.group(2)),
                          "tps": float(m.group(4).replace(",", "")), "tflops": float(m.group(5)),
                          "mfu": None if m.group(6) == "N/A" else float(m.group(6)[:-1])})
    return steps


def _echo_steps(line: str) -> None:
    clean = ANSI_RE.sub("", line)
    if STEP_RE.search(clean) or OOM_RE.search(clean) or clean.startswith("phantom:"):
        print(clean, flush=True)


def run(cmd: list[str], timeout: float, log: str | None) -> Result:
    r = run_streaming(cmd, timeout, _echo_steps, log)
    out = r.get("output", "")
    res = Result(rc=r.get("rc", -1), wall_s=round(r.get("wall_s", 0.0), 1), steps=parse_steps(out),
                 oom=bool(OOM_RE.search(out)))
    if res.rc != 0 and not res.oom:
        res.error = r.get("error") or "\n".join(out.splitlines()[-15:])
    return res


def pct(sim: float, ref: float) -> float:
    return 100.0 * (sim - ref) / ref


# -- published rows ----------------------------------------------------------------------------------

def ranks_auto_available(phantom: list[str]) -> bool:
    help_text = subprocess.run([*phantom, "run", "--help"], capture_output=True, text=True, cwd=REPO).stdout
    return "--ranks" in help_text


def cmd_published(args: argparse.Namespace) -> None:
    phantom = phantom_cmd(args.phantom)
    auto = ranks_auto_available(phantom)
    wanted = set(args.rows.split(",")) if args.rows else None
    results = []
    for row in ROWS:
        if wanted and row.name not in wanted:
            continue
        entry = {"row": asdict(row), "gpus": row.gpus}
        if row.gpus > 8 and not auto:
            entry["status"] = "not run (needs --ranks auto)"
            results.append(entry)
            continue
        cmd = [*phantom, *row.phantom_args(auto), "--dump_folder", args.dump, *row.torchtitan_args()]
        entry["command"] = " ".join(cmd)
        res = run(cmd, args.timeout, args.log)
        entry.update(rc=res.rc, wall_s=res.wall_s, steps=res.steps, oom=res.oom, error=res.error)
        entry["sim"] = res.summary(skip=2)
        if res.oom:
            entry["status"] = "OOM"
        elif res.rc != 0:
            entry["status"] = "failed"
        else:
            entry["status"] = "ok"
        results.append(entry)
        write_published(args.out, results, auto)
    write_published(args.out, results, auto)


def write_published(out: str, results: list[dict], auto: bool) -> None:
    write_json(out + ".json", {"rows": results, "ranks_auto": auto,
                               "not_expressible": NOT_EXPRESSIBLE})
    lines = ["# TorchTitan published rows under phantom", "",
             "Sources: " + H100_SRC + "; " + H200_SRC + "; " + A100_SRC + ". TPS = tokens/s per GPU; memory = "
             "torchtitan's logged peak reserved memory (GiB). Simulated: median of steps 3+ of "
             "torchtitan's own step lines.", "",
             "| row | GPUs | GPU preset | published TPS | sim TPS | error | published mem | sim mem | "
             "error | sim MFU | status | wall |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    errs, merrs = [], []
    for e in results:
        r, s = e["row"], e.get("sim") or {}
        pub_tps = "OOM" if r["tps"] is None else f"{r['tps']:,.0f}"
        sim_tps = f"{s['tps']:,.0f}" if s.get("tps") else ("OOM" if e.get("oom") else "-")
        err = ""
        if r["tps"] and s.get("tps") and e.get("status") == "ok":
            err = f"{pct(s['tps'], r['tps']):+.1f}%"
            errs.append(abs(pct(s["tps"], r["tps"])))
        elif r["tps"] is None and e.get("status") in ("OOM", "ok"):
            err = "OOM as published" if e["status"] == "OOM" else "no OOM (published: OOM)"
        merr = ""
        if r.get("mem_gib") and s.get("mem_gib"):
            merr = f"{pct(s['mem_gib'], r['mem_gib']):+.1f}%"
            merrs.append(abs(pct(s["mem_gib"], r["mem_gib"])))
        lines.append(
            f"| {r['name']} | {e['gpus']} | {r['gpu']} | {pub_tps} | {sim_tps} | {err} | "
            f"{r.get('mem_gib') or '-'} | {s.get('mem_gib', '-')} | {merr} | "
            f"{(str(s['mfu']) + '%') if s.get('mfu') else '-'} | {e.get('status')} | "
            f"{e.get('wall_s', '-')} s |")
    lines.append("")
    if errs:
        lines.append(f"TPS error over {len(errs)} rows run: mean {statistics.mean(errs):.1f}%, "
                     f"max {max(errs):.1f}%.")
    if merrs:
        lines.append(f"Memory error: mean {statistics.mean(merrs):.1f}%, max {max(merrs):.1f}%.")
    lines.append("Not expressible in torchtitan 0.3.0 (no layer-level selective AC): "
                 + "; ".join(NOT_EXPRESSIBLE) + ".")
    if not auto:
        lines.append("Rows of more than 8 GPUs need `phantom run --ranks auto`, which this phantom "
                     "does not offer yet.")
    Path(out + ".md").write_text("\n".join(lines) + "\n")


# -- real / sim on 2 GPUs ------------------------------------------------------------------------------

def install_wheels() -> None:
    """Install torchtitan and its light dependencies from bench/torchtitan_wheels/ if missing."""
    probe = subprocess.run([sys.executable, "-c", "import torchtitan, tyro, spmd_types, torchdata, tokenizers"],
                           capture_output=True, text=True)
    if probe.returncode == 0:
        return
    if not list(WHEELS.glob("*.whl")):
        raise SystemExit(f"torchtitan is not installed and {WHEELS} holds no wheels: run "
                         "`python bench/suites/torchtitan.py wheels` on a machine with network first\n"
                         + probe.stderr[-2000:])
    cmd = [sys.executable, "-m", "pip", "install", "--no-deps", "--no-index", "--find-links",
           str(WHEELS), *WHEEL_SPECS]
    print("$", " ".join(cmd), flush=True)
    subprocess.run(cmd, check=True)


def cmd_wheels(args: argparse.Namespace) -> None:
    dest = Path(args.dest)
    dest.mkdir(parents=True, exist_ok=True)
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:",
           "--platform", "manylinux_2_28_x86_64", "--platform", "manylinux2014_x86_64",
           "--platform", "manylinux_2_17_x86_64", "-d", str(dest), *WHEEL_SPECS]
    print("$", " ".join(cmd), flush=True)
    subprocess.run(cmd, check=True)
    size = sum(p.stat().st_size for p in dest.glob("*.whl"))
    print(f"{len(list(dest.glob('*.whl')))} wheels, {size / 2**20:.1f} MiB in {dest}")


# What the board did during a real run: power against its limit, SM clock, temperature, and why
# the clock was held down (nvidia-smi's throttle-reason bit mask: 0x4 software power cap,
# 0x20/0x40 thermal slowdown). Read-only queries; nothing is set.
SMI_FIELDS = ("timestamp,power.draw,power.limit,clocks.sm,clocks.mem,temperature.gpu,"
              "clocks_throttle_reasons.active,utilization.gpu")


def start_smi_log(path: str, period_ms: int = 200) -> subprocess.Popen | None:
    try:
        return subprocess.Popen(["nvidia-smi", f"--query-gpu={SMI_FIELDS}", "--format=csv,nounits",
                                 "-lms", str(period_ms), "-f", path])
    except FileNotFoundError:
        print("nvidia-smi not found: no power/clock log", flush=True)
        return None


def cmd_real(args: argparse.Namespace) -> None:
    install_wheels()
    meta = environment()
    rows = []
    for cfg in selected(args.configs):
        smi = start_smi_log(f"{args.out}.{cfg.name}.smi.csv") if args.smi else None
        patches = ["--patches", TT2024, *cfg.patch_args] if cfg.model_2024 else []
        cmd = [*torchrun_cmd(cfg.gpus), ENTRY, *patches, "--dump_folder", args.dump,
               *cfg.torchtitan_args()]
        res = run(cmd, args.timeout, args.log)
        if smi is not None:
            smi.terminate()
        rows.append({"name": cfg.name, "command": " ".join(cmd), **asdict(res),
                     "summary": res.summary(cfg.skip)})
        write_json(args.out, {"meta": meta, "results": rows})


def cmd_sim(args: argparse.Namespace) -> None:
    phantom = phantom_cmd(args.phantom)
    real = {r["name"]: r for r in json.loads(Path(args.real).read_text())["results"]} if args.real else {}
    rows = []
    for cfg in selected(args.configs):
        target = [TT2024, *cfg.patch_args] if cfg.model_2024 else ["-m", "torchtitan.train"]
        cmd = [*phantom, "run", "--nproc-per-node", str(cfg.gpus), "--gpu", args.gpu, *target,
               "--dump_folder", args.dump, *cfg.torchtitan_args()]
        res = run(cmd, args.timeout, args.log)
        rows.append({"name": cfg.name, "command": " ".join(cmd), **asdict(res),
                     "summary": res.summary(cfg.skip)})
        write_sim(args.out, rows, real, args.gpu)


def cmd_compare(args: argparse.Namespace) -> None:
    """Re-write the sim table against a real run, without simulating again."""
    sim = json.loads(Path(args.sim).read_text())
    real = {r["name"]: r for r in json.loads(Path(args.real).read_text())["results"]}
    write_sim(args.out, sim["results"], real, sim["gpu"])
    print(Path(args.out + ".md").read_text())


def write_sim(out: str, rows: list[dict], real: dict, gpu: str) -> None:
    write_json(out + ".json", {"gpu": gpu, "results": rows})
    lines = [f"# TorchTitan on {gpu}: real vs phantom", "",
             "| config | real TPS | sim TPS | error | real mem GiB | sim mem GiB | error | sim wall |",
             "|---|---|---|---|---|---|---|---|"]
    errs = []
    for r in rows:
        s, ref = r["summary"], (real.get(r["name"]) or {}).get("summary") or {}
        e = m = ""
        if s.get("tps") and ref.get("tps"):
            e = f"{pct(s['tps'], ref['tps']):+.1f}%"
            errs.append(abs(pct(s["tps"], ref["tps"])))
        if s.get("mem_gib") and ref.get("mem_gib"):
            m = f"{pct(s['mem_gib'], ref['mem_gib']):+.1f}%"
        lines.append(f"| {r['name']} | {ref.get('tps', '-')} | {s.get('tps', '-')} | {e} | "
                     f"{ref.get('mem_gib', '-')} | {s.get('mem_gib', '-')} | {m} | {r['wall_s']} s |")
    if errs:
        lines += ["", f"TPS error: mean {statistics.mean(errs):.1f}%, max {max(errs):.1f}%."]
    Path(out + ".md").write_text("\n".join(lines) + "\n")


def selected(names: str | None) -> list[RealConfig]:
    if not names:
        return REAL
    wanted = names.split(",")
    unknown = set(wanted) - {c.name for c in REAL}
    if unknown:
        raise SystemExit(f"unknown configs {sorted(unknown)}; see `list`")
    return [c for c in REAL if c.name in wanted]


def cmd_list(args: argparse.Namespace) -> None:
    print("published rows:")
    for r in ROWS:
        print(f"  {r.name:28} {r.gpus:4d} x {r.gpu:10} {'OOM' if r.tps is None else r.tps:>6}  "
              f"{' '.join([*r.entry_args, *r.torchtitan_args()])}")
    print("real/sim configs:")
    for c in REAL:
        print(f"  {c.name:28} {c.gpus} GPU{'s' if c.gpus > 1 else ''}{' (2024 model code' + ''.join(' ' + f for f in c.patch_args) + ')' if c.model_2024 else ''}"
              f"  {' '.join(c.torchtitan_args())}")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="cmd", required=True)
    sub.add_parser("list")
    q = sub.add_parser("published")
    q.add_argument("--rows", help="comma-separated row names (default: all)")
    q.add_argument("--out", default="/tmp/torchtitan_published")
    q.add_argument("--timeout", type=float, default=3600)
    q.add_argument("--phantom", help="command that runs phantom (default: `phantom`)")
    q.add_argument("--dump", default="/tmp/torchtitan_bench")
    q.add_argument("--log")
    w = sub.add_parser("wheels")
    w.add_argument("--dest", default=str(WHEELS))
    sub.add_parser("install", help="install torchtitan from bench/torchtitan_wheels/ if missing (GPU host)")
    for name in ("real", "sim"):
        q = sub.add_parser(name)
        q.add_argument("--configs", help="comma-separated config names (default: all)")
        q.add_argument("--out", required=True)
        q.add_argument("--timeout", type=float, default=1800)
        q.add_argument("--dump", default="/tmp/torchtitan_bench")
        q.add_argument("--log")
        if name == "real":
            q.add_argument("--smi", action="store_true",
                           help="log nvidia-smi power, clocks and temperature to <out>.<config>.smi.csv")
        if name == "sim":
            q.add_argument("--gpu", default="H200")
            q.add_argument("--real", help="the real run's JSON, to compare with")
            q.add_argument("--phantom")
    q = sub.add_parser("compare", help="the sim table against a real run, from saved JSON")
    q.add_argument("--sim", required=True, help="the sim run's JSON")
    q.add_argument("--real", required=True)
    q.add_argument("--out", required=True)
    args = p.parse_args()
    {"list": cmd_list, "published": cmd_published, "wheels": cmd_wheels, "real": cmd_real,
     "sim": cmd_sim, "compare": cmd_compare, "install": lambda _: install_wheels()}[args.cmd](args)


if __name__ == "__main__":
    main()
