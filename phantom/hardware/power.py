"""What a GPU's kernels draw from its power budget, for the power-limit model (engine/power.py).

A board holds its power at or under its limit by lowering the SM clock. phantom's kernel times
(database rows and the calibrated roofline) are what a kernel takes in a short measurement, so a
run whose kernel mix asks for more power than the limit for longer than the controller's window
runs slower than those times say: that is what the model adds.

Model (per board): a GEMM's database time t_db is a back-to-back measurement, at the clock the
limit allows a stream of it; at the burst clock it takes t = gemm_db_clock_share * t_db and draws
    P = base_w + e_compute * flops / t + e_hbm * bytes / t_db
where e_compute is the tensor-core energy per FLOP of its class at that clock (GEMM/convolution
or attention, 0 for other kernels) and e_hbm the energy per byte moved to or from HBM. Attention
and convolution kernels keep their database times (t = t_db): attention's draw is per FLOP at
its database rate, a convolution's that of a GEMM at the database's clock. Lowering the clock by
a factor s (0 < s <= 1) stretches the clock-bound part of a compute kernel by 1/s and scales its
compute power by s ** clock_exponent (dynamic power f * V^2 with the voltage falling with f).

The numbers below were measured on an H100 SXM at its 700 W limit by bench/kernels/power_probe.py
and power_dynamics.py, data in bench/kernels/results/power_probe_H100.json and
power_dynamics_H100.json (the board, driver and torch are recorded inside). Reading only: no
setting of the board was changed.
"""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class PowerModel:
    base_w: float  # board power with the clocks up and no kernel running (warm board)
    gemm_db_clock_share: float  # a GEMM's time at the burst clock over its database time
    gemm_pj_per_flop: float  # GEMMs (and convolutions), at the burst clock
    attention_pj_per_flop: float  # flash attention (its useful FLOPs, causal-halved)
    hbm_pj_per_byte: float  # one byte read or written in HBM
    clock_exponent: float  # compute power ~ clock ** this, in the throttled range
    window_ms: float  # the power controller's averaging window
    source: str


# Note [Database GEMM clock]
# ~~~~~~~~~~~~~~~~~~~~~~~~~~
# The kernel database times a row as cost/profile/timing.py does: CUDA-graph replays back to
# back, after a second of big GEMMs to ramp the clock. A compute-bound row so carries the SM
# clock the power limit allows a long stream of that kernel, not the burst clock a GEMM runs at
# between the memory-bound kernels of a training step. engine/power.py takes each GEMM to the
# burst clock by `gemm_db_clock_share` and lowers the clock again only where the simulated
# kernel mix draws more than the limit.
#
# Measured by bench/kernels/gemm_clock.py on an H100 (data in
# bench/kernels/results/gemm_clock_H100.json): 21 bf16 GEMMs (Llama 3
# 8B's at 8192 tokens, squares of 2048-16384) timed after 1 s idle (SM clock 1980 MHz) took
# 0.912 (0.84-0.96) of their database-style time, and 0.911 (0.90-0.93) of a 0.6 s back-to-back
# stream's (1490-1690 MHz). The same GEMMs inside a traced torchtitan step ran within -4..+10%
# of the idle-start times (mean +2%). Attention rows are not moved: in two traced steps (H100,
# 4 x H200) flash attention ran at 1.03x and 1.01x its database time, and a stream of it draws
# about the limit. Convolution rows were never compared and keep their times. A change of the
# database's timing method must re-measure the share.

# Measured on the H100 SXM above:
#   base_w: 134 W idle with the clock held up after load (49 C) and 157 W as the intercept of
#     board power against busy SMs at the full clock; 150 W is taken.
#   hbm_pj_per_byte: a 1 GiB device copy moves 3.01 TB/s at 502 W: (502 - 150) W / 3.01 TB/s =
#     117 pJ/B; an elementwise add (3.06 TB/s, 529 W) gives 124.
#   clock_exponent: a persistent Triton GEMM on k of the 132 SMs (k = 8..132, two data
#     patterns): below the limit power rises 13.7 (10.6) W per busy SM at the full clock; at the
#     limit the per-SM rate falls, and dynamic power against that rate gives exponents 2.6-3.5,
#     median 2.9 over the eight capped points.
#   gemm_db_clock_share: see Note [Database GEMM clock] above.
#   gemm_pj_per_flop: cuBLAS bf16 8192^3 back to back settles at 690 TFLOP/s and 695 W after
#     ~100 ms; the kernel database has it at 730 TFLOP/s (1.506 ms), so 800 at the burst clock
#     (GEMM phases of 2-50 ms between copies ran at 770-793). Its compute power at the burst
#     clock: (695 - 150 - 30 [HBM]) W / (690/800) ** 2.9 = 791 W over 800 TFLOP/s.
#   attention_pj_per_flop: flash attention forward + backward (B 2, H 32, S 8192, D 128,
#     causal) back to back: 286 TFLOP/s at 698 W, a rate the database's estimate already has
#     (13.75 ms simulated, 13.46 ms measured): (698 - 150) W / 280 TFLOP/s.
#   window_ms: GEMM phases of 2-50 ms alternating with equal copy phases run at the burst rate
#     (770-793 TFLOP/s); 200 ms and 1 s phases run at the sustained one (688); from rest the
#     rate falls from 795 to its sustained value between 50 and 100 ms.
HOPPER_SXM = PowerModel(
    base_w=150.0,
    gemm_db_clock_share=0.912,
    gemm_pj_per_flop=0.99,
    attention_pj_per_flop=1.96,
    hbm_pj_per_byte=117.0,
    clock_exponent=2.9,
    window_ms=100.0,
    source="measured on an H100 SXM at 700 W (bench/kernels/results/power_*_H100.json)",
)
