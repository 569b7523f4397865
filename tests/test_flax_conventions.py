"""Flax convention probes (_flax_probes): every cell a word of its axis, with figures."""
from __future__ import annotations

import importlib.util

import pytest

from conformance.contract.axes import BY_ID, FEATURE_ARGUMENTS

pytestmark = pytest.mark.skipif(
    importlib.util.find_spec("flax") is None or importlib.util.find_spec("jax") is None,
    reason="jax/flax not installed (pip install -e '.[flax]')")
AXES = ("key_padding_polarity", "weights_dropout", "causal_flag", "scale_precision",
        "float64_compute", "mixed_dtype", "implicit_mask", *FEATURE_ARGUMENTS)


@pytest.mark.parametrize("api, causal", [("flax.linen.MultiHeadDotProductAttention",
                                          "not_applicable"),
                                         ("flax.nnx.MultiHeadAttention", "upper_left")])
def test_flax_probe_cells_are_vocabulary_words(api, causal):
    from conformance.runners.flax.probes import flax_cells

    cells = {c.axis: c for c in flax_cells(api)}
    assert tuple(cells) == AXES
    for c in cells.values():  # a free-text axis (vocabulary None) takes any short text
        vocab = BY_ID[c.axis].vocabulary
        assert c.evidence and (vocab is None or c.value in vocab), (c.axis, c.value)
    assert cells["causal_flag"].value == causal
    assert cells["qk_norm_scope"].value == "per_head"  # normalize_qk: LayerNorm over d
    assert cells["kv_head_mapping"].value == ("grouped" if "nnx" in api else "not_applicable")
    assert cells["weights_dropout"].value == "pre_dropout"
    assert "max |sum - 1|" in cells["weights_dropout"].evidence
