"""`phantom sweep --executor ray`: each point's `phantom run` as a Ray task on some node.

A task runs the same `phantom run` command a local point runs (runner.run_point_process) on
the node Ray places it on, so the script, its config files' directory and the host profile
must be at the same paths there, as for `phantom run --executor ray`; the config copies and the
host profile's files travel with the task and are written there first. The report comes back
as text; the sweep writes it under OUT/points/ here.
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

    def __call__(self, run_args: list[str], env: dict[str, str], files: dict[str, str],
                 report_path: str) -> tuple[int, str, str, str | None]:
        ref = self._task.remote(run_args, env, files, self._profile, report_path)
        try:
            return self._ray.get(ref)
        except BaseException:
            self._ray.cancel(ref, force=True)
            raise


def _run_on_node(run_args: list[str], env: dict[str, str], files: dict[str, str],
                 binary_files: dict[str, bytes], report_path: str) -> tuple[int, str, str, str | None]:
    from phantom.sweep.runner import run_point_process

    for path, data in binary_files.items():
        target = Path(path)
        if not target.exists() or target.read_bytes() != data:
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(data)
    return run_point_process(run_args, env, files, report_path)
