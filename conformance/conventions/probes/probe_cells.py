"""Readings flags.py and heads.py share: a boolean mask's polarity from `fwd(mask) -> output`
(the system run on a probe case with `mask` passed raw in its own mask argument, as NumPy
(B, T, S)), named by the reading the output matches, or the refusal quoted; the oracle's
outputs under the two grouped-query head mappings.

Only contract, probes and axes are imported: frameworks stay in the runners.
"""
from __future__ import annotations

from typing import Callable

import numpy as np

from conformance.conventions.axes import IGNORED, NOT_PROBED, Convention
from conformance.conventions.probes.probing import (
    distances, nearest, output_added, output_with, probe_mask, refusal)

Forward = Callable[[np.ndarray | None], np.ndarray]
NEAR = 1e-3  # a reading "matches" within this (float32 probes are ~1e-7 off)


def _try(axis: str, fwd: Forward, mask, what: str):
    try:
        return fwd(mask), None
    except Exception as exc:  # the system's refusal is the observation
        return None, refusal(axis, exc, what)


def mask_polarity(case, fwd: Forward, what: str, **doc) -> Convention:
    """A boolean mask passed raw: True = attends or True = blocks (or neither)."""
    m = probe_mask(case)
    out, refused = _try("attn_mask_polarity", fwd, m, what)
    if refused:
        return refused
    d = distances(out, {"true_attends": output_with(case, m), "true_blocks": output_with(case, ~m)})
    return _neither(nearest("attn_mask_polarity", d, what, **doc), min(d.values()), out, case,
                    m)


def _neither(cell: Convention, best: float, out: np.ndarray, case, m) -> Convention:
    """Neither reading within NEAR of the output (`best`: the least distance): the mask
    was not read as a mask.  The eager HF path adds a boolean mask to the scores as 0/1
    (added_as_number, when the output matches that reading); a mask accepted and without
    effect is `ignored`; another effect is `not_probed` (no reading the suite knows), each
    with how far an unmasked run is."""
    if best < NEAR:
        return cell
    free = np.max(np.abs(out - output_with(case, None)))
    added = np.max(np.abs(out - output_added(case, m.astype(np.float64))))
    word = "added_as_number" if added < NEAR else IGNORED if free < NEAR else NOT_PROBED
    return Convention(cell.axis, word, f"{cell.evidence}; neither reading matches: the "
                      f"boolean is not used as a mask: added to the scores as 0/1 {added:.1e}, "
                      f"no mask at all {free:.1e}", cell.documented, cell.documented_source)


def kv_mapping_candidates(case, data) -> dict[str, np.ndarray]:
    """The oracle's output for a grouped-query case under the two head mappings:
    grouped (query head h reads kv head h // g, the canonical one) and tiled (h % H_kv),
    the latter as a canonical grouping of the query heads reordered so that canonical
    head j is head perm[j] with perm[j] % H_kv == j // g (the output sums over heads)."""
    from dataclasses import replace

    from conformance.oracle.reference import attention

    h, kv = case.attention.num_heads, case.attention.num_kv_heads
    perm = np.argsort((np.arange(h) % kv) * h + np.arange(h), kind="stable")
    w = data.weights
    tiled = replace(w, wq=w.wq[perm], wo=w.wo[perm], bq=None if w.bq is None else w.bq[perm])
    return {"grouped": attention(case, data).output,
            "tiled": attention(case, replace(data, weights=tiled)).output}
