"""Memory at the peak by category, the iteration breakdown, link usage and the report schema."""
from __future__ import annotations

import json
import random
from pathlib import Path

import pytest

from phantom.report.recorder import CATEGORIES, Breakdown, PeakTracker
from report_runs import TRAIN_PARAM_BYTES, fsdp_run, single_run

SCHEMA = Path(__file__).resolve().parents[1] / "phantom" / "report" / "run.schema.json"


def _report(d: Path) -> dict:
    return json.loads((d / "report.json").read_text())


# -- exact peak set, by brute force -----------------------------------------------------------
def test_peak_tracker_matches_a_brute_force_replay():
    rng = random.Random(7)
    for _ in range(20):
        t = PeakTracker()
        live, history = [], []  # history: the live set after every event
        for step in range(400):
            if live and rng.random() < 0.45:
                a = live.pop(rng.randrange(len(live)))
                t.free(a)
            else:
                a = t.malloc(rng.choice([512, 4096, 2**20, 3 * 2**20]), 0, "op", float(step))
                live.append(a)
            if rng.random() < 0.01:
                t.reset_peak(float(step), 0)
                history = []  # the peak restarts here
            history.append((sum(x.size for x in live), set(live)))
        if not history:
            continue
        best = max(h[0] for h in history)
        assert t.peak == best
        got = t.at_peak()
        assert sum(a.size for a in got) == best
        # the set is one that actually was live when memory first reached the peak
        first = next(h[1] for h in history if h[0] == best)
        assert set(got) == first


def test_breakdown_parts_sum_to_the_window():
    b = Breakdown()
    b.kernel(0, 10, 0, "gemm")
    b.kernel(5, 30, 7, "comm")  # overlaps compute 5..10, exposed 10..30
    b.kernel(40, 50, 0, "gemm")
    b.mark(60)
    b.kernel(60, 70, 0, "gemm")
    b.kernel(55, 65, 7, "comm")  # launched after the step, partly inside the first window
    b.kernel(70, 80, 7, "comm_wait")  # an NCCL kernel waiting for a late peer...
    b.kernel(80, 85, 7, "comm")  # ...then moving data
    b.mark(100)
    b.finish()
    first, second = b.iterations
    assert first["compute_ms"] * 1e6 == pytest.approx(20)
    assert first["exposed_comm_ms"] * 1e6 == pytest.approx(25)  # 10..30 and 55..60
    assert first["idle_ms"] * 1e6 == pytest.approx(15)
    for it in b.iterations:
        assert it["compute_ms"] + it["exposed_comm_ms"] + it["idle_ms"] == pytest.approx(it["time_ms"])
    assert first["exposed_comm_wait_ms"] == 0
    assert second["compute_ms"] * 1e6 == pytest.approx(10)
    assert second["exposed_comm_ms"] * 1e6 == pytest.approx(15)
    assert second["exposed_comm_wait_ms"] * 1e6 == pytest.approx(10)
    assert second["idle_ms"] * 1e6 == pytest.approx(15)


def test_link_busy_time_is_a_union():
    from phantom.network.usage import _Busy

    rng = random.Random(3)
    busy, covered = _Busy(), set()
    for _ in range(300):
        s = rng.randrange(0, 1000)
        e = s + rng.randrange(1, 30)
        busy.add(float(s), float(e))
        covered.update(range(s, e))
    assert busy.total() == pytest.approx(len(covered))
    assert all(a < b for a, b in zip(busy.ends, busy.starts[1:]))


# -- end to end ------------------------------------------------------------------------------
def test_memory_at_peak_sums_to_the_reported_peak_single_rank():
    report = _report(single_run()[0])
    mem = report["memory"]
    peak = mem["at_peak"]
    assert peak["unattributed_bytes"] == 0
    assert sum(peak["by_category"].values()) == mem["peak_allocated_bytes"] == peak["bytes"]
    assert set(peak["by_category"]) == set(CATEGORIES)
    # The peak is inside the first AdamW step (foreach's temporaries come on top), where the
    # model's parameters, every gradient and AdamW's two moments per parameter are all live:
    # exact sizes, as torch allocates them (TRAIN's blocks need no rounding).
    assert peak["by_category"]["parameters"] == TRAIN_PARAM_BYTES
    assert peak["by_category"]["gradients"] == TRAIN_PARAM_BYTES
    assert peak["by_category"]["optimizer_state"] == 2 * TRAIN_PARAM_BYTES
    assert peak["by_category"]["activations"] > 0
    rows = mem["over_time"]["rows"]
    assert max(r[2] for r in rows) == mem["peak_allocated_bytes"]  # the peak is never averaged away
    assert max(r[3] for r in rows) <= mem["peak_reserved_bytes"]


# fsdp_run's GPT-2 124M (12 blocks of 768, 50304-entry vocabulary tied to lm_head, 256
# positions, LayerNorms without bias) sharded on dim 0 over 2 ranks: every dim 0 is even, so
# no padding; each rank holds half of every parameter in fp32.
EMBD, LAYERS, VOCAB, POSITIONS = 768, 12, 50304, 256
BLOCK_PARAMS = 2 * EMBD + 3 * EMBD * EMBD + EMBD * EMBD + 2 * 4 * EMBD * EMBD  # norms, qkv, proj, MLP
ROOT_PARAMS = VOCAB * EMBD + POSITIONS * EMBD + EMBD  # wte (= lm_head), wpe, ln_f
SHARD_BYTES = (LAYERS * BLOCK_PARAMS + ROOT_PARAMS) // 2 * 4
ROOT_BF16_BYTES = ROOT_PARAMS * 2
LARGE_SHARDS = 1 + 4 * LAYERS  # shards of 1 MiB or more: wte's, and qkv, proj, fc, fc proj in a block


def test_memory_at_peak_sums_to_the_reported_peak_on_every_fsdp_rank():
    report = _report(fsdp_run())
    assert [r["rank"] for r in report["ranks"]] == [0, 1]
    for r in report["ranks"]:
        peak = r["memory"]["at_peak"]
        assert peak["unattributed_bytes"] == 0
        assert sum(peak["by_category"].values()) == r["memory"]["peak_allocated_bytes"]
        # At the peak (the loss's backward) a rank holds its fp32 shard of every parameter, its
        # AdamW moments for that shard, and the root's parameters gathered in bf16 (FSDP2 keeps
        # the root's unsharded after forward). Exact from the shapes; on top, allocator blocks
        # may carry an unsplit tail: PyTorch splits a large-pool block only when more than
        # 1 MiB (kSmallSize) would remain, so at most 1 MiB a tensor of 1 MiB or more.
        by = peak["by_category"]
        assert 2 * SHARD_BYTES <= by["optimizer_state"] <= 2 * (SHARD_BYTES + LARGE_SHARDS * 2**20)
        assert SHARD_BYTES + ROOT_BF16_BYTES <= by["parameters"]
        # ...and at most one block's bf16 parameters gathered ahead of its backward
        assert by["parameters"] <= SHARD_BYTES + ROOT_BF16_BYTES + BLOCK_PARAMS * 2 + LARGE_SHARDS * 2**20
        # the breakdown of each iteration adds up to its time
        for it in r["breakdown"]["iterations"]:
            assert it["compute_ms"] + it["exposed_comm_ms"] + it["idle_ms"] == pytest.approx(it["time_ms"])
        assert r["breakdown"]["steady_state"]["compute_ms"] > 0
        assert r["top_collectives"] and r["timeline_overview"]["tracks"]


def test_reset_peak_memory_stats_is_followed(run_script):
    proc, report = run_script("""
        import torch
        big = torch.empty(64 * 2**20, dtype=torch.uint8, device="cuda")
        del big
        torch.cuda.reset_peak_memory_stats()
        keep = [torch.empty(2**20, dtype=torch.uint8, device="cuda") for _ in range(3)]
        torch.cuda.synchronize()
    """, "--out", "rundir")
    assert proc.returncode == 0, proc.stderr
    peak = report["memory"]["at_peak"]
    assert report["memory"]["peak_allocated_bytes"] < 64 * 2**20
    assert peak["unattributed_bytes"] == 0 and peak["bytes"] == report["memory"]["peak_allocated_bytes"]


def test_reports_match_the_published_schema():
    jsonschema = pytest.importorskip("jsonschema", reason="jsonschema is in the test extra")
    schema = json.loads(SCHEMA.read_text())
    jsonschema.Draft202012Validator.check_schema(schema)
    out, _ = single_run()
    docs = [_report(out), _report(fsdp_run()),
            json.loads((fsdp_run() / "ranks" / "rank1.json").read_text())]
    for doc in docs:
        errors = [f"{list(e.path)}: {e.message}" for e in
                  jsonschema.Draft202012Validator(schema).iter_errors(doc)]
        assert errors == []
    net = docs[1]["network"]
    assert net["links"] and all(0 < l["busy_fraction"] <= 1 and l["bytes"] > 0 for l in net["links"])
    assert docs[1]["run"]["logs"] == ["logs/rank0.log", "logs/rank1.log"]
    assert "iter 0" in (fsdp_run() / "logs" / "rank0.log").read_text()
    config = json.loads((fsdp_run() / "config.json").read_text())
    assert config["config"]["nproc_per_node"] == 2
