"""Flax `flax.linen.MultiHeadDotProductAttention`.

`qkv_features` is the TOTAL over heads (head dim = qkv_features // num_heads,
one for queries, keys and values), `out_features` the output width (default:
the query width); kernels are DenseGeneral (E_in, H, d), in x out; the mask is
True = attend, broadcast to (B, H, T, S); dropout runs when deterministic=False.
Key and value inputs may have their own widths (kernels are shaped from the
inputs).  No grouped-query heads.
"""
from __future__ import annotations

import numpy as np

from ..contract import Convention, NotExpressible, Observation, Runner, Translation, to_numpy
from . import _flax, _flax_probes


class FlaxLinen(Runner):
    name = "flax.linen"
    framework = "flax"
    system = "flax.linen.MultiHeadDotProductAttention"
    backend = "jax"
    requires = ("jax", "flax")

    sets_scale = True  # through attention_fn (module docstring of _flax)

    def translate(self, case):
        reason = _flax.limits(case, gqa=False, kv_one_width=False,
                              name="MultiHeadDotProductAttention")
        if reason:
            return NotExpressible(reason)
        args, plan = _flax.with_scale(case, _flax.kwargs_for(case), "nn.dot_product_attention")
        return Translation(f"flax.linen.MultiHeadDotProductAttention({args})", plan)

    def apply(self, case, plan, data, mask=None, x=None, dropout=0.0, deterministic=True):
        import jax
        import jax.numpy as jnp
        import flax.linen as nn

        dt = getattr(jnp, case.inputs.dtype)

        def make():
            layer = nn.MultiHeadDotProductAttention(
                **_flax.constructor(plan, nn.dot_product_attention), dtype=dt, param_dtype=dt,
                dropout_rate=dropout)
            return jax.jit(lambda params, q, k, v, m: layer.apply(
                {"params": params}, q, k, v, mask=m, deterministic=deterministic,
                rngs={"dropout": jax.random.key(0)}))

        fn = _flax.jitted(("linen", repr(sorted(plan.items())), case.inputs.dtype, dropout,
                           deterministic), make)
        params = jax.tree.map(lambda a: jnp.asarray(a, dtype=dt), _flax.params_for(data.weights))
        q, k, v = _flax.inputs_for(case, data, jnp, dt) if x is None else (jnp.asarray(x),) * 3
        m = None if mask is None else jnp.asarray(np.asarray(mask)[:, None])
        return fn(params, q, k, v, m), params

    def run(self, case, translation, data):
        import jax.numpy as jnp

        allowed = data.inputs.allowed
        y, params = self.apply(case, translation.plan, data, mask=allowed)
        leaves = {f"{m}/{n}": a for m, d in params.items() for n, a in d.items()}
        notes = []
        if y.dtype != getattr(jnp, case.inputs.dtype):
            notes.append(f"computed in {y.dtype}: JAX x64 is off (its default)")
        return Observation(output=to_numpy(y), parameters=int(sum(a.size for a in
                                                                   leaves.values())),
                           weight_shapes={n: tuple(a.shape) for n, a in leaves.items()},
                           notes=notes, extras={"mask_polarity": "True = attend",
                                                "output_dtype": str(y.dtype)})

    def conventions(self):
        from ..weights import case_data

        def call(case, **kw):
            return to_numpy(self.apply(case, self.translate(case).plan, case_data(case), **kw)[0])
        what = "flax.linen.MultiHeadDotProductAttention"
        return _flax.common_cells(self, call, what) + _flax_probes.flax_cells(what) + [
            Convention("size_arguments", "total_over_heads",
                       "qkv_features=8, num_heads=2: query/kernel (8, 2, 4), head dim 8 // 2",
                       "total_over_heads", _flax.DOCS + "flax.linen/layers.html"),
            Convention("parameter_formula", "(E_q + E_k + E_v) F + F E_o (+ 3F + E_o), F = "
                       "qkv_features", "sum of the param tree's sizes"),
            Convention("weight_layout", "query/kernel (E, H, d) in x heads x dim (DenseGeneral)",
                       "canonical Wq (H, E, d) loaded as transpose(1, 0, 2)"),
            Convention("argument_order", "query_key_value",
                       "__call__(inputs_q, inputs_k=None, inputs_v=None, *, mask=None, ...)")]
