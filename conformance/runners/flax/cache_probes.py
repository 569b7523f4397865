"""cache_causal_alignment and cache_layout of the Flax layers (#20), through their own
autoregressive cache: linen's `decode=True` (a "cache" collection created by `init` on a
max-length input, then one position per `apply(..., mutable=["cache"])`) and nnx's
`decode=True` with `init_cache(input_shape)`.  Both decode one query at a time, so the
prefill of P = 3 is P single steps; the step at position P names the alignment, the
cached key variable the layout.  The steps are called as the layers' users call them: no
mask and (nnx) no `is_causal`, the layer masking the slots past `cache_index` itself
(flax/nnx/nn/attention.py, MultiHeadAttention.__call__: "our single query position should
only attend to those key positions that have already been generated and cached", the mask
`jnp.arange(max_length) <= cur_index`; init_cache's docstring example calls
`model_nnx(x)` with nothing else; linen's the same, flax/linen/attention.py).  nnx's call
also takes `is_causal`, which builds `jnp.tril(ones((T, S)))` (dot_product_attention): a
one-position step with it attends key 0 only (google/flax#5591), the flag's upper-left
reading; the nnx cell quotes that as a causal_flag fact beside its value.  jax / flax are
imported inside the functions.
"""
from __future__ import annotations

import numpy as np

from conformance.contract import cache_probes as cp
from conformance.contract.runner import Convention, to_numpy
from conformance.oracle.canonical import case_data

DOC = "https://flax.readthedocs.io/en/latest/api_reference/flax.{}/nn/attention.html"


def _linen_steps(case, params, x):
    import jax
    import flax.linen as nn

    layer = nn.MultiHeadDotProductAttention(num_heads=case.attention.num_heads,
                                            qkv_features=case.attention.query_features,
                                            decode=True)
    cache = layer.init(jax.random.key(0), x)["cache"]
    outs, shapes = [], []
    for t in range(x.shape[1]):
        y, state = layer.apply({"params": params, "cache": cache}, x[:, t:t + 1],
                               mutable=["cache"])
        cache = state["cache"]
        outs.append(to_numpy(y))
        shapes.append(tuple(cache["cached_key"].shape))
    return outs, shapes, {}


def _nnx_steps(case, params, x, **call):
    import jax.numpy as jnp
    from flax import nnx

    a = case.attention
    layer = nnx.MultiHeadAttention(num_heads=a.num_heads, in_features=a.query_features,
                                   qkv_features=a.query_features, decode=True,
                                   rngs=nnx.Rngs(0))
    for m, d in params.items():
        for n, p in d.items():
            getattr(getattr(layer, m), n).value = jnp.asarray(p)
    layer.init_cache(x.shape, dtype=x.dtype)  # float64 under JAX x64
    outs, shapes = [], []
    for t in range(x.shape[1]):
        outs.append(to_numpy(layer(x[:, t:t + 1], **call)))
        shapes.append(tuple(layer.cached_key.value.shape))
    return outs, shapes


def cache_cells(api: str) -> list[Convention]:
    """Both cells for flax.linen or flax.nnx."""
    import jax.numpy as jnp

    from conformance.runners.flax.common import params_for

    case = cp.decode_case()
    x = jnp.asarray(case_data(case).inputs.query)  # float64 under JAX x64, else float32
    params = params_for(case_data(case).weights)
    linen = "linen" in api
    doc = {"documented_source": DOC.format("linen" if linen else "nnx")}
    if linen:
        outs, shapes, _ = _linen_steps(case, params, x)
        what = f"{api}(decode=True, init on the max-length input, one position per apply)"
        cell = cp.cache_alignment(case, outs[-1], f"{what}, no mask",
                                  np.concatenate(outs[:-1], 1), documented="lower_right", **doc)
    else:  # the documented call (init_cache, then layer(x_t)); is_causal=True quoted
        outs, shapes = _nnx_steps(case, params, x)
        causal = _nnx_steps(case, params, x, is_causal=True)[0]
        what = f"{api}(decode=True, init_cache((B, 4, E)), one position per call)"
        cell = cp.cache_alignment(case, outs[-1], f"{what}, no mask, no is_causal (the "
                                  "layer's own cache mask, arange(max_length) <= cache_index)",
                                  np.concatenate(outs[:-1], 1), documented="lower_right",
                                  **doc)
        cell = cp.with_fact(cell, cp.flag_fact(case, causal[-1], "is_causal=True") +
                            " (google/flax#5591)")
    align = cell
    var = "cache['cached_key']" if linen else "layer.cached_key"
    layout = Convention("cache_layout", cp.layout_words(
        case, [shapes[-2], shapes[-1]], "two tensors (cached_key, cached_value) and a "
        "cache_index", preallocated=True), f"{what}: {var} {shapes[0]} from the first step "
        f"to the last (max length 4 allocated up front; cache_index counts the steps)", **doc)
    return [align, layout]
