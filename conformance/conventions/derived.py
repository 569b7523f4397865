"""The cells this run's matrix rows settle: one deriver per axis (fully masked rows,
returned weights, float64, parameter formula, weight layout, refusals), each
(runner name, its rows, cases by id) -> a LedgerCell or None.  The rows are the second
witness of an axis a probe also reads (ledger.witnessed).
"""
from __future__ import annotations

import re
from dataclasses import replace
from typing import Iterable

from conformance.conventions.axes import AXES, DEPENDS, REFUSED
from conformance.contract.runner import HARNESS_LIMIT
from conformance.run.evaluate import FEATURE_REFUSAL, Row
from conformance.compare.verdict import FailureKind, Outcome
from conformance.conventions.cells import (
    MODEL_AXES, WEIGHT_WORDS, LedgerCell, _at, _bounded, _cell)
from conformance.conventions.artifact import artifact_params, suite_built
from conformance.conventions.layout import counted, holds_none, weight_layout

MASK_PASSED = "mask_passed"  # Row.extras: the mask as the runner gave it to the system


def fully_masked_condition(row: Row) -> str:
    """What a fully masked row depends on: the mask as the runner gave it to the system (a
    boolean mask, or an additive float mask of a fill in a dtype: a -1e9 fill is -inf in
    float16), as the row records it.  A runner that gives a float mask records it
    (extras["mask_passed"]); a row without the record was given a boolean mask, whatever
    the case's mask.fill (a fill reaches only a system that takes a float mask).  The dtype
    is named with every form: a system's own fill of a boolean mask may differ by dtype."""
    passed = str(row.extras.get(MASK_PASSED) or "boolean mask")
    return passed if " in " in passed or not row.dtype else f"{passed} in {row.dtype}"


def _fully_masked(name: str, rows: list[Row], cases) -> LedgerCell | None:
    """One word when every fully masked row reads the same; else `depends`, each condition
    (fully_masked_condition) with its word and the first case that shows it.  Nothing
    measured is dropped: the evidence names every condition."""
    seen = [r for r in rows if r.fully_masked_row]
    if not seen:
        return None
    by_condition: dict[str, list[Row]] = {}
    for r in seen:
        by_condition.setdefault(fully_masked_condition(r), []).append(r)
    words = {r.fully_masked_row for r in seen}
    if len(words) == 1:
        first = seen[0]
        text = f"{_at(first)}: output {first.fully_masked_row}"
        if first.fully_masked_row_weights:
            text += f", returned weights {first.fully_masked_row_weights}"
        if len(seen) > 1:
            text += (f"; the same in {len(seen) - 1} other case(s) ("
                     + ", ".join(sorted(by_condition)) + ")")
        return _cell(name, "fully_masked_row", first.fully_masked_row, text)
    parts = []
    for condition, group in sorted(by_condition.items()):
        found: dict[str, list[Row]] = {}
        for r in group:
            found.setdefault(r.fully_masked_row, []).append(r)
        parts.append(f"{condition} -> " + ", ".join(
            f"{w} ({_at(g[0])}" + (f" and {len(g) - 1} more)" if len(g) > 1 else ")")
            for w, g in sorted(found.items())))
    return replace(_cell(name, "fully_masked_row", DEPENDS, "; ".join(parts)),
                   words=tuple(sorted(words)))


def _returned_weights(name: str, rows: list[Row], cases) -> LedgerCell | None:
    ran = [r for r in rows if r.outcome.ran and r.weights_returned in WEIGHT_WORDS]
    if not ran:
        return None
    default = [r for r in ran if r.extras.get("default_weights") in WEIGHT_WORDS.values()]
    if default:  # the default call returns other weights than this row's call (MATLAB)
        row = default[0]
        return _cell(row, "returned_weights", row.extras["default_weights"],
                     f"{_at(row)}: the default call returns {row.extras['default_weights']}; "
                     f"this row's call returns {row.weights_returned} weights"
                     + (f" (native call: {row.native_call})" if row.native_call else ""))
    typed = [r for r in ran if isinstance(r.extras.get("default_weights_shape"), list)]
    if typed:  # the default call's weights, recorded beside the per-head ones the row asked for
        row = typed[0]
        shape = row.extras["default_weights_shape"]
        word = "head_averaged" if len(shape) == 3 else "per_head"
        return _cell(row, "returned_weights", word,
                     f"{_at(row)}: the default call returns weights of shape {tuple(shape)} "
                     f"({word}); this row's call returns {row.weights_returned}")
    row = ran[0]
    word = WEIGHT_WORDS[row.weights_returned]
    # the runner's own call, which may ask for other weights than the default call does
    return replace(_cell(row, "returned_weights", word,
                         f"{_at(row)}: this runner's call returns {row.weights_returned} weights"
                         + (f" (native call: {row.native_call})" if row.native_call else "")),
                   comparable=False)


def _float64(name: str, rows: list[Row], cases) -> LedgerCell | None:
    rows = [r for r in rows if r.dtype == "float64"
            and (r.executed or r.outcome is Outcome.NOT_EXPRESSIBLE)]
    below = [r for r in rows if r.outcome.ran and
             (r.failed(FailureKind.VALUES) or r.failed(FailureKind.WEIGHTS))]
    exact = [r for r in rows if r.outcome.ran and r not in below]
    # a refusal settles the axis only when it is about the dtype: a float64 case refused
    # for its bias or its mask (a case limit) says nothing of float64 arithmetic
    refused = [r for r in rows if r.outcome is Outcome.NOT_EXPRESSIBLE
               and not r.reason.startswith(HARNESS_LIMIT)  # the suite's, not the system's
               and re.search(r"float64|double", r.reason, re.I)]
    if below:
        # the first row in case order is quoted, never the worst: which of two float32
        # results is further from the oracle is a CPU's kernel choice; the largest error of
        # them all is a figure beside it
        first = below[0]
        err = max(max(r.max_abs_error or 0, r.weights_max_abs_error or 0) for r in below)
        more = f" (and {len(below) - 1} more float64 case(s))" if len(below) > 1 else ""
        # a declared known mismatch explains the error (a rounded scale...): the probe of
        # the arithmetic itself is the witness of this axis, the row is quoted beside it
        return replace(_cell(first, "float64_compute", "below_float64",
                             f"{_at(first)}{more}: largest max abs error {err:.2e} against "
                             f"the float64 oracle (atol {first.atol:g}, rtol {first.rtol:g})"
                             + (f"; known: {first.known_mismatch}" if first.known_mismatch
                                else "")), comparable=not first.known_mismatch)
    if exact:
        row = exact[0]
        more = f"; {len(exact) - 1} more float64 case(s) agree" if len(exact) > 1 else ""
        return _cell(row, "float64_compute", "float64",
                     f"{_at(row)}: max abs error {row.max_abs_error or 0:.2e} against the "
                     f"float64 oracle (atol {row.atol:g}){more}")
    if refused:
        return _cell(refused[0], "float64_compute", REFUSED,
                     f"{_at(refused[0])}: not expressible: {refused[0].reason}")
    return None


def _params(name: str, rows: list[Row], cases) -> LedgerCell | None:
    """An exported or converted program's cell comes from what the program holds
    (artifact.py); a framework object's from its own count (Row.parameters), never from a
    count-only row's formula (the suite's figure)."""
    ran = counted(rows)
    if not ran:
        return None
    if holds_none(rows):
        agree = [r for r in ran if (r.projection_parameters or r.parameters)
                 == r.parameters_formula]
        return _cell(name, "parameter_formula", "holds_none",
                     f"holds no parameters in {len(ran)} case(s) (e.g. {_at(ran[0])}); the "
                     "projections passed in" + (" (the initializers of the graph the suite "
                                                "builds around the op)" if suite_built(ran[0])
                                                else "")
                     + f" match the formula in {len(agree)} of them "
                     f"({_counts(ran, projection=True)})")
    program = artifact_params(name, rows, cases)
    if program is not None:
        return program
    differ = [r for r in ran if r.parameters != r.parameters_formula]
    if not differ:
        return _cell(name, "parameter_formula", "canonical",
                     f"the system's count equals the formula in all {len(ran)} case(s) it ran: "
                     f"{_counts(ran)}")
    return _cell(name, "parameter_formula", "differs",
                 f"the system's count differs from the formula in {len(differ)} of {len(ran)} "
                 "case(s): " + "; ".join(f"{_at(r)}: {r.parameters:,} vs formula "
                                         f"{r.parameters_formula:,}" for r in differ[:4]))


def _counts(rows: list[Row], projection: bool = False, limit: int = 3) -> str:
    counts = [(r.projection_parameters or r.parameters) if projection else r.parameters
              for r in rows[:limit]]
    shown = [f"{_at(r)} {n:,}" for r, n in zip(rows, counts)]
    return ", ".join(shown) + (f" and {len(rows) - limit} more" if len(rows) > limit else "")


def _weight_layout(name: str, rows: list[Row], cases) -> LedgerCell | None:
    found = weight_layout(name, rows, cases)
    if found is None:
        return None
    row, value, text = found
    return _cell(row, "weight_layout", value, f"{_at(row)}: {text}")


def _normal(reason: str) -> str:
    return re.sub(r"\d+(\.\d+)?", "#", reason)[:70]


def _refusals(name: str, rows: list[Row], cases) -> LedgerCell | None:
    counted = [r for r in rows if r.outcome is not Outcome.SKIPPED]
    if not counted:
        return None
    # a case asking for a feature the runner lacks (Case.features: rope, ALiBi, a window..)
    # is not the system's
    # refusal (the feature axes say what it lacks): counted apart, named in the evidence
    lacking = [r for r in counted if r.outcome is Outcome.NOT_EXPRESSIBLE
               and FEATURE_REFUSAL in r.reason]
    counted = [r for r in counted if r not in lacking]
    if not counted:
        return None
    refused = [r for r in counted if r.outcome is Outcome.NOT_EXPRESSIBLE]
    harness = [r for r in refused if r.reason.startswith(HARNESS_LIMIT)]
    refused = [r for r in refused if r not in harness]
    groups: dict[str, list[Row]] = {}
    for r in refused:
        groups.setdefault(_normal(r.reason), []).append(r)
    if not refused:
        text = f"none of the {len(counted)} case(s) it ran is refused (e.g. {_at(counted[0])})"
    else:
        parts = [f"{len(g)}x, e.g. {_at(g[0])}: {g[0].reason[:160]}"
                 for g in sorted(groups.values(), key=lambda g: -len(g))[:5]]
        text = (f"{len(refused)} of {len(counted)} case(s) not expressible, {len(groups)} "
                "reason(s): " + " | ".join(parts))
    if harness:  # the suite's own limits: reported, never counted as the system's
        text += (f"; apart, {len(harness)} harness limit(s), not the system's: "
                 + " | ".join(f"{_at(r)}: {r.reason[len(HARNESS_LIMIT):][:120]}"
                              for r in harness[:3]))
    # the number of kinds of refusal, not of cases: a new case refused for a known
    # reason changes the evidence, not the pinned value
    value = f"{len(groups)} kind{'s' if len(groups) > 1 else ''}" if groups else "none"
    if lacking:  # these words are in the committed reports: change them with a regeneration
        text += (f"; besides, {len(lacking)} case(s) ask for case features it lacks (rope, "
                 f"QK-norm, ALiBi, softcap, sinks, windows, decode; e.g. {_at(lacking[0])}: "
                 f"{lacking[0].reason[:120]})")
    return _cell(name, "refusals", value, text)


# the axes a harness choice moves (HF's eager vs sdpa: uniform vs zero weights on a fully
# masked row, weights returned or None): rows run under the runner's own choice read that
# choice only, and the probes ask each (table.py, choices.py)
CHOSEN_AXES = ("fully_masked_row", "returned_weights")


def under_own_choice(runner, cell: LedgerCell) -> LedgerCell:
    """`cell` of a runner naming harness choices, on an axis they move: the reading of the
    harness's own choice, so another question than the system's (never a conflict with a
    probe that reads `depends`); any other cell as it is."""
    choices = getattr(runner, "harness_choices", None) or {}
    if not choices or cell.axis not in CHOSEN_AXES:
        return cell
    own = ", ".join(f"{name}={getattr(runner, name)!r}" for name in choices)
    return replace(cell, comparable=False, evidence=_bounded(
        f"under the harness's own {own} only: {cell.evidence}"))


DERIVERS = {"fully_masked_row": _fully_masked, "returned_weights": _returned_weights,
            "float64_compute": _float64, "parameter_formula": _params,
            "weight_layout": _weight_layout, "refusals": _refusals}


def derive(rows: Iterable[Row], runners, cases: Iterable | None = None) -> list[LedgerCell]:
    """The cells this run's matrix rows settle, per runner (in runners' order) and axis
    (AXES order).  `cases` (Case objects) lets layouts name their sizes (E, H, d_k)."""
    by_case = {c.id: c for c in cases or ()}
    rows = list(rows)
    cells = []
    for runner in runners:
        mine = [r for r in rows if r.runner == runner.name]
        executed = any(r.executed for r in mine if r.outcome.ran) or not any(
            r.outcome.ran for r in mine)
        for axis in AXES:
            derive_axis = DERIVERS.get(axis.id)
            if derive_axis is None or (not executed and axis.id not in MODEL_AXES):
                continue
            cell = derive_axis(runner.name, mine, by_case)
            if cell is not None:
                cells.append(under_own_choice(runner, cell))
    return cells
