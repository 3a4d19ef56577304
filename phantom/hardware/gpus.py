"""GPU presets: datasheet specs of the GPUs phantom can simulate.

Peak rates are dense (no sparsity), in TFLOP/s; memory is what `torch.cuda` reports as the
device's total memory. Sources: NVIDIA H100/H200/A100 datasheets.
"""
from __future__ import annotations

import statistics
from dataclasses import dataclass, replace

from phantom.hardware.power import HOPPER_SXM, PowerModel

GIB = 1024**3

# How fast the GPU node's host runs plain Python: nanoseconds for the pure-Python probe of
# phantom.host.machine.probe_ns (`python -m phantom.host.machine` on the node; fastest of
# repeated runs, as a cloud GPU host changes speed up to 2x like any shared host). Measured on
# an H200 and an H100 node (Python 3.12), data in bench/host/data/host_reference_*.json. The
# script's own Python measured here is converted by it (host.machine.MachineSpeed); torch's
# work is priced by the host-cost table instead. A preset whose host was never measured takes
# the H200 node's host, a current Xeon server. The H100 node's probe ran 2.3x the H200's
# (1,065,344 ns), yet its real host-bound steps took only 1.09x as long (13 pairs,
# bench/host/host_pairs.py): the probe met that host in a slow state. Its preset takes the H200's
# probe scaled by the two hosts' reference CPU training steps (700,833 against 603,441 ns, the
# same files), which follow PyTorch's own host path.
H200_HOST_PROBE_NS = 471_902.0
H200_HOST_STEP_NS = 603_441.0  # the reference CPU training step (phantom.host.machine's history)
H100_HOST_STEP_NS = 700_833.0
H100_HOST_PROBE_NS = H200_HOST_PROBE_NS * H100_HOST_STEP_NS / H200_HOST_STEP_NS
# How far below that fastest speed a GPU node's host runs on average: the median of the mean
# slowdowns of the pure-Python probe of bench/host/host_flicker.py, run back to back for 10-15 s on
# H200 and H100 nodes (one value per probing core; the files are listed in bench/host/host_pairs.py).
# One value for every preset: the H100 hosts' runs are the higher (median 1.67 against 1.32),
# but their real host-bound steps are not slower by that: over 13 pairs of real runs of the same
# host-bound suite on an H100 and an H200 host, the H100 step took 1.09x the H200 one (median;
# 0.93-1.26), where per-kind values made the simulated H100 host 1.40x slower, above every pair,
# and one value makes it 1.16x (the reference steps' ratio); bench/host/host_pairs.py.
HOST_FLICKER_MEAN_SLOWDOWNS = (
    1.32, 1.55, 1.34, 1.32, 1.20, 1.24,  # H200 hosts (one and two GPUs)
    1.92, 1.45, 1.59, 1.87, 1.58, 2.15, 1.39, 1.74,  # H100 hosts (one and two GPUs)
)
HOST_MEAN_SLOWDOWN = statistics.median(HOST_FLICKER_MEAN_SLOWDOWNS)
# How far apart the ranks of one real multi-GPU step run on the host: every rank runs the same
# Python, yet on real GPU hosts one rank's host work in a step takes 2-13% longer than the
# ranks' mean (mostly the same rank, run after run), and the step ends when the slowest rank's
# work is done. Each value is one real run that recorded every rank's host time per step
# (tensor-parallel GPTs and the SD UNet under DDP; two 2 x H200 hosts, one 2 x H100, and a
# 4 x H100 host with 2 and with 4 ranks): the spread sigma of a lognormal rank host time that
# gives its mean slowest-to-mean ratio (bench/host/rank_host_spread.py, which reads the files).
# phantom.host.steady.straggler_pace turns the median into the pace of a node's slowest rank;
# its growth with the ranks of a host held on the 4 x H100 host: slowest / mean 1.109 with 4
# ranks (median of 6 runs) against 1.105 predicted, 1.055 with 2 (1.056).
HOST_RANK_SPREADS = (
    0.216, 0.117, 0.072, 0.101, 0.041, 0.062, 0.055, 0.090, 0.106, 0.097,  # 2 x H200 / 2 x H100
    0.096, 0.101, 0.099, 0.100, 0.093, 0.105, 0.153, 0.126, 0.065, 0.097, 0.083, 0.094,  # 4 x H100 host
)
HOST_RANK_SPREAD = statistics.median(HOST_RANK_SPREADS)


@dataclass(frozen=True)
class GPUSpec:
    name: str  # canonical preset name, e.g. "H100"
    device_name: str  # what torch.cuda.get_device_name() returns on the real GPU
    memory_bytes: int  # total device memory as torch.cuda.get_device_properties reports it
    bf16_tflops: float
    fp16_tflops: float
    fp32_tflops: float  # non-tensor-core FP32
    tf32_tflops: float
    fp8_tflops: float | None  # None: no FP8 tensor cores
    hbm_gbps: float  # HBM bandwidth, GB/s
    sm_count: int
    compute_capability: tuple[int, int]
    nvlink_gbps: float  # NVLink bandwidth per GPU per direction, GB/s
    l2_cache_bytes: int
    tdp_watts: int  # the board's power limit, which the power model holds it to
    sm_clock_mhz: float  # maximum SM (boost) clock, NVIDIA's datasheet: torch.cuda._sleep's cycles
    power: PowerModel | None = None  # what its kernels draw (None: the limit is not modelled)
    host_probe_ns: float = H200_HOST_PROBE_NS  # the node's Python speed (see H200_HOST_PROBE_NS)
    host_mean_slowdown: float = HOST_MEAN_SLOWDOWN  # its typical speed below that
    host_rank_spread: float = HOST_RANK_SPREAD  # how far apart ranks' hosts run (see above)
    # A preset of the same die and clocks whose measured kernel rows this GPU borrows: all of
    # them when it has no database of its own, else the signatures its own misses. Tensor-core
    # rows keep their time, the others move by the fallback model's difference of the two GPUs,
    # at most by its ratio (the memory system differs, the SMs do not): cost/dbmodel.borrow_ns.
    kernel_db_from: str | None = None

    @property
    def memory_gib(self) -> float:
        return self.memory_bytes / GIB

    def peak_tflops(self, dtype_name: str) -> float:
        """Dense tensor-core peak for a dtype name (bf16, fp16, fp32, tf32, fp8)."""
        table = {
            "bf16": self.bf16_tflops,
            "fp16": self.fp16_tflops,
            "fp32": self.fp32_tflops,
            "tf32": self.tf32_tflops,
            "fp8": self.fp8_tflops or self.bf16_tflops,
        }
        return table[dtype_name]

    def with_memory_gib(self, gib: float) -> "GPUSpec":
        return replace(self, memory_bytes=int(gib * GIB))

    def with_power_limit(self, watts: float) -> "GPUSpec":
        return replace(self, tdp_watts=int(round(watts)))


# Total memory values are what the CUDA driver reports (cudaMemGetInfo total, which is what
# torch.cuda.get_device_properties().total_memory returns), slightly below nvidia-smi's
# figure. H100 and H200: measured, as bench/kernels/measure.py records it (`memory_bytes` in
# bench/kernels/results/kernels_{H100,H200}.json). A100: nvidia-smi's MiB figure (no A100
# measured).
_PRESETS: dict[str, GPUSpec] = {
    "H100": GPUSpec(
        name="H100",
        device_name="NVIDIA H100 80GB HBM3",
        memory_bytes=85_017_493_504,
        bf16_tflops=989.4,
        fp16_tflops=989.4,
        fp32_tflops=66.9,
        tf32_tflops=494.7,
        fp8_tflops=1978.9,
        hbm_gbps=3350.0,
        sm_count=132,
        compute_capability=(9, 0),
        nvlink_gbps=450.0,
        l2_cache_bytes=50 * 1024**2,
        tdp_watts=700,
        sm_clock_mhz=1980,
        power=HOPPER_SXM,
        host_probe_ns=H100_HOST_PROBE_NS,
        kernel_db_from="H200",  # the H200's rows fill this database's gaps (bench/probes/db_borrow.py)
    ),
    "H200": GPUSpec(
        name="H200",
        device_name="NVIDIA H200",
        memory_bytes=150_109_880_320,
        bf16_tflops=989.4,
        fp16_tflops=989.4,
        fp32_tflops=66.9,
        tf32_tflops=494.7,
        fp8_tflops=1978.9,
        hbm_gbps=4800.0,
        sm_count=132,
        compute_capability=(9, 0),
        nvlink_gbps=450.0,
        l2_cache_bytes=60 * 1024**2,
        tdp_watts=700,
        sm_clock_mhz=1980,
        power=HOPPER_SXM,
        kernel_db_from="H100",  # the H100's rows fill this database's gaps (bench/probes/db_borrow.py)
    ),
    "A100": GPUSpec(
        name="A100",
        device_name="NVIDIA A100-SXM4-80GB",
        memory_bytes=81920 * 1024**2,
        bf16_tflops=312.0,
        fp16_tflops=312.0,
        fp32_tflops=19.5,
        tf32_tflops=156.0,
        fp8_tflops=None,
        hbm_gbps=2039.0,
        sm_count=108,
        compute_capability=(8, 0),
        nvlink_gbps=300.0,
        l2_cache_bytes=40 * 1024**2,
        tdp_watts=400,
        sm_clock_mhz=1410,
    ),
    "A100-40GB": GPUSpec(
        name="A100-40GB",
        device_name="NVIDIA A100-SXM4-40GB",
        memory_bytes=40960 * 1024**2,
        bf16_tflops=312.0,
        fp16_tflops=312.0,
        fp32_tflops=19.5,
        tf32_tflops=156.0,
        fp8_tflops=None,
        hbm_gbps=1555.0,
        sm_count=108,
        compute_capability=(8, 0),
        nvlink_gbps=300.0,
        l2_cache_bytes=40 * 1024**2,
        tdp_watts=400,
        sm_clock_mhz=1410,
    ),
    # The H100 of Meta's Grand Teton hosts that torchtitan's published H100 numbers come from
    # (torchtitan benchmarks/llama3_h100_202412_torchtitan.md): 96 GB HBM2e at 2.4 TB/s, run
    # at a 500 W power limit. That file puts its peak "between SXM and NVL" (989 and 835
    # TFLOP/s dense bf16): what the board delivers under its limit. The preset takes the SXM
    # die's peak and clocks and leaves the limit to the power model (measured on an H100 SXM;
    # the HBM2e's energy per byte is taken as the HBM3's, an assumption). Kernel times: the
    # H100 SXM's measured database, scaled per kernel for the slower memory (kernel_db_from).
    # Memory: 96 GiB less what the driver keeps on the 80 GB part (0.88 GB), an estimate.
    "H100-96GB": GPUSpec(
        name="H100-96GB",
        device_name="NVIDIA H100 96GB HBM2e",
        memory_bytes=102_197_362_688,
        bf16_tflops=989.4,
        fp16_tflops=989.4,
        fp32_tflops=66.9,
        tf32_tflops=494.7,
        fp8_tflops=1978.9,
        hbm_gbps=2400.0,
        sm_count=132,
        compute_capability=(9, 0),
        nvlink_gbps=450.0,
        l2_cache_bytes=50 * 1024**2,
        tdp_watts=500,
        sm_clock_mhz=1980,
        power=HOPPER_SXM,
        kernel_db_from="H100",
    ),
}


class UnknownGPUError(ValueError):
    pass


def list_gpus() -> list[GPUSpec]:
    return list(_PRESETS.values())


def get_gpu(name: str) -> GPUSpec:
    """Look a preset up by name, case-insensitively; unknown names list the known ones."""
    for key, spec in _PRESETS.items():
        if key.lower() == name.strip().lower():
            return spec
    known = ", ".join(_PRESETS)
    raise UnknownGPUError(f"unknown GPU {name!r}; known GPUs: {known} (see `phantom gpus`)")
