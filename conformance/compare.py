"""Comparators: numbers against the reference, and edge-case behaviour labels.

`agree` is elementwise |observed - expected| <= atol + rtol * |expected|, as
in torch.testing.assert_close, restricted to where the reference is defined;
a NaN or inf where a number is expected fails, and so does a shape mismatch.
`classify_fully_masked` names what a system did with a query row whose every
key is masked, by checking each hypothesis of case.BEHAVIOURS numerically.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .case import Tolerance
from .reference import Expected


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
    """Compare where `where` (broadcast to expected) is True and expected is finite."""
    if observed is None:
        return Agreement(False, None, None, "no output was returned")
    observed = np.asarray(observed, dtype=np.float64)
    if observed.shape != expected.shape:
        return Agreement(False, None, None,
                         f"shape mismatch: expected {expected.shape}, got {observed.shape}",
                         shape_mismatch=True)
    select = np.isfinite(expected)
    if where is not None:
        select &= np.broadcast_to(where, expected.shape)
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
