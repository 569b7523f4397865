"""Ask the ledger's probes of one library's runners in this interpreter; print one JSON
object on stdout.

Usage (by the drift command, in an env built for one release, with this repository's root
on PYTHONPATH: the package is read from the source, never installed, so none of its
dependencies is pinned there; the probe path imports NumPy and PyYAML only):
    ENV/bin/python run_probes.py '{"runners": [...], "axes": [...], "imports": [...],
                                   "packages": [...]}'
Each cell `<runner>.<axis>` is conventions/probes/one_axis.axis_cell: the probe the ledger
asks for that axis of that runner, its word and evidence.  A failed import of the library
marks the env broken; a probe that raised is `probe_error` with its message; a cell the
runner's code could not ask because the release lacks the API it calls is `api_absent`
(cells.py), the ledger's word kept in its evidence; the other probes still run.
"""
from __future__ import annotations

import importlib
import json
import sys
import traceback
import warnings

MARK = "DRIFT-RESULT "


def _one(runner, axis: str, own) -> dict:
    from conformance.conventions.probes.one_axis import axis_cell
    from conformance.history.probes.cells import drift_cell
    try:
        cell = axis_cell(runner, axis, own)
    except Exception as e:  # recorded, not fatal: the other probes still run
        line = traceback.extract_tb(e.__traceback__)[-1]
        return drift_cell("probe_error", f"{type(e).__name__}: {str(e)[:300]} (at "
                          f"{line.name}:{line.lineno})")
    return drift_cell(cell.value, cell.evidence)


def _runners(names):
    """The registry's runners of these names, in that order (a name it lacks: KeyError)."""
    from conformance.runners import load, registry
    found = {}
    for target, params in registry():
        try:
            runner = load(target, params)
        except Exception:  # noqa: BLE001 - another framework's module: not this library's
            continue
        found.setdefault(runner.name, runner)
    return [found[name] for name in names]


def main(spec: dict) -> dict:
    warnings.filterwarnings("ignore")
    from conformance.versions import package_versions
    result = {"versions": package_versions(tuple(spec["packages"]))}
    name = ""
    try:
        for name in spec["imports"]:
            importlib.import_module(name)
    except BaseException as e:  # noqa: BLE001 - an import that fails is the finding
        result["broken"] = f"import {name}: {type(e).__name__}: {str(e)[:400]}"
        return result
    cells = {}
    for runner in _runners(spec["runners"]):
        memo: list = []

        def own(runner=runner, memo=memo):  # the runner's conventions(), once, if needed
            if not memo:
                from conformance.conventions.probes.api_facts import own_cells

                memo.append(own_cells(runner))
            return memo[0]
        for axis in spec["axes"]:
            cells[f"{runner.name}.{axis}"] = _one(runner, axis, own)
    result["cells"] = cells
    return result


if __name__ == "__main__":
    out = main(json.loads(sys.argv[1]))
    sys.stdout.flush()
    print(MARK + json.dumps(out, sort_keys=True))
