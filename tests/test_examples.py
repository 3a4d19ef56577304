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


def _run_example(tmp_path, gpu: str, script: str, *args: str,
                 host_time: str | None = None) -> tuple[dict, dict, str]:
    report = tmp_path / "report.json"
    options = ["--host-time", host_time] if host_time else []
    proc = run_phantom(["run", "--gpu", gpu, *options, "--report", str(report), str(REPO / script), *args],
                       cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return _summary(proc.stdout), json.loads(report.read_text()), proc.stdout


# The single_gpu benchmark's 124m-s2k row, measured on a real H100 with this script and these
# arguments (bench/results/single_gpu/real-h100-2026-11-22-1.json: 1 x H100 80GB HBM3, torch
# 2.11.0+cu130): median step, the script's MFU and peak allocated memory.
GPT_124M_S2K_ARGS = ["--preset", "gpt2-124m", "--seq-len", "2048", "--batch-size", "16"]
REAL_H100_124M_S2K = {"median_iter_ms": 93.39, "mfu": 0.3434, "peak_alloc_gib": 27.36,
                      "peak_reserved_gib": 35.69}
# Tolerances. Step time and MFU: the real steps spread 92.96-94.26 ms (+-0.7%), and phantom's
# documented error on the whole single-GPU suite is at most 6.4% (bench/README.md, single_gpu;
# docs/benchmarks/accuracy.md); 10% covers both and still fails a 2x slower GEMM (GEMMs are
# about half of this step). Peak memory: allocated within 0.2% on that suite (accuracy.md);
# 1% of 27-36 GiB is about one of the allocator's large segments.
STEP_REL, MEMORY_REL = 0.10, 0.01


def test_gpt_training_script_with_and_without_checkpointing(tmp_path):
    """bf16 autocast, SDPA, fused AdamW, clipping, with and without checkpointing, against the
    real H100's numbers of the same script. One test runs both, so the comparison of the two
    can never be skipped. `--host-time off`: this step is GPU-bound (99% busy), so the real step
    is its GPU time, and a loaded test machine cannot move the simulated one."""
    results = {}
    for ac in (False, True):
        args = [*GPT_124M_S2K_ARGS, "--steps", "4", "--warmup", "1"] + (["--ac"] if ac else [])
        summary, report, stdout = _run_example(tmp_path, "H100", "examples/gpt_train.py",
                                               *args, host_time="off")
        iters = ITER.findall(stdout)
        assert [int(i[0]) for i in iters] == [0, 1, 2, 3]
        assert all(float(i[1]) == 0.0 for i in iters)  # the loss read is the documented placeholder
        # The script's own timing (perf_counter + synchronize) is the simulated step.
        assert summary["median_iter_ms"] == pytest.approx(report["iterations"]["median_ms"], rel=0.02)
        assert report["iterations"]["count"] == 4
        ops = {o["op"] for o in report["top_ops"]}
        assert "_fused_adamw_.default" in ops or report["op_classes"]["optimizer"]["gpu_ms"] > 0
        assert any("cudnn_attention" in o for o in ops)  # the fused kernel torch picks on H100
        assert "gemm" in report["op_classes"] and "attention" in report["op_classes"]
        results[ac] = summary

    plain, ckpt = results[False], results[True]
    real = REAL_H100_124M_S2K
    assert plain["median_iter_ms"] == pytest.approx(real["median_iter_ms"], rel=STEP_REL)
    assert plain["mfu"] == pytest.approx(real["mfu"], rel=STEP_REL)
    assert plain["peak_alloc_gib"] == pytest.approx(real["peak_alloc_gib"], rel=MEMORY_REL)
    assert plain["peak_reserved_gib"] == pytest.approx(real["peak_reserved_gib"], rel=MEMORY_REL)

    # Checkpointing recomputes each block's forward in the backward. It adds at least the
    # blocks' forward GEMMs at the datasheet's peak (2 x 12 L C^2 flops a token: 5.6 ms of
    # 989 TFLOP/s, 6% of the step) and at most a whole forward again (a third of the forward
    # and backward's flops). Real H100 and H200 runs of the 350M model (single_gpu's 350m-s4k
    # and 350m-s4k-ac) took 1.17x per token with it.
    assert 1.06 * plain["median_iter_ms"] < ckpt["median_iter_ms"] < 4 / 3 * plain["median_iter_ms"]
    # ...and keeps only each block's input: less memory, by most of the activations.
    assert ckpt["peak_alloc_gib"] < 0.8 * plain["peak_alloc_gib"]


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
    # Datasheet bounds: a step can gain no more than the bf16 tensor-core peaks' ratio (989.4 /
    # 312 TFLOP/s = 3.17) and no less than the HBM bandwidths' (3.35 / 2.04 TB/s = 1.64). About
    # half of this step is GEMM and attention, so it sits well above the bandwidth ratio: 1.8.
    assert 1.8 < a100["median_iter_ms"] / h100["median_iter_ms"] < 989.4 / 312


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
    # host-bound step. Reference: this script with these arguments on one real H100, 23.97 and
    # 27.06 ms in two runs (workloads' hf-trainer-small, bench/results/workloads/
    # real-h100-2026-11-25-{1,2}.json; no real 2-GPU run of it is kept). Host-bound steps are
    # predicted within 55% (the host_bound suite's worst row, bench/README.md): 0.45 x 23.97 =
    # 10.8 ms up to 1.55 x 27.06 = 41.9 ms, and the second rank adds DDP's all-reduce of the
    # fp32 gradients (178 MB, each rank sending and receiving half twice over 450 GB/s of
    # NVLink: 0.4 ms, if none of it hides behind the backward) and a hook per 25 MB bucket:
    # 42.5 ms. (The GPU side of a host-bound step is checked elsewhere.)
    assert 10.8 < summary["median_iter_ms"] < 42.5
    # the Trainer's own clock covers the steps and its set-up inside train() (accelerate's DDP
    # wrapping, the DataLoader), in simulated time, not this run's wall time. The set-up's
    # simulated host time varies from run to run on a 2-core machine (0.2-2.7 s over six runs;
    # the cause is not found), hence the loose bound.
    assert sum(steps) / 1e3 <= summary["train_runtime_s"] < min(5.0, wall)
    data = json.loads(report.read_text())
    assert data["iterations"]["count"] == 6
    # Peak memory. The model: 44,569,088 fp32 parameters (embedding and head 32000 x 512 each,
    # 4 layers of 2,950,144, norms); at the peak after the first step a rank holds their
    # weights, gradients and AdamW's two moments, 16 bytes each (0.664 GiB), and DDP's
    # gradient buckets, a fourth copy (0.166 GiB), besides activations. The real 1-GPU runs'
    # peak, the same script and arguments: 1.58 GiB in both (files above), which with DDP's
    # buckets makes 1.746 GiB. Tolerance: -10% covers DDP's peak memory, the one row below the
    # suites' 1% (7.7% low, docs/benchmarks/accuracy.md); +5% covers the allocator's rounding;
    # gradients held twice more, or AdamW's moments in the wrong dtype, fail.
    n_params = 2 * 32000 * 512 + 4 * 2_950_144 + 512
    state_gib, buckets_gib = 16 * n_params / 2**30, 4 * n_params / 2**30
    reference = 1.58 + buckets_gib
    assert state_gib + buckets_gib < 0.9 * reference < summary["peak_alloc_gib"] < 1.05 * reference
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
