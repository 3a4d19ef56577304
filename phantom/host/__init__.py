"""Host time: what the script's CPU side costs on the simulated node.

Note [Host time]
~~~~~~~~~~~~~~~~
A rank's simulated host clock moves for three reasons, and only these:

    host clock += script gaps (measured, converted) + fixed node costs + waits on the GPU

* Script gaps (`account.HostAccount.begin_op`): the CPU time this process spent between two
  entries into phantom, i.e. the script's own Python, the framework's hooks and torch's
  dispatch up to phantom's handler. It is converted to the node's speed:

      gap_node = (gap_here * speed_factor - overheads) * host_speed * rank_pace

  - `speed_factor` (speed.HostSpeedNormalizer) scales this machine's time now to its best
    observed speed (the pace process's reading of the reference step, else a pure-Python
    probe, against the fastest this machine has run them);
  - `host_speed` is the node's reference CPU step (GPUSpec.host_step_ns, measured on the GPU
    host) over this machine's best time for the same step (machine.reference_step_ns);
  - `overheads` are what phantom's own path adds to a gap that a real run does not pay: the
    fake dispatch per handler entry, per list tensor, per freed storage, per runtime call, and
    the cold-cache cost after a blocking coordinator round trip. Each is measured at start-up
    against the same work on real CPU tensors (calibration.py);
  - `rank_pace` (steady.straggler_pace) is the slowest of a node's ranks against a typical one;
  - with `--host-gaps steady` (the default), a gap seen before is charged at the mean of the
    same point of the last few iterations (steady.SteadyGaps), and a distributed run's ranks
    charge their class leader's means.
* Fixed node costs: what the node's host pays for work phantom does instead of the GPU stack
  (a kernel launch, a GEMM's cuBLAS set-up, a runtime call, a collective's enqueue), charged
  as measured constants at the call (account.HostAccount.charge_launch, api_exit).
* Waits: a synchronize, a blocking copy or a value read moves the host clock to the GPU's
  completion time (engine.Timeline).

Python's garbage collections and phantom's own work inside a gap (freeing a fake storage) are
taken off the gap (`on_gc`, `storage_released`).
"""
