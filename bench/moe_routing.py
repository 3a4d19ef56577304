"""How evenly a real Megatron-Core MoE router spreads tokens over the experts, against phantom's
policy (every expert gets tokens x top-k / experts).

    torchrun --nproc-per-node 2 bench/moe_routing.py --out routing.json -- \\
        examples/megatron/pretrain_gpt.py --preset mixtral-8x7b --ep 2 --num-layers 4 ...
    python bench/moe_routing.py --summary routing.json            # the table, from both ranks

The training script runs unchanged (`runpy`); `TopKRouter.forward` is wrapped to keep each
call's tokens per expert (`routing_map.sum(0)`: this rank's tokens routed to each expert, one
call per MoE layer and micro-batch). The counts stay on the GPU until the script ends, so the
run is not synchronised by the probe; they are copied to the host once, at exit. Run it apart
from the timing runs anyway: it is meant for the routing, not the time.

The summary gives, per call and averaged, the most loaded expert against the mean (what sets
the slowest expert GEMM) and, with expert parallelism, the tokens each rank's experts receive
from all ranks against the mean (what sets the slowest rank's expert work and its all-to-all).
Each rank writes OUT with `.rankN` before the suffix when the world has more than one rank.
"""
from __future__ import annotations

import argparse
import json
import os
import runpy
import statistics
import sys
from pathlib import Path


def _rank_path(out: str) -> Path:
    world = int(os.environ.get("WORLD_SIZE", "1"))
    path = Path(out)
    if world > 1:
        path = path.with_name(f"{path.stem}.rank{os.environ.get('RANK', '0')}{path.suffix}")
    return path


def record(out: str, script: str, script_args: list[str]) -> None:
    # The script's folder in place of this one, as `python SCRIPT` would have it: bench/megatron.py
    # would otherwise shadow the megatron package.
    sys.path[0] = str(Path(script).resolve().parent)
    from megatron.core.transformer.moe import router

    calls: list = []
    forward = router.TopKRouter.forward

    def counting_forward(self, *args, **kwargs):
        probs, routing_map = forward(self, *args, **kwargs)
        calls.append(routing_map.sum(0).detach())  # stays on the GPU: no sync here
        return probs, routing_map

    router.TopKRouter.forward = counting_forward

    def dump() -> None:
        # world == expert parallel size in these runs is not assumed: read --ep as given
        ep = int(script_args[script_args.index("--ep") + 1]) if "--ep" in script_args else 1
        _rank_path(out).write_text(json.dumps(dict(
            rank=int(os.environ.get("RANK", "0")), world=int(os.environ.get("WORLD_SIZE", "1")),
            expert_parallel=ep, argv=script_args, counts=[c.tolist() for c in calls])))

    sys.argv = [script, *script_args]
    try:
        runpy.run_path(script, run_name="__main__")
    finally:
        dump()


def summarise(path: str) -> str:
    """A markdown table from every rank's file of a run (OUT or OUT.rankN)."""
    base = Path(path)
    files = sorted(base.parent.glob(f"{base.stem}.rank*{base.suffix}")) or [base]
    ranks = [json.loads(f.read_text()) for f in files]
    ep = ranks[0].get("expert_parallel") or 1
    experts = len(ranks[0]["counts"][0])
    calls = min(len(r["counts"]) for r in ranks)
    expert_peak, rank_peak = [], []
    for i in range(calls):
        for r in ranks:
            c = r["counts"][i]
            expert_peak.append(max(c) / (sum(c) / experts))
        if ep > 1 and len(ranks) == ep:
            # experts are split into `ep` contiguous blocks; each EP rank's experts receive
            # tokens from every rank of its EP group (the whole world: summarised only when world == ep)
            per = experts // ep
            received = [sum(sum(r["counts"][i][b * per:(b + 1) * per]) for r in ranks)
                        for b in range(ep)]
            rank_peak.append(max(received) / (sum(received) / ep))
    lines = [f"Routing of `{' '.join(ranks[0]['argv'])}`: {len(ranks)} ranks, {experts} experts, "
             f"expert parallel {ep}, {calls} router calls per rank.", "",
             "| measure | mean | median | max |", "|---|---|---|---|"]
    for name, xs in (("most loaded expert / mean (per call and rank)", expert_peak),
                     ("tokens received by the busiest EP rank / mean (per call)", rank_peak)):
        if xs:
            lines.append(f"| {name} | {statistics.mean(xs):.3f} | {statistics.median(xs):.3f} | "
                         f"{max(xs):.3f} |")
    return "\n".join(lines)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", help="where each rank writes its counts (record mode)")
    p.add_argument("--summary", help="summarise a recorded run (OUT as given to --out)")
    p.add_argument("script_and_args", nargs=argparse.REMAINDER,
                   help="-- SCRIPT ARGS...: the training script and its arguments")
    args = p.parse_args()
    if args.summary:
        print(summarise(args.summary))
        return
    rest = args.script_and_args[1:] if args.script_and_args[:1] == ["--"] else args.script_and_args
    if not args.out or not rest:
        p.error("record mode needs --out and -- SCRIPT ARGS...")
    record(args.out, rest[0], rest[1:])


if __name__ == "__main__":
    main()
