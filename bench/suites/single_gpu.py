"""Single-GPU accuracy benchmark: examples/gpt_train.py for real versus under phantom.

    python bench/suites/single_gpu.py list
    python bench/suites/single_gpu.py real --out /tmp/real_h100.json          # on a machine with the GPU
    python bench/suites/single_gpu.py sim --gpu H100 --real /tmp/real_h100.json --out /tmp/sim_h100.md

`real` runs every config as its own process on this machine's GPU and records the median
iteration time and peak memory that the script prints in its `summary:` line. `sim` runs the same
command lines through `phantom run` and compares. Standard library only: the GPU work happens in
the subprocesses.
"""
import argparse
import datetime
import json
import os
import re
import shlex
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
SCRIPT = "examples/gpt_train.py"
GIB = 2**30

# Mirrors PRESETS in examples/gpt_train.py (that file imports torch; this one must not).
PRESETS = {
    "gpt2-124m": dict(n_layer=12, n_embd=768, n_head=12),
    "gpt2-350m": dict(n_layer=24, n_embd=1024, n_head=16),
    "gpt2-774m": dict(n_layer=36, n_embd=1280, n_head=20),
    "1b": dict(n_layer=18, n_embd=2048, n_head=16),
    "3b": dict(n_layer=36, n_embd=2560, n_head=20),
}
VOCAB = 50304


@dataclass
class Config:
    name: str
    preset: str
    seq_len: int
    batch_size: int
    ac: bool = False
    compile: bool = False

    def args(self, steps: int, warmup: int) -> list[str]:
        a = ["--preset", self.preset, "--seq-len", str(self.seq_len), "--batch-size", str(self.batch_size),
             "--steps", str(steps), "--warmup", str(warmup)]
        return a + ["--ac"] * self.ac + ["--compile"] * self.compile

    def params(self) -> int:
        L, C = PRESETS[self.preset]["n_layer"], PRESETS[self.preset]["n_embd"]
        # 12*C^2 per block (qkv, proj, 4x MLP), tied token embedding, learned positions, norm weights
        return 12 * L * C * C + VOCAB * C + self.seq_len * C + (2 * L + 1) * C

    def estimate_gib(self) -> float:
        """Rough peak allocated memory: the larger of the two usual peaks of a training step.

        Within ~5% of what an H100 measured for every config below."""
        L, C = PRESETS[self.preset]["n_layer"], PRESETS[self.preset]["n_embd"]
        n, tokens = self.params(), self.batch_size * self.seq_len
        # Saved for backward per token per layer, bf16 matmul inputs and fp32 residual/norm inputs:
        # ln1 in 4C, qkv in 2C, q/k/v 6C, sdpa out 2C, proj in 2C, ln2 in 4C, fc in 2C, gelu in 8C, fc2 in 8C.
        full = 38 * C * tokens
        # With checkpointing only each block's fp32 input stays, plus one block recomputed in backward.
        acts = L * 4 * C * tokens + full if self.ac else L * full
        # Start of backward: fp32 weights + AdamW's two fp32 states (grads were set to None), the
        # activations, the loss (bf16 logits, fp32 log-softmax, its fp32 gradient) and, without
        # checkpointing, autocast's bf16 copies of the weights that the matmuls saved for backward.
        start_of_backward = 12 * n + (0 if self.ac else 2 * n) + acts + 10 * VOCAB * tokens
        # End of backward: the fp32 grads exist too; with checkpointing the first block's recomputed
        # activations are still alive.
        end_of_backward = 16 * n + (full if self.ac else 0)
        return max(start_of_backward, end_of_backward) / GIB

    def estimate_ms(self, tflops: float = 400.0) -> float:
        """Iteration time at a sustained rate (400 TFLOP/s is ~40% MFU on an H100)."""
        L, C = PRESETS[self.preset]["n_layer"], PRESETS[self.preset]["n_embd"]
        per_token = 6 * (self.params() - self.seq_len * C) + 12 * L * C * self.seq_len
        if self.ac:
            per_token *= 4 / 3  # the forward pass runs twice
        return per_token * self.batch_size * self.seq_len / (tflops * 1e12) * 1e3


# 0.1B to 3B parameters, 2k to 8k tokens, with and without checkpointing; all well inside 80 GB.
CONFIGS = [
    Config("124m-s2k", "gpt2-124m", 2048, 16),
    Config("124m-s8k", "gpt2-124m", 8192, 4),
    Config("350m-s4k", "gpt2-350m", 4096, 4),
    Config("350m-s4k-ac", "gpt2-350m", 4096, 8, ac=True),
    Config("774m-s2k", "gpt2-774m", 2048, 8),
    Config("1b-s2k", "1b", 2048, 8),
    Config("1b-s8k-ac", "1b", 8192, 2, ac=True),
    Config("3b-s2k-ac", "3b", 2048, 4, ac=True),
    Config("3b-s4k-ac", "3b", 4096, 2, ac=True),
]
# The same script under torch.compile (the whole model, as nanoGPT does): Inductor's fusion and
# its forward/backward partition, which phantom takes from Dynamo and AOTAutograd
# (phantom/interception/compiled.py). Not in the default set: each costs a compile on the GPU.
COMPILE_CONFIGS = [
    Config("124m-s2k-compile", "gpt2-124m", 2048, 16, compile=True),
    Config("350m-s4k-compile", "gpt2-350m", 4096, 4, compile=True),
    Config("350m-s4k-ac-compile", "gpt2-350m", 4096, 8, ac=True, compile=True),
    Config("1b-s2k-compile", "1b", 2048, 8, compile=True),
]

SUMMARY_RE = re.compile(r"^summary: (.*)$", re.MULTILINE)
ITER_RE = re.compile(r"^iter (\d+) \|.*\| ([\d.]+) ms \|", re.MULTILINE)


def parse_summary(stdout: str) -> dict:
    """`summary: k=v k=v ...` -> {k: float}; params=124.44M -> params=124440000."""
    m = SUMMARY_RE.search(stdout)
    if not m:
        raise ValueError("no summary line in the output")
    out = {}
    for field in m.group(1).split():
        key, value = field.split("=", 1)
        out[key] = float(value[:-1]) * 1e6 if value.endswith("M") else float(value)
    out["iter_ms"] = [float(ms) for _, ms in ITER_RE.findall(stdout)]
    return out


def tail(text: str, n: int = 15) -> str:
    return "\n".join(text.strip().splitlines()[-n:])


def run_one(cmd: list[str], timeout: float) -> dict:
    """Run one config; never raises, so a failing config (OOM, crash, timeout) is only recorded."""
    print("$", shlex.join(cmd), flush=True)
    t0 = time.perf_counter()
    try:
        proc = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired as e:
        out = e.stdout.decode() if isinstance(e.stdout, bytes) else (e.stdout or "")
        return {"error": f"timed out after {timeout:.0f} s", "log_tail": tail(out), "wall_s": timeout}
    wall = time.perf_counter() - t0
    result = {"wall_s": round(wall, 2)}
    try:
        result.update(parse_summary(proc.stdout))
        if proc.returncode == 0:
            return result
    except ValueError:
        pass
    # the last line of stderr is usually the exception, e.g. torch.OutOfMemoryError: CUDA out of memory...
    last = (proc.stderr.strip().splitlines() or ["no summary line in the output"])[-1]
    result["error"] = f"exit code {proc.returncode}: {last[:200]}"
    result["log_tail"] = tail(proc.stdout + "\n" + proc.stderr)
    return result


def brief(r: dict) -> str:
    if r.get("error"):
        return "FAILED: " + r["error"]
    return f"{r['median_iter_ms']:.1f} ms/iter, peak {r['peak_alloc_gib']:.2f} GiB allocated"


def select(names: str | None) -> list[Config]:
    if not names:
        return CONFIGS
    by_name = {c.name: c for c in CONFIGS + COMPILE_CONFIGS}
    unknown = [n for n in names.split(",") if n not in by_name]
    if unknown:
        sys.exit(f"unknown config(s) {unknown}; known: {', '.join(by_name)}")
    return [by_name[n] for n in names.split(",")]


def sh(cmd: list[str]) -> str:
    try:
        return subprocess.run(cmd, capture_output=True, text=True, timeout=60).stdout.strip()
    except (OSError, subprocess.TimeoutExpired):
        return ""


def environment() -> dict:
    smi = sh(["nvidia-smi", "--query-gpu=name,driver_version", "--format=csv,noheader"]) if shutil.which("nvidia-smi") else ""
    name, _, driver = (smi.splitlines() or [""])[0].partition(", ")  # first GPU: the one the scripts use
    versions = sh([sys.executable, "-c", "import torch; print(torch.__version__, torch.version.cuda)"]).split()
    return {
        "device": name or "unknown",
        "driver": driver or "unknown",
        "torch": versions[0] if versions else "unknown",
        "cuda": versions[1] if len(versions) > 1 else "unknown",
        "python": sys.version.split()[0],
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "host": os.uname().nodename,
    }


def fmt(x: float | None, spec: str = ".1f") -> str:
    return "-" if x is None else format(x, spec)


def cmd_list(args: argparse.Namespace) -> None:
    print("| config | params | seq | batch | AC | est. peak GiB | est. ms/iter @400 TFLOP/s |")
    print("|---|---|---|---|---|---|---|")
    for c in select(args.configs):
        print(f"| {c.name} | {c.params() / 1e6:.0f}M | {c.seq_len} | {c.batch_size} | {'yes' if c.ac else 'no'} "
              f"| {c.estimate_gib():.1f} | {c.estimate_ms():.0f} |")


def cmd_real(args: argparse.Namespace) -> None:
    env = environment()
    print(f"device {env['device']} | driver {env['driver']} | torch {env['torch']} (CUDA {env['cuda']})")
    results = {}
    for c in select(args.configs):
        r = run_one([sys.executable, SCRIPT, *c.args(args.steps, args.warmup)], args.timeout)
        results[c.name] = {**asdict(c), "params": round(r.pop("params", c.params())), **r}
        print("  ->", brief(r), flush=True)
        # write after every config so a crash of the harness itself loses nothing
        write_json(args.out, {"meta": {**env, "steps": args.steps, "warmup": args.warmup}, "results": results})

    print(f"\n{env['device']}  (results in {args.out})")
    print(f"{'config':<14} {'params':>8} {'ms/iter':>9} {'alloc GiB':>10} {'resv GiB':>9}  est GiB")
    for name, r in results.items():
        c = next(c for c in CONFIGS + COMPILE_CONFIGS if c.name == name)
        if r.get("error"):
            print(f"{name:<14} {r['params'] / 1e6:>7.0f}M  FAILED: {r['error']}")
        else:
            print(f"{name:<14} {r['params'] / 1e6:>7.0f}M {r['median_iter_ms']:>9.1f} {r['peak_alloc_gib']:>10.2f} "
                  f"{r['peak_reserved_gib']:>9.2f}  {c.estimate_gib():7.1f}")


def phantom_cmd(override: str | None) -> list[str]:
    if override:
        return shlex.split(override)
    if shutil.which("phantom"):
        return ["phantom"]
    # not installed as a command (no venv activated): import it from the checkout
    return [sys.executable, "-c", "import sys; from phantom.cli import main; sys.exit(main())"]


def pct_err(sim: float | None, real: float | None) -> float | None:
    return None if sim is None or not real else (sim - real) / real * 100


def cmd_sim(args: argparse.Namespace) -> None:
    real = json.loads(Path(args.real).read_text())["results"] if args.real else {}
    phantom = phantom_cmd(args.phantom)
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for c in select(args.configs):
            report_path = Path(tmp) / f"{c.name}.json"
            cold = ["--no-db"] if args.cold else []
            cmd = [*phantom, "run", "--gpu", args.gpu, "--quiet", *cold, *shlex.split(args.run_args), "--report", str(report_path),
                   "--", SCRIPT, *c.args(args.steps, args.warmup)]
            r = run_one(cmd, args.timeout)
            report = json.loads(report_path.read_text()) if report_path.exists() else {}
            stats = report.get("simulation", {})  # phantom's report schema: docs/report-schema.md
            wall = stats.get("wall_seconds", r.get("wall_s"))
            rows.append({"config": c.name, "params": r.get("params", c.params()), "sim": r, "real": real.get(c.name, {}),
                         "wall_s_per_iter": wall / args.steps if wall else None,
                         "ops_per_wall_second": stats.get("ops_per_wall_second"),
                         "ops_simulated": stats.get("ops_intercepted"),
                         "report": report})
            print("  ->", brief(r), flush=True)

    table = markdown(rows, args.gpu, args.real)
    print("\n" + table)
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(table)
    if args.json:
        write_json(args.json, {"gpu": args.gpu, "real": args.real, "steps": args.steps, "rows": rows})


def markdown(rows: list[dict], gpu: str, real_path: str | None) -> str:
    lines = [f"phantom --gpu {gpu} vs real ({real_path or 'no real data'})", "",
             "| config | params | real ms | sim ms | err % | real peak GiB | sim peak GiB | err % | wall s/iter | ops/wall s |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    time_errs, mem_errs, walls, rates = [], [], [], []
    for row in rows:
        sim, real = row["sim"], row["real"]
        if sim.get("error"):
            lines.append(f"| {row['config']} | {row['params'] / 1e6:.0f}M | {fmt(real.get('median_iter_ms'))} "
                         f"| FAILED: {sim['error']} | | | | | | |")
            continue
        t_err = pct_err(sim.get("median_iter_ms"), real.get("median_iter_ms"))
        m_err = pct_err(sim.get("peak_alloc_gib"), real.get("peak_alloc_gib"))
        time_errs += [abs(t_err)] if t_err is not None else []
        mem_errs += [abs(m_err)] if m_err is not None else []
        walls += [row["wall_s_per_iter"]] if row["wall_s_per_iter"] else []
        rates += [row["ops_per_wall_second"]] if row["ops_per_wall_second"] else []
        lines.append(f"| {row['config']} | {row['params'] / 1e6:.0f}M | {fmt(real.get('median_iter_ms'))} "
                     f"| {fmt(sim.get('median_iter_ms'))} | {fmt(t_err, '+.1f')} | {fmt(real.get('peak_alloc_gib'), '.2f')} "
                     f"| {fmt(sim.get('peak_alloc_gib'), '.2f')} | {fmt(m_err, '+.1f')} | {fmt(row['wall_s_per_iter'], '.2f')} "
                     f"| {fmt(row['ops_per_wall_second'], ',.0f')} |")
    lines.append("")
    if time_errs:
        lines.append(f"iteration time |error|: mean {statistics.mean(time_errs):.1f}%, max {max(time_errs):.1f}% "
                     f"({len(time_errs)} configs)")
    if mem_errs:
        lines.append(f"peak memory |error|: mean {statistics.mean(mem_errs):.1f}%, max {max(mem_errs):.1f}%")
    if walls:
        lines.append(f"simulator speed: {statistics.mean(walls):.2f} wall s per simulated iteration (mean)"
                     + (f", {statistics.mean(rates):,.0f} intercepted ops per wall second" if rates else ""))
    return "\n".join(lines) + "\n"


def write_json(path: str, data: dict) -> None:
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    Path(path).write_text(json.dumps(data, indent=2) + "\n")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="mode", required=True)
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--configs", help="comma-separated subset of config names")
    common.add_argument("--steps", type=int, default=10)
    common.add_argument("--warmup", type=int, default=3)
    common.add_argument("--timeout", type=float, default=300, help="seconds per config")

    sub.add_parser("list", parents=[common], help="show the configs and their memory estimates")
    p = sub.add_parser("real", parents=[common], help="run the configs on this machine's GPU")
    p.add_argument("--out", default="/tmp/real.json")
    p = sub.add_parser("sim", parents=[common], help="run the configs under phantom and compare")
    p.add_argument("--gpu", default="H100")
    p.add_argument("--real", help="JSON written by the real mode")
    p.add_argument("--out", help="write the markdown table here")
    p.add_argument("--json", help="write all results (with phantom's reports) here")
    p.add_argument("--cold", action="store_true",
                   help="leave out the shipped kernel database (phantom run --no-db): fallback model only")
    p.add_argument("--phantom", help="command that starts phantom (default: the `phantom` command, else phantom.cli from this checkout)")
    p.add_argument("--run-args", default="", help="extra `phantom run` options, e.g. '--host-time off'")
    args = parser.parse_args()
    {"list": cmd_list, "real": cmd_real, "sim": cmd_sim}[args.mode](args)


if __name__ == "__main__":
    main()
