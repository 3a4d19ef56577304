"""Host time: what the script's CPU side costs on the simulated node.

Note [Host time]
~~~~~~~~~~~~~~~~
A rank's simulated host clock moves for these reasons only:

    host clock += script gaps (measured, converted) + fixed node costs + waits on the GPU
                  + the script's own sleeps (time.sleep on the simulated host)

* Script gaps (`account.HostAccount.begin_op`): the CPU time this process spent between two
  entries into phantom, i.e. the script's own Python, the framework's hooks and torch's
  dispatch up to phantom's handler, converted to the node in this order:

      gap = gap_here * speed_factor * host_speed - wake_credit - release_credit
      gap = steady(site, gap)                          (--host-gaps steady)
      gap = gap - dispatch_overhead (or api_overhead) - list_overheads + node_list_costs
      charged = max(0, gap) * rank_pace

  - `speed_factor` (speed.HostSpeedNormalizer) scales this machine's time now to its best
    observed speed (the pace process's reading of the reference step, else a pure-Python
    probe, against the fastest this machine has run them);
  - `host_speed` is the node's reference CPU step (GPUSpec.host_step_ns, measured on the GPU
    host) over this machine's best time for the same step (machine.reference_step_ns);
  - the credits and overheads, all in node ns, are what phantom's own path adds to a gap that
    a real run does not pay: the cold caches after a blocking coordinator round trip, freed
    fake storages' finalizers, the fake dispatch per handler entry or simulated runtime call,
    each tensor of a list argument or returned list. Each is measured at start-up against the
    same work on real CPU tensors (calibration.py); the node's own cost of a list tensor and
    of a freed storage is charged instead;
  - `steady` (steady.SteadyGaps): a gap seen in earlier iterations is charged at the mean of the
    same point of the last few, and a distributed run's ranks charge their class leader's means;
  - `rank_pace` (steady.straggler_pace) is the slowest of a node's ranks against a typical one.
* Fixed node costs: what the node's host pays for work phantom does instead of the GPU stack
  (a kernel launch, a GEMM's cuBLAS set-up, a runtime call, a collective's enqueue, a CUDA
  graph's instantiation and replay), measured constants charged at the call at `rank_pace`
  (account.HostAccount.at_pace, api_exit).
* Waits: a synchronize, a blocking copy or a value read moves the host clock to the GPU's
  completion time (engine.Timeline).

Python's garbage collections and phantom's own work inside a gap (freeing a fake storage) are
taken off the gap (`on_gc`, `storage_released`).
"""
