"""Host time: what the script's CPU side costs on the simulated node.

Note [Host time]
~~~~~~~~~~~~~~~~
A rank's simulated host clock moves for these reasons only:

    host clock += script Python  + torch's work   + fixed node costs + waits on the GPU
                  (measured)       (table prices)    (constants)        (engine.Timeline)

* Script Python (`account.HostAccount._charge_script`): each segment of the script's own
  Python, the stretch of a thread between two torch calls (its code, the framework's hooks and
  modules' Python, DTensor's and FSDP's Python outside torch calls). Where a segment ends is
  told by interception.boundary (Note [The torch-call boundary]). Per segment:

      charged = max(0, thread_cpu_ns - boundary_ns) * ratio        (--host-time measured)
      charged = steady(site, charged)                               (steady.SteadyGaps)
      charged = the saved profile's next segment                    (--host-time counted)

  - `thread_cpu_ns`: this thread's CPU time (time.thread_time_ns): waiting for a core is not
    in it; freed fake tensors' deallocation (`release_ns` each) and garbage collections are
    taken off;
  - `boundary_ns`: what marking one torch call adds to the segment here (machine.MachineSpeed);
  - `ratio`: the node's time for a pure-Python probe (GPUSpec.host_probe_ns, at its typical
    speed GPUSpec.host_mean_slowdown) over this machine's (`phantom calibrate`'s file, else
    measured at start-up): machine.py;
  - `steady`: a site seen in earlier iterations is charged at a low order statistic of the
    same point of the last few, robust to one-sided noise; a distributed run's ranks charge
    their class leader's values.
* Torch's work (`costs.HostCosts`): everything inside a torch call, priced from the table
  measured on the node's host: the call's way in by its kind, each ATen op it dispatches by
  its overload and whether autograd records a node, list ops by their length, backward ops
  at their no-grad row plus the engine's cost of a node. Never measured here.
* Fixed node costs: what the node's host pays for work no table row prices (a runtime call
  `torch.cuda.*`, a collective's enqueue, a CUDA graph's replay, a compiled graph's call, a
  kernel of generated code): measured constants charged at `HostAccount.at_pace`.
* Waits: a synchronize, a blocking copy or a value read moves the host clock to the GPU's
  completion time (engine.Timeline).

All of a multi-GPU rank's host time runs at the pace of its node's slowest rank
(`steady.straggler_pace`). `--host-time off` charges none of it.
"""
