"""bench/host_speed_curve.py: real host-bound samples placed at their hosts' pace, and phantom's
curve read at that pace."""
import importlib.util
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[1] / "bench"


@pytest.fixture(scope="module")
def curve():
    sys.path.insert(0, str(BENCH))  # its imports of the other bench modules
    try:
        spec = importlib.util.spec_from_file_location("host_speed_curve", BENCH / "host_speed_curve.py")
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
    finally:
        sys.path.remove(str(BENCH))
    return module


def _points(*xy, default=None):
    pts = [{"pace_us": x, "ms": y, "default": False} for x, y in xy]
    return pts + ([{"pace_us": default[0], "ms": default[1], "default": True}] if default else [])


def test_the_curve_is_read_between_its_nearest_paces_and_along_its_end_segments(curve):
    pts = _points((500, 200.0), (800, 300.0), (1100, 420.0), default=(905, 999.0))
    assert curve.interpolate(pts, 650) == pytest.approx(250.0)
    assert curve.interpolate(pts, 800) == pytest.approx(300.0)
    assert curve.interpolate(pts, 950) == pytest.approx(360.0)
    assert curve.interpolate(pts, 400) == pytest.approx(200.0 - 100 / 3)  # the first segment's slope
    assert curve.interpolate(pts, 1250) == pytest.approx(480.0)  # the last one's
    assert curve.interpolate(_points((500, 1.0)), 600) is None  # one pace is no curve


def test_real_samples_carry_the_pace_of_the_reference_steps_around_them(curve):
    points = curve.real_points(["z3-1b", "z3-3b-ac"])
    one_gpu = [p for p in points if p["gpus"] == 1 and p["config"] == "z3-1b"]
    # two rounds on one lent H200, at their call's four reference steps averaged ...
    rounds = [p for p in one_gpu if "zero3_1gpu_real" in p["source"]]
    assert sorted(p["ms"] for p in rounds) == [352.27, 372.54]
    assert {round(p["pace_us"]) for p in rounds} == {956}
    # ... and four single runs, each at the two reference steps just before and after it
    paced = {p["source"].rsplit("/", 1)[1]: p for p in one_gpu if "paced" in p["source"]}
    assert len(paced) == 4
    folder = curve.DATA / "session43" / "device_zero3_paced_h200"
    before, after = (curve._reference_us(folder / f"host_reference_{k}.json") for k in (2, 3))
    assert paced["paced_3_z3-1b.json"]["pace_us"] == pytest.approx((before + after) / 2)
    assert paced["paced_3_z3-1b.json"]["ms"] == 297.5
    two_gpu = [p for p in points if p["gpus"] == 2 and p["config"] == "z3-1b"]
    assert len(two_gpu) == 7  # every committed FusedAdam sample, as ground_truth_spread.py reads
    assert sum(p["pace_us"] is not None for p in two_gpu) == 6  # the first call timed no reference


def test_the_table_sets_each_sample_against_the_curve_at_its_pace(curve):
    curves = {"z3-1b x2": _points((600, 250.0), (900, 325.0), default=(905, 330.0))}
    reals = [{"config": "z3-1b", "gpus": 2, "ms": 300.0, "pace_us": 750.0, "source": "a.json"},
             {"config": "z3-1b", "gpus": 2, "ms": 250.0, "pace_us": None, "source": "b.json"}]
    text = "\n".join(curve.tables(curves, reals))
    assert "| z3-1b | 2 | 300.0 | 750 | 287.5 | -4.2% | `a.json` |" in text
    assert "| z3-1b | 2 | 250.0 | - | - | - | `b.json` |" in text
    assert "z3-1b x2: mean error -4.2%" in text and "905*: 330.0" in text
