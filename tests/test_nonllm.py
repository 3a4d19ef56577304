"""Vision, diffusion and graph workloads, and the two torch builds (issue 10).

The end-to-end tests run the shipped examples through `phantom run` with small inputs and
assert on what the scripts print. They run on whichever torch this interpreter has; CI runs
this file a second time in a venv with a CUDA build of torch (`.ci/run`), where
PHANTOM_EXPECT_TORCH_BUILD=cuda makes sure that step really tests that build.
"""
from __future__ import annotations

import importlib.util
import os
import re
from pathlib import Path

import pytest

from conftest import REPO, run_phantom

SUMMARY = re.compile(r"^summary: (.*)$", re.M)
ITER = re.compile(r"^iter (\d+) \| loss [\d.]+ \| ([\d.]+) ms \|", re.M)


def _summary(stdout: str) -> dict[str, float]:
    m = SUMMARY.search(stdout)
    assert m, stdout[-2000:]
    return {k: float(v.rstrip("M")) for k, v in (kv.split("=") for kv in m.group(1).split())}


def _run(tmp_path: Path, script: str, *args: str, nproc: int = 1) -> tuple[dict, str, str]:
    proc = run_phantom(["run", "--gpu", "H200", "--nproc-per-node", str(nproc), str(REPO / script), *args],
                       cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return _summary(proc.stdout), proc.stdout, proc.stderr


# ---- the torch build -----------------------------------------------------------------
def _fake_torch(tmp_path: Path, cuda: str) -> Path:
    d = tmp_path / "torch"
    (d / "lib").mkdir(parents=True)
    (d / "version.py").write_text(f"__version__ = '2.14.1'\ncuda: Optional[str] = {cuda}\ngit_version = 'x'\n")
    return d


def test_build_detection_reads_torch_version_cuda(tmp_path):
    from phantom.native.build import _cuda_build, torch_cuda_version

    cpu = _fake_torch(tmp_path / "a", "None")
    assert torch_cuda_version(cpu) is None and not _cuda_build(cpu)
    cuda = _fake_torch(tmp_path / "b", "'13.0'")
    assert torch_cuda_version(cuda) == "13.0"
    assert not _cuda_build(cuda)  # no libtorch_cuda.so: not a usable CUDA build
    (cuda / "lib" / "libtorch_cuda.so").write_bytes(b"")
    assert _cuda_build(cuda)


def test_this_interpreter_has_the_expected_build():
    import torch

    from phantom.native.build import torch_cuda_version

    assert torch_cuda_version() == torch.version.cuda
    expected = os.environ.get("PHANTOM_EXPECT_TORCH_BUILD")
    if expected == "cuda":
        assert torch.version.cuda is not None, "this CI step must run on a CUDA build of torch"
        assert not torch.cuda.is_available() or os.environ.get("CUDA_VISIBLE_DEVICES") == ""
    elif expected == "cpu":
        assert torch.version.cuda is None


def test_gpt_example_runs_on_this_build(tmp_path):
    """The LLM path, unchanged, on this build: the script's own lines and summary."""
    proc = run_phantom(["run", "--gpu", "H100", str(REPO / "examples/gpt_train.py"), "--preset", "gpt2-124m",
                        "--seq-len", "512", "--batch-size", "4", "--steps", "3", "--warmup", "1"], cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    import torch

    assert f"torch {torch.__version__}" in proc.stdout  # the script saw this interpreter's torch
    s = _summary(proc.stdout)
    assert len(ITER.findall(proc.stdout)) == 3
    assert 1.5 < s["peak_alloc_gib"] < 6.0 and s["median_iter_ms"] > 1.0


# ---- workloads -----------------------------------------------------------------------
def test_resnet_ddp_example(tmp_path):
    """torchvision ResNet (resnet18, small images) with DDP on 2 simulated GPUs, channels_last."""
    # find_spec, not importorskip: on the CPU build torchvision imports only under phantom
    if importlib.util.find_spec("torchvision") is None:
        pytest.skip("torchvision is not installed")
    s, out, err = _run(tmp_path, "examples/vision/resnet50_ddp.py", "--arch", "resnet18", "--batch-size", "64",
                       "--image-size", "64", "--steps", "3", "--warmup", "1", nproc=2)
    assert len(ITER.findall(out)) == 3
    assert "conv" in err  # the summary's GPU time by class has convolutions
    # 11.7M params: fp32 weights + grads + momentum + DDP buckets ~ 0.2 GiB, plus activations
    assert 0.15 < s["peak_alloc_gib"] < 3.0
    assert s["median_iter_ms"] > 0.5


def test_gat_ddp_example(tmp_path):
    if importlib.util.find_spec("torch_geometric") is None:
        pytest.skip("torch_geometric is not installed")
    s, out, err = _run(tmp_path, "examples/graph/gat_ddp.py", "--nodes", "5000", "--avg-degree", "8",
                       "--steps", "3", "--warmup", "1")
    assert len(ITER.findall(out)) == 3
    # per layer and head the edge messages: 45k edges x 512 fp32 channels ~ 88 MiB each
    assert 0.1 < s["peak_alloc_gib"] < 4.0
    assert "scatter" in err or "index_add" in err  # message passing reached the cost model


def test_conv_output_keeps_channels_last_as_cudnn_does(tmp_path, script):
    """The fake hooks report cuDNN, so ATen picks the layout a GPU would: channels_last in,
    channels_last out, and the backward of both."""
    path = script("""
        import torch
        x = torch.randn(8, 16, 32, 32, device="cuda").to(memory_format=torch.channels_last).requires_grad_()
        conv = torch.nn.Conv2d(16, 32, 3, padding=1).cuda().to(memory_format=torch.channels_last)
        y = conv(x)
        y.sum().backward()
        print("out", y.is_contiguous(memory_format=torch.channels_last))
        print("grad", x.grad.is_contiguous(memory_format=torch.channels_last))
        print("cudnn", torch.backends.cudnn.is_available())
    """)
    proc = run_phantom(["run", "--quiet", str(path)], cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "out True" in proc.stdout and "grad True" in proc.stdout, proc.stdout


# ---- cost model ----------------------------------------------------------------------
def test_conv_fallback_reads_layout_precision_and_direction():
    """H200's calibration has a conv scale per precision.layout.direction (calibrate_conv.py):
    cuDNN's native NHWC is faster than NCHW at the same FLOPs, as the sweep measured."""
    import torch

    from phantom.cost.roofline import RooflineCostModel, conv_layout
    from phantom.hardware import get_gpu

    aten = torch.ops.aten
    model = RooflineCostModel(get_gpu("H200"))
    assert {"bf16.channels_last.fwd", "bf16.contiguous.bwd"} <= set(model.cal.gemm.conv_scales)

    def fwd(cl: bool) -> float:
        x = torch.empty(128, 256, 56, 56, dtype=torch.bfloat16, device="meta")
        w = torch.empty(256, 256, 3, 3, dtype=torch.bfloat16, device="meta")
        if cl:
            x, w = x.to(memory_format=torch.channels_last), w.to(memory_format=torch.channels_last)
        assert conv_layout(x) == ("channels_last" if cl else "contiguous")
        args = (x, w, None, [1, 1], [1, 1], [1, 1], False, [0, 0], 1)
        return model.estimate(aten.convolution.default, args, {}, aten.convolution.default(*args)).gpu_ns

    nhwc, nchw = fwd(True), fwd(False)
    assert nhwc < nchw
    # 2*128*256*56*56*256*9 = 236.7 GFLOP: between 30% and 100% of the H200's 989 TFLOP/s bf16 peak
    assert 236.7e9 / 0.989e15 * 1e9 < nhwc < 236.7e9 / 0.3e15 * 1e9
