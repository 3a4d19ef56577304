"""Multi-GPU accuracy benchmark: examples/dist_train.py (DDP, FSDP2, TP, PP) for real versus under phantom.

    python bench/suites/distributed.py list
    python bench/suites/distributed.py real --out /tmp/real_distributed_h200x2.json      # on the 2-GPU machine
    python bench/suites/distributed.py sim --gpu H200 --real /tmp/real_distributed_h200x2.json --out /tmp/sim_distributed_h200x2.md

`real` runs every config as its own `torchrun --nproc-per-node 2` and records the median
iteration time and the peak memory (rank 0 and the maximum over ranks) that rank 0 prints in its
`summary:` line. `sim` runs the same command lines through
`phantom run --nproc-per-node 2 --gpu GPU` and compares. Standard library only: the GPU work
happens in the subprocesses.
"""
import argparse
import json
import shlex
import statistics
import sys
import tempfile
from dataclasses import asdict, dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from collectives import environment, phantom_cmd, run_streaming, torchrun_cmd, write_json  # noqa: E402
from single_gpu import PRESETS, VOCAB, fmt, parse_summary, pct_err, tail  # noqa: E402

SCRIPT = "examples/dist_train.py"
GIB = 2**30


@dataclass
class Config:
    name: str
    parallel: str  # ddp | fsdp | tp | pp
    preset: str
    seq_len: int
    batch_size: int  # sequences per step of one model replica (dist_train.py --batch-size)
    microbatches: int = 4  # pp only

    def args(self, steps: int, warmup: int) -> list[str]:
        a = ["--parallel", self.parallel, "--preset", self.preset, "--seq-len", str(self.seq_len),
             "--batch-size", str(self.batch_size), "--steps", str(steps), "--warmup", str(warmup)]
        return a + ["--microbatches", str(self.microbatches)] if self.parallel == "pp" else a

    def dims(self) -> tuple[int, int]:
        return PRESETS[self.preset]["n_layer"], PRESETS[self.preset]["n_embd"]

    def params(self) -> int:
        L, C = self.dims()
        return 12 * L * C * C + VOCAB * C + self.seq_len * C + (2 * L + 1) * C

    def tokens_per_step(self, world: int) -> int:
        return self.batch_size * self.seq_len * (world if self.parallel in ("ddp", "fsdp") else 1)

    def estimate_gib(self, world: int = 2) -> float:
        """Rough peak allocated memory of the busiest rank (for sizing batches, +-20%)."""
        L, C = self.dims()
        n, blocks, emb = self.params(), 12 * L * C * C, VOCAB * C
        T = self.seq_len
        full = 38 * C  # bytes saved for backward per token per layer under bf16 autocast (single_gpu.py)
        if self.parallel == "ddp":  # the single-GPU step plus DDP's fp32 gradient buckets
            tokens = self.batch_size * T
            return (16 * n + 4 * n + L * full * tokens + 10 * VOCAB * tokens) / GIB
        if self.parallel == "fsdp":  # fp32 shards + states; bf16 activations; 2 blocks and the root unsharded
            tokens = self.batch_size * T
            return (16 * n / world + 2 * (2 * blocks / L + emb) + L * 32 * C * tokens + 6 * VOCAB * tokens) / GIB
        if self.parallel == "tp":  # replicated embeddings and norms, sharded blocks, partly sharded activations
            tokens = self.batch_size * T
            acts = L * (12 * C + 26 * C / world) * tokens
            return (16 * (emb + T * C) + 18 * blocks / world + 2 * emb + acts + 10 * VOCAB * tokens) / GIB
        # pp: stage 0 keeps up to `world` micro-batches of activations in flight under 1F1B
        mb_tokens = self.batch_size // self.microbatches * T
        stage0 = 18 * (emb + T * C + blocks / world) + min(world, self.microbatches) * L / world * full * mb_tokens
        last = 18 * (emb + blocks / world) + L / world * full * mb_tokens + 10 * VOCAB * mb_tokens
        return max(stage0, last) / GIB

    def estimate_ms(self, world: int = 2, tflops: float = 400.0) -> float:
        """Compute time alone at a sustained rate per GPU (no communication, no pipeline bubble)."""
        L, C = self.dims()
        per_token = 6 * (self.params() - self.seq_len * C) + 12 * L * C * self.seq_len
        return per_token * self.tokens_per_step(world) / (world * tflops * 1e12) * 1e3


# 1B and 3B models, 2k-4k tokens; every config well inside an H200's 141 GB (estimates: `list`).
CONFIGS = [
    Config("ddp-1b-s2k", "ddp", "1b", 2048, 8),
    Config("fsdp-1b-s2k", "fsdp", "1b", 2048, 8),
    Config("fsdp-3b-s4k", "fsdp", "3b", 4096, 2),
    Config("tp-1b-s2k", "tp", "1b", 2048, 8),
    Config("tp-3b-s2k", "tp", "3b", 2048, 4),
    Config("pp-1b-s2k", "pp", "1b", 2048, 8, microbatches=4),
]

# Host-bound steps (`--suite host-bound`): the same models on 128-token sequences, so the
# GPU finishes each kernel in microseconds and the host's Python (DDP's reducer, FSDP2's
# hooks, DTensor's dispatch, the pipeline schedule) sets the step time.
HOST_BOUND = [
    Config("ddp-350m-s128", "ddp", "gpt2-350m", 128, 2),
    Config("fsdp-350m-s128", "fsdp", "gpt2-350m", 128, 2),
    Config("tp-350m-s128", "tp", "gpt2-350m", 128, 2),
    Config("tp-3b-s128", "tp", "3b", 128, 2),
    Config("pp-350m-s128", "pp", "gpt2-350m", 128, 4, microbatches=4),
]
SUITES = {"training": CONFIGS, "host-bound": HOST_BOUND}


def select(names: str | None, suite: str = "training") -> list[Config]:
    if not names:
        return SUITES[suite]
    by_name = {c.name: c for c in CONFIGS + HOST_BOUND}
    unknown = [n for n in names.split(",") if n not in by_name]
    if unknown:
        sys.exit(f"unknown config(s) {unknown}; known: {', '.join(by_name)}")
    return [by_name[n] for n in names.split(",")]


def run_one(cmd: list[str], timeout: float) -> dict:
    """Run one config; never raises, so a failing config (OOM, crash, timeout) is only recorded."""
    r = run_streaming(cmd, timeout)
    result = {"wall_s": r["wall_s"]}
    try:
        result.update(parse_summary(r["output"]))
        if not r.get("error"):
            return result
    except ValueError:
        pass
    result["error"] = r.get("error") or "no summary line in the output"
    result["log_tail"] = tail(r["output"], 25)
    return result


def brief(r: dict) -> str:
    if r.get("error"):
        return "FAILED: " + r["error"]
    return (f"{r['median_iter_ms']:.1f} ms/iter, peak {r['peak_alloc_gib']:.2f} GiB allocated on rank 0, "
            f"{r['max_peak_alloc_gib']:.2f} max over ranks")


def cmd_list(args: argparse.Namespace) -> None:
    print(f"| config | parallel | params | seq | batch | tokens/step | rough est. peak GiB | est. ms/iter @400 TFLOP/s/GPU |")
    print("|---|---|---|---|---|---|---|---|")
    for c in select(args.configs, args.suite):
        print(f"| {c.name} | {c.parallel}{f' ({c.microbatches} mb)' if c.parallel == 'pp' else ''} | "
              f"{c.params() / 1e6:.0f}M | {c.seq_len} | {c.batch_size} | {c.tokens_per_step(args.nproc)} | "
              f"{c.estimate_gib(args.nproc):.1f} | {c.estimate_ms(args.nproc):.0f} |")
    print("\ne.g.", shlex.join(torchrun_cmd(args.nproc) + [SCRIPT, *CONFIGS[0].args(args.steps, args.warmup)]))


def cmd_real(args: argparse.Namespace) -> None:
    env = environment()
    print(f"device {env['device']} | driver {env['driver']} | torch {env['torch']} (CUDA {env['cuda']}, NCCL {env['nccl']})")
    results = {}
    for c in select(args.configs, args.suite):
        r = run_one(torchrun_cmd(args.nproc) + [SCRIPT, *c.args(args.steps, args.warmup)], args.timeout)
        results[c.name] = {**asdict(c), "params": round(r.pop("params", c.params())), **r}
        print("  ->", brief(r), flush=True)
        # write after every config so a crash or a timeout of the harness itself loses nothing
        write_json(args.out, {"meta": {**env, "nproc": args.nproc, "steps": args.steps, "warmup": args.warmup},
                              "results": results})

    print(f"\n{env['device']}  (results in {args.out})")
    print(f"{'config':<13} {'params':>7} {'ms/iter':>9} {'alloc r0':>9} {'alloc max':>10} {'resv max':>9}  est GiB")
    for name, r in results.items():
        c = next(c for c in CONFIGS + HOST_BOUND if c.name == name)
        if r.get("error"):
            print(f"{name:<13} {r['params'] / 1e6:>6.0f}M  FAILED: {r['error']}")
        else:
            print(f"{name:<13} {r['params'] / 1e6:>6.0f}M {r['median_iter_ms']:>9.1f} {r['peak_alloc_gib']:>9.2f} "
                  f"{r['max_peak_alloc_gib']:>10.2f} {r['max_peak_reserved_gib']:>9.2f}  {c.estimate_gib(args.nproc):7.1f}")


def cmd_sim(args: argparse.Namespace) -> None:
    real = json.loads(Path(args.real).read_text())["results"] if args.real else {}
    phantom = phantom_cmd(args.phantom)
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for c in select(args.configs, args.suite):
            report_path = Path(tmp) / f"{c.name}.json"
            cmd = [*phantom, "run", "--nproc-per-node", str(args.nproc), "--gpu", args.gpu, "--quiet",
                   "--report", str(report_path), *shlex.split(args.phantom_args),
                   "--", SCRIPT, *c.args(args.steps, args.warmup)]
            r = run_one(cmd, args.timeout)
            report = json.loads(report_path.read_text()) if report_path.exists() else {}
            rows.append({"config": c.name, "params": r.get("params", c.params()), "sim": r,
                         "real": real.get(c.name, {}), "report": report})
            print("  ->", brief(r), flush=True)

    table = markdown(rows, args.gpu, args.nproc, args.real, args.phantom_args)
    print("\n" + table)
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(table)
    if args.json:
        write_json(args.json, {"gpu": args.gpu, "real": args.real, "steps": args.steps,
                               "phantom_args": args.phantom_args, "rows": rows})


def markdown(rows: list[dict], gpu: str, nproc: int, real_path: str | None, extra: str = "") -> str:
    lines = [f"phantom --nproc-per-node {nproc} --gpu {gpu}{' ' + extra if extra else ''} "
             f"vs real ({real_path or 'no real data'})", "",
             "| config | params | real ms | sim ms | err % | real peak GiB r0 | sim | err % "
             "| real peak GiB max | sim | err % | wall s |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    t_errs, m_errs = [], []
    for row in rows:
        sim, real = row["sim"], row["real"]
        if sim.get("error"):
            lines.append(f"| {row['config']} | {row['params'] / 1e6:.0f}M | {fmt(real.get('median_iter_ms'))} "
                         f"| FAILED: {sim['error']} | | | | | | | | |")
            continue
        t_err = pct_err(sim.get("median_iter_ms"), real.get("median_iter_ms"))
        m0_err = pct_err(sim.get("peak_alloc_gib"), real.get("peak_alloc_gib"))
        mx_err = pct_err(sim.get("max_peak_alloc_gib"), real.get("max_peak_alloc_gib"))
        t_errs += [abs(t_err)] if t_err is not None else []
        m_errs += [abs(e) for e in (m0_err, mx_err) if e is not None]
        lines.append(f"| {row['config']} | {row['params'] / 1e6:.0f}M | {fmt(real.get('median_iter_ms'))} "
                     f"| {fmt(sim.get('median_iter_ms'))} | {fmt(t_err, '+.1f')} "
                     f"| {fmt(real.get('peak_alloc_gib'), '.2f')} | {fmt(sim.get('peak_alloc_gib'), '.2f')} | {fmt(m0_err, '+.1f')} "
                     f"| {fmt(real.get('max_peak_alloc_gib'), '.2f')} | {fmt(sim.get('max_peak_alloc_gib'), '.2f')} "
                     f"| {fmt(mx_err, '+.1f')} | {fmt(sim.get('wall_s'))} |")
    lines.append("")
    if t_errs:
        lines.append(f"iteration time |error|: mean {statistics.mean(t_errs):.1f}%, max {max(t_errs):.1f}% ({len(t_errs)} configs)")
    if m_errs:
        lines.append(f"peak memory |error| (rank 0 and max over ranks): mean {statistics.mean(m_errs):.1f}%, max {max(m_errs):.1f}%")
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="mode", required=True)
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--configs", help="comma-separated subset of config names")
    common.add_argument("--suite", choices=sorted(SUITES), default="training",
                        help="training steps (default) or host-bound steps (128-token sequences)")
    common.add_argument("--nproc", type=int, default=2, help="ranks (GPUs)")
    common.add_argument("--steps", type=int, default=10)
    common.add_argument("--warmup", type=int, default=3)
    common.add_argument("--timeout", type=float, default=240, help="seconds per config")

    sub.add_parser("list", parents=[common], help="show the configs and their estimates")
    p = sub.add_parser("real", parents=[common], help="run the configs on this machine's GPUs")
    p.add_argument("--out", default="/tmp/real_distributed.json")
    p = sub.add_parser("sim", parents=[common], help="run the configs under phantom and compare")
    p.add_argument("--gpu", default="H200")
    p.add_argument("--real", help="JSON written by the real mode")
    p.add_argument("--out", help="write the markdown table here")
    p.add_argument("--json", help="write all results (with phantom's reports) here")
    p.add_argument("--phantom", help="command that starts phantom (default: the `phantom` command, else phantom.cli from this checkout)")
    p.add_argument("--phantom-args", default="",
                   help="more `phantom run` options, e.g. '--host-time off' for the GPU side alone")
    args = parser.parse_args()
    {"list": cmd_list, "real": cmd_real, "sim": cmd_sim}[args.mode](args)


if __name__ == "__main__":
    main()
