"""causal_flag read row by row, where no reading matches the whole output: a causal switch
with T != S whose query rows follow different alignments (onnxruntime's CPU
com.microsoft.MultiHeadAttention, unidirectional=1 on T 3, S 5: rows 0 and 1 upper left,
the last row every key) is `depends`, each row with the readings it matches; the nearest
reading of the whole output would name one alignment that no row pair shows.
"""
from __future__ import annotations

from dataclasses import replace

import numpy as np

from conformance.conventions.axes import DEPENDS, Convention
from conformance.conventions.probes.probing import causal_candidates
from conformance.conventions.probes.asked import NEAR


def row_readings(case, out: np.ndarray) -> list[list[str]]:
    """Per query row, the causal_candidates readings its output matches within NEAR."""
    cands = causal_candidates(case)
    return [[k for k, v in cands.items()
             if float(np.max(np.abs(out[:, t] - v[:, t]))) < NEAR]
            for t in range(case.inputs.query_len)]


def by_rows(cell: Convention, case, out: np.ndarray) -> Convention:
    """`cell` (the nearest reading of the whole output) where a reading matches the whole
    output within NEAR, or some row matches none; else `depends` with each row's readings
    where the rows' readings differ."""
    rows = row_readings(case, out)
    if all(cell.value in r for r in rows) or not all(rows):
        return cell
    words = "; ".join(f"query row {t}: {' = '.join(r)}" for t, r in enumerate(rows))
    return replace(cell, value=DEPENDS, evidence=f"{cell.evidence}; no reading matches every "
                   f"row (within {NEAR:g}): {words}")
