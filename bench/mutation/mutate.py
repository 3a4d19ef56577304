"""Mutation check: does the test suite notice when the model is wrong?

Each mutation changes one of phantom's physical inputs by a large factor in a copy of the
working tree (the repository is never touched), runs the tests there, and records which tests
failed. A mutation no test catches is a hole in the suite. The baseline (no mutation) runs first
on the same tests: a test failing there is a flake or a broken test, not a catch, and is left
out of every mutation's list.

    python bench/mutation/mutate.py                       # every mutation, each on its own tests
    python bench/mutation/mutate.py --mutations gemm      # one mutation
    python bench/mutation/mutate.py --tests tests         # every mutation on the whole suite

Results go to bench/mutation/results.json (date, machine, software and commit inside);
docs/testing.md explains them.
"""
from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import xml.etree.ElementTree as ET
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
RESULTS = Path(__file__).with_name("results.json")


@dataclass(frozen=True)
class Mutation:
    name: str
    description: str
    edits: tuple[tuple[str, str, str], ...]
    """(file relative to the repository root, text, replacement): each text must occur exactly
    once in its file."""
    tests: tuple[str, ...]
    """The tests run by default: the mutated modules' unit tests and the end-to-end tests that
    assert on what they decide (step times, collective times, memory, host time)."""


MUTATIONS = (
    Mutation("gemm", "every GEMM takes 2x: the roofline's GEMM efficiency halved and the kernel "
                     "database's GEMM rows doubled",
             (("phantom/cost/roofline.py", "    return (curve.eff_max * gemm_wave_factor(",
               "    return 0.5 * (curve.eff_max * gemm_wave_factor("),
              ("phantom/cost/dbmodel.py", "            cost = replace(cost, gpu_ns=ns, source=DB_SOURCE)",
               "            cost = replace(cost, gpu_ns=ns * (2 if cost.op_class == 'gemm' else 1), "
               "source=DB_SOURCE)")),
             ("tests/test_cost_model.py", "tests/test_db.py", "tests/test_examples.py",
              "tests/test_deepspeed.py", "tests/test_megatron.py", "tests/test_torchtitan.py")),
    Mutation("network", "NVLink and NIC bandwidth doubled",
             (("phantom/network/cluster.py", "return get_gpu(self.gpu).nvlink_gbps if n is None else n",
               "return 2 * (get_gpu(self.gpu).nvlink_gbps if n is None else n)"),
              ("phantom/network/cluster.py", "return self.inter_node.nic_gbit / 8.0",
               "return self.inter_node.nic_gbit / 4.0")),
             ("tests/test_network.py", "tests/test_network_measured.py", "tests/test_distributed.py",
              "tests/test_deepspeed.py")),
    Mutation("allocator", "the caching allocator rounds requests to 1 KiB instead of 512 B",
             (("phantom/memory/allocator.py",
               "    return K_MIN_BLOCK_SIZE * ((size + K_MIN_BLOCK_SIZE - 1) // K_MIN_BLOCK_SIZE)",
               "    return 1024 * ((size + 1023) // 1024)"),),
             ("tests/test_allocator.py", "tests/test_report_memory.py", "tests/test_examples.py")),
    Mutation("host", "measured host time scaled by 2 (the machine-to-node ratio doubled)",
             (("phantom/host/account.py",
               "self.ratio = machine.ratio(self.gpu.host_probe_ns * self.gpu.host_mean_slowdown)",
               "self.ratio = 2 * machine.ratio(self.gpu.host_probe_ns * self.gpu.host_mean_slowdown)"),),
             ("tests/test_host.py", "tests/test_cuda_graphs.py", "tests/test_examples.py")),
)


def copy_tree(dest: Path) -> None:
    """The working tree as git sees it (tracked and untracked, ignored files left out)."""
    files = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
                           cwd=REPO, capture_output=True, check=True).stdout.decode().split("\0")
    for name in filter(None, files):
        source = REPO / name
        if source.is_file():
            (dest / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, dest / name)


def apply(mutation: Mutation, tree: Path) -> None:
    for name, old, new in mutation.edits:
        path = tree / name
        text = path.read_text()
        if text.count(old) != 1:
            raise SystemExit(f"mutate: {name} holds {text.count(old)} copies of {old!r}, "
                             f"expected one: update mutation {mutation.name!r} to the code")
        path.write_text(text.replace(old, new))


def run_tests(tree: Path, tests: list[str], seed: Path, label: str) -> dict[str, str]:
    """Outcome per test id ("passed", "failed", "skipped") of one pytest run in `tree`."""
    junit = tree / f"junit-{label}.xml"
    env = {**os.environ, "PYTHONPATH": str(tree), "PHANTOM_TEST_SEED_CACHE": str(seed)}
    print(f"mutate: {label}: pytest {' '.join(tests)}", flush=True)
    subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", f"--junitxml={junit}",
                    *tests], cwd=tree, env=env, stdout=subprocess.DEVNULL)
    outcomes = {}
    for case in ET.parse(junit).getroot().iter("testcase"):
        test_id = f"{case.get('classname', '').replace('.', '/')}.py::{case.get('name')}"
        failed = case.find("failure") is not None or case.find("error") is not None
        outcomes[test_id] = "failed" if failed else "skipped" if case.find("skipped") is not None else "passed"
    return outcomes


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--mutations", nargs="+", choices=[m.name for m in MUTATIONS],
                        default=[m.name for m in MUTATIONS])
    parser.add_argument("--tests", nargs="+",
                        help="pytest arguments naming the tests every mutation runs (default: each "
                             "mutation's own list; the baseline runs all of them)")
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args()

    sys.path.insert(0, str(REPO / "tests"))
    from conftest import prepare_seed_cache  # the suite's own set-up: one native build, one calibration
    import torch

    from phantom.host.machine import cpu_model

    seed = prepare_seed_cache()
    commit = subprocess.run(["git", "rev-parse", "HEAD"], cwd=REPO, capture_output=True, text=True).stdout.strip()
    dirty = bool(subprocess.run(["git", "status", "--porcelain"], cwd=REPO, capture_output=True, text=True).stdout)
    results = {"date": datetime.date.today().isoformat(), "commit": commit + ("+changes" if dirty else ""),
               "cpu": cpu_model(), "cpus": os.cpu_count(),
               "python": platform.python_version(), "torch": torch.__version__,
               "command": " ".join(["python bench/mutation/mutate.py", *sys.argv[1:]]), "mutations": []}
    chosen = [m for m in MUTATIONS if m.name in args.mutations]
    tests = {m.name: args.tests or list(m.tests) for m in chosen}
    union = args.tests or sorted({t for m in chosen for t in m.tests})
    with tempfile.TemporaryDirectory(prefix="phantom-mutation-") as tmp:
        trees = {name: Path(tmp) / name for name in ("baseline", *tests)}
        for name, tree in trees.items():  # all copied now: the same tree for every run
            copy_tree(tree)
            if name != "baseline":
                apply(next(m for m in chosen if m.name == name), tree)
        baseline = run_tests(trees["baseline"], union, seed, "baseline")
        broken = sorted(t for t, outcome in baseline.items() if outcome == "failed")
        results["baseline"] = {"tests": len(baseline), "failed": broken}
        for mutation in chosen:
            outcomes = run_tests(trees[mutation.name], tests[mutation.name], seed, mutation.name)
            caught = sorted(t for t, outcome in outcomes.items() if outcome == "failed" and t not in broken)
            print(f"mutate: {mutation.name}: caught by {len(caught)} of {len(outcomes)} tests", flush=True)
            results["mutations"].append({"name": mutation.name, "description": mutation.description,
                                         "files": sorted({name for name, _, _ in mutation.edits}),
                                         "tests_run": tests[mutation.name],
                                         "tests": len(outcomes), "caught_by": caught})
    shutil.rmtree(seed, ignore_errors=True)
    args.out.write_text(json.dumps(results, indent=1) + "\n")
    missed = [m["name"] for m in results["mutations"] if not m["caught_by"]]
    print(f"mutate: wrote {args.out}" + (f"; NOT CAUGHT: {', '.join(missed)}" if missed else ""))
    raise SystemExit(1 if missed else 0)


if __name__ == "__main__":
    main()
