"""Comparators: numbers against the reference, and edge-case behaviour labels.

`agree` is elementwise |observed - expected| <= atol + rtol * |expected|, as
in torch.testing.assert_close, restricted to where the reference is defined
(not NaN); a NaN or inf where a number is expected fails, an expected +inf or
-inf must be met by the same infinity, and a shape mismatch, an empty output
or a non-float output (integer, complex, bool) fail with the problem named.
`classify_fully_masked` names what a system did with a query row whose every
key is masked, by checking each hypothesis of case.BEHAVIOURS numerically;
`classify_nonfinite` names what it did with non-finite or overflowing inputs.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from conformance.case.loader import Tolerance
from conformance.oracle.reference import Expected


@dataclass(frozen=True)
class Agreement:
    ok: bool
    max_abs_error: float | None  # over compared elements; None when not comparable
    max_rel_error: float | None
    problem: str = ""  # why not ok, in words ("" when ok)
    compared: int = 0  # how many elements were compared
    shape_mismatch: bool = False  # the shapes differ: nothing was compared


def agree(expected: np.ndarray, observed: np.ndarray | None, tol: Tolerance,
          where: np.ndarray | None = None) -> Agreement:
    """Compare where `where` (broadcast to expected) is True and expected is not NaN;
    an infinite expected value must be met exactly (same sign)."""
    observed, problem = _as_floats(expected, observed)
    if problem:
        return problem
    select = ~np.isnan(expected)
    if where is not None:
        select &= np.broadcast_to(where, expected.shape)
    infinite = select & np.isinf(expected)
    if infinite.any():
        wrong = int((observed[infinite] != expected[infinite]).sum())
        if wrong:
            return Agreement(False, None, None, f"{wrong} of {int(infinite.sum())} values are "
                             "not the infinity (same sign) the reference has", int(select.sum()))
        select &= ~infinite
    e, o = expected[select], observed[select]
    if e.size == 0:
        return Agreement(True, 0.0, 0.0, "", 0)
    bad_values = ~np.isfinite(o)
    if bad_values.any():
        return Agreement(False, None, None,
                         f"{int(bad_values.sum())} of {e.size} values are NaN/inf where the "
                         "reference has numbers", e.size)
    diff = np.abs(o - e)
    rel = diff / np.where(e == 0, np.inf, np.abs(e))
    failing = diff > tol.atol + tol.rtol * np.abs(e)
    problem = ""
    if failing.any():
        problem = (f"{int(failing.sum())} of {e.size} values differ beyond rtol={tol.rtol:g}, "
                   f"atol={tol.atol:g}")
    return Agreement(not failing.any(), float(diff.max()), float(rel.max()), problem, e.size)


def _as_floats(expected: np.ndarray, observed) -> tuple[np.ndarray | None, Agreement | None]:
    """`observed` as float64, or the Agreement that says why it cannot be compared.  Numbers
    of another kind are a mismatch; what is not numbers at all (a string) raises, as before:
    a runner fault, an error row (run/evaluate.py)."""
    if observed is None:
        return None, Agreement(False, None, None, "no output was returned")
    observed = np.asarray(observed)
    if observed.dtype.kind in "biuc":
        return None, Agreement(False, None, None, f"dtype mismatch: expected floating-point "
                               f"values, got {observed.dtype}", shape_mismatch=True)
    observed = np.asarray(observed, dtype=np.float64)  # not numbers (a string): raises
    if observed.size == 0 and expected.size:
        return None, Agreement(False, None, None, f"empty output: shape {observed.shape}, the "
                               f"reference has {expected.size} elements {expected.shape}",
                               shape_mismatch=True)
    if observed.shape != expected.shape:
        return None, Agreement(False, None, None, f"shape mismatch: expected "
                               f"{expected.shape}, got {observed.shape}", shape_mismatch=True)
    return observed, None


def _rows_close(a: np.ndarray, b: np.ndarray, tol: Tolerance) -> bool:
    return bool(np.all(np.abs(a - b) <= tol.atol + tol.rtol * np.abs(b)))


def classify_fully_masked(expected: Expected, output: np.ndarray, tol: Tolerance) -> str:
    """'nan' | 'zeros' | 'uniform' | 'finite_other' for the fully masked rows.

    zeros: every weight of the row is 0, so the row's output is the output bias;
    uniform: the row attends equally to every key (masked ones included).
    """
    rows = expected.fully_masked
    got = np.asarray(output, dtype=np.float64)[rows]
    if np.isnan(got).any():
        return "nan"
    if _rows_close(got, expected.output_if_zeros[rows], tol):
        return "zeros"
    if _rows_close(got, expected.output_if_uniform[rows], tol):
        return "uniform"
    return "finite_other"


def classify_masked_weights(weights: np.ndarray, fully_masked: np.ndarray) -> str:
    """The same labels for returned per-head weights on fully masked rows."""
    got = np.moveaxis(np.asarray(weights, dtype=np.float64), 1, 2)[fully_masked]  # (N, H, S)
    if np.isnan(got).any():
        return "nan"
    if np.all(got == 0):
        return "zeros"
    if np.allclose(got, 1.0 / got.shape[-1]):
        return "uniform"
    return "finite_other"


def classify_nonfinite(expected: Expected, output: np.ndarray) -> str:
    """What a system did with non-finite or overflowing inputs (case/extreme.py), over
    the output elements outside fully masked rows.  U: where the float64 oracle is
    NaN/inf (Expected.undefined); N: where the system's output is NaN/inf.

    contained: N empty (finite everywhere); nan_propagates: N == U, not empty (non-finite
    exactly where the oracle's math is); partial: N a strict subset of U; nan_spreads:
    N reaches beyond U with NaN there; overflow_inf: N reaches beyond U with only +-inf
    there (an overflow the float64 oracle does not have)."""
    got = np.asarray(output, dtype=np.float64)
    defined = np.broadcast_to(~expected.fully_masked[:, :, None], got.shape)
    undefined = expected.undefined if expected.undefined is not None else np.zeros_like(defined)
    bad = ~np.isfinite(got) & defined
    if not bad.any():
        return "contained"
    if np.array_equal(bad, undefined & defined):
        return "nan_propagates"
    beyond = bad & ~undefined
    if not beyond.any():
        return "partial"
    return "nan_spreads" if np.isnan(got[beyond]).any() else "overflow_inf"
