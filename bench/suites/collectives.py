"""NCCL collectives through torch.distributed, nccl-tests style: real GPUs versus phantom.

    python bench/suites/collectives.py list
    python bench/suites/collectives.py real --out /tmp/real_collectives_h200x2.json    # on the 2-GPU machine
    python bench/suites/collectives.py sim --gpu H200 --real /tmp/real_collectives_h200x2.json --out /tmp/sim_collectives_h200x2.md

`real` starts `torchrun --nproc-per-node N bench/suites/collectives.py worker ...` (one process per
GPU) and records what rank 0 prints; `sim` runs the same worker under
`phantom run --nproc-per-node N --gpu GPU` and compares. The driver is standard library
only; the worker (the `worker` subcommand, started by torchrun or phantom) imports torch.

What is measured, as nccl-tests does it (github.com/NVIDIA/nccl-tests, doc/PERFORMANCE.md):
- ops: all_reduce (sum), all_gather_into_tensor, reduce_scatter_tensor (sum),
  all_to_all_single, broadcast (root 0), sendrecv (ranks 0 and 1 ping-pong: 0 sends, 1 sends
  back; the time of one transfer is half the round trip);
- size: the nccl-tests "size": the buffer of all_reduce, broadcast, all_to_all and send; the
  whole *output* of all_gather; the whole *input* of reduce_scatter; float32 by default
  (nccl-tests' default type), 4 KiB to 1 GiB in steps of x2;
- time: `--warmup` untimed ops, then `--repeats` loops of `--iters` ops back to back, each
  between two `torch.cuda.synchronize()` on `time.perf_counter()` and divided by the count;
  the median loop is reported (rank 0's clock; every op here synchronises the ranks);
- algbw = size / time; busbw = algbw x factor: all_reduce 2(n-1)/n, all_gather,
  reduce_scatter and all_to_all (n-1)/n, broadcast and sendrecv 1.
"""
import argparse
import datetime
import json
import os
import re
import shlex
import shutil
import signal
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
SCRIPT = "bench/suites/collectives.py"
OPS = ["all_reduce", "all_gather", "reduce_scatter", "all_to_all", "broadcast", "sendrecv"]
KIB, MIB, GIB = 2**10, 2**20, 2**30
# Lent multi-GPU machines must never use NVLink multicast (NVLS): it can take the shared host's
# GPUs out of service. Set for every child unless the caller set them already.
SAFE_ENV = {"NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1", "NVSHMEM_DISABLE_NVLS": "1"}
NCCL_ENV_RE = re.compile(r"^(NCCL_|TORCH_NCCL|TORCH_SYMM|NVSHMEM_)")


def bus_factor(op: str, n: int) -> float:
    """nccl-tests' busbw / algbw ratio for `op` on n ranks."""
    if op == "all_reduce":
        return 2 * (n - 1) / n
    if op in ("all_gather", "reduce_scatter", "all_to_all"):
        return (n - 1) / n
    return 1.0  # broadcast, sendrecv


def sizes(lo: int, hi: int, factor: int) -> list[int]:
    out, s = [], lo
    while s <= hi:
        out.append(s)
        s *= factor
    return out


def parse_bytes(text: str) -> int:
    """4K, 1M, 1G, 4096 -> bytes (binary units, as nccl-tests)."""
    m = re.fullmatch(r"(\d+)([KMG]?)B?", text.strip().upper())
    if not m:
        raise argparse.ArgumentTypeError(f"not a size: {text!r}")
    return int(m.group(1)) * {"": 1, "K": KIB, "M": MIB, "G": GIB}[m.group(2)]


def human(n: int) -> str:
    for unit, div in (("G", GIB), ("M", MIB), ("K", KIB)):
        if n >= div and n % div == 0:
            return f"{n // div}{unit}"
    return str(n)


# ---------------------------------------------------------------------------------------------
# worker: one process per GPU, started by torchrun or by phantom run


def worker(args: argparse.Namespace) -> None:
    import warnings

    import torch
    import torch.distributed as dist

    warnings.filterwarnings("ignore", category=FutureWarning)  # torch >= 2.12 renames *_into_tensor / *_tensor
    rank, local_rank, world = int(os.environ["RANK"]), int(os.environ["LOCAL_RANK"]), int(os.environ["WORLD_SIZE"])
    torch.cuda.set_device(local_rank)
    dist.init_process_group("nccl")
    dtype = {"float32": torch.float32, "bfloat16": torch.bfloat16}[args.dtype]
    elem = dtype.itemsize
    nccl = ".".join(map(str, torch.cuda.nccl.version()))
    if rank == 0:
        print(f"env: world_size={world} torch={torch.__version__} nccl={nccl} "
              f"device={torch.cuda.get_device_name().replace(' ', '_')} dtype={args.dtype}", flush=True)

    def make(op: str, size: int):
        """Buffers and a closure that issues one op of nccl-tests size `size` bytes."""
        count = size // elem // world * world  # elements of the nccl-tests buffer
        full = torch.empty(count, dtype=dtype, device="cuda").uniform_()
        if op == "all_reduce":
            return count, lambda: dist.all_reduce(full)
        if op == "all_gather":  # size = the gathered output
            part = torch.empty(count // world, dtype=dtype, device="cuda").uniform_()
            return count, lambda: dist.all_gather_into_tensor(full, part)
        if op == "reduce_scatter":  # size = the input that is reduced and scattered
            part = torch.empty(count // world, dtype=dtype, device="cuda")
            return count, lambda: dist.reduce_scatter_tensor(part, full)
        if op == "all_to_all":
            out = torch.empty_like(full)
            return count, lambda: dist.all_to_all_single(out, full)
        if op == "broadcast":
            return count, lambda: dist.broadcast(full, src=0)
        if op == "sendrecv":  # ping-pong between ranks 0 and 1; other ranks idle
            def pingpong():
                if rank == 0:
                    dist.send(full, dst=1)
                    dist.recv(full, src=1)
                elif rank == 1:
                    dist.recv(full, src=0)
                    dist.send(full, dst=0)
            return count, pingpong
        raise ValueError(op)

    for op in args.ops.split(","):
        if op == "sendrecv" and world < 2:
            continue
        for size in sizes(args.min_bytes, args.max_bytes, args.step_factor):
            count, fn = make(op, size)
            iters = args.iters if size <= args.many_iters_below else args.iters_large
            for _ in range(args.warmup):
                fn()
            per_op = []  # seconds per op of each timed loop
            for _ in range(args.repeats):
                torch.cuda.synchronize()
                dist.barrier()  # start the timed loop together
                torch.cuda.synchronize()
                t0 = time.perf_counter()
                for _ in range(iters):
                    fn()
                torch.cuda.synchronize()
                per_op.append((time.perf_counter() - t0) / iters / (2 if op == "sendrecv" else 1))
            seconds = statistics.median(per_op)  # sendrecv: one round trip = two transfers, halved above
            nbytes = count * elem
            algbw = nbytes / seconds / 1e9
            if rank == 0:
                print(f"coll: op={op} size={nbytes} count={count} dtype={args.dtype} iters={iters} "
                      f"repeats={args.repeats} time_us={seconds * 1e6:.2f} time_us_min={min(per_op) * 1e6:.2f} "
                      f"time_us_max={max(per_op) * 1e6:.2f} algbw_gbs={algbw:.3f} "
                      f"busbw_gbs={algbw * bus_factor(op, world):.3f}", flush=True)
            del fn
            torch.cuda.empty_cache()  # the 1 GiB buffers of one op do not pile up on the next
    dist.barrier()
    dist.destroy_process_group()


# ---------------------------------------------------------------------------------------------
# driver: standard library only


COLL_RE = re.compile(r"^coll: (.*)$")
ENV_RE = re.compile(r"^env: (.*)$")


def parse_fields(text: str) -> dict:
    out = {}
    for field in text.split():
        key, value = field.split("=", 1)
        try:
            out[key] = int(value) if value.isdigit() else float(value)
        except ValueError:
            out[key] = value
    return out


def worker_args(args: argparse.Namespace) -> list[str]:
    return [SCRIPT, "worker", "--ops", args.ops, "--dtype", args.dtype,
            "--min-bytes", str(args.min_bytes), "--max-bytes", str(args.max_bytes),
            "--step-factor", str(args.step_factor), "--warmup", str(args.warmup), "--iters", str(args.iters),
            "--iters-large", str(args.iters_large), "--many-iters-below", str(args.many_iters_below),
            "--repeats", str(args.repeats)]


def child_env() -> dict:
    env = dict(os.environ)
    for key, value in SAFE_ENV.items():
        env.setdefault(key, value)
    env["PYTHONUNBUFFERED"] = "1"
    return env


def descendants(pid: int) -> list[int]:
    """Process ids below `pid` (Linux /proc). torchrun starts its workers in sessions of their own,
    so killing torchrun's process group would leave them running."""
    children: dict[int, list[int]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        children.setdefault(int(fields[1]), []).append(int(stat.parent.name))
    out, todo = [], [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            out.append(child)
            todo.append(child)
    return out


def stop_tree(proc: subprocess.Popen, grace: float = 15.0) -> None:
    """SIGTERM torchrun (it stops its workers), then SIGKILL whatever of the tree is left."""
    tree = descendants(proc.pid)
    try:
        proc.send_signal(signal.SIGTERM)
        proc.wait(grace)
    except (OSError, subprocess.TimeoutExpired):
        pass
    for pid in [proc.pid, *tree, *descendants(proc.pid)]:
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass


def run_streaming(cmd: list[str], timeout: float, on_line=None, log_path: str | None = None) -> dict:
    """Run `cmd` in its own process group, echo and hand each output line to `on_line`.

    Never raises: returns {"rc", "wall_s", "output"} and "error" on failure. On timeout the whole
    group (torchrun and the workers it started) is killed, so no orphan keeps a GPU busy."""
    print("$", shlex.join(cmd), flush=True)
    t0 = time.perf_counter()
    lines: list[str] = []
    log = open(log_path, "a") if log_path else None
    proc = subprocess.Popen(cmd, cwd=REPO, env=child_env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True, bufsize=1, start_new_session=True)
    timed_out = False
    deadline = t0 + timeout

    def watchdog():
        nonlocal timed_out
        while proc.poll() is None:
            if time.perf_counter() > deadline:
                timed_out = True
                stop_tree(proc)
                return
            time.sleep(0.5)

    threading.Thread(target=watchdog, daemon=True).start()
    for line in proc.stdout:
        line = line.rstrip("\n")
        lines.append(line)
        if log:
            log.write(line + "\n")
            log.flush()
        if on_line:
            on_line(line)
    rc = proc.wait()
    if log:
        log.close()
    result = {"rc": rc, "wall_s": round(time.perf_counter() - t0, 2), "output": "\n".join(lines)}
    if timed_out:
        result["error"] = f"timed out after {timeout:.0f} s"
    elif rc != 0:
        # the exception line of a worker (torchrun's own summary ends in a row of '=')
        last = next((l for l in reversed(lines) if re.search(r"(Error|Exception)\b", l)), None)
        last = last or next((l for l in reversed(lines) if l.strip()), "")
        result["error"] = f"exit code {rc}: {last.strip()[:200]}"
    return result


def sh(cmd: list[str]) -> str:
    try:
        return subprocess.run(cmd, capture_output=True, text=True, timeout=60).stdout.strip()
    except (OSError, subprocess.TimeoutExpired):
        return ""


def environment() -> dict:
    """The machine and software, for the `meta` of real-data files (all GPUs, topology, NCCL)."""
    smi = shutil.which("nvidia-smi")
    gpus = sh(["nvidia-smi", "--query-gpu=name,driver_version", "--format=csv,noheader"]).splitlines() if smi else []
    name, _, driver = (gpus or [""])[0].partition(", ")
    versions = sh([sys.executable, "-c", "import torch; print(torch.__version__, torch.version.cuda, "
                   "'.'.join(map(str, torch.cuda.nccl.version())))"]).split()
    return {
        "device": f"{len(gpus)} x {name}" if gpus else "unknown",
        "gpus": len(gpus),
        "driver": driver or "unknown",
        "torch": versions[0] if versions else "unknown",
        "cuda": versions[1] if len(versions) > 1 else "unknown",
        "nccl": versions[2] if len(versions) > 2 else "unknown",
        "python": sys.version.split()[0],
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "host": os.uname().nodename,
        "topology": sh(["nvidia-smi", "topo", "-m"]) if smi else "",
        "nccl_env": {k: v for k, v in child_env().items() if NCCL_ENV_RE.match(k)},
    }


def write_json(path: str, data: dict) -> None:
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    Path(path).write_text(json.dumps(data, indent=2) + "\n")


def torchrun_cmd(nproc: int) -> list[str]:
    return [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", str(nproc)]


def phantom_cmd(override: str | None) -> list[str]:
    if override:
        return shlex.split(override)
    if shutil.which("phantom"):
        return ["phantom"]
    return [sys.executable, "-c", "import sys; from phantom.cli import main; sys.exit(main())"]


def collect(cmd: list[str], timeout: float, out: str | None, meta: dict, log_path: str | None = None) -> tuple[list[dict], dict]:
    """Run a worker command; parse rank 0's lines; rewrite `out` after every row."""
    rows: list[dict] = []

    def on_line(line: str) -> None:
        print(line, flush=True)
        if m := ENV_RE.match(line):
            meta["worker"] = parse_fields(m.group(1))
        elif m := COLL_RE.match(line):
            rows.append(parse_fields(m.group(1)))
            if out:
                write_json(out, {"meta": meta, "results": rows})

    r = run_streaming(cmd, timeout, on_line, log_path)
    if r.get("error"):
        meta["error"] = r["error"]
        print("FAILED:", r["error"], flush=True)
    meta["wall_s"] = r["wall_s"]
    if out:
        write_json(out, {"meta": meta, "results": rows})
    return rows, r


def table(rows: list[dict]) -> str:
    """busbw (GB/s) per size, one column per op."""
    ops = [op for op in OPS if any(r["op"] == op for r in rows)]
    if not ops:
        return "(no results)"
    by = {(r["op"], r["size"]): r for r in rows}
    lines = ["| size | " + " | ".join(ops) + " |", "|---" * (len(ops) + 1) + "|"]
    for size in sorted({r["size"] for r in rows}):
        cells = [f"{by[(op, size)]['busbw_gbs']:.1f}" if (op, size) in by else "-" for op in ops]
        lines.append(f"| {human(size)} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def cmd_list(args: argparse.Namespace) -> None:
    print(f"ops: {args.ops}; dtype {args.dtype}; {args.nproc} ranks")
    print(f"sizes: {', '.join(human(s) for s in sizes(args.min_bytes, args.max_bytes, args.step_factor))}")
    print(f"iterations: {args.warmup} warm-up, then {args.repeats} x {args.iters} timed (sizes <= "
          f"{human(args.many_iters_below)}), {args.repeats} x {args.iters_large} above; median of the {args.repeats}")
    print("busbw factors: " + ", ".join(f"{op} {bus_factor(op, args.nproc):.3g}" for op in OPS))
    print("real:", shlex.join(torchrun_cmd(args.nproc) + worker_args(args)))
    print("sim: ", shlex.join(["phantom", "run", "--nproc-per-node", str(args.nproc), "--gpu", "GPU", "--"] + worker_args(args)))


def cmd_real(args: argparse.Namespace) -> None:
    meta = {**environment(), "ops": args.ops, "dtype": args.dtype, "warmup": args.warmup, "iters": args.iters,
            "iters_large": args.iters_large, "many_iters_below": args.many_iters_below, "step_factor": args.step_factor,
            "repeats": args.repeats, "nproc": args.nproc,
            "timer": "time.perf_counter around torch.cuda.synchronize, rank 0"}
    print(f"device {meta['device']} | driver {meta['driver']} | torch {meta['torch']} (CUDA {meta['cuda']}, NCCL {meta['nccl']})")
    rows, _ = collect(torchrun_cmd(args.nproc) + worker_args(args), args.timeout, args.out, meta, args.log)
    print(f"\nbusbw GB/s, {meta['device']}, {args.dtype} (results in {args.out})\n" + table(rows))


def fmt(x: float | None, spec: str) -> str:
    return "-" if x is None else format(x, spec)


def pct_err(sim: float | None, real: float | None) -> float | None:
    return None if sim is None or not real else (sim - real) / real * 100


def cmd_sim(args: argparse.Namespace) -> None:
    real_doc = json.loads(Path(args.real).read_text()) if args.real else {"meta": {}, "results": []}
    real = {(r["op"], r["size"]): r for r in real_doc["results"]}
    if args.real:  # replay exactly what was measured
        m = real_doc["meta"]
        for key in ("ops", "dtype", "warmup", "iters", "iters_large", "many_iters_below", "step_factor", "repeats"):
            if key in m:
                setattr(args, key, m[key])
        if real_doc["results"]:
            args.min_bytes = min(r["size"] for r in real_doc["results"])
            args.max_bytes = max(r["size"] for r in real_doc["results"])
    cmd = [*phantom_cmd(args.phantom), "run", "--nproc-per-node", str(args.nproc), "--gpu", args.gpu, "--quiet", "--",
           *worker_args(args)]
    meta = {"gpu": args.gpu, "real": args.real}
    rows, r = collect(cmd, args.timeout, args.json, meta)
    md = markdown(rows, real, args.gpu, args.real, meta.get("error"))
    print("\n" + md)
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(md)


def markdown(rows: list[dict], real: dict, gpu: str, real_path: str | None, error: str | None) -> str:
    lines = [f"phantom --gpu {gpu} --nproc-per-node 2, bench/suites/collectives.py vs real ({real_path or 'no real data'})", ""]
    if error:
        lines += [f"sim FAILED: {error}", ""]
    summary = []
    for op in OPS:
        op_rows = [r for r in rows if r["op"] == op]
        if not op_rows:
            continue
        lines += [f"**{op}**", "", "| size | real us | sim us | err % | real busbw GB/s | sim busbw GB/s |",
                  "|---|---|---|---|---|---|"]
        small, large = [], []
        for r in op_rows:
            ref = real.get((op, r["size"]), {})
            err = pct_err(r["time_us"], ref.get("time_us"))
            if err is not None:
                (large if r["size"] >= MIB else small).append(abs(err))
            lines.append(f"| {human(r['size'])} | {fmt(ref.get('time_us'), '.2f')} | {r['time_us']:.2f} | "
                         f"{fmt(err, '+.1f')} | {fmt(ref.get('busbw_gbs'), '.1f')} | {r['busbw_gbs']:.1f} |")
        lines.append("")
        summary.append((op, small, large))
    lines += ["| op | mean abs(err) % below 1 MiB | mean abs(err) % from 1 MiB |", "|---|---|---|"]
    all_small, all_large = [], []
    for op, small, large in summary:
        all_small += small
        all_large += large
        lines.append(f"| {op} | {statistics.mean(small) if small else float('nan'):.1f} | "
                     f"{statistics.mean(large) if large else float('nan'):.1f} |")
    if all_small or all_large:
        lines.append(f"| all | {statistics.mean(all_small) if all_small else float('nan'):.1f} | "
                     f"{statistics.mean(all_large) if all_large else float('nan'):.1f} |")
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="mode", required=True)
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--ops", default=",".join(OPS), help=f"comma-separated subset of {','.join(OPS)}")
    common.add_argument("--dtype", choices=["float32", "bfloat16"], default="float32")
    common.add_argument("--min-bytes", type=parse_bytes, default=4 * KIB)
    common.add_argument("--max-bytes", type=parse_bytes, default=GIB)
    common.add_argument("--step-factor", type=int, default=2)
    common.add_argument("--warmup", type=int, default=5)
    common.add_argument("--iters", type=int, default=50, help="timed ops per size up to --many-iters-below")
    common.add_argument("--iters-large", type=int, default=20, help="timed ops per larger size")
    common.add_argument("--many-iters-below", type=parse_bytes, default=64 * MIB)
    common.add_argument("--repeats", type=int, default=5, help="timed loops per size; the median is reported")
    drv = argparse.ArgumentParser(add_help=False, parents=[common])
    drv.add_argument("--nproc", type=int, default=2, help="ranks (GPUs)")
    drv.add_argument("--timeout", type=float, default=420, help="seconds for the whole sweep")

    sub.add_parser("worker", parents=[common], help="(started by torchrun / phantom run) run the sweep")
    sub.add_parser("list", parents=[drv], help="show the sweep and the commands")
    p = sub.add_parser("real", parents=[drv], help="run the sweep on this machine's GPUs")
    p.add_argument("--out", default="/tmp/real_collectives.json")
    p.add_argument("--log", help="also write the full output here")
    p = sub.add_parser("sim", parents=[drv], help="run the sweep under phantom and compare")
    p.add_argument("--gpu", default="H200")
    p.add_argument("--real", help="JSON written by the real mode (its ops, sizes and iterations are replayed)")
    p.add_argument("--out", help="write the markdown comparison here")
    p.add_argument("--json", help="write the simulated rows here")
    p.add_argument("--phantom", help="command that starts phantom (default: `phantom`, else phantom.cli from this checkout)")
    args = parser.parse_args()
    {"worker": worker, "list": cmd_list, "real": cmd_real, "sim": cmd_sim}[args.mode](args)


if __name__ == "__main__":
    main()
