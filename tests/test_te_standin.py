"""phantom's simulated Transformer Engine (phantom/adapters/te_standin): the import hook that
offers it, each module's GPU work and collectives, the optimizer kernels, the refusals, and
Megatron-Core's TE layer spec end to end."""
from __future__ import annotations

import re

import pytest

from conftest import REPO, run_phantom

TE = ("--transformer-engine", "simulated")


def _ops(report: dict) -> dict[str, int]:
    return {o["op"]: o["calls"] for o in report["top_ops"]}


def test_the_package_is_offered_only_when_asked_for_and_absent(monkeypatch):
    from phantom.adapters import SIMULATED_PACKAGES, SIMULATED_TE_ENV, _AdapterFinder

    finder = _AdapterFinder({}, {}, {})
    import sys

    sys.meta_path.insert(0, finder)
    try:
        monkeypatch.delenv(SIMULATED_TE_ENV, raising=False)
        assert finder.find_spec("transformer_engine", None) is None  # default: off
        monkeypatch.setenv(SIMULATED_TE_ENV, "off")
        assert finder.find_spec("transformer_engine", None) is None
        monkeypatch.setenv(SIMULATED_TE_ENV, "simulated")
        spec = finder.find_spec("transformer_engine", None)
        assert spec is not None
        assert spec.origin.startswith(str(SIMULATED_PACKAGES["transformer_engine"]))
        # a real package of a simulated name wins: here the name of an installed package
        SIMULATED_PACKAGES["json"] = SIMULATED_PACKAGES["transformer_engine"]
        assert finder.find_spec("json", None) is None
    finally:
        SIMULATED_PACKAGES.pop("json", None)
        sys.meta_path.remove(finder)


def test_without_the_option_transformer_engine_is_not_installed(run_script):
    proc, _ = run_script("""
        try:
            import transformer_engine
        except ImportError:
            print("no TE")
    """)
    assert proc.returncode == 0 and "no TE" in proc.stdout


def test_linear_layers_launch_tes_kernels(run_script):
    """LayerNormLinear (RMSNorm) then Linear, no tensor parallelism, gradient accumulation
    fused into fp32 main_grad: forward one norm and two GEMMs; backward two data-gradient
    GEMMs, two weight-gradient GEMMs into main_grad (no add kernel), one norm backward, and
    autograd gets TE's dummy weight gradient."""
    proc, report = run_script("""
        import torch
        import transformer_engine as te

        qkv = te.pytorch.LayerNormLinear(256, 768, normalization="RMSNorm", bias=False,
                                         fuse_wgrad_accumulation=True, params_dtype=torch.bfloat16)
        proj = te.pytorch.Linear(768, 256, bias=False, fuse_wgrad_accumulation=True,
                                 params_dtype=torch.bfloat16)
        for lin in (qkv, proj):
            lin.weight.main_grad = torch.zeros(lin.weight.shape, dtype=torch.float32, device="cuda")
            lin.weight.grad_added_to_main_grad = False
        x = torch.randn(128, 2, 256, device="cuda", dtype=torch.bfloat16, requires_grad=True)
        y = proj(qkv(x))
        assert y.shape == (128, 2, 256) and y.dtype == torch.bfloat16
        y.sum().backward()
        assert qkv.weight.grad_added_to_main_grad and proj.weight.grad is not None
        assert x.grad.shape == x.shape
        print("ok")
    """, *TE)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0 and "ok" in proc.stdout, out[-3000:]
    ops = _ops(report)
    assert ops.get("addmm.dtype_out") == 2  # the two weight gradients, into main_grad
    assert ops.get("mm.default") == 4  # two forward GEMMs, two data gradients
    assert "add_.Tensor" not in ops  # no main_grad.add_
    assert sum(n for op, n in ops.items() if "rms_norm" in op) == 2  # one each way


def test_tensor_parallel_collectives_follow_tes_linear(run_script):
    """Column-parallel LayerNormLinear then row-parallel Linear with sequence parallelism on
    TP 2: forward all-gathers the norm's output and reduce-scatters the row layer's; backward
    all-gathers the output gradient (row), re-gathers the saved input and reduce-scatters the
    data gradient (column)."""
    proc, report = run_script("""
        import torch, torch.distributed as dist
        import transformer_engine as te

        dist.init_process_group("nccl")
        torch.cuda.set_device(dist.get_rank())
        group = dist.new_group([0, 1])
        fc1 = te.pytorch.LayerNormLinear(512, 2048, sequence_parallel=True, tp_group=group,
                                         tp_size=2, parallel_mode="column", bias=True,
                                         params_dtype=torch.bfloat16)
        fc2 = te.pytorch.Linear(2048, 512, sequence_parallel=True, tp_group=group, tp_size=2,
                                parallel_mode="row", bias=True, return_bias=True,
                                params_dtype=torch.bfloat16)
        assert fc1.weight.shape == (1024, 512) and fc2.weight.shape == (512, 1024)
        assert fc1.weight.tensor_model_parallel and fc2.weight.partition_dim == 1
        assert fc1.layer_norm_weight.sequence_parallel and fc2.bias.sequence_parallel
        x = torch.randn(64, 2, 512, device="cuda", dtype=torch.bfloat16, requires_grad=True)
        h = fc1(x)
        assert h.shape == (128, 2, 1024)  # the full sequence, this rank's columns
        y, bias = fc2(h)
        assert y.shape == (64, 2, 512) and bias is fc2.bias
        (y + bias).sum().backward()
        assert x.grad.shape == x.shape
        print("ok")
    """, "--nproc-per-node", "2", "--out", "run", *TE)  # --out: collectives are recorded
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0 and "ok" in proc.stdout, out[-3000:]
    calls: dict[str, int] = {}
    for c in report["top_collectives"]:
        calls[c["kind"]] = calls.get(c["kind"], 0) + c["calls"]
    gathers = sum(n for k, n in calls.items() if "gather" in k)
    scatters = sum(n for k, n in calls.items() if "scatter" in k)
    assert (gathers, scatters) == (3, 2), calls


def test_attention_rope_and_optimizer_kernels(run_script):
    """DotProductAttention on sbhd GQA inputs is one fused attention kernel each way with the
    output as [s, b, heads x dim]; the fused RoPE is one kernel; FusedAdam is one multi-tensor
    update per dtype; the multi-tensor norm and scale answer in TE's shapes."""
    proc, report = run_script("""
        import torch
        import transformer_engine as te
        from transformer_engine.pytorch.attention.rope import apply_rotary_pos_emb
        from transformer_engine.pytorch.optimizers import (FusedAdam, multi_tensor_applier,
                                                           multi_tensor_l2norm, multi_tensor_scale)

        attn = te.pytorch.DotProductAttention(8, 64, num_gqa_groups=2, qkv_format="sbhd",
                                              attn_mask_type="causal")
        q = torch.randn(256, 2, 8, 64, device="cuda", dtype=torch.bfloat16, requires_grad=True)
        k = torch.randn(256, 2, 2, 64, device="cuda", dtype=torch.bfloat16, requires_grad=True)
        freqs = torch.randn(256, 1, 1, 64, device="cuda")
        q2 = apply_rotary_pos_emb(q, freqs, tensor_format="sbhd", fused=True)
        out = attn(q2, k, k)
        assert out.shape == (256, 2, 512)
        out.sum().backward()

        params = [torch.nn.Parameter(torch.randn(64, 64, device="cuda")) for _ in range(4)]
        for p in params:
            p.grad = torch.randn_like(p)
        opt = FusedAdam(params, lr=1e-3, weight_decay=0.1)
        opt.step()
        opt.step()
        buf = torch.zeros(1, dtype=torch.int, device="cuda")
        norm, _ = multi_tensor_applier(multi_tensor_l2norm, buf, [[p.grad for p in params]], False)
        assert norm.shape == (1,) and norm.dtype == torch.float32
        multi_tensor_applier(multi_tensor_scale, buf, [[p.grad for p in params]] * 2, 0.5)
        print("ok")
    """, *TE)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0 and "ok" in proc.stdout, out[-3000:]
    ops = _ops(report)
    assert sum(n for op, n in ops.items() if op.startswith("_scaled_dot_product")) == 2
    assert ops.get("_fused_adamw_.default") == 2
    assert ops.get("_foreach_mul_.Scalar") == 1


@pytest.mark.parametrize("code, message", [
    ("with te.pytorch.fp8_autocast(enabled=True):\n    pass", "FP8 execution"),
    ("te.pytorch.Linear(64, 64, delay_wgrad_compute=True)", "delay_wgrad_compute"),
    ("te.pytorch.DotProductAttention(4, 64, window_size=(128, 0))", "sliding-window"),
])
def test_what_is_not_simulated_is_refused_with_a_message(run_script, code, message):
    proc, _ = run_script("import transformer_engine as te\n" + code + "\n", *TE)
    assert proc.returncode != 0
    assert message in proc.stderr and "simulated Transformer Engine" in proc.stderr or \
        message in proc.stderr and "FP8" in proc.stderr


@pytest.mark.parametrize("layout", [
    ("--preset", "tiny", "--tp", "2", "--sequence-parallel"),
    ("--preset", "tiny-moe", "--ep", "2", "--moe-grouped-gemm"),  # TE's GroupedLinear experts
])
def test_megatron_te_spec_end_to_end(layout):
    """Megatron-Core's Transformer Engine layer spec (fused norm + GEMM, TE attention, RoPE
    fusion, TE's FusedAdam) runs under phantom with TP 2 + sequence parallelism, and MoE with
    grouped GEMMs on EP 2, with the distributed optimizer; Megatron's log line prints every
    iteration."""
    pytest.importorskip("megatron.core", reason="megatron-core is not installed")
    script = str(REPO / "examples" / "megatron" / "pretrain_gpt.py")
    proc = run_phantom(["run", "--nproc-per-node", "2", *TE, script, *layout,
                        "--use-distributed-optimizer", "--gradient-accumulation-fusion",
                        "--transformer-impl", "transformer_engine", "--train-iters", "3"],
                       timeout=600)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-4000:]
    iters = re.findall(r"iteration\s+(\d+)/\s*3 \| .*?elapsed time per iteration \(ms\): ([\d.]+)", out)
    assert [int(i) for i, _ in iters] == [1, 2, 3]
    assert all(float(ms) > 0 for _, ms in iters)


def test_megatron_te_spec_without_the_option_says_how_to_get_it():
    pytest.importorskip("megatron.core", reason="megatron-core is not installed")
    script = str(REPO / "examples" / "megatron" / "pretrain_gpt.py")
    proc = run_phantom(["run", "--nproc-per-node", "1", script, "--preset", "tiny",
                        "--transformer-impl", "transformer_engine", "--train-iters", "1"],
                       timeout=600)
    assert proc.returncode != 0
    assert "--transformer-engine simulated" in proc.stderr


@pytest.mark.parametrize("interleaved", [False, True])
@pytest.mark.parametrize("rot_dim", [64, 32])
def test_fused_rope_backward_is_the_rotations_gradient(monkeypatch, interleaved, rot_dim):
    """The stand-in's fused RoPE is an autograd Function (TE's FusedRoPEFunc) with a hand-written
    backward; it must be the gradient of the rotation, rotated dims and passed-through ones."""
    import sys

    import torch

    monkeypatch.syspath_prepend(str(REPO / "phantom" / "adapters" / "te_standin"))
    before = set(sys.modules)
    try:
        from transformer_engine.pytorch.attention import rope

        t = torch.randn(6, 2, 3, 64, dtype=torch.float64, requires_grad=True)
        freqs = torch.randn(6, 1, 1, rot_dim, dtype=torch.float64)
        grad = torch.randn(6, 2, 3, 64, dtype=torch.float64)
        (rope._rope_forward(t, freqs, interleaved) * grad).sum().backward()
        assert torch.allclose(rope._rope_backward(grad, freqs, interleaved), t.grad)
    finally:
        # later tests in this process must not find a `transformer_engine` imported
        for name in set(sys.modules) - before:
            if name.startswith("transformer_engine"):
                del sys.modules[name]
