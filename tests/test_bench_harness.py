"""bench/bench.py: the compare logic on small fixtures, the suites' readers, and the READMEs it
generates from the committed results (a stale bench/README.md or README.md table fails here);
and bench/'s scripts import only what phantom has."""
import ast
import importlib
import importlib.util
import json
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def bench():
    spec = importlib.util.spec_from_file_location("bench_harness", REPO / "bench" / "bench.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up while being built
    spec.loader.exec_module(module)
    yield module
    del sys.modules[spec.name]


def _run(rows, kind="real"):
    return {"kind": kind, "rows": rows}


def test_a_row_is_phantoms_median_against_the_real_median(bench):
    rows = bench.pool([_run({"a": 100.0, "b": 50.0}), _run({"a": 120.0}), _run({"a": 110.0})],
                      [_run({"a": 99.0, "b": 55.0}, "sim"), _run({"a": 121.0}, "sim"), _run({"a": 132.0}, "sim")])
    by = {r.name: r for r in rows}
    assert [r.name for r in rows] == ["a", "b"]  # in the order the rows first appear
    assert by["a"].real == [100.0, 120.0, 110.0] and by["a"].sim == [99.0, 121.0, 132.0]
    assert by["a"].error_pct() == pytest.approx(100 * (121 / 110 - 1))
    assert by["b"].error_pct() == pytest.approx(10.0)
    mean, worst, n = bench.summary(rows)
    assert (n, worst) == (2, pytest.approx(10.0)) and mean == pytest.approx((10.0 + 10.0) / 2)


def test_a_row_missing_on_one_side_has_no_error_and_stays_out_of_the_summary(bench):
    rows = bench.pool([_run({"a": 100.0, "only-real": 5.0})], [_run({"a": 90.0, "only-sim": 7.0}, "sim")])
    by = {r.name: r for r in rows}
    assert by["only-real"].error_pct() is None and by["only-sim"].error_pct() is None
    assert bench.summary(rows) == (pytest.approx(10.0), pytest.approx(10.0), 1)
    assert bench.summary(bench.pool([_run({"x": 1.0})], [])) is None


def test_the_least_error_is_reached_by_one_value_and_no_value_does_better(bench):
    samples = [100.0, 150.0, 120.0]
    floor = bench.least_error_pct(samples)
    assert floor == pytest.approx(20.0)  # (150 - 100) / (150 + 100)
    best = 2 * 150 * 100 / 250
    assert max(abs(best / m - 1) for m in samples) * 100 == pytest.approx(floor)
    for x in (110.0, 119.0, 121.0, 130.0):
        assert max(abs(x / m - 1) for m in samples) * 100 > floor


def test_collectives_are_summarised_by_op_and_size_range(bench):
    real = [_run({"all_reduce 4096": 10.0, "all_reduce 8192": 10.0, "all_reduce 2097152": 100.0,
                  "broadcast 4096": 20.0})]
    sim = [_run({"all_reduce 4096": 12.0, "all_reduce 8192": 11.0, "all_reduce 2097152": 95.0,
                 "broadcast 4096": 19.0}, "sim")]
    rows = bench.pool(real, sim)
    groups = {name: [r.name for r in rs] for name, rs in bench.collective_groups(rows).items()}
    assert groups == {"all_reduce, below 1 MiB": ["all_reduce 4096", "all_reduce 8192"],
                      "all_reduce, from 1 MiB": ["all_reduce 2097152"], "broadcast, below 1 MiB": ["broadcast 4096"]}
    for_mean, for_max = bench.errors(bench.BY_NAME["collectives"], rows)
    # the mean over (op, size range) groups, the max over every point
    assert for_mean == [pytest.approx(15.0), pytest.approx(5.0), pytest.approx(5.0)]
    assert max(for_max) == pytest.approx(20.0) and len(for_max) == 4


def test_the_readers_take_the_suites_own_output(bench):
    table = "| config | params | real ms | sim ms |\n|---|---|---|---|\n| ddp | 1M | 239.5 | 224.7 |\n"
    assert bench.read_distributed({"table": table}) == {"ddp": 224.7}
    real = {"results": {"ddp": {"iter_ms": [900.0, 300.0, 250.0, 240.0, 238.0, 242.0]}}}
    assert bench.read_distributed(real) == {"ddp": 240.0}  # median after the 3 warm-up steps
    ds = {"results": [{"config": {"name": "z2"}, "median_iter_ms": 200.0, "optimizer": "fused_adam"},
                      {"config": {"name": "z3"}, "median_iter_ms": 300.0, "optimizer": "torch_adam"}]}
    assert bench.read_deepspeed(ds) == {"z2": 200.0}  # runs with DeepSpeed's fused optimizers only
    nonllm = "| workload | GPUs | real | phantom |\n|---|---|---|---|\n| unet | 2 | 200.0 | 210.0 |\n"
    assert bench.read_nonllm({"table": nonllm}) == {"unet x2": 210.0}


def test_every_results_file_carries_its_provenance(bench):
    files = sorted((REPO / "bench" / "results").glob("*/*.json"))
    assert len(files) > 50
    for f in files:
        d = json.loads(f.read_text())
        assert d["suite"] == f.parent.name and d["suite"] in bench.BY_NAME
        assert d["kind"] in ("real", "sim") and d["rows"]
        assert d["device"] and d["date"] and isinstance(d["software"], dict) and d["command"]
        if d["kind"] == "real":
            assert "torch" in d["software"] and "driver" in d["software"]
        assert d["setup"] in {s.tag for s in bench.BY_NAME[d["suite"]].setups}


def test_the_report_regenerates_the_committed_readme(bench, tmp_path, monkeypatch):
    out = tmp_path / "README.md"
    monkeypatch.setattr(sys, "argv", ["bench.py", "report", "--out", str(out)])
    bench.main()
    committed = (REPO / "bench" / "README.md").read_text()
    assert out.read_text() == committed, "bench/README.md is stale: run `python bench/bench.py report`"
    # a summary and a short table per setup: about 25 lines per suite, 12 suites
    assert len(committed.splitlines()) <= 320


def test_the_accuracy_table_goes_between_the_markers_and_nowhere_else(bench, tmp_path):
    readme = tmp_path / "README.md"
    readme.write_text(f"# x\n\nbefore\n{bench.BEGIN}\nold table\n{bench.END}\nafter\n")
    bench.write_accuracy_table(readme)
    text = readme.read_text()
    assert text.startswith("# x\n\nbefore\n" + bench.BEGIN + "\n| workload |") and text.endswith(bench.END + "\nafter\n")
    assert "old table" not in text
    rows = text.split(bench.BEGIN)[1].split(bench.END)[0].strip().splitlines()[2:]
    assert len(rows) == len([s for s in bench.SUITES if bench.suite_summary(s)])  # one row per suite
    assert all("](bench/README.md#" in r for r in rows)
    bench.write_accuracy_table(readme)
    assert readme.read_text() == text  # idempotent
    readme.write_text("no markers\n")
    with pytest.raises(SystemExit):
        bench.write_accuracy_table(readme)


def test_the_readme_accuracy_table_is_current(bench, tmp_path):
    readme = tmp_path / "README.md"
    readme.write_text((REPO / "README.md").read_text())
    bench.write_accuracy_table(readme)
    assert readme.read_text() == (REPO / "README.md").read_text(), \
        "README.md's accuracy table is stale: run `python bench/bench.py report --readme README.md`"


def _phantom_imports(path: Path) -> list[tuple[int, str, list[str]]]:
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.level == 0 and (node.module or "").startswith("phantom"):
            found.append((node.lineno, node.module, [a.name for a in node.names]))
        elif isinstance(node, ast.Import):
            found += [(node.lineno, a.name, []) for a in node.names if a.name.startswith("phantom")]
    return found


def test_bench_scripts_import_only_what_phantom_has():
    """A module or name phantom moved or renamed breaks a bench script only when it runs on a
    lent GPU: caught here instead."""
    missing = []
    for path in sorted((REPO / "bench").rglob("*.py")):
        for line, module, names in _phantom_imports(path):
            try:
                imported = importlib.import_module(module)
            except ImportError as e:
                missing.append(f"{path.relative_to(REPO)}:{line}: {module} ({e})")
                continue
            for name in names:
                if not hasattr(imported, name) and importlib.util.find_spec(f"{module}.{name}") is None:
                    missing.append(f"{path.relative_to(REPO)}:{line}: {module}.{name}")
    assert missing == []


def test_a_sim_run_replaces_the_rows_an_older_phantom_simulated(bench, tmp_path, monkeypatch):
    monkeypatch.setattr(bench, "RESULTS", tmp_path)
    suite = bench.BY_NAME["single_gpu"]
    setup = suite.setups[0]

    def write(rows, commit):
        return bench.write_result(suite, setup, "sim", rows, "phantom", {"phantom": commit}, "cmd", None)

    old_full = write({"a": 1.0, "b": 2.0}, "old")
    old_a = write({"a": 1.5}, "old")
    same = write({"a": 1.1}, "new")  # a repeat run of this commit: pooled, kept
    assert bench.supersede(suite, setup, {"a"}, "new") == [old_full.name, old_a.name]
    assert bench.load(old_full)["rows"] == {"b": 2.0}  # the rows this run did not simulate stay
    assert not old_a.exists() and bench.load(same)["rows"] == {"a": 1.1}
