"""The readings heads.py and qk_norm.py build on name what a system does: the oracle's
tiled head mapping (probe_cells.kv_mapping_candidates) is brute-force tiling, apart from
the grouped one; the QK-norm probe data (position_head_probes.unit_norm_data) leaves the
scope alone to decide the output, so a system normalising over the other scope moves it."""
from __future__ import annotations

from dataclasses import replace

import numpy as np

from conformance.conventions.probes import position_head_probes as php
from conformance.conventions.probes.probe_cells import kv_mapping_candidates
from conformance.conventions.probes.probing import output_with, probe_case
from conformance.oracle.canonical import case_data
from conformance.oracle.reference import project


def _attend(case, kv_index):
    """Brute-force attention with query head h reading kv head kv_index(h)."""
    d, a = case_data(case), case.attention
    x, w = d.inputs, d.weights
    q, k, v = (project(x.query, w.wq, w.bq), project(x.key, w.wk, w.bk),
               project(x.value, w.wv, w.bv))
    idx = [kv_index(h) for h in range(a.num_heads)]
    s = np.einsum("bhtd,bhsd->bhts", q, k[:, idx]) / np.sqrt(a.qk_head_dim)
    p = np.exp(s - s.max(-1, keepdims=True))
    p /= p.sum(-1, keepdims=True)
    return np.einsum("bhtd,hde->bte", p @ v[:, idx], w.wo) + w.bo


def test_tiled_reading_is_brute_force_tiling():
    case = probe_case("gqa", attention={"num_heads": 6, "num_kv_heads": 3, "query_features": 24,
                                        "qk_head_dim": 4, "v_head_dim": 4})
    tiled = _attend(case, lambda h: h % 3)
    grouped = _attend(case, lambda h: h // 2)
    got = kv_mapping_candidates(case, case_data(case))
    assert np.max(np.abs(got["tiled"] - tiled)) < 1e-12
    assert np.max(np.abs(got["grouped"] - grouped)) < 1e-12
    assert np.max(np.abs(tiled - grouped)) > 1e-2


def test_unit_norm_data_parts_the_two_scopes():
    ph = php.qk_norm_case("per_head")
    ah = replace(ph, attention=replace(ph.attention, qk_norm=replace(
        ph.attention.qk_norm, scope="all_heads")))
    data = php.unit_norm_data(ph)
    assert all(np.all(x == 1) for x in (data.weights.q_norm, data.weights.k_norm))
    apart = np.max(np.abs(output_with(ph, None, data) - output_with(ah, None,
                                                                    php.unit_norm_data(ah))))
    assert apart > 1e-2
