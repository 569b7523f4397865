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
            lib = replace(lib, versions=_versions(spec, versions))
        chosen.append(lib)
    return chosen


def _versions(spec: str, text: str) -> tuple[str, ...]:
    """The releases of one --package option, oldest first; a bad one is a clear error."""
    from packaging.version import InvalidVersion, Version
    try:
        return tuple(sorted((v.strip() for v in text.split(",") if v.strip()), key=Version))
    except InvalidVersion as e:
        raise SystemExit(f"drift: --package {spec}: {e}; write releases as LIB==1.2.3,1.4.0"
                         ) from e


def survey(library, bisect: bool, probe=None, releases=None, say=None) -> dict:
    """Probe the library's releases, find the changes and (optionally) bisect them until
    every change lies between two releases with nothing unprobed in between."""
    from packaging.version import Version

    from conformance.history import bisect as bisecting
    from conformance.history.envs import probe_release
    probe = probe or (lambda v: probe_release(library, v))
    say = say or (lambda line: print(line, flush=True))  # progress, as each env finishes
    memo = {}
    for version in library.versions:
        memo[version] = probe(version)
        _say_release(say, library, memo[version])

    def walk(version):
        result = probe(version)
        _say_release(say, library, result, "  bisect ")
        return result

    def ordered():
        return [memo[v] for v in sorted(memo, key=Version)]
    listed = releases if bisect and releases is not None else (
        bisecting.release_list(library.package) if bisect else [])
    while True:  # a bisect may reveal a change that comes back between probed releases
        pending = [c for c in bisecting.changes(ordered()) if _unprobed(c, listed, memo)]
        if not pending:
            break
        for change in pending:
            bisecting.bisect(change, listed, walk, memo)
    found = bisecting.changes(ordered())
    walked = set(memo) - set(library.versions)
    for c in found:
        c.walked = sorted((v for v in walked if Version(c.before) <= Version(v) <= Version(
            c.after)), key=Version)
        c.skipped = _between(c, listed, memo)
    keep = set(library.versions) | {v for c in found for v in (c.before, c.after)}
    return {"library": library, "changes": found,
            "releases": [memo[v] for v in sorted(keep, key=Version)]}


def _between(change, listed, memo) -> list[str]:
    """Releases strictly between the change's two sides that were probed (broken or
    without a comparable value: the boundary cannot be narrower than them)."""
    from packaging.version import Version
    lo, hi = Version(change.before), Version(change.after)
    return [v for v in listed if lo < Version(v) < hi and v in memo]


def _unprobed(change, listed, memo) -> bool:
    from packaging.version import Version
    lo, hi = Version(change.before), Version(change.after)
    return any(lo < Version(v) < hi and v not in memo for v in listed)


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
        try:
            table.append(survey(library, args.bisect))
        except RuntimeError as e:  # the registry's release list could not be read
            print(f"drift: {library.id}: {e}", file=sys.stderr)
            return 1
    doc = render.as_json(table)
    paths = render.write(doc, Path(args.out))
    n = sum(len(entry["changes"]) for entry in table)
    print(f"drift: {len(libraries)} libraries, {n} change(s), "
          f"{time.monotonic() - start:.0f} s; wrote {', '.join(map(str, paths))}",
          file=sys.stderr)
    return 0
