"""`phantom sweep`: specs and their errors, points, commands, ranking, and real sweeps end to end."""
from __future__ import annotations

import json
import sys
import textwrap
from pathlib import Path

import pytest

from conftest import REPO, run_phantom
from phantom.sweep import expr
from phantom.sweep.results import rank, result_from_report
from phantom.sweep.spec import (Parameter, SweepSpec, SweepSpecError, load_spec, point_run,
                                points, resolve)


def write_spec(tmp_path: Path, body: str) -> Path:
    path = tmp_path / "s.toml"
    path.write_text(textwrap.dedent(body))
    return path


# -- expressions and points ---------------------------------------------------------------------
def test_expressions_compute_and_refuse_code():
    tree = expr.parse("world_size // (tp * pp) if tp in [1, 2] else min(tp, 3)")
    assert expr.evaluate(tree, {"world_size": 64, "tp": 2, "pp": 4}) == 8
    assert expr.evaluate(tree, {"world_size": 64, "tp": 8, "pp": 4}) == 3
    assert expr.names(tree) == {"world_size", "tp", "pp"}
    for bad in ("__import__('os')", "x.y", "[i for i in x]", "open('f')", "lambda: 1"):
        with pytest.raises(expr.ExprError):
            expr.parse(bad)


def test_points_follow_constraints_and_derive_values():
    spec = SweepSpec(target=["t.py"], world_size=8, nnodes=1, nproc_per_node=8, parameters=[
        Parameter("tp", values=[1, 2, 4, 8, 3], arg="--tp"),
        Parameter("pp", values=[1, 2], arg="--pp"),
        Parameter("dp", expr="world_size // (tp * pp)", arg="--dp"),
    ], constraints=["world_size % (tp * pp) == 0"])
    valid, skipped = points(spec)
    assert [(p.get("tp"), p.get("pp"), p.get("dp")) for p in valid] == [
        (1, 1, 8), (1, 2, 4), (2, 1, 4), (2, 2, 2), (4, 1, 2), (4, 2, 1), (8, 1, 1)]
    assert len(skipped) == 3 and all(s.reason == "not world_size % (tp * pp) == 0" for s in skipped)


def test_a_point_command_replaces_appends_and_edits_config(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    Path("ds.json").write_text(json.dumps({"zero_optimization": {"stage": 2}, "train_micro_batch_size_per_gpu": 4}))
    spec = SweepSpec(target=["train.py", "--tp=1", "--ac", "--deepspeed_config", "ds.json",
                             "activation-checkpoint:selective"], parameters=[
        Parameter("tp", values=[2], arg="--tp"),
        Parameter("ac", values=[False], arg="--ac"),
        Parameter("mode", values=["full"], append="activation-checkpoint:{}"),
        Parameter("zero", values=[3], config="ds.json:zero_optimization.stage"),
        Parameter("recompute", values=["none"], arg="--recompute", omit="none"),
        Parameter("gpu", values=["H200"], option="--gpu"),
        Parameter("seed", values=[7], env="SEED"),
    ])
    (point,), _ = points(spec)
    run = point_run(spec, point, tmp_path / "p")
    copy = str(tmp_path / "p" / "ds.json")
    assert run.run_args == ["--gpu", "H200", "--", "train.py", "--deepspeed_config", copy, "--tp", "2",
                            "activation-checkpoint:full"]
    assert json.loads(run.files[copy]) == {"zero_optimization": {"stage": 3}, "train_micro_batch_size_per_gpu": 4}
    assert run.env == {"SEED": "7"}
    assert json.loads(Path("ds.json").read_text())["zero_optimization"]["stage"] == 2  # the user's file untouched


@pytest.mark.parametrize("body, message", [
    ('script = "x.py"\nmodule = "m"\n', "give exactly one"),
    ('script = "x.py"\n[[axis]]\nname = "tp"\n', "axis[0] (tp): missing `values`"),
    ('script = "x.py"\n[[axis]]\nname = "tp"\nvalues = []\n', "expected a non-empty list"),
    ('script = "x.py"\n[[axis]]\nname = "tp"\nvalues = [1]\narg = "--tp"\nenv = "TP"\n', "at most one of"),
    ('script = "x.py"\nbogus = 1\n', "unknown key"),
    ('script = "x.py"\nmfu_pattern = "mfu"\n[[axis]]\nname = "a"\nvalues = [1]\n', "needs a group"),
    ('script = "x.py"\n[[axis]]\nname = "a"\nvalues = [1]\nconfig = "ds.json"\n', "FILE:dotted.key"),
    ('script = "x.py\n', "not valid TOML"),
])
def test_bad_spec_files_name_the_field(tmp_path, body, message):
    with pytest.raises(SweepSpecError, match="s.toml") as info:
        load_spec(write_spec(tmp_path, body))
    assert message in str(info.value)


def test_resolve_checks_names_and_the_command(tmp_path):
    script = tmp_path / "t.py"
    script.write_text("")
    spec = SweepSpec(target=[str(script)], run_options=["--cluster", "h100-ib", "--nnodes", "2"],
                     parameters=[Parameter("tp", values=[1, 2]),
                                 Parameter("dp", expr="world_size // tp // pq")])
    with pytest.raises(SweepSpecError, match="unknown name pq"):
        resolve(spec)
    spec.parameters[1].expr = "world_size // tp"
    resolve(spec)
    assert (spec.world_size, spec.nnodes, spec.nproc_per_node, spec.gpu) == (16, 2, 8, "H100")
    spec.run_options = ["--gpu", "H900"]
    with pytest.raises(SweepSpecError, match="H900"):
        resolve(spec)


def test_the_command_line_splits_sweep_and_run_options():
    from phantom.sweep.cli import split_command

    ours, run, command = split_command(["spec.toml", "--jobs", "3", "--cluster", "h100-ib", "--nnodes=2",
                                        "--quiet", "--vary", "b=1,2", "--", "train.py", "--jobs", "9"])
    assert ours == ["spec.toml", "--jobs", "3", "--vary", "b=1,2"]
    assert run == ["--cluster", "h100-ib", "--nnodes=2", "--quiet"]
    assert command == ["train.py", "--jobs", "9"]


# -- results -------------------------------------------------------------------------------------
def _report(times, peak=10 * 2**30, stopped=None):
    return {"iterations": {"times_ms": times},
            "memory": {"peak_allocated_bytes": peak, "peak_reserved_bytes": peak, "capacity_bytes": 80 * 2**30},
            "simulation": {"stopped": stopped}}


def test_results_rank_finished_then_stopped_oom_failed():
    oom_text = ("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 4.00 GiB. GPU 0 has a total "
                "capacity of 79.19 GiB of which 1.50 GiB is free. Of the allocated ...")
    make = lambda pid, report, err="", code=0: result_from_report(  # noqa: E731
        pid, {"p": pid}, "cmd", report, "step | mfu: 41.50% |", err, code, 8192.0, 2, r"mfu: ([\d.]+)%")
    fast = make("fast", _report([50.0, 20.0, 22.0, 21.0]))
    slow = make("slow", _report([50.0, 40.0, 40.0]))
    stopped = make("stopped", _report([50.0, 90.0], stopped="iteration 1 took 90 ms"), "", 1)
    oom = make("oom", _report([]), oom_text, 1)
    failed = make("failed", None, "Traceback...\nValueError: bad layout", 1)
    assert fast.iteration_ms == 21.0 and fast.tokens_per_s_per_gpu == pytest.approx(8192 / 0.021 / 2)
    assert fast.mfu == pytest.approx(0.415)
    assert oom.status == "oom" and oom.shortfall_bytes == int(2.5 * 2**30)
    assert failed.status == "failed" and failed.message.endswith("ValueError: bad layout")
    ranked = rank([failed, oom, stopped, slow, fast], "tokens_per_s_per_gpu")
    assert [r.id for r in ranked] == ["fast", "slow", "stopped", "oom", "failed"]


# -- end to end ------------------------------------------------------------------------------------
def _sweep(args, tmp_path, timeout=400):
    return run_phantom(["sweep", *args], cwd=REPO, timeout=timeout)


def test_sweep_ranks_real_runs_and_resumes_from_its_cache(tmp_path):
    """A 2 x 2 sweep of gpt_train.py: the ranking is the one each point's own `phantom run`
    report gives (tokens / iteration time); a rerun reads every point from the cache, and
    `--rerun` replays each point's own saved host profile to the same result."""
    out = tmp_path / "sw"
    args = ["--out", str(out), "--jobs", "2", "--prune-factor", "0", "--gpu", "H100",
            "--vary", "batch-size=1,4", "--vary", "ac=false,true",
            "--tokens-per-iteration", "batch_size * 256", "--",
            "examples/gpt_train.py", "--preset", "gpt2-124m", "--seq-len", "256", "--steps", "4"]
    first = _sweep(args, tmp_path)
    assert first.returncode == 0, first.stderr[-3000:]
    doc = json.loads((out / "sweep.json").read_text())
    assert doc["schema"] == "phantom.sweep/1" and len(doc["points"]) == 4
    assert all(p["status"] == "ok" for p in doc["points"])
    for p in doc["points"]:  # each row is what that point's own run report says
        report = json.loads((out / "points" / p["id"] / "report.json").read_text())
        steady = report["iterations"]["times_ms"][1:]
        assert p["iteration_ms"] == pytest.approx(sorted(steady)[len(steady) // 2])
        assert p["tokens_per_s_per_gpu"] == pytest.approx(p["values"]["batch_size"] * 256 / p["iteration_ms"] * 1e3)
        assert report["simulation"]["host_time"]["mode"] == "measured"  # the point's first run
        assert (out / "points" / p["id"] / "host-profile" / "rank0.npz").exists()
    speeds = [p["tokens_per_s_per_gpu"] for p in doc["points"]]
    assert speeds == sorted(speeds, reverse=True) and doc["best"] == doc["points"][0]["id"]
    # recomputing a layer's activations costs time: each batch is faster without checkpointing
    by = {(p["values"]["batch_size"], p["values"]["ac"]): p for p in doc["points"]}
    for b in (1, 4):
        assert by[b, False]["tokens_per_s_per_gpu"] > by[b, True]["tokens_per_s_per_gpu"]
        assert by[b, False]["peak_reserved_bytes"] >= by[b, True]["peak_reserved_bytes"]
    assert "best: batch_size=" in first.stdout and (out / "sweep.html").stat().st_size > 100_000
    again = _sweep(args, tmp_path)
    assert again.returncode == 0 and again.stderr.count("(cached)") == 4, again.stderr[-2000:]
    cached = json.loads((out / "sweep.json").read_text())
    assert [(p["id"], p["iteration_ms"]) for p in cached["points"]] == \
        [(p["id"], p["iteration_ms"]) for p in doc["points"]]
    replayed = _sweep(["--rerun", *args], tmp_path)
    assert replayed.returncode == 0 and "(cached)" not in replayed.stderr
    redo = {p["id"]: p for p in json.loads((out / "sweep.json").read_text())["points"]}
    for p in doc["points"]:
        report = json.loads((out / "points" / p["id"] / "report.json").read_text())
        assert report["simulation"]["host_time"]["mode"] == "counted"
        assert report["simulation"]["host_time"]["replay"]["departed"] == 0
        assert redo[p["id"]]["iteration_ms"] == pytest.approx(p["iteration_ms"], rel=1e-9)


def test_sweep_reports_out_of_memory_with_its_shortfall_and_prunes(tmp_path):
    """Batch 8 runs first and sets the best; batch 1 of this small model, bound by the host's
    launches, trains far fewer tokens per second and is stopped once it is 1.5x behind; batch 64 runs out of the
    12 GiB the run is given, and says by how much at least."""
    out = tmp_path / "sw"
    result = _sweep(["--out", str(out), "--jobs", "1", "--gpu", "H100",
                     "--vram-gib", "12", "--vary", "batch-size=8,1,64",
                     "--tokens-per-iteration", "batch_size * 1024", "--prune-factor", "1.5", "--",
                     "examples/gpt_train.py", "--preset", "gpt2-124m", "--steps", "4"], tmp_path)
    assert result.returncode == 0, result.stderr[-2000:]
    doc = json.loads((out / "sweep.json").read_text())
    by = {p["values"]["batch_size"]: p for p in doc["points"]}
    assert [p["values"]["batch_size"] for p in doc["points"]] == [8, 1, 64]  # ok, stopped, oom
    assert by[8]["status"] == "ok"
    stopped = by[1]
    assert stopped["status"] == "stopped", stopped
    report = json.loads((out / "points" / stopped["id"] / "report.json").read_text())
    assert report["simulation"]["stopped_above_ms"] > 1.5 * by[8]["iteration_ms"] / 8 * 0.999
    assert stopped["tokens_per_s_per_gpu"] < by[8]["tokens_per_s_per_gpu"] / 1.5
    assert by[64]["status"] == "oom" and by[64]["shortfall_bytes"] > 0
    assert "OOM, short >=" in result.stdout and "stopped (dominated)" in result.stdout


def test_an_interrupted_sweep_ends_its_points_and_keeps_none_half_done(tmp_path):
    """Ctrl-C ends the sweep and every process it started, and the interrupted point leaves no
    result behind for a rerun to mistake for its own."""
    import signal
    import subprocess
    import time

    from processes import assert_no_leftovers, leftovers

    out = tmp_path / "sw"
    args = [sys.executable, "-m", "phantom.cli", "sweep", "--out", str(out), "--jobs", "1",
            "--host-time", "off", "--gpu", "H100", "--vary", "batch-size=1,2", "--",
            str(REPO / "examples" / "gpt_train.py"), "--preset", "gpt2-124m", "--steps", "400"]
    proc = subprocess.Popen(args, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, start_new_session=True)
    deadline = time.monotonic() + 120
    while not list(out.glob("points/*")) and time.monotonic() < deadline:
        time.sleep(0.2)  # a point's directory: its run is starting
    time.sleep(3)
    assert proc.poll() is None and leftovers(tmp_path)  # the sweep and its point's run are alive
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err[-2000:]
    assert "a rerun resumes" in err
    assert not list(out.glob("points/*/result.json"))
    assert_no_leftovers(tmp_path)


def test_sweep_errors_are_one_clear_line(tmp_path):
    bad = write_spec(tmp_path, 'script = "examples/gpt_train.py"\n[[axis]]\nname = "b"\nvalues = [1]\n'
                               '[[derived]]\nname = "c"\nexpr = "b // nope"\n')
    result = _sweep([str(bad)], tmp_path, timeout=60)
    assert result.returncode == 2
    assert result.stderr.strip().splitlines() == [
        f"phantom sweep: error: {bad}: derived 'c': unknown name nope (known here: b, nnodes, "
        "nproc_per_node, world_size)"]
    none = _sweep(["--vary", "batch-size=1", "--constraint", "batch_size > 1", "--",
                   "examples/gpt_train.py"], tmp_path, timeout=60)
    assert none.returncode == 2 and "no point passes the constraints" in none.stderr


@pytest.mark.parametrize("framework, command, expected", [
    ("megatron", ["examples/megatron/pretrain_gpt.py", "--preset", "tiny", "--num-layers", "4",
                  "--train-iters", "3", "--global-batch-size", "8", "--disable-gloo-process-groups"],
     {"tp", "pp", "micro_batch", "recompute"}),
    ("deepspeed", ["examples/deepspeed/train.py", "--deepspeed_config", "examples/deepspeed/zero2.json",
                   "--model", "tiny", "--steps", "3", "--warmup", "1", "--seq-len", "128"],
     {"zero", "micro_batch", "grad_accum"}),
])
def test_framework_axis_sets_run_end_to_end(tmp_path, framework, command, expected):
    """The built-in axes of Megatron-Core and DeepSpeed on a small model, 2 ranks: every point
    runs (or fails with its reason), and the layouts differ where they must."""
    out = tmp_path / "sw"
    listing = _sweep(["--list", "--framework", framework, "--nproc-per-node", "2", "--gpu", "H100",
                      "--", *command], tmp_path, timeout=120)
    assert listing.returncode == 0, listing.stderr[-2000:]
    wanted = {"megatron": "tp=2 pp=1 micro_batch=1 recompute=none",
              "deepspeed": "zero=3 micro_batch=1"}[framework]
    line = next(x for x in listing.stdout.splitlines() if x.strip().startswith(wanted))
    constraint = {"megatron": ["--constraint", "micro_batch == 1"], "deepspeed": []}[framework]
    result = _sweep(["--out", str(out), "--jobs", "2", "--host-time", "off", "--prune-factor", "0",
                     "--framework", framework,
                     "--nproc-per-node", "2", "--gpu", "H100", *constraint, "--", *command], tmp_path)
    doc = json.loads((out / "sweep.json").read_text())
    assert expected <= set(doc["points"][0]["values"]), line
    assert all(p["status"] == "ok" for p in doc["points"]), \
        [(p["values"], p["status"], p["message"]) for p in doc["points"]]
    assert result.returncode == 0
    peak = {tuple(sorted(p["values"].items())): p["peak_allocated_bytes"] for p in doc["points"]}
    if framework == "deepspeed":  # ZeRO-3 shards the parameters ZeRO-1 and -2 keep whole
        assert len(doc["points"]) == 9
        z = {(p["values"]["zero"], p["values"]["micro_batch"]): p["peak_allocated_bytes"] for p in doc["points"]}
        assert all(z[3, mb] < z[1, mb] for mb in (1, 2, 4))
        assert all(p["values"]["grad_accum"] * p["values"]["micro_batch"] * 2 == 8 for p in doc["points"])
    else:  # TP 2 halves the weights each rank keeps; recomputing keeps fewer activations
        assert len(doc["points"]) == 9  # (tp, pp) in (1, 1), (2, 1), (1, 2) on 2 ranks
        by = {(p["values"]["tp"], p["values"]["pp"], p["values"]["recompute"]): p for p in doc["points"]}
        assert by[2, 1, "none"]["peak_allocated_bytes"] < by[1, 1, "none"]["peak_allocated_bytes"]
        assert by[1, 1, "full"]["peak_allocated_bytes"] < by[1, 1, "none"]["peak_allocated_bytes"]
        assert by[1, 1, "full"]["iteration_ms"] > by[1, 1, "none"]["iteration_ms"]
    assert len(peak) == len(doc["points"])


def test_the_torchtitan_set_reads_the_jobs_config(tmp_path):
    """The torchtitan axes on 2 nodes of 8: the job's global batch (local batch 2 x 16 ranks)
    stays fixed, FSDP takes the ranks TP and PP leave, a pipeline takes the whole local batch."""
    listing = _sweep(["--list", "--framework", "torchtitan", "--cluster", "h100-ib", "--nnodes", "2",
                      "--", "-m", "torchtitan.train", "--module", "examples.torchtitan",
                      "--config", "llama3_8b"], tmp_path, timeout=120)
    assert listing.returncode == 0, listing.stderr[-2000:]
    listed, ruled_out = listing.stdout.split("combinations ruled out:")
    lines = [x.strip() for x in listed.splitlines() if x.startswith("  tp=")]
    # tp 1-8 x pp 1-4 x three AC modes, less TP 8 x PP 4 (32 ranks of 16)
    assert len(lines) == 4 * 3 * 3 - 3 and ruled_out.count("tp=8 pp=4") == 3
    for line in lines:
        v = dict(kv.split("=") for kv in line.split())
        tp, pp, dp, local = int(v["tp"]), int(v["pp"]), int(v["dp_shard"]), int(v["local_batch"])
        assert tp * pp * dp == 16 and v["global_batch"] == "32"
        assert local == (32 // dp if pp > 1 else 2)


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-q"]))
