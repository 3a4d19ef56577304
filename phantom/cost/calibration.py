"""Calibration constants of the roofline cost model, and how a GPU gets its set.

Where the numbers live:
  * `phantom/cost/data/<GPU>.json` — per-GPU sets fitted by `phantom.cost.calibrate` from kernel
    times measured on that GPU by `bench/kernels/measure.py`. Each file names its measurement
    (device, driver, torch/CUDA, date) and carries the fit quality per group.
  * `seed_calibration()` below — the fallback used only when no measured file can be found. Every
    seed constant names its source in `notes`; those marked "assumption" are shape parameters
    with no public measurement, which the fit replaces.

Scaling rule for a GPU without its own file (`scale_calibration`): efficiencies are fractions of
the GPU's own datasheet peaks (GPUSpec), so they carry over unchanged; launch floors (µs) carry
over unchanged (launch latency is a property of the driver/front-end, similar across datacenter
parts); the bytes-in-flight scale b_sat of every memory curve scales with HBM bandwidth (Little's
law: bytes in flight needed to saturate = bandwidth x latency) and sat_blocks with the SM count;
SM count and peaks come from the GPUSpec at estimate time. A source of the same compute-capability major is preferred; across
architectures the `ARCH_OVERRIDES` (public measurements) are applied on top, and the GEMM
residuals (corrections measured on one architecture's cuBLAS kernels) are dropped.
"""
from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

from phantom.hardware.gpus import GPUSpec, UnknownGPUError, get_gpu

DATA_DIR = Path(__file__).resolve().parent / "data"
SCHEMA_VERSION = 1

# GEMM precisions a calibration distinguishes (keys of GemmCal.curves).
GEMM_PRECISIONS = ("bf16", "fp16", "tf32", "fp32", "fp8", "fp8_rowwise")


@dataclass(frozen=True)
class GemmCurve:
    """Achieved fraction of one precision's peak for a GEMM of shape (batch, M, N, K).

    eff = eff_max * wave_util(work units over SMs) ** gamma * K_eff / (K_eff + k_half)
          * tile padding of M and N  [* misaligned_scale | unaligned_scale]
    where work units are output tiles (tile_m x tile_n), split along K when there are fewer
    tiles than SMs (cuBLAS split-K, slices of at least split_k_min), and K_eff is the K depth one
    work unit walks (its pipeline fill/drain is paid once per unit). gamma is fill_gamma when
    the units do not fill one wave (units < SMs: idle SMs, nothing can hide them) and wave_gamma
    for the tail of the last of several waves (Hopper's persistent cuBLAS kernels spread that
    tail over the SMs: fitted wave_gamma is close to 0, fill_gamma about 0.55); fill_gamma None
    means wave_gamma for both (files fitted before the two were told apart).
    The alignment factor applies when an operand's leading dimension is not a multiple of 16
    bytes, so cuBLAS cannot use its TMA/tensor-core fast path. Measured on H100 and H200
    (`bench/kernels/measure.py`'s gemm_align group): 4- and 8-byte aligned shapes run at about a
    third of the aligned rate (misaligned_scale), 2-byte aligned ones (odd sizes: a 4095^3 GEMM,
    GPT-2's 50257-wide LM head) at about a sixth (unaligned_scale). misaligned_scale None means
    unaligned_scale for both (files fitted before the classes were told apart).
    """

    eff_max: float
    k_half: float
    tile_m: int
    tile_n: int
    wave_gamma: float
    split_k_min: float
    unaligned_scale: float = 1.0
    fill_gamma: float | None = None
    misaligned_scale: float | None = None
    misaligned_k_half: float | None = None  # the 4/8-byte kernels' k_half (None: k_half)
    # The 4/8-byte kernels' exponent on the last wave's tail: they are not Hopper's persistent
    # TMA kernels, so a partial last wave idles SMs (2500^3: 400 tiles = 3.03 waves of 132).
    misaligned_wave_gamma: float | None = None

    def k_half_for(self, align_bytes: int) -> float:
        """K half-saturation depth of the kernel cuBLAS picks at this alignment: the 4/8-byte
        kernels load without TMA and pay a longer prologue per tile (measured: at M = N = 1024
        they go from 126 to 207 TFLOP/s as K goes 1500 -> 6148 on H100, aligned ones far less)."""
        if 4 <= align_bytes < 16 and self.misaligned_k_half is not None:
            return self.misaligned_k_half
        return self.k_half

    def alignment_scale(self, align_bytes: int) -> float:
        """Efficiency factor of a GEMM whose worst leading dimension is `align_bytes`-aligned."""
        if align_bytes >= 16:
            return 1.0
        if align_bytes >= 4 and self.misaligned_scale is not None:
            return self.misaligned_scale
        return self.unaligned_scale


@dataclass(frozen=True)
class GemmResiduals:
    """Measured corrections on top of a GemmCurve, interpolated in log space over the sweep.

    Each sweep row of one precision leaves a point (log2(batch*M), log2 N, log2 K, r) with
    r = ln(measured / curve's time). A shape's correction is exp of the Gaussian-weighted mean
    of the r of its alignment class (16-byte aligned or not; the class factor is in the curve), the weights exp(-d^2 / 2 h^2) of
    the distance d in log2 units, plus a weight w0 on r = 0: on the grid it reproduces the
    measurements up to the neighbours' share; between grid points it blends them; far from any
    (a shape the sweep never came near) it fades to the analytic curve. h and w0 are chosen by
    leave-one-shape-out cross-validation over the sweep (calibrate.py). Convolutions and
    GEMMs of a precision without rows get no correction.
    """

    h: float
    w0: float
    aligned: tuple[tuple[float, float, float, float], ...] = ()
    unaligned: tuple[tuple[float, float, float, float], ...] = ()


@dataclass(frozen=True)
class GemmCal:
    floor_us: float  # launch + tail of one cuBLAS kernel
    mem_eff: float  # fraction of HBM bandwidth a memory-bound (skinny) GEMM streams at
    conv_scale: float  # cuDNN conv efficiency relative to a GEMM of the same implicit-GEMM shape
    curves: dict[str, GemmCurve]
    residuals: dict[str, GemmResiduals] = field(default_factory=dict)  # per precision (see GemmResiduals)
    # conv efficiency per "<precision>.<layout>.<fwd|bwd>" (calibrate_conv.py), where the sweep
    # measured that combination; conv_scale otherwise
    conv_scales: dict[str, float] = field(default_factory=dict)
    # grouped and depthwise convs per "<precision>.<layout|conv1d>.<fwd|bwd>" (calibrate_conv.py)
    grouped_conv: dict[str, "GroupedConvCal"] = field(default_factory=dict)


@dataclass(frozen=True)
class GroupedConvCal:
    """A grouped convolution (groups > 1: depthwise in MobileNet, EfficientNet, ConvNeXt and
    Mamba's conv1d; ResNeXt's 32 groups) runs cuDNN's or ATen's direct kernels, not the implicit
    GEMM of a dense conv: a depthwise conv has one input channel per group and no GEMM to speak
    of. Measured on the H100 (bench/kernels/measure.py, conv_grouped), the flop rate grows with
    the input channels per group (CUDA-core kernels for depthwise, tensor cores as groups
    widen) and small kernels are HBM-bound:

        time = floor + max(flops / (tflops * 1e12 * cin_per_group ** alpha), bytes / (HBM * mem_eff))
    """

    tflops: float  # the rate of a depthwise conv (one input channel per group)
    alpha: float  # how the rate grows with input channels per group
    mem_eff: float  # fraction of HBM bandwidth when memory-bound


@dataclass(frozen=True)
class BatchNormCal:
    """Training-mode batch norm (statistics and normalisation, or its backward). Measured on the
    H100 (bench/kernels/measure.py, batch_norm), its time follows the element count, not the
    bytes (bf16 and fp32 take the same time: the Welford reductions bound it), and in NCHW
    the statistics kernel works one channel per block, so few channels leave SMs idle (64
    channels at 112x112: 65 G elements/s, against ~170 in NHWC):

        time = floor + numel / (gelems_per_s * 1e9 * min(1, channels / c_sat))
    """

    floor_us: float
    gelems_per_s: float
    c_sat: float  # channels that fill the GPU (1: the layout does not depend on them)


@dataclass(frozen=True)
class AttnCurve:
    """Flash-attention efficiency (one direction, fwd or bwd).

    eff = eff_max * wave_util(B*Hq*ceil(S_par/tile)) ** wave_gamma * L/(L + s_half) * D/(D + d_half)
    where S_par is the parallelised sequence (Sq fwd, Sk bwd) and L the average length of the
    inner loop (the other sequence, halved by a causal mask).
    """

    eff_max: float
    s_half: float
    d_half: float
    wave_gamma: float
    tile: int
    floor_us: float
    mem_eff: float


@dataclass(frozen=True)
class MemCurve:
    """Memory-bound kernel: t = floor_us + bytes / (HBM * bw_eff * (1 - exp(-bytes/b_sat))).

    The saturating factor is Little's law: a kernel moving few bytes cannot keep enough loads in
    flight to reach the streaming bandwidth; b_sat is the bytes-in-flight scale. Multi-tensor-apply
    kernels (optimizer) are costed per launch instead, with the bandwidth scaled by
    min(1, blocks in the launch / sat_blocks): a launch of few chunks cannot fill the GPU.
    """

    floor_us: float
    bw_eff: float
    b_sat: float
    sat_blocks: float = 0.0  # multi-tensor-apply only: blocks per launch that saturate HBM


@dataclass(frozen=True)
class TransferCal:
    """Host<->device memcpy over PCIe: t = floor_us + bytes / bandwidth."""

    floor_us: float
    h2d_pinned_gbps: float
    h2d_pageable_gbps: float
    d2h_pinned_gbps: float
    d2h_pageable_gbps: float


@dataclass(frozen=True)
class Calibration:
    gpu: str  # GPUSpec.name these constants were measured on (or scaled to)
    origin: str  # "measured", "seed", or "scaled from <GPU> (<origin>)"
    source: str  # where the numbers came from, human-readable
    gemm: GemmCal
    attention: dict[str, AttnCurve]  # "<backend>.<fwd|bwd>": flash, cudnn, efficient (flash is the fallback)
    memory: dict[str, MemCurve]  # keyed by op class, or "class:op" for an op measured on its own
    transfer: TransferCal
    notes: dict[str, str] = field(default_factory=dict)  # provenance per constant group
    fit: dict[str, Any] = field(default_factory=dict)  # fit quality per group (calibrate.py)
    # training-mode batch norm per "<layout>.<fwd|bwd>" (calibrate_norm.py); the norm class's
    # byte curve where absent
    batch_norm: dict[str, "BatchNormCal"] = field(default_factory=dict)

    def attn_curve(self, backend: str, bwd: bool) -> AttnCurve:
        """The backend's own curve if it was measured, else flash attention's."""
        d = "bwd" if bwd else "fwd"
        return self.attention.get(f"{backend}.{d}") or self.attention[f"flash.{d}"]

    def mem_curve(self, op_class: str, *op_keys: str) -> MemCurve:
        """The first of the op's keys that was measured, else its class's curve, else the copy curve."""
        for key in op_keys:
            curve = self.memory.get(f"{op_class}:{key}")
            if curve is not None:
                return curve
        return self.memory.get(op_class) or self.memory["copy"]

    def to_dict(self) -> dict[str, Any]:
        return {"schema": SCHEMA_VERSION, **asdict(self)}

    @staticmethod
    def from_dict(d: dict[str, Any]) -> "Calibration":
        g = d["gemm"]
        return Calibration(
            gpu=d["gpu"],
            origin=d.get("origin", "measured"),
            source=d.get("source", ""),
            gemm=GemmCal(g["floor_us"], g["mem_eff"], g["conv_scale"],
                         {k: GemmCurve(**v) for k, v in g["curves"].items()},
                         {k: _residuals_from_dict(v) for k, v in g.get("residuals", {}).items()},
                         dict(g.get("conv_scales", {})),
                         {k: GroupedConvCal(**v) for k, v in g.get("grouped_conv", {}).items()}),
            attention={k: AttnCurve(**v) for k, v in d["attention"].items()},
            memory={k: MemCurve(**v) for k, v in d["memory"].items()},
            transfer=TransferCal(**d["transfer"]),
            notes=dict(d.get("notes", {})),
            fit=dict(d.get("fit", {})),
            batch_norm={k: BatchNormCal(**v) for k, v in d.get("batch_norm", {}).items()},
        )


def _residuals_from_dict(d: dict[str, Any]) -> GemmResiduals:
    return GemmResiduals(h=d["h"], w0=d["w0"], aligned=tuple(tuple(p) for p in d.get("aligned", ())),
                         unaligned=tuple(tuple(p) for p in d.get("unaligned", ())))


# --------------------------------------------------------------------------------------
# Seed (fallback when no measured file exists), Hopper-class, relative to H100 SXM specs.
# --------------------------------------------------------------------------------------
SEED_GPU = "H100"

# Measurements the seed cites.
H100_BF16_GEMM_ACHIEVED = 798.0 / 989.4  # an H100's 8192^3 bf16 GEMM on random data
H100_COPY_ACHIEVED = 3000.0 / 3350.0  # an H100's D2D copy, ~3.0 TB/s counting read+write
H200_COPY_ACHIEVED = 4300.0 / 4800.0  # an H200's D2D copy, ~4.3 TB/s: the same fraction
FA2_H100_UTILISATION = 0.35  # FlashAttention-3 paper (arXiv 2407.08608) abstract: FA2 reaches 35% of H100 peak
LAUNCH_FLOOR_US = 2.5  # assumed: ~2-3 us per kernel on H100 (back-to-back launch + tail)


def seed_calibration() -> Calibration:
    """Hopper seed. Built fresh on each call so no module-level mutable state exists."""
    bf16 = GemmCurve(eff_max=H100_BF16_GEMM_ACHIEVED, k_half=128.0, tile_m=128, tile_n=128,
                     wave_gamma=0.5, split_k_min=512.0, unaligned_scale=0.2)
    mem = MemCurve(floor_us=LAUNCH_FLOOR_US, bw_eff=H100_COPY_ACHIEVED, b_sat=4e6, sat_blocks=132.0)
    memory = {c: mem for c in ("copy", "elementwise", "reduction", "norm", "softmax", "loss", "embedding",
                               "random", "optimizer", "other")}
    attn = AttnCurve(eff_max=FA2_H100_UTILISATION / 0.8, s_half=256.0, d_half=32.0, wave_gamma=0.5, tile=128,
                     floor_us=LAUNCH_FLOOR_US, mem_eff=H100_COPY_ACHIEVED)
    return Calibration(
        gpu=SEED_GPU,
        origin="seed",
        source="public measurements (see notes); shape parameters are assumptions until fitted",
        gemm=GemmCal(floor_us=LAUNCH_FLOOR_US, mem_eff=H100_COPY_ACHIEVED, conv_scale=0.7,
                     curves={"bf16": bf16, "fp16": bf16,
                             "tf32": replace(bf16, eff_max=0.75), "fp32": replace(bf16, eff_max=0.75),
                             "fp8": replace(bf16, eff_max=0.70), "fp8_rowwise": replace(bf16, eff_max=0.65)}),
        attention={"flash.fwd": attn, "flash.bwd": replace(attn, eff_max=0.30 / 0.8)},
        memory=memory,
        transfer=TransferCal(floor_us=8.0, h2d_pinned_gbps=25.0, h2d_pageable_gbps=10.0, d2h_pinned_gbps=25.0,
                             d2h_pageable_gbps=10.0),
        notes={
            "gemm.bf16.eff_max": "798 TFLOP/s of 989.4 at 8192^3 measured on an H100; "
                                 "ml-engineering MAMF table gives H100 SXM 792.1/989 = 80.1%",
            "gemm.fp16": "same tensor-core rate as bf16 (H100 datasheet)",
            "gemm.tf32/fp32/fp8/fp8_rowwise.eff_max": "assumption (no public measurement at hand)",
            "gemm shape params (k_half, tiles, wave_gamma, split_k_min), conv_scale": "assumption",
            "gemm.unaligned_scale": "assumption (~1/5; see GemmCurve)",
            "memory.bw_eff": "3.0 TB/s of 3.35 (H100) and 4.3 of 4.8 (H200) D2D copy measured on the two "
                             "GPUs: both 0.90 of datasheet",
            "memory.b_sat": "assumption (~1.2 us latency x 3.35 TB/s)",
            "memory.sat_blocks": "assumption (one block per SM)",
            "floor_us": "assumption: launch floor ~2-3 us per kernel on H100",
            "attention.eff_max": "FA3 paper abstract: FlashAttention-2 reaches 35% utilisation on H100 "
                                 "(fwd); bwd assumed 30%; divided by the seed's size factors at D=128",
            "transfer": "assumption (PCIe); measure.py measures it",
        },
    )


# Public per-architecture numbers applied when scaling across architectures (compute-capability major).
ARCH_OVERRIDES: dict[int, dict[str, tuple[float, str]]] = {
    8: {
        "gemm.bf16.eff_max": (267.9 / 312.0, "ml-engineering MAMF table: A100 SXM bf16 267.9 of 312 TFLOP/s"),
        "gemm.fp16.eff_max": (267.9 / 312.0, "as bf16 (same tensor-core rate on A100)"),
    },
}


# --------------------------------------------------------------------------------------
# Loading and scaling
# --------------------------------------------------------------------------------------
def _apply_overrides(cal: Calibration, cc_major: int) -> Calibration:
    overrides = ARCH_OVERRIDES.get(cc_major, {})
    if not overrides:
        return cal
    curves = dict(cal.gemm.curves)
    notes = dict(cal.notes)
    for key, (value, why) in overrides.items():
        _, prec, attr = key.split(".")
        curves[prec] = replace(curves[prec], **{attr: value})
        notes[key] = why
    return replace(cal, gemm=replace(cal.gemm, curves=curves), notes=notes)


def scale_calibration(cal: Calibration, ref: GPUSpec, gpu: GPUSpec) -> Calibration:
    """Carry a calibration measured on `ref` over to `gpu` (rule in the module docstring)."""
    ratio = gpu.hbm_gbps / ref.hbm_gbps
    sm_ratio = gpu.sm_count / ref.sm_count  # blocks needed to fill the GPU scale with its SMs
    memory = {k: replace(v, b_sat=v.b_sat * ratio, sat_blocks=v.sat_blocks * sm_ratio) for k, v in cal.memory.items()}
    scaled = replace(cal, gpu=gpu.name, origin=f"scaled from {ref.name} ({cal.origin})", memory=memory,
                     fit={}, notes={**cal.notes, "scaling": f"from {ref.name}: efficiencies and floors kept, "
                                                            f"b_sat x{ratio:.3f} (HBM ratio), "
                                                            f"sat_blocks x{sm_ratio:.3f} (SM ratio)"})
    if gpu.compute_capability[0] != ref.compute_capability[0]:
        # The residuals correct one architecture's cuBLAS kernels; another's start from the curve.
        # The grouped-conv and batch-norm tables are absolute rates of one architecture's
        # kernels: another's fall back to the implicit-GEMM and byte models.
        scaled = replace(scaled, gemm=replace(scaled.gemm, residuals={}, grouped_conv={}), batch_norm={})
        scaled = _apply_overrides(scaled, gpu.compute_capability[0])
    return scaled


def read_calibration(path: Path) -> Calibration:
    with open(path) as f:
        return Calibration.from_dict(json.load(f))


def write_calibration(cal: Calibration, path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w") as f:
        json.dump(cal.to_dict(), f, indent=1, sort_keys=False)
        f.write("\n")


def calibration_path(gpu_name: str, data_dir: Path | None = None) -> Path:
    return (data_dir or DATA_DIR) / f"{gpu_name}.json"


def _measured_files(data_dir: Path) -> list[tuple[GPUSpec, Path]]:
    found = []
    for path in sorted(data_dir.glob("*.json")):
        try:
            found.append((get_gpu(path.stem), path))
        except UnknownGPUError:
            continue  # a file for a GPU without a preset cannot be scaled from
    return found


def load_calibration(gpu: GPUSpec, data_dir: Path | None = None) -> Calibration:
    """The GPU's own measured set, else the nearest measured set scaled to it, else the scaled seed."""
    data_dir = data_dir or DATA_DIR
    own = calibration_path(gpu.name, data_dir)
    if own.exists():
        return read_calibration(own)
    candidates = _measured_files(data_dir) if data_dir.exists() else []
    if candidates:
        # Same architecture first, then the closest memory bandwidth.
        ref, path = min(candidates, key=lambda c: (c[0].compute_capability[0] != gpu.compute_capability[0],
                                                    abs(c[0].hbm_gbps - gpu.hbm_gbps)))
        return scale_calibration(read_calibration(path), ref, gpu)
    seed = seed_calibration()
    return scale_calibration(seed, get_gpu(SEED_GPU), gpu) if gpu.name != SEED_GPU else seed
