"""interception/compiled.py: Inductor's kernels for an AOTAutograd graph.

The graphs here come from make_fx with Inductor's decompositions, as AOTAutograd hands them to
phantom's backend; they run on CPU tensors against a stand-in simulation that records what
would be launched."""
from __future__ import annotations

from types import SimpleNamespace

import torch
import torch.nn.functional as F
from torch._inductor.decomposition import select_decomp_table
from torch.fx.experimental.proxy_tensor import make_fx

from phantom.interception.compiled import EXTERN, FUSED, NEUTRAL, GraphRunner


class RecordingSim:
    """A simulation whose fused-code part (sim.fusion) records the generated kernels."""
    gpu = SimpleNamespace(sm_count=132, sm_clock_mhz=1980)  # an H100's

    @property
    def fusion(self) -> "RecordingSim":
        return self

    def __init__(self) -> None:
        self.kernels: list[tuple[str, float]] = []
        self.math: list[float] = []
        self.efficiency: list[float] = []
        self.extra_ns: list[float] = []
        self.in_registers = False
        self.depth = 0

    def begin_generated_code(self) -> None:
        self.depth += 1

    def end_generated_code(self) -> None:
        self.depth -= 1

    def launch_generated_kernel(self, name: str, nbytes: float, math_flops: float = 0.0,
                                load_efficiency: float = 1.0, extra_ns: float = 0.0) -> None:
        assert self.depth == 1
        self.kernels.append((name, nbytes))
        self.extra_ns.append(extra_ns)
        self.math.append(math_flops)
        self.efficiency.append(load_efficiency)


def _runner(fn, *args) -> tuple[GraphRunner, RecordingSim]:
    gm = make_fx(fn, decomposition_table=select_decomp_table())(*args)
    sim = RecordingSim()
    return GraphRunner(gm, sim), sim


def test_a_pointwise_chain_between_gemms_is_one_kernel_reading_its_inputs_once():
    x, w, r = torch.randn(64, 32), torch.randn(32, 128), torch.randn(64, 128)

    def block(x, w, r):
        return F.gelu(x @ w, approximate="tanh") * 2 + r

    runner, sim = _runner(block, x, w, r)
    roles = {n.target.__name__: runner.roles[n] for n in runner.nodes if n.op == "call_function"}
    assert roles["mm.default"] == EXTERN and roles["tanh.default"] == FUSED
    out = runner([x, w, r])
    torch.testing.assert_close(out, block(x, w, r))
    # the GEMM's output and r are read, the result written: nothing of GeLU's tanh chain
    assert [b for _, b in sim.kernels] == [3 * 64 * 128 * 4]


def test_values_only_a_later_kernel_needs_are_recomputed_there_not_stored():
    x, w = torch.randn(64, 32), torch.randn(32, 32)

    def f(x, w):
        h = torch.sin(x) * 3  # used after the GEMM by a generated kernel only: inlined there
        y = h @ w
        return y + torch.sin(x) + h

    runner, sim = _runner(f, x, w)
    runner([x, w])
    size = 64 * 32 * 4
    # kernel 1 stores h for the GEMM (reads x); kernel 2 reads y, x and h (h is stored, since
    # the GEMM needed it) and writes the output
    assert [b for _, b in sim.kernels] == [2 * size, 4 * size]


def test_a_reduction_result_is_stored_and_kernels_split_by_iteration_space():
    x, w = torch.randn(128, 64), torch.randn(64, 64)

    def f(x, w):
        normed = F.layer_norm(x, (64,))
        return normed @ w, w.to(torch.bfloat16)

    runner, sim = _runner(f, x, w)
    stored = {n.name for n in runner.stored}
    assert any(name.startswith("var_mean") for name in stored)
    runner([x, w])
    # the weight cast and the normalisation are separate kernels (different sizes)
    assert len(sim.kernels) == 2
    by_bytes = sorted(b for _, b in sim.kernels)
    assert by_bytes[0] == 64 * 64 * (4 + 2)  # fp32 read, bf16 written
    assert by_bytes[1] >= 2 * 128 * 64 * 4  # x read, normed written (plus the small stats)


def test_values_in_registers_and_views_are_not_kernels():
    x = torch.randn(8, 16)

    def f(x):
        return (x.t() * 2).contiguous().view(-1)

    runner, sim = _runner(f, x)
    assert NEUTRAL in runner.roles.values()
    out = runner([x])
    torch.testing.assert_close(out, f(x))
    assert len(sim.kernels) == 1
    assert runner.in_registers  # the intermediate product never reaches memory


def test_inputs_are_released_as_the_graph_runs():
    x = torch.randn(4)
    args = [x]
    runner, _ = _runner(lambda a: a + 1, x)
    runner(args)
    assert args == []  # AOTAutograd's boxed convention: the graph took its inputs


def test_a_whole_tensor_amax_splits_and_its_consumer_reads_the_input_again():
    """float8 scaling: amax(|x|) to one scale, then x cast with it. Inductor splits the
    reduction (partial pass over x, final pass to the scalar) and the cast runs after it,
    loading x a second time; nothing of it shares the partial pass."""
    x = torch.randn(4096, 4096)  # 16.8M elements: more than 8,192 an output, one output

    def scale_and_cast(x):
        amax = torch.amax(torch.abs(x))
        return (x * (448.0 / amax)).clamp(-448.0, 448.0)

    runner, sim = _runner(scale_and_cast, x)
    torch.testing.assert_close(runner([x]), scale_and_cast(x))
    nbytes = x.numel() * 4
    by_bytes = sorted(b for _, b in sim.kernels)
    assert len(sim.kernels) == 3  # partial amax, final amax, the cast
    assert by_bytes[0] < 64  # the final pass: the scalar
    assert by_bytes[1] == nbytes  # the partial pass reads x
    assert by_bytes[2] >= 2 * nbytes  # the cast reads x again and writes its output


def test_a_row_reduction_fuses_with_its_consumer():
    x = torch.randn(4096, 1024)

    def rms_norm(x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6)

    runner, sim = _runner(rms_norm, x)
    runner([x])
    # one kernel: x read once, the output written (and the row statistic, which it stores)
    assert len(sim.kernels) == 1 and 0 <= sim.kernels[0][1] - 2 * x.numel() * 4 <= 2 * 4096 * 4


def test_generated_kernels_carry_the_math_of_what_they_evaluate():
    """erf's math (the fitted table) rides with the kernel that evaluates it, the amax's
    partial pass here; a plain add carries none."""
    from phantom.cost.roofline import generated_math_flops

    x = torch.randn(4096, 4096)
    runner, sim = _runner(lambda x: torch.amax(torch.erf(x)), x)
    runner([x])
    assert max(sim.math) == generated_math_flops("erf", x.numel()) > 0
    runner, sim = _runner(lambda x: x + 1, x)
    runner([x])
    assert sim.math == [0.0]


def test_a_misaligned_split_reduction_loads_slower():
    """16384 x 8192 elements to one value: Inductor's split size (993 elements a thread) starts
    chunks off 16-byte boundaries (cost/roofline.py split_reduction_plan)."""
    from phantom.cost.roofline import MISALIGNED_SPLIT_EFFICIENCY

    x = torch.empty(16384, 8192, device="meta")
    runner = GraphRunner(make_fx(lambda x: torch.amax(x))(torch.randn(4, 4)), RecordingSim())
    node = next(n for n in runner.nodes if n.op == "call_function")
    sizes = {i: (x.numel() * 2, x.numel()) for i in node.all_input_nodes}
    sizes[node] = (2, 1)
    assert runner._split_reduction(node, x.numel(), sizes) == MISALIGNED_SPLIT_EFFICIENCY
    small = {i: (4096 * 8192 * 2, 4096 * 8192) for i in node.all_input_nodes} | {node: (2, 1)}
    assert runner._split_reduction(node, 4096 * 8192, small) == 1.0


def test_an_outer_reduction_hands_its_result_to_a_later_kernel():
    """Per-column scales (amax over dim 0) and the cast that uses them: two kernels, the cast
    re-reading x, as Inductor ran it on the H100 (inductor_cast_H100.json, colwise)."""
    x = torch.randn(2048, 512)

    def colwise(x):
        amax = torch.amax(torch.abs(x), dim=0, keepdim=True)
        return x / amax

    runner, sim = _runner(colwise, x)
    torch.testing.assert_close(runner([x]), colwise(x))
    nbytes = x.numel() * 4
    assert len(sim.kernels) == 2
    assert sorted(b for _, b in sim.kernels)[1] >= 2 * nbytes  # the cast: x again, its output
