"""HF runners of positions and heads: rotary (hf.llama, hf.gptj, hf.gpt_neox), QK-norm
(hf.qwen3, hf.olmo2), ALiBi (hf.bloom, hf.mpt): runs against the reference, refusals in
the systems' words, converters, the interleaved <-> half-split permutation through real
modules, and the ledger's generic probes (conventions/probes/) asking the real modules,
with planted defects."""
from __future__ import annotations

import importlib.util
from dataclasses import replace

import numpy as np
import pytest

from conformance.contract.runner import NotExpressible
from conformance.convert import ConversionError
from conformance.convert.hf import from_gpt_neox, from_qk_norm, to_gpt_neox, to_qk_norm
from conformance.convert.rope import interleaved_to_half_split
from conformance.conventions.probes.heads import kv_head_mapping_cell as kv_head_mapping
from conformance.conventions.probes.partial import rope_partial_setting_cell
from conformance.conventions.probes.positions import (
    rope_partial_cell as rope_partial, rope_style_cell as rope_style)
from conformance.conventions.probes.qk_norm import qk_norm_scope_cell as qk_norm_scope
from conformance.oracle.canonical import case_data
from conformance.oracle.reference import attention
from conformance.runners.hf.bloom import HFBloom
from conformance.runners.hf.gpt_neox import HFGptNeox
from conformance.runners.hf.gptj import HFGptj
from conformance.runners.hf.llama import HFLlama
from conformance.runners.hf.mpt import HFMpt
from conformance.runners.hf.olmo2 import HFOlmo2
from conformance.runners.hf.qwen3 import HFQwen3

from .helpers import make_case

needs_hf = pytest.mark.skipif(
    importlib.util.find_spec("transformers") is None or importlib.util.find_spec("torch") is None,
    reason="transformers/torch not installed (pip install -e '.[hf]')")
SELF = {"self_attention": True, "batch": 2, "query_len": 5, "key_len": 5}
CAUSAL = {"causal": "upper_left"}
CASES = {  # runner -> a case of its own (attention, inputs, mask)
    HFLlama: ({"num_heads": 4, "num_kv_heads": 2, "query_features": 32,
               "rope": {"style": "half_split", "base": 500.0}}, {"position_offset": 7}, {}),
    HFGptj: ({"num_heads": 4, "query_features": 32, "bias": False,
              "rope": {"style": "interleaved", "rotary_dim": 4}}, {"position_offset": 5}, CAUSAL),
    HFGptNeox: ({"num_heads": 4, "query_features": 32,
                 "rope": {"style": "half_split", "rotary_dim": 4, "base": 500.0}},
                {"position_offset": 3}, {}),
    HFQwen3: ({"num_heads": 4, "num_kv_heads": 2, "query_features": 32,
               "qk_norm": {"kind": "rms", "scope": "per_head"}, "rope": {"style": "half_split"}},
              {}, CAUSAL),
    HFOlmo2: ({"num_heads": 4, "num_kv_heads": 2, "query_features": 32,
               "qk_norm": {"kind": "rms", "scope": "all_heads"}}, {}, {}),
    HFBloom: ({"num_heads": 6, "query_features": 24, "alibi": True}, {}, CAUSAL),
    HFMpt: ({"num_heads": 6, "query_features": 24, "alibi": True, "bias": False}, {}, CAUSAL),
}


def case_for(runner_cls, **att):
    a, i, m = CASES[runner_cls]
    return make_case(attention={**a, **att}, inputs={**SELF, **i}, mask=m)


@needs_hf
@pytest.mark.parametrize("runner_cls", list(CASES), ids=lambda c: c.name)
def test_runs_agree_with_reference(runner_cls):
    runner, case = runner_cls(), case_for(runner_cls)
    assert runner.features >= case.features
    obs = runner.run(case, runner.translate(case), case_data(case))
    np.testing.assert_allclose(obs.output, attention(case).output, rtol=1.3e-6, atol=1e-5)


@pytest.mark.parametrize("runner_cls, att, words", [
    (HFLlama, {"rope": {"style": "interleaved"}}, "rotate_half(x)"),
    (HFLlama, {"rope": {"style": "half_split", "rotary_dim": 4}}, "partial_rotary_factor"),
    (HFGptNeox, {"rope": {"style": "interleaved"}}, "rotate_half(x)"),
    (HFGptj, {"rope": {"style": "half_split"}}, "rotate_every_two"),
    (HFGptj, {"rope": {"style": "interleaved", "base": 500.0}}, "fixes the base at 10000"),
    (HFGptj, {"rope": None}, "rotates q and k on every call"),
    (HFQwen3, {"qk_norm": {"kind": "rms", "scope": "all_heads"}}, "unlike olmo"),
    (HFOlmo2, {"qk_norm": {"kind": "rms", "scope": "per_head"}}, "num_attention_heads * head_dim"),
    (HFQwen3, {"qk_norm": {"kind": "layer", "scope": "per_head"}}, "RMSNorm"),
    (HFBloom, {"bias": False}, "bias=True"),
    (HFMpt, {"alibi": False}, "position_bias on every call"),
])
def test_refusals_quote_the_system(runner_cls, att, words):
    t = runner_cls().translate(case_for(runner_cls, **att))
    assert isinstance(t, NotExpressible) and words in t.reason, t


@needs_hf
def test_llama_without_rope_runs_neutralised():
    runner = HFLlama()
    case = make_case(attention={"num_heads": 2, "query_features": 8}, inputs=SELF)
    obs = runner.run(case, runner.translate(case), case_data(case))
    np.testing.assert_allclose(obs.output, attention(case).output, rtol=1.3e-6, atol=1e-5)
    assert any("neutralised" in n for n in obs.notes)


def _half_split_weights(w, heads: int, kv_heads: int, rotary_dim: int, key_heads: int):
    """Canonical weights with the W_q / W_k rows permuted (interleaved -> half-split)."""
    def perm(m, h):  # (H, E, d) -> rows (H*d, E) -> permuted -> (H, E, d)
        rows = m.transpose(0, 2, 1).reshape(-1, m.shape[1])
        out = interleaved_to_half_split(rows, h, rotary_dim)
        return np.ascontiguousarray(out.reshape(m.shape[0], m.shape[2], -1).transpose(0, 2, 1))

    def perm_b(b, h):
        return None if b is None else interleaved_to_half_split(b.ravel(), h, rotary_dim
                                                                ).reshape(b.shape)
    return replace(w, wq=perm(w.wq, heads), wk=perm(w.wk, key_heads),
                   bq=perm_b(w.bq, heads), bk=perm_b(w.bk, key_heads))


@needs_hf
@pytest.mark.parametrize("runner_cls, att", [
    (HFLlama, {"num_heads": 4, "num_kv_heads": 2, "query_features": 32}),
    (HFGptNeox, {"num_heads": 4, "query_features": 32, "rotary_dim": 4}),
], ids=["llama-gqa", "gpt_neox-partial"])
def test_interleaved_equals_half_split_with_permuted_rows(runner_cls, att):
    """Meta's interleaved attention with W = HF's half-split module with the permuted W;
    permuting the key rows with the query head count is caught (GQA)."""
    att = dict(att)
    dim = att.pop("rotary_dim", None)  # None: the whole head (a buggy converter's view)
    inter = make_case(attention={**att, "rope": {"style": "interleaved", "rotary_dim": dim or 8}},
                      inputs={**SELF, "position_offset": 2})
    half = replace(inter, attention=replace(inter.attention, rope=replace(
        inter.attention.rope, style="half_split")))
    data = case_data(inter)
    expected = attention(inter, data).output
    h, kv = att["num_heads"], att.get("num_kv_heads", att["num_heads"])
    runner = runner_cls()
    good = replace(data, weights=_half_split_weights(data.weights, h, kv, dim, kv))
    out = runner.run(half, runner.translate(half), good).output
    np.testing.assert_allclose(out, expected, rtol=1e-5, atol=1e-5)
    if kv != h:
        bad = replace(data, weights=_half_split_weights(data.weights, h, kv, dim, h))
        wrong = runner.run(half, runner.translate(half), bad).output
        assert np.max(np.abs(wrong - expected)) > 1e-2


def test_gpt_neox_layout_is_per_head_q_k_v():
    w = case_data(make_case(attention={"num_heads": 2, "query_features": 8})).weights
    state = to_gpt_neox(w)
    rows = state["query_key_value.weight"]
    np.testing.assert_array_equal(rows[4:8], w.wk[0].T)  # head 0: [q_0; k_0; v_0]
    np.testing.assert_array_equal(rows[12:16], w.wq[1].T)
    back = from_gpt_neox(state, 2)
    assert back.wq.tobytes() == w.wq.tobytes() and back.bv.tobytes() == w.bv.tobytes()
    with pytest.raises(ConversionError, match="does not split"):
        from_gpt_neox(state, 3)


@pytest.mark.parametrize("scope, shape", [("per_head", (4,)), ("all_heads", (16,))])
def test_qk_norm_round_trip(scope, shape):
    case = make_case(attention={"num_heads": 4, "num_kv_heads": 2, "query_features": 16,
                                "bias": False, "qk_norm": {"kind": "rms", "scope": scope}})
    w = case_data(case).weights
    state = to_qk_norm(w)
    assert state["q_norm.weight"].shape == shape
    back = from_qk_norm(state, 4, 2)
    for n in ("wq", "wk", "wv", "wo", "q_norm", "k_norm"):
        assert getattr(back, n).tobytes() == getattr(w, n).tobytes(), n
    with pytest.raises(ConversionError, match="no q_norm"):
        to_qk_norm(replace(w, q_norm=None))


# -- the ledger probes, with planted defects -------------------------------------------

class _TiledLlama(HFLlama):
    """A converter bug: the probe's 6 query heads loaded in the order [0, 3, 1, 4, 2, 5]
    (and W_o's blocks with them), so canonical query head h reads kv head h % 3: tiled."""
    def state(self, case, weights):
        if weights.wq.shape[0] == 6 and weights.wk.shape[0] == 3:
            p = np.array([0, 3, 1, 4, 2, 5])
            weights = replace(weights, wq=weights.wq[p], wo=weights.wo[p],
                              bq=None if weights.bq is None else weights.bq[p])
        return super().state(case, weights)


class _AnyStyleLlama(HFLlama):
    """A runner that accepts interleaved pairs but still rotates half-split."""
    def model_limits(self, case):
        return None


@needs_hf
def test_kv_head_mapping_grouped_and_planted_tiled():
    assert kv_head_mapping(HFLlama()).value == "grouped"
    cell = kv_head_mapping(_TiledLlama())
    assert cell.value == "tiled", cell.evidence


@needs_hf
def test_rope_style_observed_and_not_fooled_by_a_claim():
    assert rope_style(HFGptj()).value == "interleaved"
    assert rope_style(HFLlama()).value == "half_split"
    cell = rope_style(_AnyStyleLlama())
    assert cell.value == "half_split", cell.evidence  # runs both, but is not choosable


@needs_hf
def test_qk_norm_scope_observed():
    assert qk_norm_scope(HFQwen3()).value == "per_head"
    assert qk_norm_scope(HFOlmo2()).value == "all_heads"


# -- typed numbers: GPT-J's rotary_dim per head, GPT-NeoX's rotary_pct of the head -----

@pytest.mark.parametrize("typed, style, dim", [
    ({"system": "hf.gptj", "n_embd": 64, "n_head": 4, "rotary_dim": 8}, "interleaved", 8),
    ({"system": "hf.gpt_neox", "hidden_size": 64, "num_attention_heads": 2, "rotary_pct": 0.25},
     "half_split", 8),
])
def test_typed_rotary_width(typed, style, dim):
    case = make_case(typed=typed, attention={"num_heads": typed.get("n_head", 2),
                                             "query_features": 64, "rope": {"style": style}})
    assert case.attention.rope.rotary_dim == dim


@pytest.mark.parametrize("typed, rope, words", [
    ({"system": "hf.gpt_neox", "hidden_size": 64, "num_attention_heads": 2, "rotary_pct": 1.5},
     {"style": "half_split"}, "must be a number in (0, 1]"),
    ({"system": "hf.gptj", "n_embd": 64, "n_head": 4, "rotary_dim": 8},
     {"style": "interleaved", "rotary_dim": 16}, "typed (GPTJConfig(n_embd=64, n_head=4, "
     "rotary_dim=8)) means 8"),
    ({"system": "hf.gptj", "n_embd": 64, "n_head": 4, "rotary_dim": 8}, None,
     "give attention.rope with its style"),
])
def test_typed_rotary_errors_name_the_field(typed, rope, words):
    from conformance.case.loader import CaseError

    att = {"num_heads": typed.get("n_head", 2), "query_features": 64}
    with pytest.raises(CaseError) as err:
        make_case(typed=typed, attention={**att, **({"rope": rope} if rope else {})})
    assert words in str(err.value)


@needs_hf
@pytest.mark.parametrize("runner", [HFLlama(), HFQwen3(), HFOlmo2()])
def test_partial_rotary_factor_is_accepted_and_ignored(runner):
    cell = rope_partial_setting_cell(runner)
    assert cell.value == "ignored", cell.evidence
    assert "accepted: output 0.0e+00 from the run without it" in cell.evidence


@needs_hf
def test_rope_partial_supported_refused_and_a_planted_wrong_rotation():
    assert rope_partial(HFGptj()).value == "supported"
    assert rope_partial(HFGptNeox()).value == "supported"

    class Refusing(HFLlama):  # the system's own error, quoted
        def build(self, torch, plan):
            if plan.get("partial_rotary_factor"):
                raise ValueError("partial_rotary_factor must be 1.0")
            return super().build(torch, plan)
    cell = rope_partial_setting_cell(Refusing())
    assert cell.value == "refused" and "must be 1.0" in cell.evidence, cell.evidence

    class Moved(HFLlama):  # the planted defect: the setting changes the output, wrongly
        def forward(self, module, x, mask, **kw):
            out, w = super().forward(module, x, mask, **kw)
            if module.config.rope_parameters.get("partial_rotary_factor"):
                out = out + 0.1
            return out, w
    assert rope_partial_setting_cell(Moved()).value == "not_probed"


@needs_hf
def test_boolean_mask_added_as_number_read_from_the_module_itself():
    """The suite's 0/1 reading leaves out Qwen3's QK-norm: the ledger asks the module's own
    float 0/1 run as the reference (mask_number.py); a planted module that treats the
    boolean otherwise is not_probed."""
    import torch

    from conformance.conventions.probes.flags import attn_mask_polarity_cell

    # eager, the attention function that adds a boolean (sdpa reads it: test_harness_choices)
    assert attn_mask_polarity_cell(HFQwen3(harness_choices={})).value == "added_as_number"

    class Planted(HFQwen3):
        def forward(self, module, x, mask, **kw):
            out, w = super().forward(module, x, mask, **kw)
            return (out + 0.1 if mask is not None and mask.dtype == torch.bool else out), w
    assert attn_mask_polarity_cell(Planted()).value == "not_probed"
