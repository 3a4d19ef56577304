"""The start-up calibration: what phantom's own way to its handler costs on this machine.

See Note [Host time] in phantom/host/__init__.py. Each measurement here is a difference between
the same work run under the simulation and run for real on CPU tensors, in alternating blocks,
so that both see the same machine state; what a run charges is the median of this measurement
and the recent ones of the same code on this machine (`HostSpeedNormalizer.settle`).
"""
from __future__ import annotations

import gc
import os
import random
import statistics
from typing import Any, Callable, Iterator

import torch
from torch._subclasses.fake_tensor import unset_fake_temporarily

from phantom.host.account import REAL_NS, HostAccount
from phantom.host.machine import cpu_contended, training_step, wake_penalty_ns
from phantom.host.pace import PACE_FILE_ENV, wait_for_pace
from phantom.host.pace import PERIOD_S as PACE_PERIOD_S
from phantom.host.speed import (API_CALL, DISPATCH_OVERHEAD, LIST_INPUT, LIST_OUTPUT, RELEASE,
                                WAKE_PENALTY, code_fingerprint)

# Whether a run re-measures a full calibration history (`_recent_calibration`): its own
# generator, so the script's `random` sequence is the same under phantom as without it.
_remeasure_draw = random.Random().random

# While a code version has fewer measurements than this on a machine (its first runs after an
# install or upgrade), the calibration takes FIRST_RUNS_PAIR_FACTOR times as many pairs: one
# measurement of 15 pairs spreads by ~1.3 us per entry on a 2-core VM (10.9-15.6 us in 12
# runs back to back), of 45 pairs by ~0.7 us; later runs charge the median of the history,
# which is steadier anyway.
FIRST_RUNS = 5
FIRST_RUNS_PAIR_FACTOR = 3
# Pairs of blocks a run's calibration measures once the history has FIRST_RUNS measurements.
# The calibration is most of a short run's start-up (5 s with 15 pairs on a 2-core VM, against
# ~3 s for everything else); what a run charges is the median of the last HISTORY
# measurements, so 8 pairs' wider spread (~1.4x one measurement's) narrows again there.
CALIBRATION_PAIRS = 8
# Once a code version has HISTORY measurements here, one run in REMEASURE_EVERY measures again
# and the others charge the history's median (`_recent_calibration`).
REMEASURE_EVERY = 4
# The training step's shape in the calibration (batch, width). The overhead is the fake step's
# gaps minus the same step on CPU tensors, per handler entry: every microsecond the CPU kernels
# spend computing is taken off that difference. At the reference step's 16x64 the CPU step's
# arithmetic is ~110 of its ~670 us (~1.7 us per entry); at 1x8 almost none. The fake side does
# no arithmetic at any shape (its handler's time is not in the gaps).
CALIBRATION_SHAPE = (1, 8)
# Calibrations measured while other processes competed for this machine's CPUs are kept in a
# history of their own (the fingerprint with this suffix): one busy process beside the
# calibration lowered its per-entry overhead from 14.5-15.7 to 10.1-11.0 us on a 2-core VM, and
# a history mixing such values made op-dense layer code come out ~1.5-2x its real host time.
CONTENDED_SUFFIX = "+contended"
PACED_SUFFIX = "+paced"  # ... and those converted by the pace process (host.pace), likewise

# Host cost per tensor of a list argument (foreach ops, fused optimizers, cat) and per tensor of
# a returned list, on the node: multi_tensor_apply's per-tensor metadata, one launch per few
# dozen tensors, an allocation per new output. Under phantom every tensor of such a list also
# crosses into Python and back around the fake dispatch, a cost the per-entry dispatch
# overhead does not see (it grows with the list, not with the entries): the list tensors'
# share of a gap is measured at start-up (`_measure_list_costs`), taken off, and these charged
# instead. Measured by bench/probes/host_list_ops.py on an H200 host (torch 2.11): per-call host time
# against list length (16-686 tensors): an in-place `_foreach_mul_` 0.19 us a tensor
# (`_foreach_addcmul_`'s three lists 0.155, `cat` 0.24), an out-of-place `_foreach_add` 1.99 us,
# so 1.80 us per returned tensor, of which the new storage's malloc and free (REAL_STORAGE_NS,
# charged when it is freed) are 1.3.
REAL_LIST_INPUT_NS = 190.0
REAL_LIST_OUTPUT_NS = 500.0
LIST_PROBE = 64  # tensors in the calibration's long list (a short list has one)
# What a new tensor's storage costs the node's host beyond an op that writes into an existing
# one (the caching allocator's malloc and free, a new tensor object): `x * 2` against
# `torch.add(x, 1, out=y)` on an H200 host, 8.25 against 6.95 us (bench/host/data/host_h200.json,
# bench/host/host_calibration.py). Charged per storage freed, in place of what freeing a fake one
# costs here.
REAL_STORAGE_NS = 1_300.0


def calibrate(account: HostAccount, client: Any, forget_work: Callable[[], None],
              pairs: int = CALIBRATION_PAIRS, steps: int = 4) -> None:
    """Set `account`'s overheads: what reaching the handler costs per entry, in simulated-host
    ns (taken off every dispatched gap), and the other costs measured with it. In a
    distributed run (`client`: the rank's coordinator client) the first rank to get here
    measures, with the host speed and the wake-up cost of a round trip, and every other rank
    uses its numbers: ranks that do the same work must not differ by a measurement's noise (an
    error of 1 us per entry is several ms a step in a host-bound run). `forget_work` resets
    the simulation's state after the measurement's own simulated work."""
    measure = lambda: _measure(account, client is not None, forget_work, pairs, steps)  # noqa: E731
    calibration = measure() if client is None else client.shared_calibration(measure)
    account.host_speed = calibration["host_speed"]
    account.host_step_ns_here = calibration["host_step_ns_here"]
    account.dispatch_overhead_ns = calibration["dispatch_overhead_ns"]
    account.wake_penalty_ns = calibration.get("wake_penalty_ns", 0.0)
    account.list_overhead_ns = tuple(calibration.get("list_overhead_ns", (0.0, 0.0)))
    account.list_real_ns = (REAL_LIST_INPUT_NS, REAL_LIST_OUTPUT_NS)
    account.release_overhead_ns = calibration.get("release_overhead_ns", 0.0)
    account.release_host_ns = REAL_STORAGE_NS
    account.api_overhead_ns = calibration.get("api_overhead_ns", 0.0)
    account.calibration_contended = bool(calibration.get("calibration_contended", False))
    account.gap_scale = account.speed.factor * account.host_speed
    # The script's first gap starts here: a rank that waited for another's measurement had its
    # mark at start-up, and its first op was charged the whole start-up (0.6-1.1 s on ranks 1-3
    # of a 4-rank run, against ~5 ms on the measuring rank).
    account.restart_gap()


def _measure(account: HostAccount, blocking: bool, forget_work: Callable[[], None], pairs: int,
             steps: int) -> dict:
    """Measure what reaching the handler costs per entry on this machine, beyond what the
    same program costs in plain eager mode, and forget everything the measurement did.
    `blocking`: collectives block on a coordinator (not a 1-rank run's local group).

    Runs a small training step (linear, layer norm, GELU, loss, backward, foreach AdamW)
    on fake CUDA tensors and on real CPU tensors of the same tiny shapes, in alternating
    pairs of blocks so both see the same machine state; the median of the pairs'
    differences, spread over the handler entries of the fake step (metadata queries
    included), is the overhead per entry. A whole step, rather than one op, puts autograd
    bookkeeping and tensor creation and destruction in the measurement.

    The two sides cost about the same (a few us per entry apart), and the difference is
    taken off every gap of the run, thousands per iteration: an error of 1 us here moves
    a host-bound step by several ms. The minimum of each side over 5 blocks put the result
    anywhere between 0 and 4.5 us from one run to the next on a flickering machine; a median
    of paired differences does not depend on which block hit a fast spell. It may come out
    negative (the fake path cheaper than CPU kernels), and is used so: clipping at zero would
    bias every noisy estimate upwards. Once the history is full, most runs skip the
    measurement and charge its median (`_recent_calibration`).
    """
    speed = account.speed
    fingerprint = code_fingerprint()  # hashes phantom's sources: once per calibration
    if speed.paced:
        # right after its next reading, so that the pace process's own few ms of work do not
        # count as another busy process below (and stay out of the measurement)
        wait_for_pace(os.environ[PACE_FILE_ENV], timeout_s=2 * PACE_PERIOD_S, fresh=True)
    contended = cpu_contended()
    # Measurements converted to the best speed by the pace process and by the probe differ by
    # how the two read this machine: each keeps its own history.
    if speed.paced:
        fingerprint += PACED_SUFFIX
    history = fingerprint + CONTENDED_SUFFIX if contended else fingerprint
    recent = _recent_calibration(account, history, blocking)
    if recent is not None:
        forget_work()
        return {**recent, "calibration_contended": contended}
    # every gap as measured, none shared with other ranks: the steps are not the script's
    # iterations
    account.steady = None
    if speed.known(DISPATCH_OVERHEAD, history) < FIRST_RUNS:
        pairs *= FIRST_RUNS_PAIR_FACTOR  # a new version's first runs: no history to lean on
    fake_step = training_step("cuda", *CALIBRATION_SHAPE)
    with unset_fake_temporarily():
        real_step = training_step("cpu", *CALIBRATION_SHAPE)
        real_step()  # warm both
    fake_step()
    pace = account.rank_pace
    account.measure_raw_gaps()
    # Freed storages first: the per-entry overhead below is then measured net of them (a step
    # frees about one storage per op, and scripts free more or fewer than that)
    release_raw, release_best = _measure_release_cost(account, pairs)
    account.release_overhead_ns = release_raw
    diffs = []
    # The CPU side on one intra-op thread, as the reference step: on two shared cores, OpenMP's
    # second thread made a 1 ms step take 3-120 ms, which buried the overhead.
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    for fake_ns, real_ns, entries in paired_blocks(account, fake_step, real_step, pairs, steps):
        # at this machine's best speed, by a probe taken with the pair: one sample taken after
        # the calibration scaled the whole run's overhead by that moment's speed
        diffs.append((fake_ns - real_ns) / entries * speed.sample_now())
    list_in, list_out = _measure_list_costs(account, pairs)
    api_call = _measure_api_overhead(account, pairs)
    torch.set_num_threads(threads)
    account.rank_pace = pace
    account.sample_speed()
    if not contended and cpu_contended():  # another process started while it measured
        contended, history = True, fingerprint + CONTENDED_SUFFIX
    host_speed = account.host_speed
    per_entry = speed.settle(DISPATCH_OVERHEAD, history, statistics.median(diffs))
    account.dispatch_overhead_ns = per_entry * host_speed
    list_overhead = (speed.settle(LIST_INPUT, history, list_in) * host_speed,
                     speed.settle(LIST_OUTPUT, history, list_out) * host_speed)
    release = speed.settle(RELEASE, history, release_best) * host_speed
    api_overhead = speed.settle(API_CALL, history, api_call) * host_speed
    wake_penalty = _measure_wake_penalty(account, history) if blocking else 0.0
    del fake_step, real_step
    gc.collect()  # the modules and optimizer form cycles: free their fake storages now
    forget_work()
    return {"host_speed": host_speed, "host_step_ns_here": account.host_step_ns_here,
            "dispatch_overhead_ns": account.dispatch_overhead_ns, "wake_penalty_ns": wake_penalty,
            "list_overhead_ns": list_overhead, "release_overhead_ns": release,
            "api_overhead_ns": api_overhead, "calibration_contended": contended}


def _recent_calibration(account: HostAccount, fingerprint: str, blocking: bool) -> dict | None:
    """The calibration as the median of this machine's last HISTORY measurements of this
    code, without measuring, in all but one run in REMEASURE_EVERY once that history is full;
    None: measure. What a run charges is that median either way (`settle`), so a new
    measurement moves it by a fifteenth at most; measuring takes about half of a short run's
    start-up, and the test suite starts hundreds of runs. The runs that still measure keep
    the history following the machine."""
    kinds = [DISPATCH_OVERHEAD, LIST_INPUT, LIST_OUTPUT, RELEASE, API_CALL]
    kinds += [WAKE_PENALTY] if blocking else []
    if _remeasure_draw() < 1 / REMEASURE_EVERY:
        return None
    recent = {kind: account.speed.recent(kind, fingerprint) for kind in kinds}
    if any(value is None for value in recent.values()):
        return None
    account.sample_speed()
    at_node = {kind: value * account.host_speed for kind, value in recent.items()}
    return {"host_speed": account.host_speed, "host_step_ns_here": account.host_step_ns_here,
            "dispatch_overhead_ns": at_node[DISPATCH_OVERHEAD],
            "wake_penalty_ns": at_node.get(WAKE_PENALTY, 0.0),
            "list_overhead_ns": (at_node[LIST_INPUT], at_node[LIST_OUTPUT]),
            "release_overhead_ns": at_node[RELEASE], "api_overhead_ns": at_node[API_CALL]}


def paired_blocks(account: HostAccount, fake_step: Callable[[], None],
                  real_step: Callable[[], None], pairs: int,
                  steps: int) -> Iterator[tuple[float, float, int]]:
    """Alternating blocks of `steps` calls of `fake_step` (under the simulation) and of
    `real_step` (on real tensors), `pairs` times: yields (the fake block's charged gaps, the
    real block's time, the fake block's handler entries), in this machine's ns under
    `HostAccount.measure_raw_gaps`. Only gaps count on the fake side: the step's simulated syncs and
    launches are not host time of this machine. A pair is yielded as soon as it is measured,
    so the caller can probe the machine's speed with it."""
    clock = account.clock
    for _ in range(pairs):
        # The fake block's first gap starts here: left alone, it ran from the previous fake
        # block's last op and held the real block and the caller's speed probe (~1.4 ms),
        # which put ~2.3 us more on every entry (25%)
        account.restart_gap()
        u0, e0 = account.user_host_ns, account.dispatch_entries
        for _ in range(steps):
            fake_step()
        fake_ns, entries = account.user_host_ns - u0, account.dispatch_entries - e0
        with unset_fake_temporarily():
            t0 = clock()
            for _ in range(steps):
                real_step()
            real_ns = clock() - t0
        yield fake_ns, real_ns, entries


def _charged_block(account: HostAccount, block: Callable[[], object]) -> tuple[float, object]:
    """Run `block` as a gap of its own and return what its gaps were charged, with what it
    returned (kept alive until the charge is taken). Under `HostAccount.measure_raw_gaps`."""
    account.restart_gap()
    u0 = account.user_host_ns
    result = block()
    account.begin_op("probe")  # closes the block's last gap
    account.end_op()
    return account.user_host_ns - u0, result


def _measure_release_cost(account: HostAccount, pairs: int, n: int = 256) -> tuple[float, float]:
    """What a freed fake storage costs the gap it dies in, beyond freeing a CPU tensor: `n`
    small tensors made and dropped one by one against made and kept, on fake CUDA and on the
    CPU, in alternating blocks; the median per storage, in this machine's raw ns and at its
    best speed. Under `HostAccount.measure_raw_gaps` (no release overhead taken off yet)."""
    clock = account.clock

    def make(keep: bool) -> list:
        kept = []
        for _ in range(n):
            x = torch.empty(8, device="cuda")
            if keep:
                kept.append(x)
            del x
        return kept  # freed after the block, outside the next one's gaps (its mark is reset)

    def fake_block(keep: bool) -> float:
        return _charged_block(account, lambda: make(keep))[0]

    def real_block(keep: bool) -> float:
        with unset_fake_temporarily():
            kept = []
            t0 = clock()
            for _ in range(n):
                x = torch.empty(8)
                if keep:
                    kept.append(x)
                del x
            return clock() - t0

    raw, best = [], []
    for _ in range(pairs):
        fake = fake_block(keep=False) - fake_block(keep=True)
        real = real_block(keep=False) - real_block(keep=True)
        raw.append((fake - real) / n)
        best.append(raw[-1] * account.speed.sample_now())
    return max(0.0, statistics.median(raw)), max(0.0, statistics.median(best))


def _measure_list_costs(account: HostAccount, pairs: int, calls: int = 4) -> tuple[float, float]:
    """This machine's ns, at its best speed, per tensor of a list argument and per tensor of a
    returned list on the way through the handler: foreach calls on LIST_PROBE tensors against
    the same calls on one, in alternating blocks (an in-place op for the inputs, an
    out-of-place one for inputs and outputs), the median of the pairs' differences. Under
    `HostAccount.measure_raw_gaps`, with the freed storages' cost already taken off (the out-of-place
    outputs die in the next gap): what is left is the tensors' own way."""
    long = [torch.zeros(8, device="cuda") for _ in range(LIST_PROBE)]
    short = long[:1]

    def gaps(fn, tensors: list) -> float:
        account.restart_gap()  # not the speed probe's time (paired_blocks)
        u0 = account.user_host_ns
        for _ in range(calls):
            fn(tensors)
        return (account.user_host_ns - u0) / calls

    in_place = lambda xs: torch._foreach_mul_(xs, 1.0)  # noqa: E731
    out_of_place = lambda xs: torch._foreach_add(xs, 1.0)  # noqa: E731
    in_place(long), out_of_place(long)  # warm both paths
    inputs, outputs = [], []
    for _ in range(pairs):
        per_input = (gaps(in_place, long) - gaps(in_place, short)) / (LIST_PROBE - 1)
        both = (gaps(out_of_place, long) - gaps(out_of_place, short)) / (LIST_PROBE - 1)
        speed = account.speed.sample_now()
        inputs.append(per_input * speed)
        outputs.append((both - per_input) * speed)
    return max(0.0, statistics.median(inputs)), max(0.0, statistics.median(outputs))


def _measure_api_overhead(account: HostAccount, pairs: int, calls: int = 256) -> float:
    """This machine's ns, at its best speed, that a simulated runtime call's way in and out
    (the wrapper, its clock reads) adds to the gaps around it, beyond a real call's: blocks of
    `calls` `torch.cuda.current_stream()` calls (its cheapest wrapped call) against as many
    calls of a C function, alternating; the median of the pairs' per-call differences. Under
    `HostAccount.measure_raw_gaps` (the call's node cost goes to the timeline, not to the gaps)."""
    clock = account.clock
    query = torch.cuda.current_stream
    real_call = REAL_NS  # a C function, as the real runtime call would be

    def queries() -> None:
        for _ in range(calls):
            query()

    def fake_block() -> float:
        return _charged_block(account, queries)[0]

    def real_block() -> float:
        t0 = clock()
        for _ in range(calls):
            real_call()
        return clock() - t0

    diffs = []
    for _ in range(pairs):
        diffs.append((fake_block() - real_block()) / calls * account.speed.sample_now())
    return max(0.0, statistics.median(diffs))


def _measure_wake_penalty(account: HostAccount, fingerprint: str) -> float:
    """Simulated-host ns to take off after each blocking round trip (wake_penalty_ns): the
    median of this measurement and the recent ones of the same code on this machine."""
    with unset_fake_temporarily():
        raw = wake_penalty_ns(account.clock)
    if raw is None:
        return 0.0
    best = raw * account.speed.sample_now()
    return account.speed.settle(WAKE_PENALTY, fingerprint, best) * account.host_speed
