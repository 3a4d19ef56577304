"""`phantom run --executor ray`: rank processes as Ray actors on a local Ray cluster that the
test starts (`ray start --head`) and stops."""
import re
import subprocess
from pathlib import Path

import pytest

import processes
from conftest import run_phantom

ray = pytest.importorskip("ray", reason="Ray is not installed (pip install 'phantom-sim[ray]')")

REPO = Path(__file__).resolve().parent.parent
# Host time out (--host-time off): both runs must simulate the same thing; what this
# machine's Python timing adds would differ between any two runs. A Ray actor's CPU time
# includes Ray's own threads: at 1e-4, their hundreds of ms moved a 3 ms step by 2% (seen).
# Ranks 0 and 8 run (one per node, two Ray actors); the other 14 are represented. The same
# job with all 16 ranks as actors (--ranks all) is not tested here: it
# takes minutes of Ray worker start-up on a 2-core CI machine.
ARGS = ["--cluster", "h100-ib", "--nnodes", "2", "--ranks", "0,8", "--host-time", "off",
        str(REPO / "examples/llama_train.py"), "--preset", "debug", "--seq-len", "256",
        "--local-batch-size", "1", "--steps", "3", "--warmup", "1"]


@pytest.fixture(scope="module")
def ray_cluster():
    with processes.ray_cluster() as cluster:
        yield cluster


def _phantom(args: list[str], env: dict, cwd: Path) -> subprocess.CompletedProcess:
    return run_phantom(["run", *args], cwd=cwd, env=env)


def _summary(out: str) -> dict[str, float]:
    line = next(l for l in out.splitlines() if l.startswith("summary:"))
    return {k: float(v) for k, v in re.findall(r"(\w+)=([\d.]+)", line)}


def test_sixteen_rank_fsdp_on_ray_matches_the_local_executor(ray_cluster, tmp_path):
    address, env = ray_cluster
    on_ray = _phantom(["--executor", "ray", "--ray-address", address, "--log-dir",
                       str(tmp_path / "logs"), *ARGS], env, tmp_path)
    assert on_ray.returncode == 0, on_ray.stderr[-4000:]
    local = _phantom(ARGS, env, tmp_path)
    assert local.returncode == 0, local.stderr[-4000:]
    a, b = _summary(local.stdout), _summary(on_ray.stdout)
    assert b["world_size"] == 16
    assert abs(b["tokens_per_s_per_gpu"] - a["tokens_per_s_per_gpu"]) <= 0.01 * a["tokens_per_s_per_gpu"]
    assert b["peak_alloc_gib"] == a["peak_alloc_gib"]
    # ranks 0 and 8 ran in actors; rank 0's output came back through Ray into its log
    logs = tmp_path / "logs"
    assert sorted(p.name for p in logs.iterdir()) == ["rank0.log", "rank8.log"]
    assert "2 of 16 ranks ran" in on_ray.stderr
    assert "summary:" in (logs / "rank0.log").read_text()


def test_a_failing_rank_on_ray_ends_the_run(ray_cluster, tmp_path):
    address, env = ray_cluster
    script = tmp_path / "fail.py"
    script.write_text("import torch.distributed as dist\ndist.init_process_group('nccl')\n"
                      "if dist.get_rank() == 1:\n    raise ValueError('rank one broke')\n"
                      "dist.barrier()\n")
    res = _phantom(["--executor", "ray", "--ray-address", address, "--nproc-per-node", "2",
                    str(script)], env, tmp_path)
    assert res.returncode != 0
    assert "rank 1 failed" in res.stderr and "rank one broke" in res.stderr


def test_a_sweep_on_ray_brings_back_what_a_local_rerun_replays(ray_cluster, tmp_path):
    """`phantom sweep --executor ray`: each point a Ray task; the host profile a point saves on
    its node comes back, so a local `--rerun` replays it to the same iteration times."""
    import json

    address, env = ray_cluster
    out = tmp_path / "sw"
    args = ["sweep", "--out", str(out), "--jobs", "2", "--prune-factor", "0", "--gpu", "H100",
            "--vary", "batch-size=1,4", "--tokens-per-iteration", "batch_size * 256", "--",
            str(REPO / "examples/gpt_train.py"), "--preset", "gpt2-124m", "--seq-len", "256",
            "--steps", "4"]
    on_ray = run_phantom(["sweep", "--ray-address", address, *args[1:]], cwd=tmp_path, env=env)
    assert on_ray.returncode == 0, on_ray.stderr[-3000:]
    first = {p["id"]: p for p in json.loads((out / "sweep.json").read_text())["points"]}
    assert len(first) == 2 and all(p["status"] == "ok" for p in first.values())
    for pid in first:
        assert (out / "points" / pid / "host-profile" / "rank0.npz").exists()
    local = run_phantom([*args[:1], "--rerun", *args[1:]], cwd=tmp_path, env=env)
    assert local.returncode == 0, local.stderr[-3000:]
    for p in json.loads((out / "sweep.json").read_text())["points"]:
        assert p["iteration_ms"] == pytest.approx(first[p["id"]]["iteration_ms"], rel=1e-9)
