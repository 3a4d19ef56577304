"""End-to-end: the shipped example scripts, unchanged, under `phantom run`.

The assertions are on what the scripts themselves print (their per-iteration lines and their
`summary:` line), checked against physics and against phantom's own report.
"""
from __future__ import annotations

import json
import re
import time

import pytest

from conftest import REPO, run_phantom

SUMMARY = re.compile(r"^summary: (.*)$", re.M)
ITER = re.compile(r"^iter (\d+) \| loss ([\d.]+) \| ([\d.]+) ms \| ([\d,]+) tok/s \| MFU ([\d.]+)% \| peak ([\d.]+) GiB$", re.M)


def _summary(stdout: str) -> dict[str, float]:
    match = SUMMARY.search(stdout)
    assert match, stdout
    fields = dict(kv.split("=") for kv in match.group(1).split())
    return {k: float(v.rstrip("M")) for k, v in fields.items()}


def _run_example(tmp_path, gpu: str, script: str, *args: str) -> tuple[dict, dict, str]:
    report = tmp_path / "report.json"
    proc = run_phantom(["run", "--gpu", gpu, "--report", str(report), str(REPO / script), *args],
                       cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return _summary(proc.stdout), json.loads(report.read_text()), proc.stdout


@pytest.mark.parametrize("ac", [False, True])
def test_gpt_training_script(tmp_path, ac):
    """bf16 autocast, SDPA, fused AdamW, clipping, with and without checkpointing."""
    args = ["--preset", "gpt2-124m", "--seq-len", "1024", "--batch-size", "4", "--steps", "4",
            "--warmup", "1"] + (["--ac"] if ac else [])
    summary, report, stdout = _run_example(tmp_path, "H100", "examples/gpt_train.py", *args)

    iters = ITER.findall(stdout)
    assert [int(i[0]) for i in iters] == [0, 1, 2, 3]
    assert all(float(i[1]) == 0.0 for i in iters)  # the loss read is the documented placeholder
    # 124M params in fp32 with AdamW: 16 bytes/param = 1.86 GiB before activations.
    assert 2.0 < summary["peak_alloc_gib"] < 8.0
    # 6*N*T flops per step at a plausible fraction of the H100's 989 TFLOP/s. A step this
    # small is host-bound, and host time measured on a loaded 2-core machine varies by 2x,
    # so the lower bound is loose.
    assert 0.02 < summary["mfu"] < 0.7
    # The script's own timing (perf_counter + synchronize) agrees with the simulated GPU.
    assert summary["median_iter_ms"] == pytest.approx(report["iterations"]["median_ms"], rel=0.15)
    assert report["iterations"]["count"] == 4
    ops = {o["op"] for o in report["top_ops"]}
    assert "_fused_adamw_.default" in ops or report["op_classes"]["optimizer"]["gpu_ms"] > 0
    assert any("cudnn_attention" in o for o in ops)  # the fused kernel torch picks on H100
    assert "gemm" in report["op_classes"] and "attention" in report["op_classes"]
    gpu_ms = sum(c["gpu_ms"] for c in report["op_classes"].values())
    test_gpt_training_script.results[ac] = dict(summary, gpu_ms=gpu_ms)


test_gpt_training_script.results = {}


def test_activation_checkpointing_trades_time_for_memory():
    results = test_gpt_training_script.results
    if len(results) < 2:
        pytest.skip("needs both parametrisations of test_gpt_training_script")
    assert results[True]["peak_alloc_gib"] < results[False]["peak_alloc_gib"]
    # The recomputed forward costs GPU time. (Not compared on the step time: these steps are
    # host-bound, and one loaded moment on this 2-core machine made a no-AC step 4x slow.)
    assert results[True]["gpu_ms"] > 1.05 * results[False]["gpu_ms"]


def test_compiled_gpt_does_less_gpu_work_and_keeps_less(tmp_path):
    """`--compile` (torch.compile of the whole model): Dynamo and AOTAutograd trace it, and
    Inductor-like kernels replace the pointwise chains, so the same step has less GPU time
    and a lower peak (the min-cut partition saves less), as on a GPU (9-25% faster,
    14-54% leaner on a real H200: bench/results/single_gpu/)."""
    args = ["--preset", "gpt2-124m", "--n-layer", "4", "--seq-len", "1024", "--batch-size", "16",
            "--steps", "3", "--warmup", "1"]
    eager, eager_report, _ = _run_example(tmp_path, "H100", "examples/gpt_train.py", *args)
    compiled, report, stdout = _run_example(tmp_path, "H100", "examples/gpt_train.py", *args, "--compile")
    assert "compile True" in stdout and len(ITER.findall(stdout)) == 3

    def gpu_ms(r):
        return sum(c["gpu_ms"] for c in r["op_classes"].values())

    assert gpu_ms(report) < 0.9 * gpu_ms(eager_report)
    assert compiled["peak_alloc_gib"] < 0.9 * eager["peak_alloc_gib"]
    ops = {o["op"] for o in report["top_ops"]}
    assert any(o.startswith("triton_") for o in ops)  # generated kernels
    assert "mm.default" in ops and any("cudnn_attention" in o for o in ops)  # library calls stay


def test_faster_gpu_is_faster(tmp_path):
    # Batch 32: GPU-bound, so the ratio is the GPUs' and not this machine's host timing
    # (at batch 8 the H100 run turned host-bound on a loaded machine: 1.75x).
    args = ["--preset", "gpt2-124m", "--seq-len", "1024", "--batch-size", "32", "--steps", "3",
            "--warmup", "1"]
    h100, _, _ = _run_example(tmp_path, "H100", "examples/gpt_train.py", *args)
    a100, _, _ = _run_example(tmp_path, "A100", "examples/gpt_train.py", *args)
    assert 1.8 < a100["median_iter_ms"] / h100["median_iter_ms"] < 4.0


def test_hugging_face_llama_from_config(tmp_path):
    pytest.importorskip("transformers")
    summary, report, stdout = _run_example(tmp_path, "H200", "examples/hf_llama_train.py",
                                           "--steps", "3", "--warmup", "1")
    assert len(ITER.findall(stdout)) == 3
    assert report["iterations"]["count"] == 3
    assert summary["median_iter_ms"] > 0 and summary["peak_alloc_gib"] > 0.3
    # transformers takes its eager path (no materialised mask, see phantom/adapters), so
    # SDPA runs a fused causal kernel (cuDNN or flash), never the masked fallbacks.
    ops = " ".join(o["op"] for o in report["top_ops"])
    assert "cudnn_attention" in ops or "flash_attention" in ops, ops
    assert "efficient_attention" not in ops and "bmm" not in ops, ops


def test_hugging_face_trainer_on_two_ranks(tmp_path):
    """The Trainer with accelerate's DDP (find_unused_parameters, as the Trainer sets it), a
    pinned-memory DataLoader and bf16 autocast: its own train_runtime and the script's step
    times are simulated time, and agree with each other."""
    pytest.importorskip("accelerate")
    report = tmp_path / "report.json"
    wall = time.perf_counter()
    proc = run_phantom(["run", "--nproc-per-node", "2", "--gpu", "H100", "--report", str(report),
                        str(REPO / "examples/hf_trainer_train.py"), "--steps", "6", "--warmup", "2",
                        "--output-dir", str(tmp_path / "out")], cwd=tmp_path)
    wall = time.perf_counter() - wall
    assert proc.returncode == 0, proc.stderr[-3000:]
    summary = _summary(proc.stdout)
    steps = [float(m) for m in re.findall(r"^step \d+ ([\d.]+) ms$", proc.stdout, re.M)]
    assert len(steps) == 6
    # 4 layers of 512 with a 32k vocabulary, 4 x 512 tokens per GPU: a few ms of kernels and a
    # host-bound step of tens of ms on an H100, not seconds
    assert 2.0 < summary["median_iter_ms"] < 300.0
    # the Trainer's own clock covers the steps and its set-up inside train() (accelerate's DDP
    # wrapping, the DataLoader), in simulated time, not this run's wall time. The set-up's
    # simulated host time varies from run to run on a 2-core machine (0.2-2.7 s over six runs;
    # the cause is not found), hence the loose bound.
    assert sum(steps) / 1e3 <= summary["train_runtime_s"] < min(5.0, wall)
    data = json.loads(report.read_text())
    assert data["iterations"]["count"] == 6
    assert 0.2 < summary["peak_alloc_gib"] < 4.0
    assert data["distributed"]["world_size"] == 2 and data["distributed"]["collectives"] >= 6  # DDP's all-reduces


def test_training_that_does_not_fit_ooms(tmp_path):
    """A 1B model with AdamW needs ~16 GiB of state alone: on a 12 GiB GPU it must OOM where
    the real allocation would fail, with PyTorch's message and exit code."""
    proc = run_phantom(["run", "--gpu", "H100", "--vram-gib", "12", "--quiet",
                        str(REPO / "examples/gpt_train.py"), "--preset", "1b", "--steps", "2"],
                       cwd=tmp_path)
    assert proc.returncode == 1
    assert "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate" in proc.stderr
    assert "GPU 0 has a total capacity of 12.00 GiB" in proc.stderr
