"""bench/ground_truth_spread.py: the least error one prediction can have against several real
samples, and the committed samples it reads."""
import importlib.util
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[1] / "bench"


@pytest.fixture(scope="module")
def spread():
    spec = importlib.util.spec_from_file_location("ground_truth_spread", BENCH / "ground_truth_spread.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclass looks its module up while being built
    spec.loader.exec_module(module)
    return module


def test_the_floor_is_reached_by_one_value_and_no_value_does_better(spread):
    row = spread.Row(10, "nonllm", "unet x2", 12.0, "max", [(100.0, "a"), (150.0, "b"), (120.0, "c")])
    floor = row.floor_pct()
    assert floor == pytest.approx(20.0)  # (150 - 100) / (150 + 100)
    best = 2 * 150 * 100 / 250  # 120: 20% above 100 and 20% below 150
    assert max(abs(best / m - 1) for m, _ in row.samples) * 100 == pytest.approx(floor)
    for x in (110.0, 119.0, 121.0, 130.0):
        assert max(abs(x / m - 1) for m, _ in row.samples) * 100 > floor
    assert row.spread_pct() == pytest.approx(50.0)


def test_every_listed_sample_file_is_committed_and_read(spread):
    listed = (spread.DISTRIBUTED_H200 + spread.DEEPSPEED_H200 + spread.MEGATRON_H200
              + spread.NONLLM_H200 + spread.UNET_LOGS_H200)
    assert [rel for rel in listed if not (spread.DATA / rel).exists()] == []
    rows = {(r.suite, r.name): r for r in spread.collect()}
    # every acceptance row of the four suites is there, the host-bound ones with several samples
    assert len(rows[("distributed", "tp-3b-s2k")].samples) == 4
    assert len(rows[("nonllm", "unet x2")].samples) == 7
    assert len(rows[("megatron", "tp2-sp")].samples) == 10
    assert len(rows[("deepspeed", "z2-1b")].samples) == 4
    # DeepSpeed rows are FusedAdam runs only, as simulated
    assert len(rows[("deepspeed", "z3-1b")].samples) == 7
    assert len(rows[("deepspeed", "z3-3b-ac")].samples) == 3


def test_simulated_runs_are_read_from_the_suites_outputs(spread):
    runs = sorted((BENCH / "data" / "session38").glob("sim_suites*/"))
    assert runs, "the committed session-38 runs"
    sims = spread.simulated(runs[0])
    assert {suite for suite, _ in sims} == {"distributed", "deepspeed", "megatron", "nonllm"}
    assert sims[("distributed", "ddp-1b-s2k")] > 0 and sims[("nonllm", "unet x2")] > 0
    text = spread.report(runs)
    assert "against the real median" in text and "| 10 | unet x2 |" in text


def test_collective_sweeps_are_compared_by_issue_4s_size_ranges(spread):
    sims = sorted((BENCH / "data" / "session38" / "collectives").glob("sim_collectives_h200x2_r*.json"))
    assert len(sims) == 3
    lines = "\n".join(spread.collectives(sims))
    assert "from 1 MiB: mean |error|" in lines and "below 1 MiB: mean |error|" in lines
    times = spread.collective_times(spread.DATA / spread.COLLECTIVES_H200[2])  # a full sweep
    assert all(us > 0 for us in times.values()) and len(times) == 114
