"""Flax `flax.linen.MultiHeadDotProductAttention`.

`qkv_features` is the TOTAL over heads (head dim = qkv_features // num_heads,
one for queries, keys and values), `out_features` the output width (default:
the query width); kernels are DenseGeneral (E_in, H, d), in x out; the mask is
True = attend, broadcast to (B, H, T, S); dropout runs when deterministic=False.
Key and value inputs may have their own widths (kernels are shaped from the
inputs).  No grouped-query heads.  A ledger probe's decode runs through the layer's own
cache (decode=True: `init` on the max-length input makes the "cache" collection, then one
position per `apply(..., mutable=["cache"])`, no mask: the layer masks the slots past
cache_index itself, flax/linen/attention.py).
"""
from __future__ import annotations

from conformance.runners.flax import common as _flax

CACHE_DOC = "https://flax.readthedocs.io/en/latest/api_reference/flax.linen/layers.html"


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
    decode_suffix = (", decode=True); cache = layer.init(key, x)['cache']; layer.apply("
                     "{'params': ..., 'cache': cache}, x[:, t:t + 1], mutable=['cache']) for "
                     "each position (no mask)")
    sizes = _flax.SizeFacts(
        "qkv_features=8, num_heads=2: query/kernel (8, 2, 4), head dim 8 // 2",
        "flax.linen/layers.html",
        "(E_q + E_k + E_v) F + F E_o (+ 3F + E_o), F = qkv_features",
        "sum of the param tree's sizes", "query/kernel (E, H, d) in x heads x dim (DenseGeneral)")

    def layer_class(self):
        import flax.linen as nn

        return nn.MultiHeadDotProductAttention

    def make(self, plan, dt, dropout, deterministic):
        import jax
        import flax.linen as nn

        prefill = plan.get("decode")
        layer = nn.MultiHeadDotProductAttention(
            **_flax.constructor(plan, nn.dot_product_attention), dtype=dt, param_dtype=dt,
            dropout_rate=dropout, decode=bool(prefill))
        if not prefill:
            return jax.jit(lambda params, q, k, v, m: layer.apply(
                {"params": params}, q, k, v, mask=m, deterministic=deterministic,
                rngs={"dropout": jax.random.key(0)}))

        def steps(params, q, k, v, m):  # the cache of every position, one position a call
            cache = layer.init(jax.random.key(0), q)["cache"]
            outs, keys = [], []
            for t in range(q.shape[1]):
                y, state = layer.apply({"params": params, "cache": cache}, q[:, t:t + 1],
                                       mutable=["cache"])
                cache = state["cache"]
                outs.append(y)
                if t in (prefill - 1, q.shape[1] - 1):
                    keys.append(cache["cached_key"])
            return jax.numpy.concatenate(outs, axis=1), keys
        return jax.jit(steps)

    def sown_weights(self, case, plan, data, rate: float):
        """The attention weights the layer sows (sow_weights=True) with dropout_rate=rate,
        deterministic=False, dropout key 0: (B, H, T, S)."""
        import jax
        import jax.numpy as jnp
        import flax.linen as nn

        layer = nn.MultiHeadDotProductAttention(
            **_flax.constructor(plan, nn.dot_product_attention), dropout_rate=rate)
        q, k, v = _flax.inputs_for(case, data, jnp, jnp.float32)
        _, state = layer.apply({"params": _flax.params_for(data.weights)}, q, k, v,
                               deterministic=False, sow_weights=True,
                               mutable=["intermediates"], rngs={"dropout": jax.random.key(0)})
        sown = state.get("intermediates", {}).get("attention_weights")
        return None if sown is None else sown[0]

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
