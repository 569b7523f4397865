"""`python -m conformance drift`: which release of which library changed which convention.

Not report/drift.py (that is check-reports' comparison of reports with their committed
versions): this one installs past releases with uv and probes them.
"""
from __future__ import annotations

import sys
import time
from dataclasses import replace
from pathlib import Path


def add_parser(sub, reports_dir: Path) -> None:
    p = sub.add_parser(
        "drift", help="probe past releases of each library in uv envs: what changed when",
        description="Build one uv env per (library, release), probe its attention "
        "conventions, compare adjacent releases and (with --bisect) name the first release "
        "that changed each cell. Needs uv (pip install uv) and the package registry.")
    p.add_argument("--package", action="append", default=[], metavar="LIB==V1,V2,...",
                   help="a library of the default table with its releases (repeatable); "
                   "default: the whole default table")
    p.add_argument("--bisect", action="store_true",
                   help="walk the registry's releases between two that differ")
    p.add_argument("--out", default=str(reports_dir),
                   help=f"folder for drift.md and drift.json (default: {reports_dir})")
    p.add_argument("--prune", action="store_true",
                   help="remove the drift envs and prune uv's cache, probe nothing")


def _selection(specs: list[str]):
    from conformance.history.table import DEFAULT_TABLE
    by_id = {lib.id: lib for lib in DEFAULT_TABLE}
    if not specs:
        return list(DEFAULT_TABLE)
    chosen = []
    for spec in specs:
        name, _, versions = spec.partition("==")
        if name not in by_id:
            raise SystemExit(f"drift: --package {spec}: unknown library {name!r}; the default "
                             f"table has {', '.join(by_id)}")
        lib = by_id[name]
        if versions:
            lib = replace(lib, versions=tuple(v.strip() for v in versions.split(",") if v))
        chosen.append(lib)
    return chosen


def survey(library, bisect: bool, probe=None, releases=None, say=None) -> dict:
    """Probe the library's releases, find the changes and (optionally) bisect them."""
    from packaging.version import Version

    from conformance.history import bisect as bisecting
    from conformance.history.envs import probe_release
    probe = probe or (lambda v: probe_release(library, v))
    say = say or (lambda line: print(line, flush=True))  # progress, as each env finishes
    memo = {}
    for version in library.versions:
        memo[version] = probe(version)
        _say_release(say, library, memo[version])
    found = bisecting.changes([memo[v] for v in library.versions])
    if bisect and found:
        listed = releases if releases is not None else bisecting.release_list(library.package)

        def walk(version):
            result = probe(version)
            _say_release(say, library, result, "  bisect ")
            return result
        found = [bisecting.bisect(c, listed, walk, memo) for c in found]
        keep = set(library.versions) | {v for c in found
                                        for v in (c.first_release, c.last_old_release)}
    else:
        keep = set(library.versions)
    return {"library": library, "changes": found,
            "releases": [memo[v] for v in sorted(keep, key=Version)]}


def _say_release(say, library, probed, prefix="") -> None:
    state = "ok" if probed.status == "ok" else f"BROKEN ({probed.error[:160]})"
    say(f"{prefix}{library.id} {probed.version}: {state}, {len(probed.cells)} cells, "
        f"{probed.seconds:.1f} s")


def drift(args) -> int:
    from conformance.history import envs, render
    if args.prune:
        print(envs.prune())
        return 0
    libraries = _selection(args.package)
    envs.find_uv()  # a missing uv is one clear message, before anything is built
    start, table = time.monotonic(), []
    for library in libraries:
        table.append(survey(library, args.bisect))
    doc = render.as_json(table)
    paths = render.write(doc, Path(args.out))
    n = sum(len(entry["changes"]) for entry in table)
    print(f"drift: {len(libraries)} libraries, {n} change(s), "
          f"{time.monotonic() - start:.0f} s; wrote {', '.join(map(str, paths))}",
          file=sys.stderr)
    return 0
