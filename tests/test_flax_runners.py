"""Flax runners: translation words and limits, a run against the reference, ledger cells."""
from __future__ import annotations

import importlib.util

import numpy as np
import pytest

from conformance.conventions.axes import BY_ID
from conformance.contract.runner import NotExpressible
from conformance.oracle.reference import attention
from conformance.runners.flax.linen import FlaxLinen
from conformance.runners.flax.nnx import FlaxNnx
from conformance.oracle.canonical import case_data

from .helpers import make_case

needs_flax = pytest.mark.skipif(importlib.util.find_spec("flax") is None,
                                reason="flax not installed (pip install -e '.[flax]')")
SEED = {"attention": {"num_heads": 4, "query_features": 64, "qk_head_dim": 32, "bias": False},
        "inputs": {"self_attention": True}}


def test_qkv_features_is_the_total():
    t = FlaxLinen().translate(make_case(**SEED))
    assert t.call == ("flax.linen.MultiHeadDotProductAttention(num_heads=4, qkv_features=128, "
                      "use_bias=False)")


@pytest.mark.parametrize("runner, attention, words", [
    (FlaxLinen, {"num_heads": 4, "num_kv_heads": 2, "query_features": 8}, "grouped-query"),
    (FlaxNnx, {"num_heads": 2, "query_features": 8, "v_head_dim": 3}, "qkv_features is one"),
    (FlaxNnx, {"num_heads": 2, "query_features": 8, "key_features": 6, "value_features": 4},
     "in_kv_features"),
])
def test_not_expressible(runner, attention, words):
    t = runner().translate(make_case(attention=attention))
    assert isinstance(t, NotExpressible) and words in t.reason


@needs_flax
@pytest.mark.parametrize("runner", [FlaxLinen, FlaxNnx])
def test_seed_case_agrees_with_reference(runner):
    case = make_case(**SEED, mask={"key_padding": [5, 3]})
    r = runner()
    obs = r.run(case, r.translate(case), case_data(case))
    np.testing.assert_allclose(obs.output, attention(case).output, rtol=1.3e-6, atol=1e-5)
    assert obs.parameters == 4 * 64 * 128


@needs_flax
def test_conventions_use_the_vocabulary():
    from conformance.conventions.probes import ledger_cells

    cells = ledger_cells(FlaxLinen())
    by = {c.axis: c.value for c in cells}
    assert by["size_arguments"] == "total_over_heads" and by["attn_mask_polarity"] == "true_attends"
    for c in cells:
        vocab = BY_ID[c.axis].words  # its own words and the universal ones
        assert vocab is None or c.value in vocab, (c.axis, c.value)


def test_scale_goes_through_attention_fn():
    """Neither layer takes a scale: a case's scale becomes attention_fn, the default
    function on the query pre-multiplied by scale * sqrt(head dim)."""
    case = make_case(**{**SEED, "attention": {**SEED["attention"], "scale": 1.0}})
    t = FlaxLinen().translate(case)
    assert t.plan["query_scale"] == 1.0 * 32 ** 0.5
    assert "attention_fn=lambda q, k, v, **kw: nn.dot_product_attention(q * " in t.call
    assert FlaxLinen.sets_scale and FlaxNnx.sets_scale
    assert "attention_fn" not in FlaxNnx().translate(make_case(**SEED)).call


@needs_flax
@pytest.mark.parametrize("runner", [FlaxLinen, FlaxNnx])
def test_scaled_case_agrees_with_reference(runner):
    case = make_case(**{**SEED, "attention": {**SEED["attention"], "scale": 0.3}})
    r = runner()
    obs = r.run(case, r.translate(case), case_data(case))
    np.testing.assert_allclose(obs.output, attention(case).output, rtol=1.3e-6, atol=1e-5)
    assert not np.allclose(obs.output, attention(make_case(**SEED)).output, atol=1e-3)


@needs_flax
def test_one_jitted_function_per_configuration():
    from conformance.runners.flax import common as _flax

    case, r = make_case(**SEED), FlaxNnx()
    r.run(case, r.translate(case), case_data(case))
    before = len(_flax._JITTED)
    other = make_case(**{**SEED, "inputs": {"self_attention": True, "batch": 3}})
    r.run(other, r.translate(other), case_data(other))  # same plan, new shape: same function
    assert len(_flax._JITTED) == before
