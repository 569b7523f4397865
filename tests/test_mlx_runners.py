"""MLX runners (conformance/runners/mlx): the sdpa row's ops against the oracle on
rope, QK-norm, ALiBi, sinks and windows, planted defects rejected, and the head-mapping
candidates."""
from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from conformance.conventions.probes.probe_cells import kv_mapping_candidates
from conformance.conventions.probes.probing import probe_case
from conformance.oracle.canonical import case_data
from conformance.oracle.reference import attention, project


def test_tiled_candidate_is_h_mod_kv():
    """kv_mapping_candidates' tiled output equals a hand-built h % H_kv mapping."""
    case = probe_case("tiled", attention={"num_heads": 6, "num_kv_heads": 3,
                                          "query_features": 12})
    data = case_data(case)
    w, x = data.weights, data.inputs
    q, k, v = (project(x.query, w.wq, w.bq), project(x.key, w.wk, w.bk),
               project(x.value, w.wv, w.bv))
    k, v = np.tile(k, (1, 2, 1, 1)), np.tile(v, (1, 2, 1, 1))  # head h reads kv h % 3
    s = np.einsum("bhtd,bhsd->bhts", q, k) / np.sqrt(case.attention.qk_head_dim)
    p = np.exp(s - s.max(-1, keepdims=True))
    heads = (p / p.sum(-1, keepdims=True)) @ v
    tiled = np.einsum("bhtd,hde->bte", heads, w.wo) + w.bo
    got = kv_mapping_candidates(case, data)
    assert np.allclose(got["tiled"], tiled, atol=1e-12)
    assert np.allclose(got["grouped"], attention(case, data).output)
    assert not np.allclose(got["tiled"], got["grouped"], atol=1e-3)


mlx = pytest.importorskip("mlx.core")

FEATURE_SECTIONS = [
    {"attention": {"num_heads": 4, "query_features": 16, "rope": {"style": "interleaved",
                                                                  "rotary_dim": 4}},
     "inputs": {"position_offset": 9}},
    {"attention": {"num_heads": 4, "num_kv_heads": 2, "query_features": 16,
                   "qk_norm": {"kind": "rms", "scope": "all_heads"},
                   "rope": {"style": "half_split"}}},
    {"attention": {"num_heads": 6, "query_features": 12, "alibi": True},
     "inputs": {"self_attention": True, "key_len": 3}, "mask": {"causal": "lower_right"}},
    {"attention": {"num_heads": 4, "query_features": 16, "sinks": True},
     "mask": {"causal": "lower_right"}},
    {"inputs": {"self_attention": True, "query_len": 8, "key_len": 8},
     "mask": {"window": {"left": 2, "right": 1}}},
]


@pytest.mark.parametrize("sections", FEATURE_SECTIONS, ids=[
    "rope-interleaved", "qknorm-gqa", "alibi", "sinks", "window"])
def test_sdpa_row_matches_the_oracle(sections):
    from conformance.runners.mlx.sdpa import MlxSDPA

    case = probe_case("mlx-row", **sections)
    runner = MlxSDPA()
    obs = runner.run(case, runner.translate(case), case_data(case))
    assert np.max(np.abs(obs.output - attention(case).output)) < 1e-5


def test_sdpa_row_rejects_a_planted_rope_style():
    """The interleaved case run as half-split (traditional=False) is far off."""
    from conformance.runners.mlx.sdpa import MlxSDPA

    case = probe_case("mlx-wrong", **FEATURE_SECTIONS[0])
    runner = MlxSDPA()
    plan = runner.translate(case).plan
    wrong = replace(runner.translate(case), plan=replace(plan, rope=(4, False, 10000.0)))
    obs = runner.run(case, wrong, case_data(case))
    assert np.max(np.abs(obs.output - attention(case).output)) > 1e-3


def test_rope_partial_names_a_dropped_dims_ignored(monkeypatch):
    """mx.fast.rope(dims=4) planted to rotate all 8 dimensions: the ledger's rope_partial
    reads `ignored` (dims accepted, output unmoved from the full rotation), not `refused`
    (no error was raised); the real runner reads `supported`."""
    from conformance.conventions.probes.positions import rope_partial_cell
    from conformance.runners.mlx.sdpa import MlxSDPA

    assert rope_partial_cell(MlxSDPA()).value == "supported"
    real = MlxSDPA.translate

    def all_dims(self, case):
        t = real(self, case)
        return replace(t, plan=replace(t.plan, rope=(8,) + t.plan.rope[1:]))

    monkeypatch.setattr(MlxSDPA, "translate", all_dims)
    cell = rope_partial_cell(MlxSDPA())
    assert cell.value == "ignored", cell.evidence


def test_mha_loads_and_refuses_grouped_heads():
    from conformance.runners.mlx.mha import MlxMHA

    runner = MlxMHA()
    case = probe_case("mlx-mha", attention={"qk_head_dim": 3, "v_head_dim": 5,
                                            "output_features": 7})
    obs = runner.run(case, runner.translate(case), case_data(case))
    assert np.max(np.abs(obs.output - attention(case).output)) < 1e-5
    assert obs.parameters == runner.count(case).parameters == case_data(case).weights.count()
    grouped = probe_case("mlx-gqa", attention={"num_heads": 4, "num_kv_heads": 2})
    assert "num_kv_heads" in runner.translate(grouped).reason


DECODE = {"attention": {"num_heads": 4, "num_kv_heads": 2, "query_features": 16,
                        "rope": {"style": "half_split"}},
          "inputs": {"self_attention": True, "query_len": 7, "key_len": 7},
          "mask": {"causal": "upper_left"}, "decode": {"prefill": 4, "steps": 3}}


def _decode_case():
    from conformance.case.loader import parse_case

    return parse_case({"id": "mlx-decode", **DECODE}, "<test>")


def test_cache_decode_equals_the_full_forward_and_grows_its_blocks():
    from conformance.runners.mlx.sdpa_cache import STEP, MlxSDPACache

    case, runner = _decode_case(), MlxSDPACache()
    obs = runner.run(case, runner.translate(case), case_data(case))
    assert np.max(np.abs(obs.output - attention(case).output)) < 1e-5
    backing = obs.notes[0].split("backing key array ")[1]
    assert f"(2, 2, {STEP}, 4) -> (2, 2, {2 * STEP}, 4)" in backing  # grew by a block


def test_cache_decode_rejects_a_planted_cache_that_forgets(monkeypatch):
    """A cache that returns only the new position (the prefill forgotten) is far off."""
    from conformance.runners.mlx import kv_cache, sdpa_cache

    def forgetful(self, k, v):
        self.offset += k.shape[2]
        self.shapes.append(tuple(k.shape))
        return k, v

    monkeypatch.setattr(kv_cache.BlockCache, "update_and_fetch", forgetful)
    case, runner = _decode_case(), sdpa_cache.MlxSDPACache()
    obs = runner.run(case, runner.translate(case), case_data(case))
    assert np.max(np.abs(obs.output - attention(case).output)) > 1e-2


def test_cache_cells_name_the_lower_right_step(monkeypatch):
    """The ledger's cache probes through mlx.sdpa.cache's own decode: lower_right (and
    mask='causal' at the step quoted as lower-right too), BNSH preallocated, float64 below
    float64.  Planted: a step that sees key 0 only reads upper_left."""
    from conformance.conventions.probes import ledger_cells
    from conformance.conventions.probes.cache import cache_causal_alignment_cell
    from conformance.runners.mlx import kv_cache
    from conformance.runners.mlx.sdpa_cache import MlxSDPACache

    cells = {c.axis: c for c in ledger_cells(MlxSDPACache())}
    assert cells["cache_causal_alignment"].value == "lower_right"
    assert "mask='causal' (ml-explore/mlx#2835) passed at the step, it attends the cache" \
        in cells["cache_causal_alignment"].evidence
    assert cells["cache_layout"].value.startswith("BNSH, two arrays")
    assert cells["float64_compute"].value == "below_float64"
    real = kv_cache.BlockCache.update_and_fetch

    def first_key_only(self, k, v):
        keys, values = real(self, k, v)
        return (keys, values) if k.shape[2] > 1 else (keys[:, :, :1], values[:, :, :1])

    monkeypatch.setattr(kv_cache.BlockCache, "update_and_fetch", first_key_only)
    assert cache_causal_alignment_cell(MlxSDPACache()).value == "upper_left"


def test_raw_answers_give_the_ledger_s_cells_and_planted_ones_are_caught(monkeypatch):
    """MlxAnswers: the mask raw to mask= (the fused op, the layer), the causal switch as
    mask="causal"; the ledger reads true_attends, added, lower_right.  Planted: a float mask
    read as a boolean (!= 0) reads cast_to_bool, a dropped "causal" reads ignored."""
    from conformance.conventions.probes.flags import (
        attn_mask_polarity_cell, causal_flag_cell, float_mask_cell)
    from conformance.runners.mlx.mha import MlxMHA
    from conformance.runners.mlx.sdpa import MlxSDPA
    from conformance.runners.mlx.sdpa_cache import MlxSDPACache

    for r in (MlxSDPA(), MlxSDPACache(), MlxMHA()):
        got = (attn_mask_polarity_cell(r), float_mask_cell(r), causal_flag_cell(r))
        assert [c.value for c in got] == ["true_attends", "added", "lower_right"], got
        assert [c.documented for c in got] == ["true_attends", "added", "lower_right"]
        assert "mask='causal'" in got[2].evidence
    real = MlxSDPA.answer_with

    def planted(self, mx, case, data, mask):
        if isinstance(mask, str):
            mask = None  # the switch dropped
        elif mask is not None and mask.dtype != mx.bool_:
            mask = mask != 0  # a float mask read as a boolean
        return real(self, mx, case, data, mask)

    monkeypatch.setattr(MlxSDPA, "answer_with", planted)
    assert float_mask_cell(MlxSDPA()).value == "cast_to_bool"
    assert causal_flag_cell(MlxSDPA()).value == "ignored"
