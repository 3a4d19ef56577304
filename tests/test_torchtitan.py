"""TorchTitan 0.3.0 under phantom: its own trainer end to end, and the adapter's patches.

The end-to-end tests run `phantom run --nproc-per-node 2 -m torchtitan.train` with the presets
in examples/torchtitan/ and assert on torchtitan's own step lines (tokens/s, TFLOP/s, MFU,
memory), which must carry the simulated values.
"""
from __future__ import annotations

import re
import statistics

import pytest

from conftest import REPO, run_phantom

pytest.importorskip("torchtitan", reason="torchtitan is not installed (pip install -e '.[torchtitan]')")

ANSI = re.compile(r"\x1b\[[0-9;]*m")
STEP = re.compile(r"step:\s*(\d+)\s+loss:\s*(-?[\d.]+)\s+grad_norm:\s*([\d.]+)\s+memory:\s*([\d.]+)GiB"
                  r"\(([\d.]+)%\)\s+tps:\s*([\d,]+)\s+tflops:\s*([\d.]+)\s+mfu:\s*([\d.]+)%")


def _train(tmp_path, *args: str, nproc: int = 2, gpu: str = "H100", timeout: int = 600):
    proc = run_phantom(["run", "--nproc-per-node", str(nproc), "--gpu", gpu, "-m", "torchtitan.train",
                        "--module", "examples.torchtitan", "--dump_folder", str(tmp_path / "out"),
                        *args], cwd=REPO, timeout=timeout, env={"HF_HUB_OFFLINE": "1",
                                                                  "HF_DATASETS_OFFLINE": "1"})
    steps = [dict(step=int(m[0]), loss=float(m[1]), mem_gib=float(m[3]), mem_pct=float(m[4]),
                  tps=float(m[5].replace(",", "")), tflops=float(m[6]), mfu=float(m[7]))
             for m in STEP.findall(ANSI.sub("", proc.stdout + proc.stderr))]
    return proc, steps


def test_debug_model_fsdp_on_two_ranks(tmp_path):
    """The Llama3 debug model with FSDP2 over 2 simulated H100s: torchtitan prints every step
    with simulated throughput and memory, consistent with each other and with physics."""
    proc, steps = _train(tmp_path, "--config", "debugmodel", "--training.steps", "5")
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-4000:]
    assert [s["step"] for s in steps] == [1, 2, 3, 4, 5]
    assert "dp_shard=2" in proc.stdout + proc.stderr  # FSDP over both ranks
    steady = steps[2:]
    # 6.2M parameters, 8 x 2048 tokens per rank: a host-bound step, whose throughput depends on
    # this machine's speed (docs/host-time.md); the simulated throughput of a GPU-bound step is
    # checked against a real H100 in test_llama3_8b_5_layers_against_a_real_h100. Here: the
    # GPU's peak bounds it, MFU well below 10%.
    assert all(0.0 < s["mfu"] < 10.0 for s in steady)
    # torchtitan's MFU is tflops / 989 (H100 SXM peak by device name): the line is coherent
    assert all(s["mfu"] == pytest.approx(100 * s["tflops"] / 989, abs=0.02) for s in steady)
    # Peak reserved memory a rank, counted (6,163,712 parameters: 6 layers of dim 256, fused
    # QKV 768, FFN 768; embedding and head 2048 x 256). At least: the loss's fp32 logits,
    # 16,384 tokens x 2048 (0.125 GiB), and the rank's half of the fp32 weights, gradients and
    # AdamW moments (16 bytes a parameter, 0.046 GiB). At most: all of that state unsharded
    # (0.092) with the bf16 copies FSDP gathers (0.012); the logits' chain (bf16 logits, fp32
    # copy, log-softmax, its gradient, the bf16 gradient: 0.5 GiB); and every layer keeping all
    # its intermediate outputs, 14.6 kB a token in bf16 with an fp32 residual stream, for
    # 16,384 tokens x 6 layers (1.34 GiB), selective AC keeping less; 1.94 GiB allocated, and
    # a quarter more for the allocator's segments around it.
    low = 16384 * 2048 * 4 / 2**30 + 16 * 6_163_712 / 2 / 2**30
    high = 1.25 * (16 * 6_163_712 / 2**30 + 2 * 6_163_712 / 2**30 + 0.5 + 14.6e3 * 16384 * 6 / 2**30)
    assert all(low < s["mem_gib"] < high for s in steps), (low, high, steps)
    assert all(s["mem_pct"] == pytest.approx(100 * s["mem_gib"] / 79.18, abs=0.02) for s in steps)
    assert all(s["loss"] == 0.0 for s in steps)  # the documented placeholder of a data read
    assert "phantom summary" in proc.stderr and "iterations         5" in proc.stderr


# The torchtitan bench's 8B-5layers-1gpu-dec2024-sac-compile row: the first 5 of Llama 3 8B's
# blocks, each torch.compile'd, selective AC, on one real H100 (bench/results/torchtitan/
# real-h100-2026-11-28-1.json: 1 x H100 80GB HBM3, torch 2.11.0+cu130, torchtitan 0.3.0; the
# median of steps 16-40 of 40). torchtitan's memory is its peak reserved.
REAL_8B_5LAYERS = {"tps": 39659.0, "mem_gib": 56.65}


def test_llama3_8b_5_layers_against_a_real_h100(tmp_path):
    """A GPU-bound step (MFU ~0.47) run as the benchmark ran it, with `--host-time off` so that
    this machine's load cannot move it: throughput and memory against the real H100's."""
    proc = run_phantom(["run", "--nproc-per-node", "1", "--gpu", "H100", "--host-time", "off",
                        "bench/suites/torchtitan_entry.py", "--patches", "bench/suites/torchtitan_2024.py",
                        "--dump_folder", str(tmp_path / "out"), "--module", "examples.torchtitan",
                        "--config", "llama3_8b_5layers", "--compile.enable", "--training.steps", "4",
                        "--training.disable_cuda_graphs", "activation-checkpoint:selective"],
                       cwd=REPO, env={"HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1"})
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-4000:]
    steps = [dict(tps=float(m[5].replace(",", "")), mem_gib=float(m[3]))
             for m in STEP.findall(ANSI.sub("", proc.stdout + proc.stderr))]
    assert len(steps) == 4
    steady = steps[1:]  # the first step holds the compiled blocks' first calls
    # Tolerance: torchtitan's rows are within 4.3% of real on average (bench/README.md,
    # torchtitan); this row's benchmark simulation, host included, is 1.2% above
    # (sim-h100-2026-11-28-1.json) and leaving the host out adds ~3%. 10% holds these and
    # fails 2x slower GEMMs (about two thirds of this step).
    tps = statistics.median(s["tps"] for s in steady)
    assert tps == pytest.approx(REAL_8B_5LAYERS["tps"], rel=0.10)
    # Reserved memory: 4.5% below the real peak here (the compiled blocks' and autotuning's
    # allocations are not all modelled); 6% fails a request rounding that grows every block.
    assert max(s["mem_gib"] for s in steps) == pytest.approx(REAL_8B_5LAYERS["mem_gib"], rel=0.06)


def test_moe_expert_parallel_uses_uniform_dispatch(tmp_path):
    """Qwen3 MoE debug model with EP 2: the all-to-all split sizes come from the analytic
    uniform dispatch (simulated router logits have no values), and training proceeds."""
    proc, steps = _train(tmp_path, "--config", "qwen3_moe_debug", "--training.steps", "3",
                         "--parallelism.expert_parallel_degree", "2")
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-4000:]
    assert [s["step"] for s in steps] == [1, 2, 3]
    assert all(s["tps"] > 0 and s["mem_gib"] > 0 for s in steps)
    assert "ep=2" in proc.stdout + proc.stderr


def test_unsimulated_paths_are_clear_errors(tmp_path):
    """CUDA graphs asked for explicitly (they are off by default under phantom)."""
    proc, _ = _train(tmp_path, "--config", "debugmodel", "--training.steps", "1",
                     "--training.no-disable-cuda-graphs", nproc=1)
    assert proc.returncode != 0
    assert "CUDA graph capture" in proc.stderr and "is not simulated" in proc.stderr


# -- the adapter's pieces, without a simulated GPU --------------------------------------------

def test_uniform_splits():
    from phantom.adapters.torchtitan import uniform_splits

    assert uniform_splits(4096, 4, 0) == ([1024] * 4, [1024] * 4)
    send, receive = uniform_splits(10, 4, 3)  # uneven: the first ranks take one more row
    assert send == [3, 3, 2, 2] and sum(send) == 10 and receive == [2] * 4
    assert uniform_splits(10, 4, 0)[1] == [3] * 4


@pytest.mark.parametrize("separate_full", [True, False])
@pytest.mark.parametrize("seq_q, seq_kv", [(1024, 1024), (512, 1024)])
def test_causal_block_mask_matches_create_block_mask(separate_full, seq_q, seq_kv):
    """The analytic causal BlockMask has the block structure create_block_mask computes by
    evaluating the causal mask (bottom-right aligned when there are more keys than queries)."""
    import torch
    from torch.nn.attention.flex_attention import create_block_mask

    from phantom.adapters.torchtitan import causal_block_mask

    offset = seq_kv - seq_q

    def causal(b, h, q, kv):
        return q + offset >= kv

    ref = create_block_mask(causal, 2, None, seq_q, seq_kv, device="cpu",
                            separate_full_blocks=separate_full)
    got = causal_block_mask(causal, 2, seq_q, seq_kv, "cpu", 128, separate_full)

    def used(num, idx):  # the first num[i] indices of each query block are the ones in use
        return [sorted(idx[0, 0, i, :n].tolist()) for i, n in enumerate(num[0, 0].tolist())]

    assert torch.equal(got.kv_num_blocks, ref.kv_num_blocks)
    assert used(got.kv_num_blocks, got.kv_indices) == used(ref.kv_num_blocks, ref.kv_indices)
    if separate_full:
        assert torch.equal(got.full_kv_num_blocks, ref.full_kv_num_blocks)
        assert used(got.full_kv_num_blocks, got.full_kv_indices) == \
            used(ref.full_kv_num_blocks, ref.full_kv_indices)
    else:
        assert got.full_kv_num_blocks is None


def test_flex_attention_is_timed_as_the_fused_causal_kernel(run_script):
    """Under simulation torchtitan's compiled FlexAttention becomes FlashAttention-2 (causal;
    GQA native); with context parallelism (queries S/cp, all-gathered keys S) it charges 1/cp
    of the causal work."""
    proc, report = run_script(
        f"""
        import sys, torch
        sys.path.insert(0, {str(REPO)!r})
        from torch.nn.attention.flex_attention import AuxRequest
        from phantom.adapters.torchtitan import flex_attention_as_flash
        q = torch.randn(2, 32, 4096, 128, device="cuda", dtype=torch.bfloat16, requires_grad=True)
        k = torch.randn(2, 8, 4096, 128, device="cuda", dtype=torch.bfloat16, requires_grad=True)
        v = torch.randn_like(k, requires_grad=True)
        out, aux = flex_attention_as_flash(q, k, v, return_aux=AuxRequest(lse=True))
        out.sum().backward()
        print("shapes", tuple(out.shape), tuple(aux.lse.shape), tuple(k.grad.shape))
        q2 = q[:, :, :2048].detach()  # context parallel: half the queries, all the keys
        out2, aux2 = flex_attention_as_flash(q2, k, v, return_aux=AuxRequest())
        print("cp", tuple(out2.shape), aux2.lse)
        """,
        "--quiet",
    )
    assert proc.returncode == 0, proc.stderr
    assert "shapes (2, 32, 4096, 128) (2, 32, 4096) (2, 8, 4096, 128)" in proc.stdout
    assert "cp (2, 32, 2048, 128) None" in proc.stdout
    ops = {o["op"] for o in report["top_ops"]}
    assert "_scaled_dot_product_flash_attention.default" in ops
    assert "_scaled_dot_product_flash_attention_backward.default" in ops
