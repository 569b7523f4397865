"""Flax `flax.linen.MultiHeadDotProductAttention`.

`qkv_features` is the TOTAL over heads (head dim = qkv_features // num_heads,
one for queries, keys and values), `out_features` the output width (default:
the query width); kernels are DenseGeneral (E_in, H, d), in x out; the mask is
True = attend, broadcast to (B, H, T, S); dropout runs when deterministic=False.
Key and value inputs may have their own widths (kernels are shaped from the
inputs).  No grouped-query heads.
"""
from __future__ import annotations

from conformance.runners.flax import common as _flax
from conformance.runners.flax.probes import flax_cells


class FlaxLinen(_flax.FlaxRunner):
    # dot_product_attention_weights: big_neg = jnp.finfo(dtype).min, jnp.where(mask, w, big_neg)
    documented_fill = ("finfo_min", "https://github.com/google/flax/blob/v0.12.8/flax/linen/"
                       "attention.py#L139")
    name = "flax.linen"
    system = api = "flax.linen.MultiHeadDotProductAttention"
    short = "MultiHeadDotProductAttention"
    typed_system = "flax"
    description = ("`flax.linen.MultiHeadDotProductAttention` (`qkv_features` = total over "
                   "heads)")
    base_fn = "nn.dot_product_attention"
    sizes = _flax.SizeFacts(
        "qkv_features=8, num_heads=2: query/kernel (8, 2, 4), head dim 8 // 2",
        "flax.linen/layers.html",
        "(E_q + E_k + E_v) F + F E_o (+ 3F + E_o), F = qkv_features",
        "sum of the param tree's sizes", "query/kernel (E, H, d) in x heads x dim (DenseGeneral)")

    def probe_cells(self):
        return flax_cells(self.api)

    def make(self, plan, dt, dropout, deterministic):
        import jax
        import flax.linen as nn

        layer = nn.MultiHeadDotProductAttention(
            **_flax.constructor(plan, nn.dot_product_attention), dtype=dt, param_dtype=dt,
            dropout_rate=dropout)
        return jax.jit(lambda params, q, k, v, m: layer.apply(
            {"params": params}, q, k, v, mask=m, deterministic=deterministic,
            rngs={"dropout": jax.random.key(0)}))

    def shapes(self, plan, dt, params):
        return {f"{m}/{n}": tuple(a.shape) for m, d in params.items() for n, a in d.items()}

    def abstract_shapes(self, case, plan, dt):
        """The layer's init under jax.eval_shape on input specs of the case's shapes."""
        import jax
        import flax.linen as nn

        a, i = case.attention, case.inputs
        layer = nn.MultiHeadDotProductAttention(
            **_flax.constructor(plan, nn.dot_product_attention), dtype=dt, param_dtype=dt)
        q, k, v = (jax.ShapeDtypeStruct((i.batch, n, e), dt) for n, e in (
            (i.query_len, a.query_features), (i.key_len, a.key_features),
            (i.key_len, a.value_features)))
        variables = jax.eval_shape(layer.init, jax.random.key(0), q, k, v)
        return self.shapes(plan, dt, variables["params"])
