"""`phantom sweep --executor ray`: each point's `phantom run` as a Ray task on some node.

A task runs the same `phantom run` command a local point runs (runner.run_point_process) on
the node Ray places it on, so the script, its config files' directory and the host profile
must be at the same paths there, as for `phantom run --executor ray`; the config copies and the
host profile's files travel with the task and are written there first. The report and the
point's own host profile (Note [Sweep host time]) come back; the sweep writes them under
OUT/points/ here.
"""
from __future__ import annotations

from pathlib import Path


class RayPoints:
    """Runs points as Ray tasks: call it as runner.run_point_process is called."""

    def __init__(self, address: str | None, profile_dir: Path | None = None) -> None:
        try:
            import ray
        except ImportError:
            from phantom.sweep.runner import SweepRunError

            raise SweepRunError("--executor ray needs Ray: pip install 'phantom-sim[ray]'") from None
        self._ray = ray
        if not ray.is_initialized():
            ray.init(address=address, include_dashboard=False, log_to_driver=False)
        self._profile = {str(p): p.read_bytes() for p in sorted(profile_dir.iterdir())} \
            if profile_dir is not None and profile_dir.is_dir() else {}
        self._task = ray.remote(num_cpus=1, max_retries=0)(_run_on_node)
        self._in_flight: set = set()

    def __call__(self, run_args: list[str], env: dict[str, str], files: dict[str, str],
                 report_path: str) -> tuple[int, str, str, str | None]:
        ref = self._task.remote(run_args, env, files, self._profile, report_path)
        self._in_flight.add(ref)
        try:
            *result, saved = self._ray.get(ref)
        finally:
            self._in_flight.discard(ref)
        for path, data in saved.items():
            Path(path).parent.mkdir(parents=True, exist_ok=True)
            Path(path).write_bytes(data)
        return tuple(result)

    def stop(self) -> None:
        """Cancel the points in flight (force: their worker processes end, and with them the
        `phantom run` each started)."""
        for ref in list(self._in_flight):
            self._ray.cancel(ref, force=True)


def _run_on_node(run_args: list[str], env: dict[str, str], files: dict[str, str],
                 binary_files: dict[str, bytes], report_path: str) -> tuple:
    """The point's run on this node: (exit code, stdout, stderr, report text, the host
    profile it saved as {path: bytes})."""
    from phantom.sweep.runner import run_point_process

    for path, data in binary_files.items():
        target = Path(path)
        if not target.exists() or target.read_bytes() != data:
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(data)
    result = run_point_process(run_args, env, files, report_path)
    saved = {}
    if "--save-host-profile" in run_args:
        profile = Path(run_args[run_args.index("--save-host-profile") + 1])
        saved = {str(f): f.read_bytes() for f in sorted(profile.glob("*"))} if profile.is_dir() else {}
    return (*result, saved)
