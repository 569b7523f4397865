"""Keras 3 `keras.layers.GroupedQueryAttention` under each Keras backend.

Why its own runners: grouped-query cases (num_kv_heads < num_heads) are not
expressible by MultiHeadAttention.  GroupedQueryAttention repeats key/value
head g for query heads g*r .. g*r+r-1 (`ops.repeat(..., axis=2)`), i.e. query
head h uses kv head h // r, the canonical grouping.  Its limits:
- one `head_dim` for query, key and value (d_k must equal d_v);
- no `output_shape`: the output projects back to the query's width;
- kernels are (E_in, H or H_kv, head_dim) and output (H, head_dim, E_q), the
  same layout as MultiHeadAttention.
Non-grouped cases run too, with num_key_value_heads == num_query_heads.
One class parametrised by `backend` (`KerasGQA(backend="jax")` is
`keras.gqa.jax`); it shares the Keras workers (one per backend) and the layer
machinery (common.py, _export/keras_mha.py) with mha.py; the default call
(return_attention_scores=False, fused path) is what these rows run.
"""
from __future__ import annotations

from conformance.contract.runner import NotExpressible, Translation
from conformance.runners.keras.common import KerasLayerRunner
from conformance.runners._export.keras_mha import layer_translation

GQA_DOCS = "https://keras.io/api/layers/attention_layers/group_query_attention/"


def gqa_translation(case) -> Translation | NotExpressible:
    a = case.attention
    if a.qk_head_dim != a.v_head_dim:
        return NotExpressible(
            f"qk_head_dim={a.qk_head_dim} != v_head_dim={a.v_head_dim}: GroupedQueryAttention "
            "has one head_dim shared by query, key and value")
    if a.output_features != a.query_features:
        return NotExpressible(
            f"output_features={a.output_features} != query_features={a.query_features}: "
            "GroupedQueryAttention has no output_shape; it projects back to the query width")
    return layer_translation(case, "GroupQueryAttention", {
        "head_dim": a.qk_head_dim, "num_query_heads": a.num_heads,
        "num_key_value_heads": a.num_kv_heads})


class KerasGQA(KerasLayerRunner):
    """keras.layers.GroupQueryAttention on one backend (`backend`), default call."""

    system = "keras.layers.GroupQueryAttention"
    description = "`keras.layers.GroupQueryAttention`"
    typed_system = "keras.gqa"
    path = "fused"  # return_attention_scores=False
    layer_cls, layer_name = "GroupQueryAttention", "gqa"

    probe_takes = frozenset({"grouped"})  # num_key_value_heads

    def default_name(self) -> str:
        return f"keras.gqa.{self.backend}"

    def translate(self, case):
        return gqa_translation(case)
