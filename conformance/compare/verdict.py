"""Typed verdicts: what the matrix decides about one observation, as data.

An `Outcome` knows its report cell and its pytest meaning; a `Failure` has a
kind (never parsed back out of its message); `judge` returns a `Verdict`
instead of editing a row, so a row is built once (run/evaluate.py).
"""
from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

import numpy as np

from conformance.case.expectations import Declared, declared as declare
from conformance.case.loader import Case, tolerance_for
from conformance.compare.agreement import (
    agree, classify_fully_masked, classify_masked_weights, classify_nonfinite)
from conformance.contract.runner import Observation
from conformance.oracle.canonical import case_data
from conformance.oracle.reference import Expected, attention
from conformance.oracle.stored import as_stored, rounds


class Outcome(str, Enum):
    """One item's result.  A str, so results files hold the plain word."""

    PASS = "pass"  # within tolerance
    BEHAVIOUR = "behaviour"  # a declared edge-case behaviour held
    MISMATCH = "mismatch"  # a check failed, with figures
    NOT_EXPRESSIBLE = "not_expressible"  # the system cannot express the case (its reason)
    SKIPPED = "skipped"  # the framework is not installed
    ERROR = "error"  # the runner crashed: a result, and the matrix goes on

    def __str__(self) -> str:
        return self.value

    @property
    def cell(self) -> str:
        """The short word report tables show in place of figures."""
        return {"skipped": "skip", "not_expressible": "n/e"}.get(self.value, self.value)

    @property
    def ran(self) -> bool:
        """The system produced an observation to show figures of."""
        return self in (Outcome.PASS, Outcome.BEHAVIOUR, Outcome.MISMATCH)

    @property
    def agrees(self) -> bool:
        return self in (Outcome.PASS, Outcome.BEHAVIOUR)

    @property
    def failed(self) -> bool:
        """pytest fails the item (or xfails it when a known mismatch is declared)."""
        return self in (Outcome.MISMATCH, Outcome.ERROR)

    @property
    def skips(self) -> bool:
        """pytest skips the item, with the row's reason."""
        return self in (Outcome.SKIPPED, Outcome.NOT_EXPRESSIBLE)


class FailureKind(str, Enum):
    FORMULA = "formula"  # the analytic count differs from the case's expect.parameters
    PARAMETERS = "parameters"  # the system's count differs from what it must report
    SHAPE = "shape"  # the output has another shape than the reference
    VALUES = "values"  # output values beyond tolerance (or NaN where numbers are due)
    WEIGHTS = "weights"  # returned per-head attention weights beyond tolerance
    BEHAVIOUR = "behaviour"  # an edge-case behaviour differs from the declared one


@dataclass(frozen=True)
class Failure:
    kind: FailureKind
    message: str  # in words, for people


@dataclass(frozen=True)
class Verdict:
    """The judged figures of one observation and its outcome."""

    outcome: Outcome
    reason: str
    failures: tuple[Failure, ...]
    max_abs_error: float | None
    max_rel_error: float | None
    weights_max_abs_error: float | None = None
    weights_max_rel_error: float | None = None
    fully_masked_row: str | None = None  # observed behaviour (output)
    fully_masked_row_weights: str | None = None  # observed behaviour (returned weights)
    nonfinite_input: str | None = None  # observed behaviour on extreme inputs (output)


def parameter_failures(case: Case, obs: Observation, formula: int,
                       expected: int | None, runner: str) -> list[Failure]:
    """The parameter count's failures: the formula against the case's pin, the system's
    own count against the expected one (judge, and run/counting.py for counted rows)."""
    fails = []
    if case.expect.parameters is not None and formula != case.expect.parameters:
        fails.append(Failure(FailureKind.FORMULA, f"parameter formula gives {formula}, "
                             f"case expects {case.expect.parameters}"))
    want = expected if expected is not None else formula
    if obs.parameters is not None and obs.parameters != want:
        fails.append(Failure(FailureKind.PARAMETERS,
                             f"parameters: {runner} counts {obs.parameters}, expected {want} "
                             f"(formula {formula})"))
    if obs.parameters is None and obs.projection_parameters not in (None, want):
        fails.append(Failure(FailureKind.PARAMETERS, f"projections given: "
                             f"{obs.projection_parameters}, formula {want}"))
    return fails


def _add_line(d: Declared, runner: str, lines: str) -> str:
    """Where an undeclared answer goes: the runner's expectations file, the exact lines."""
    return (f"add to {d.file or f'expectations/{runner}.yaml'} under 'behaviours:' "
            f"(or run with --update-expectations):\n{lines}")


def _fully_masked(exp: Expected, obs: Observation, tol, d: Declared,
                  runner: str) -> tuple[str, str | None, list[Failure]]:
    """The observed behaviour on fully masked rows, for output and weights."""
    observed = classify_fully_masked(exp, obs.output, tol)
    on_weights = None
    if obs.attention_weights is not None and obs.weights_returned == "per_head" \
            and obs.attention_weights.shape == exp.weights.shape:
        on_weights = classify_masked_weights(obs.attention_weights, exp.fully_masked)
    fails, declared = [], d.fully_masked_row
    if declared is None and d.observing:
        pass  # reported (the ledger's fully_masked_row), nothing to declare it against
    elif declared is None:
        fails.append(Failure(FailureKind.BEHAVIOUR, f"fully masked row: observed '{observed}', "
                             "undeclared; " + _add_line(d, runner,
                                                        f"  fully_masked_row: {observed}")))
    elif declared != observed:
        fails.append(Failure(FailureKind.BEHAVIOUR, f"fully masked row: declared '{declared}', "
                             f"observed '{observed}'"))
    return observed, on_weights, fails


def _as_held(case: Case, exp: Expected, obs: Observation) -> Expected:
    """The reference for the fully masked rows: the oracle on the weights as the program
    stores them (oracle/stored.py), so a float16 conversion's weight rounding is not read
    as what it does with a row that attends no key."""
    dtype = getattr(obs, "weights_dtype", "")
    return attention(case, as_stored(case_data(case), dtype)) if rounds(dtype) else exp


def nonfinite_applies(case: Case, declared: Declared | None = None) -> bool:
    """The case places non-finite inputs, or the case or the runner declares what its
    scaled inputs do."""
    return (bool(case.inputs.nonfinite) or "nonfinite_input" in case.expect.behaviours
            or (declared is not None and declared.nonfinite_input is not None))


def _finite_where(where: np.ndarray, expected: np.ndarray, observed) -> np.ndarray:
    """`where`, less the elements where the oracle or the system is non-finite: on
    extreme inputs the declared nonfinite_input behaviour judges those."""
    where = where & np.isfinite(expected)
    try:
        got = np.asarray(observed, dtype=np.float64)
    except (TypeError, ValueError):
        return where
    return where & np.isfinite(got) if got.shape == expected.shape else where


def _nonfinite(case: Case, exp: Expected, obs: Observation, runner: str,
               d: Declared) -> tuple[str, list[Failure]]:
    observed, declared = classify_nonfinite(exp, obs.output), d.nonfinite_input
    if declared is None and d.observing:
        return observed, []
    if declared is None:
        return observed, [Failure(FailureKind.BEHAVIOUR, f"non-finite input: observed "
                                  f"'{observed}', undeclared; " + _add_line(
                                      d, runner, f"  nonfinite_input:\n    {case.id}: "
                                      f"{observed}"))]
    if declared != observed:
        return observed, [Failure(FailureKind.BEHAVIOUR, f"non-finite input: declared "
                                  f"'{declared}', observed '{observed}'")]
    return observed, []


def judge(case: Case, runner: str, obs: Observation, exp: Expected, formula: int,
          expected_parameters: int | None, declared: Declared | None = None) -> Verdict:
    """Compare one observation with the reference and what is declared for it: the
    case's pins over the runner's expectations (case/expectations.py `declared`)."""
    tol, declared = tolerance_for(case), declared or declare(case, runner, None)
    fails = parameter_failures(case, obs, formula, expected_parameters, runner)
    extreme = nonfinite_applies(case, declared)
    where = ~exp.fully_masked[:, :, None]
    out = agree(exp.output, obs.output, tol,
                where=_finite_where(where, exp.output, obs.output) if extreme else where)
    if not out.ok:
        kind = FailureKind.SHAPE if out.shape_mismatch else FailureKind.VALUES
        fails.append(Failure(kind, f"output: {out.problem}"))
    w_abs = w_rel = None
    if obs.attention_weights is not None and obs.weights_returned == "per_head":
        where = ~exp.fully_masked[:, None, :, None]
        wa = agree(exp.weights, obs.attention_weights, tol, where=_finite_where(
            where, exp.weights, obs.attention_weights) if extreme else where)
        w_abs, w_rel = wa.max_abs_error, wa.max_rel_error
        if not wa.ok:
            fails.append(Failure(FailureKind.WEIGHTS, f"attention weights: {wa.problem}"))
    masked = masked_weights = None
    if exp.fully_masked.any() and not out.shape_mismatch:
        masked, masked_weights, more = _fully_masked(_as_held(case, exp, obs), obs, tol,
                                                     declared, runner)
        fails += more
    nonfinite = None
    if extreme and not out.shape_mismatch:
        nonfinite, more = _nonfinite(case, exp, obs, runner, declared)
        fails += more
    held = ([f"fully masked row gives {masked}"] if masked is not None else []) + (
        [f"non-finite input gives {nonfinite}"] if nonfinite is not None else [])
    if fails:
        outcome, reason = Outcome.MISMATCH, "; ".join(f.message for f in fails)
    elif held:
        outcome, reason = Outcome.BEHAVIOUR, ", ".join(held) + (
            ", as observed (reported, not declared)" if declared.observing else ", as declared")
    else:
        outcome, reason = Outcome.PASS, ""
    return Verdict(outcome, reason, tuple(fails), out.max_abs_error, out.max_rel_error,
                   w_abs, w_rel, masked, masked_weights, nonfinite)
