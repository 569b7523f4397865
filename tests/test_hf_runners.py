"""HF runners: the seed claim (head size other than width / heads), runs against the
reference, and ledger cells in the axes' vocabularies."""
from __future__ import annotations

import importlib.util

import numpy as np
import pytest

from conformance.conventions.axes import BY_ID
from conformance.contract.runner import NotExpressible, NotExpressibleError
from conformance.conventions.probes.table import asked_probes
from conformance.oracle.reference import attention
from conformance.runners.hf.bert import HFBert
from conformance.runners.hf.gpt2 import HFGpt2
from conformance.runners.hf.llama import HFLlama
from conformance.runners.hf.marian import HFMarian
from conformance.runners.hf.t5 import HFT5
from conformance.oracle.canonical import case_data

from .helpers import make_case

needs_hf = pytest.mark.skipif(
    importlib.util.find_spec("transformers") is None or importlib.util.find_spec("torch") is None,
    reason="transformers/torch not installed (pip install -e '.[hf]')")
SEED = {"attention": {"num_heads": 4, "query_features": 64, "qk_head_dim": 32, "bias": False},
        "inputs": {"self_attention": True}}
SELF = {"attention": {"num_heads": 2, "query_features": 8}, "inputs": {"self_attention": True}}


@pytest.mark.parametrize("runner, words", [
    (HFBert, "attention_head_size = int(hidden_size / num_attention_heads)"),
    (HFGpt2, "head_dim = embed_dim // num_heads"),
    (HFMarian, "head_dim = embed_dim // num_heads"),
])
def test_seed_claim_impossible_by_construction(runner, words):
    t = runner().translate(make_case(**SEED))
    assert isinstance(t, NotExpressible) and words in t.reason and "64 / 4 gives 16" in t.reason


def test_t5_needs_no_scale_and_no_bias():
    t = HFT5().translate(make_case(**SEED))
    assert isinstance(t, NotExpressible) and "self.scaling = 1.0" in t.reason


def test_cross_attention_with_two_tensors_is_not_expressible():
    t = HFMarian().translate(make_case())
    assert isinstance(t, NotExpressible) and "key_value_states" in t.reason


@needs_hf
@pytest.mark.parametrize("runner, sections", [
    (HFBert(attn_implementation="eager"), SELF), (HFBert(attn_implementation="sdpa"), SELF),
    (HFMarian(), SELF), (HFLlama(), SEED),
    (HFGpt2(), {**SELF, "mask": {"causal": "upper_left"}}),
])
def test_runs_agree_with_reference(runner, sections):
    case = make_case(**sections)
    obs = runner.run(case, runner.translate(case), case_data(case))
    np.testing.assert_allclose(obs.output, attention(case).output, rtol=1.3e-6, atol=1e-5)


@needs_hf
def test_t5_unscaled_scores_match_reference_without_scale():
    case = make_case(**SEED)
    t5 = HFT5()
    plan = {**t5.config_call(case)[1], "attn_implementation": "eager", "dropout": 0.0}
    from conformance.runners.hf.common import import_torch
    torch = import_torch()
    module = t5.module_for(torch, case, plan, case_data(case).weights)
    with torch.no_grad():
        out, _ = t5.forward(module, torch.tensor(case_data(case).inputs.query).float(), None)
    np.testing.assert_allclose(out.double().numpy(), attention(case, scale=1.0).output,
                               rtol=1.3e-6, atol=1e-5)


@needs_hf
def test_llama_odd_head_dim_quotes_the_config():
    case = make_case(attention={"num_heads": 8, "query_features": 3136, "qk_head_dim": 49},
                     inputs={"self_attention": True})
    with pytest.raises(NotExpressibleError, match="RoPE requires an even rotary dimension"):
        HFLlama().run(case, HFLlama().translate(case), case_data(case))


@needs_hf
def test_bert_boolean_mask_eager_vs_sdpa():
    """The ledger asks the raw boolean mask (flags.py through HFRunner.answer)."""
    from conformance.conventions.probes.flags import attn_mask_polarity_cell

    polarity = {r: attn_mask_polarity_cell(HFBert(attn_implementation=r))
                for r in ("eager", "sdpa")}
    eager = polarity["eager"]  # added to the scores as 0/1: no mask
    assert eager.value == "added_as_number" and "added to the scores as 0/1" in eager.evidence
    assert polarity["sdpa"].value == "true_attends"
    from conformance.conventions.probes.api_facts import own_cells

    cells = {r: {c.axis: c for c in own_cells(HFBert(attn_implementation=r))}
             for r in ("eager", "sdpa")}
    for per in cells.values():
        for c in per.values():
            vocab = BY_ID[c.axis].words
            assert vocab is None or c.value in vocab, (c.axis, c.value)


# observations.py's (scale_precision, softmax_scale, float64_compute, fully_masked_row,
# causal_flag, mixed_dtype and weights_dropout are the ledger's)
HF_AXES = ("key_padding_polarity", "implicit_mask")


@needs_hf
@pytest.mark.parametrize("runner", [HFBert(), HFBert(attn_implementation="sdpa"), HFT5()])
def test_hf_probe_cells_are_vocabulary_words(runner):
    from conformance.conventions.probes.api_facts import own_cells

    cells = {c.axis: c for c in own_cells(runner)}
    alibi = ("alibi_slopes",) if runner.name == "hf.t5" else ()  # position_bias is not ALiBi
    assert set(HF_AXES + alibi) <= set(cells)
    for axis in ("float64_compute", "scale_precision", "softmax_scale"):
        assert axis not in cells and axis in asked_probes(runner), axis
    for c in cells.values():
        words = BY_ID[c.axis].words
        assert (words is None or c.value in words) and c.evidence, (c.axis, c.value)
    from conformance.conventions.probes.native_inputs import (
        mixed_dtype_cell, weights_dropout_cell)

    assert not {"mixed_dtype", "weights_dropout", "unbatched_input"} & set(cells)
    mixed = mixed_dtype_cell(runner)
    assert mixed.value == "refused" and "dtype" in mixed.evidence
    eager = runner.attn_implementation == "eager"
    assert weights_dropout_cell(runner).value == ("post_dropout" if eager else "not_applicable")
