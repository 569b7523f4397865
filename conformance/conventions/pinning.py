"""Pinned conventions: `conventions/expected.yaml` maps runner -> axis -> value.

The conventions items (plugin.py) compare each runner's observed ledger cells
with this file and fail on drift; `--update-conventions` rewrites it from the
observations instead.  The file is data only (validated against the registry's
runner names and the vocabularies of axes.py); it is written sorted, so a
rewrite changes only the lines whose value changed.  Layer 4, beside ledger.py.
"""
from __future__ import annotations

from pathlib import Path
from typing import Iterable

import yaml

from conformance.contract.axes import AXES, BY_ID
from conformance.conventions.ledger import NOT_PROBED, LedgerCell
from conformance.paths import ROOT

EXPECTED_FILE = ROOT / "conventions" / "expected.yaml"
HEADER = ("# Pinned conventions: runner -> axis -> value (words: conformance/axes.py).\n"
          "# Checked by the items conventions/expected.yaml::conventions[<runner>];\n"
          "# rewrite from a run with: python -m pytest --update-conventions\n")


class PinError(Exception):
    """The expectations file is malformed: names the file and the field."""


def load(path: Path | str, runner_names: Iterable[str]) -> dict[str, dict[str, str]]:
    """runner -> axis -> value; an absent file pins nothing."""
    path = Path(path)
    if not path.exists():
        return {}
    try:
        data = yaml.safe_load(path.read_text()) or {}
    except yaml.YAMLError as exc:
        raise PinError(f"{path}: not valid YAML: {exc}") from exc
    if not isinstance(data, dict):
        raise PinError(f"{path}: must map runner names to axis: value mappings")
    known = set(runner_names)
    pinned: dict[str, dict[str, str]] = {}
    for runner, axes in data.items():
        if runner not in known:
            raise PinError(f"{path}: field '{runner}': unknown runner (known: "
                           f"{', '.join(sorted(known))})")
        if not isinstance(axes, dict):
            raise PinError(f"{path}: field '{runner}': must map axis ids to values")
        pinned[runner] = {}
        for axis, value in axes.items():
            problem = value_problem(str(axis), value)
            if problem:
                raise PinError(f"{path}: field '{runner}.{axis}': {problem}")
            pinned[runner][str(axis)] = value
    return pinned


def value_problem(axis: str, value) -> str | None:
    spec = BY_ID.get(axis)
    if spec is None:
        return f"unknown axis (axes: {', '.join(BY_ID)})"
    if not isinstance(value, str) or not value.strip() or value == NOT_PROBED:
        return f"value {value!r} must be a non-empty string (an observation, not {NOT_PROBED})"
    if spec.vocabulary and value not in spec.vocabulary:
        return f"value {value!r} is not in the vocabulary ({', '.join(spec.vocabulary)})"
    return None


def yaml_lines(runner: str, cells: Iterable[LedgerCell]) -> str:
    """The lines to paste into the file to pin `cells` of one runner."""
    block = {runner: {c.axis: c.value for c in cells}}
    return yaml.safe_dump(block, sort_keys=False, default_flow_style=False, width=1000,
                          allow_unicode=True).rstrip()


def check(runner: str, cells: list[LedgerCell], pinned: dict[str, dict[str, str]] | None,
          compared: set[str], path: Path | str) -> list[str]:
    """Failure messages for one runner: drift of a pinned value, and observed axes not
    pinned (with the YAML to paste).  `compared`: the axes this run settles."""
    if pinned is None:
        observed = [c for c in cells if c.observed and c.axis in compared]
        return [f"{runner}: not pinned in {path}; add (or run with --update-conventions):\n"
                + yaml_lines(runner, observed)] if observed else []
    messages, unpinned = [], []
    for c in cells:
        if c.axis not in compared:
            continue
        want = pinned.get(c.axis)
        if want is None:
            if c.observed:
                unpinned.append(c)
        elif want != c.value:
            messages.append(f"{runner}, axis {c.axis}: expected {want!r}, observed {c.value!r}"
                            f"\n    evidence: {c.evidence}")
    if unpinned:
        messages.append(f"{runner}: {len(unpinned)} observed axis(es) not pinned in {path}; add "
                        f"under '{runner}:' (or run with --update-conventions):\n"
                        + "\n".join(yaml_lines(runner, unpinned).splitlines()[1:]))
    return messages


def update(path: Path | str, runner: str, cells: Iterable[LedgerCell],
           compared: set[str]) -> None:
    """Write the observed values of one runner into the file, keeping the others."""
    path = Path(path)
    data = (yaml.safe_load(path.read_text()) or {}) if path.exists() else {}
    mine = dict(data.get(runner) or {})
    mine.update({c.axis: c.value for c in cells if c.observed and c.axis in compared})
    data[runner] = mine
    write(path, data)


def write(path: Path, data: dict) -> None:
    """Runners sorted by name, axes in axes.py order: deterministic."""
    order = {a.id: n for n, a in enumerate(AXES)}
    out = {r: {a: data[r][a] for a in sorted(data[r], key=lambda a: order.get(a, len(order)))}
           for r in sorted(data)}
    path.parent.mkdir(parents=True, exist_ok=True)
    text = yaml.safe_dump(out, sort_keys=False, default_flow_style=False, width=1000,
                          allow_unicode=True)
    path.write_text(HEADER + text)
