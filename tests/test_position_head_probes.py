"""The probes of positions and heads (conventions/probes/position_head_probes.py) name what a system
does: NumPy stand-ins for systems that tile kv heads, pair RoPE the other way, or normalise QK over
the wrong scope get the word of what they do, never the correct one."""
from __future__ import annotations

import numpy as np

from conformance.conventions.probes import position_head_probes as php
from conformance.conventions.probes.probing import output_with
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
    case = php.gqa_case(num_heads=6, num_kv_heads=3, head_dim=4)
    tiled = _attend(case, lambda h: h % 3)
    grouped = _attend(case, lambda h: h // 2)
    assert np.max(np.abs(output_with(case, None, php.tiled_data(case)) - tiled)) < 1e-12
    assert np.max(np.abs(output_with(case, None) - grouped)) < 1e-12
    assert np.max(np.abs(tiled - grouped)) > 1e-2


def test_kv_head_mapping_names_a_tiling_system():
    case = php.gqa_case()
    assert php.kv_head_mapping(case, lambda: _attend(case, lambda h: h % 2), "t").value == "tiled"
    assert php.kv_head_mapping(case, lambda: _attend(case, lambda h: h // 2),
                              "g").value == "grouped"

    def refuses():
        raise ValueError("heads must match")
    cell = php.kv_head_mapping(case, refuses, "r")
    assert cell.value == "refused" and "heads must match" in cell.evidence


def test_rope_style_one_pairing_or_both():
    half, inter = php.rope_case("half_split"), php.rope_case("interleaved")
    both = php.rope_style(half, {"0": lambda: output_with(half, None),
                                "1": lambda: output_with(inter, None)}, "w")
    assert both.value == "choosable"
    wrong = php.rope_style(half, {"only": lambda: output_with(inter, None)}, "w")
    assert wrong.value == "interleaved"  # asked for half-split, paired the other way


def test_rope_partial_rejects_a_whole_head_rotation():
    part, whole = php.rope_case("half_split", rotary_dim=8), php.rope_case("half_split")
    assert php.rope_partial(part, lambda: output_with(part, None), "w").value == "supported"
    cell = php.rope_partial(part, lambda: output_with(whole, None), "w")
    assert cell.value == "ignored" and "whole head" in cell.evidence  # accepted, dropped

    def raises():
        raise ValueError("rotary_dim must equal head_dim")
    cell = php.rope_partial(part, raises, "w")
    assert cell.value == "refused" and "must equal head_dim" in cell.evidence


def test_every_setting_raising_is_refused_and_no_rotation_is_ignored():
    case = php.rope_case("half_split")

    def raises():
        raise RuntimeError("kernel does not support rotary")
    assert php.rope_style(case, {"a": raises}, "w").value == "refused"
    unrotated = output_with(php._with_rope(case, style="none"), None)
    assert php.rope_style(case, {"a": lambda: unrotated}, "w").value == "ignored"
    qk = php.qk_norm_case("per_head")
    cell = php.qk_norm_scope({"a": (qk, lambda data: raises())}, "w")
    assert cell.value == "refused" and "does not support rotary" in cell.evidence


def test_qk_norm_scope_names_the_scope_applied():
    ph, ah = php.qk_norm_case("per_head"), php.qk_norm_case("all_heads")

    def as_(case):
        return lambda data: output_with(case, None, php.unit_norm_data(case))
    assert php.qk_norm_scope({"a": (ph, as_(ph))}, "w").value == "per_head"
    # a system asked for per-head normalisation that normalises over all heads
    assert php.qk_norm_scope({"a": (ph, as_(ah))}, "w").value == "all_heads"
    assert php.qk_norm_scope({"a": (ph, as_(ph)), "b": (ah, as_(ah))}, "w").value == "choosable"
