"""The error types more than one package raises or catches.

An error that only one module raises lives with that module (`KernelDBError` in cost/db.py,
`ClusterConfigError` in network/cluster.py); the ones here cross package boundaries.
"""
from __future__ import annotations


class SimulationError(RuntimeError):
    """An error phantom raises into the user's script, with an actionable message."""


class RunStopped(SimulationError):
    """The run was ended from outside this rank: a collective mismatch, a deadlock, or another
    rank's failure. The launcher reports the cause in full, so a rank prints only this one-line
    message (where it was stopped), not a traceback through torch and phantom."""


def capture_error(what: str) -> None:
    """What CUDA answers when a capturing stream is asked to wait for the host or the host for
    it (a sync, a blocking copy, a value read): the capture is invalidated."""
    raise RuntimeError(f"CUDA error: operation not permitted when stream is capturing ({what} "
                       f"during CUDA graph capture: on a GPU this fails too; move it out of the "
                       f"captured region)")
