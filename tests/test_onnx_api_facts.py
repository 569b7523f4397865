"""The ONNX operator runners' ApiFacts (attention_op_facts, attention_cache_facts,
contrib_mha_calls, gqa_facts): what each reads of its operator's schema or return reaches
the ledger under its axis, the masked-score number breaks the mask_fill probe's tie, and
a schema or return planted otherwise moves the fact (or drops it) instead of keeping the
expected word."""
from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

from tests.helpers import require

require("onnx", "onnxruntime")


def _fill_cell(runner):
    """The ledger's mask_fill cell of `runner`, with the runner's own facts filed under
    their axes as ledger_cells files them (own_cells)."""
    from conformance.conventions.probes import OWNED_AXES, table
    from conformance.conventions.probes.api_facts import own_cells

    mine = {c.axis: c for c in own_cells(runner) if c.axis in OWNED_AXES}
    (axes, probe), = [p for p in table.LEDGER_PROBES if p[0] == ("mask_fill",)]
    return probe(runner, mine)[0]


def _planted_op(score: str | None):
    """onnx.attention-op.ort whose masked_score fact reads `score` (None: reports none)."""
    from dataclasses import replace

    from conformance.runners.onnx.attention_op import OnnxAttentionOp

    class Planted(OnnxAttentionOp):
        def conventions(self):
            facts = [f for f in super().conventions() if f.about != "masked_score"]
            real = [f for f in super().conventions() if f.about == "masked_score"]
            return facts + ([replace(real[0], value=score)] if score is not None else [])

    return Planted(engine="ort")


def test_the_masked_score_fact_names_the_fill_tie():
    """onnxruntime's Attention writes -FLT_MAX into masked scores (its qk_matmul_output at
    mode 2 shows it); the outputs tie -inf, finfo_min and -0.7*finfo_max, and the runner's
    masked_score fact names the tie.  Planted as -0.7*finfo_max's number the cell follows
    it; with no fact the tie is named by no number (never the nearest word)."""
    from conformance.runners.onnx.attention_op import OnnxAttentionOp

    real = OnnxAttentionOp(engine="ort")
    fact = next(f for f in real.conventions() if f.about == "masked_score")
    assert np.float32(float(fact.value)) == np.finfo(np.float32).min, fact.evidence
    cell = _fill_cell(real)
    assert cell.value == "finfo_min", cell.evidence
    assert "named by the number the system shows" in cell.evidence, cell.evidence
    planted = _fill_cell(_planted_op(f"{float(-0.7 * np.finfo(np.float32).max):.9g}"))
    assert planted.value == "-0.7*finfo_max", planted.evidence
    unnamed = _fill_cell(_planted_op(None))
    assert unnamed.value not in ("finfo_min", "-0.7*finfo_max", "-inf"), unnamed.evidence
    assert "the system shows" not in unnamed.evidence


def test_onnx_reference_shows_minus_inf():
    """onnx.reference's Attention writes -inf (onnx/reference/ops/op_attention.py:
    `np.where(allowed, 0, -np.inf)`): its fact reads -inf, not onnxruntime's number."""
    from conformance.runners.onnx.attention_op import OnnxAttentionOp

    fact = next(f for f in OnnxAttentionOp(engine="reference").conventions()
                if f.about == "masked_score")
    assert fact.value == "-inf", fact.evidence


def _schema(attributes, inputs):
    return SimpleNamespace(since_version=24, attributes={a: None for a in attributes},
                           inputs=[SimpleNamespace(name=n, description=f"{n}. more")
                                   for n in inputs])


@pytest.mark.parametrize("cache, about, value", [
    ("past", "window_argument", "not_applicable"), ("past", "padding_argument",
                                                    "not_applicable"),
    ("static", "window_argument", "not_applicable"), ("static", "padding_argument",
                                                      "lengths")])
def test_the_cache_rows_read_the_schema_they_import(cache, about, value):
    """Attention-23 (past) has no window and no key-padding input; Attention-24 (static) has
    nonpad_kv_seqlen, the valid lengths.  No fully masked row is the runner's: the ledger
    measures it through the past rows' decode steps (decode_masks) and the static rows'
    fully padded item (rows.py)."""
    from conformance.conventions.probes import decode_masks, table
    from conformance.runners.onnx.attention_cache import OnnxAttentionCache

    runner = OnnxAttentionCache(engine="reference", cache=cache)
    facts = {f.about: f for f in runner.conventions()}
    assert facts[about].value == value, facts[about].evidence
    assert "no_key_row" not in facts and "Attention-2" in facts[about].evidence
    if cache == "past":
        assert decode_masks.answers_steps(runner)
    else:
        assert table.way_for(runner, "fully_masked_row") is not None


def test_a_schema_with_a_window_or_another_padding_input_gives_no_fact(monkeypatch):
    """Planted: a schema with left_window_size, then one whose padding input is not
    nonpad_kv_seqlen: the runner reports no reading (the ledger reads the axis then), never
    not_applicable or lengths from its expectation of the schema."""
    import onnx.defs

    from conformance.runners.onnx import attention_cache_facts as cache_facts

    runner = SimpleNamespace(cache="static")
    monkeypatch.setattr(onnx.defs, "get_schema", lambda *a: _schema(
        ["is_causal", "left_window_size"], ["Q", "K", "V", "kv_padding_mask"]))
    assert cache_facts.window_fact(runner) == [] and cache_facts.padding_fact(runner) == []
    monkeypatch.setattr(onnx.defs, "get_schema", lambda *a: _schema(
        ["is_causal"], ["Q", "K", "V", "nonpad_kv_seqlen"]))
    (fact,) = cache_facts.padding_fact(runner)
    assert fact.value == "lengths" and '"nonpad_kv_seqlen"' in fact.evidence


def test_group_query_attention_returns_per_head_weights_at_qk_output_2():
    """The schema's output_qk at qk_output=2 ("after softmax normalization"): per-head
    (B, H, T, S) softmax rows (6e-8 from the causal softmax in a script of numpy).  Planted:
    an averaged (B, T, S) return reads head_averaged, a schema with no qk_output none, a
    return of another shape no fact."""
    from conformance.runners.onnx import gqa_facts

    names = gqa_facts.schema_names()
    (real,) = gqa_facts.weights_fact(names)
    assert real.value == "per_head" and "(1, 2, 4, 4)" in real.evidence, real.evidence
    rows = np.full((1, 4, 4), 0.25)
    (averaged,) = gqa_facts.weights_fact(names, qk=lambda: rows)
    assert averaged.value == "head_averaged"
    (absent,) = gqa_facts.weights_fact([n for n in names if n != "qk_output"])
    assert absent.value == "none" and "no qk_output" in absent.evidence
    assert gqa_facts.weights_fact(names, qk=lambda: np.zeros((1, 2, 4))) == []


def test_the_operator_facts_name_no_harness_word():
    """Every fact the operator runners report is a word of its axis (or the masked score's
    number), never not_probed: a harness limit is not the system's word."""
    from conformance.conventions.ledger import cell_problem
    from conformance.conventions.probes.api_facts import own_cells
    from conformance.runners.onnx.attention_cache import OnnxAttentionCache
    from conformance.runners.onnx.contrib_gqa import OnnxContribGQA
    from conformance.runners.onnx.contrib_mha import OnnxContribMHA

    for runner in (OnnxAttentionCache(engine="ort"), OnnxContribMHA(), OnnxContribGQA(),
                   OnnxAttentionCache(engine="reference", cache="static")):
        cells = own_cells(runner)
        assert [c.value for c in cells if c.value == "not_probed"] == []
        assert [cell_problem(c) for c in cells if cell_problem(c)] == [], runner.name


@pytest.mark.parametrize("engine, word", [("ort", "finfo_min"), ("reference", "-inf")])
def test_the_external_cache_shows_its_padded_scores(engine, word):
    """Attention-24 writes into the scores of keys past nonpad_kv_seqlen what the one-call
    rows' attn_mask writes (onnxruntime -FLT_MAX, onnx.reference -inf): the static rows'
    masked_score fact, which names the ledger's mask_fill tie.  Planted: an engine writing
    -1e9 there reads -1e9."""
    from conformance.conventions.probes.api_facts import as_cell
    from conformance.conventions.probes.masks import shown_word
    from conformance.runners.onnx.attention_cache import OnnxAttentionCache

    def score(runner):
        (fact,) = [f for f in runner.conventions() if f.about == "masked_score"]
        return shown_word(as_cell(runner, fact))

    assert score(OnnxAttentionCache(engine=engine, cache="static")) == word

    class Planted(OnnxAttentionCache):
        def execute(self, model, feed, dtype):
            out, w = super().execute(model, feed, dtype)
            return out, np.where(np.asarray(w) < -1e30, np.float32(-1e9), w)

    assert score(Planted(engine=engine, cache="static")) == "-1e9"
    assert [f for f in OnnxAttentionCache(engine=engine).conventions()
            if f.about == "masked_score"] == []  # the past rows: their decode steps show it
