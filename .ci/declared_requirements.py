"""Print what installed distributions declare they require, one per line, for `pip install -r`.

.ci/run installs torch's CUDA build (and phantom) with `--no-deps`, then this list without
triton, to fit the CI machine's disk: pip's resolver would pull triton back in through any
package that requires torch. Markers are evaluated here, with the extras asked for, so the list
holds only what pip would have installed on this machine.

    python .ci/declared_requirements.py torch torchvision 'phantom-sim[test-build]' --except torch triton
"""
from __future__ import annotations

import argparse
from importlib.metadata import PackageNotFoundError, requires

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name


def declared(dist: str, skip: set[str]) -> list[str]:
    """`dist` ("name" or "name[extra,...]"): its requirements, markers evaluated here."""
    wanted = Requirement(dist)
    try:
        lines = requires(wanted.name) or []
    except PackageNotFoundError:
        raise SystemExit(f"declared_requirements: {wanted.name} is not installed in this environment")
    out = []
    for line in lines:
        req = Requirement(line)
        if canonicalize_name(req.name) in skip:
            continue
        if req.marker is not None and not any(
            req.marker.evaluate({"extra": extra}) for extra in ("", *wanted.extras)
        ):
            continue
        req.marker = None
        out.append(str(req))
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("dists", nargs="+", help="installed distributions, optionally with [extras]")
    ap.add_argument("--except", dest="skip", nargs="*", default=[], help="requirements to leave out")
    args = ap.parse_args()
    skip = {canonicalize_name(n) for n in args.skip}
    lines = [line for dist in args.dists for line in declared(dist, skip)]
    print("\n".join(dict.fromkeys(lines)))


if __name__ == "__main__":
    main()
