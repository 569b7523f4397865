"""The core report sections, and SECTIONS: the one list of every section.

A section is a function `(frame, cases, runners) -> Section | None`: `frame`
is the section frame (base.py: typed columns), `cases` the run's
cases in file order, `runners` the run's Runner objects in column order.  A
section selects rows by framework and typed fields, never by runner name; None
= it has nothing to show for this run.  Wide case x runner tables are split by
framework family (base.split_section).  ANSWERS fill index.md, DETAILS details.md;
a new section is one function added to one of them.
"""
from __future__ import annotations

from typing import Callable

from conformance.compare.verdict import FailureKind, Outcome
from conformance.report.base import (
    Section, fmt, pivot, row_cells, split_section)
from conformance.report.keras import section_keras_backends
from conformance.report.onnx import (
    section_export_runtimes, section_onnx_accounting, section_onnx_masking, section_onnx_ops)
from conformance.report.typed import (  # first of ANSWERS (report/typed.py)
    section_typed_numbers, section_typed_numbers_more)

_PARAMETER_FAILURES = (FailureKind.PARAMETERS, FailureKind.FORMULA)


def _failed(r, kinds) -> bool:
    return any(f.kind in kinds for f in r.failures)


def cell_parameters(r) -> str:
    """A row's parameter cell: its count, ✗ when a parameter check failed."""
    if not r.outcome.ran:
        return r.outcome.cell
    if r.projection_parameters is not None:
        return f"{r.parameters} (+{r.projection_parameters} given)"
    bad = " ✗" if _failed(r, _PARAMETER_FAILURES) else ""
    return f"{r.parameters}{bad}{'' if r.executed else ' (model)'}"


def cell_numbers(r) -> str:
    if not r.outcome.ran:
        return r.outcome.cell
    if r.count_method:  # over the numbers budget: parameters only (counting.py)
        return f"{'✓' if r.outcome.agrees else '✗'} count only"
    mark = "✓" if r.outcome.agrees else ("✗ known" if r.known_mismatch else "✗")
    model = "" if r.executed else " (model)"
    return f"{mark} {fmt(r.max_abs_error)} / {fmt(r.max_rel_error)}{model}"


def _known(frame):
    """Rows whose failure is declared (the runner's expectations, or the case)."""
    return (frame["known_mismatch"] != "") & frame["outcome"].map(lambda o: o.failed)


KNOWN_MISMATCH = "known mismatch"  # the Outcomes column of declared failures


def section_outcomes(frame, cases, runners):
    label = frame["outcome"].map(lambda o: o.value).where(~_known(frame), KNOWN_MISMATCH)
    table = frame.assign(outcome=label).pivot_table(
        index="runner", columns="outcome", values="case", aggfunc="count", fill_value=0)
    names = [r.name for r in runners]
    table = table.reindex(index=[n for n in names if n in table.index])
    return Section("Outcomes", "Items per runner and outcome; a known mismatch is declared "
                   "in the runner's expectations/<runner>.yaml (or its case) and listed above.",
                   table.astype(int))


def section_parameters(frame, cases, runners):
    frame = frame.assign(cell=row_cells(frame, cell_parameters))
    table = pivot(frame, "cell", cases, runners)
    first = frame.drop_duplicates("case").set_index("case")
    table.insert(0, "formula", first["parameters_formula"].reindex(table.index))
    return split_section(
        "Parameter counts",
        "The framework's own count per runner, against the analytic formula (what the user "
        "typed: Typed numbers above). n/e = not expressible, ✗ = differs from what the case "
        "expects; SDPA holds no parameters and shows the projections it was given; (model) = "
        "a documented model of a system that cannot run here (MATLAB).", table, runners, 1)


def section_numbers(frame, cases, runners):
    frame = frame.assign(cell=row_cells(frame, cell_numbers))
    return split_section(
        "Numerical agreement",
        "Max abs / max rel error of the output against the float64 reference (fully masked "
        "rows excluded: see edge cases); (model) = not executed, a documented model in "
        "NumPy: it checks layout and translation only. The figures vary with the CPU "
        "(check-reports compares them by its rule, docs/reports.md).", pivot(frame, "cell", cases,
                                                                    runners), runners)


def section_weights(frame, cases, runners):
    has = frame[frame["weights_max_abs_error"].notna()]
    if has.empty:
        return None
    has = has.assign(cell=row_cells(has, lambda r: f"{fmt(r.weights_max_abs_error)} / "
                                                   f"{fmt(r.weights_max_rel_error)}"))
    return split_section("Per-head attention weights",
                         "Max abs / max rel error of the returned per-head weights "
                         "(B, H, T, S).", pivot(has, "cell", cases, runners), runners)


def _cell_masked(r) -> str:
    weights = f" (weights: {r.fully_masked_row_weights})" if r.fully_masked_row_weights else ""
    declared = ("" if r.fully_masked_row == r.fully_masked_row_declared
                else f" ✗ declared {r.fully_masked_row_declared}")
    return (r.fully_masked_row or "") + weights + declared


def section_edge_cases(frame, cases, runners):
    masked = frame[frame["case"].isin([c.id for c in cases if c.has_fully_masked_rows])]
    masked = masked[masked["outcome"].map(lambda o: o.ran)]
    if masked.empty:
        return None
    masked = masked.assign(cell=row_cells(masked, _cell_masked))
    return split_section(
        "Edge case: fully masked query rows",
        "What each system returns for a query row whose every key is masked: nan, zeros (all "
        "weights 0: the output is the output bias), uniform (equal weight on every key), "
        "finite_other.", pivot(masked, "cell", cases, runners), runners)


def _listing(sub, title, intro, columns=("reason",)):
    if sub.empty:
        return None
    return Section(title, intro, sub[["case", "runner", *columns]].set_index(["case", "runner"]))


def section_not_expressible(frame, cases, runners):
    """Grouped by reason: each reason once, with every case[runner] that gave it."""
    import pandas as pd

    sub = frame[frame["outcome"] == Outcome.NOT_EXPRESSIBLE]
    if sub.empty:
        return None
    groups: dict[str, list[str]] = {}
    for r in sub.itertuples(index=False):
        groups.setdefault(r.reason, []).append(f"{r.case}[{r.runner}]")
    table = pd.DataFrame({"reason": list(groups), "items": [", ".join(v) for v in
                                                            groups.values()]}).set_index("reason")
    return Section("Not expressible", "Configurations a system cannot express, in its own "
                   "words; each reason once, with the items (case[runner]) that gave it.", table)


def section_failures(frame, cases, runners):
    listed = frame["outcome"].map(lambda o: o.failed or o == Outcome.SKIPPED)
    return _listing(frame[listed & (frame["known_mismatch"] == "")], "Failures and skips",
                    "Mismatches, runner errors and missing frameworks.")


def section_known_mismatches(frame, cases, runners):
    sub = frame[_known(frame)]
    sub = sub.assign(known=sub["known_mismatch"], observed=sub["reason"])
    return _listing(sub, "Known mismatches",
                    "Declared in expectations/<runner>.yaml (known_mismatches, where its 'when' "
                    "matches the case) or in the case (expect.known_mismatch): the item is an "
                    "expected failure, and fails again if the mismatch goes away.",
                    ("known", "observed"))


# The answers follow index.md's headline findings and the ledger's differences
# (findings.py, ledger_groups.py), in this order; the details go to details.md.  Each section
# decides from the typed columns whether it applies (None = nothing to show).
# The native calls and weight shapes live on the per-case pages (pages.py).
# the known mismatches' table sits with the details (the headline names those that cite
# an upstream bug): index.md stays within its 60 KB as runners are added
ANSWERS: list[Callable] = [
    section_typed_numbers, section_edge_cases, section_failures,
]
DETAILS: list[Callable] = [
    section_known_mismatches, section_typed_numbers_more, section_outcomes, section_parameters,
    section_numbers,
    section_weights,
    section_not_expressible, section_keras_backends,
    section_onnx_accounting, section_onnx_ops, section_onnx_masking, section_export_runtimes,
]
SECTIONS: list[Callable] = ANSWERS + DETAILS
