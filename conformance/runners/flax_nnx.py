"""Flax `flax.nnx.MultiHeadAttention`.

As linen's layer, but with explicit `in_features` and one `in_kv_features`
for keys and values (so key and value widths must be equal), `num_kv_heads`
for grouped-query heads, and an `is_causal` call flag.  Parameters are
nnx.Param leaves of the module's state: query.kernel (E, H, d), in x out.
"""
from __future__ import annotations

import numpy as np

from ..contract import Convention, NotExpressible, Observation, Runner, Translation, to_numpy
from . import _flax, _flax_probes


class FlaxNnx(Runner):
    name = "flax.nnx"
    framework = "flax"
    system = "flax.nnx.MultiHeadAttention"
    backend = "jax"
    requires = ("jax", "flax")

    def translate(self, case):
        reason = _flax.limits(case, gqa=True, kv_one_width=True, name="nnx.MultiHeadAttention")
        if reason:
            return NotExpressible(reason)
        a = case.attention
        kw = {"num_heads": a.num_heads, "in_features": a.query_features,
              **{k: v for k, v in _flax.kwargs_for(case).items() if k != "num_heads"}}
        if a.key_features != a.query_features:
            kw["in_kv_features"] = a.key_features
        if case.grouped:
            kw["num_kv_heads"] = a.num_kv_heads
        args = ", ".join(f"{k}={v!r}" for k, v in kw.items())
        return Translation(f"flax.nnx.MultiHeadAttention({args}, decode=False, rngs=...)", kw)

    def build(self, case, plan, data, dropout=0.0):
        import jax.numpy as jnp
        from flax import nnx

        dt = getattr(jnp, case.inputs.dtype)
        layer = nnx.MultiHeadAttention(**plan, dtype=dt, param_dtype=dt, dropout_rate=dropout,
                                       decode=False, rngs=nnx.Rngs(0))
        for m, d in _flax.params_for(data.weights).items():
            for n, a in d.items():
                getattr(getattr(layer, m), n).value = jnp.asarray(a, dtype=dt)
        return layer

    def apply(self, case, plan, data, mask=None, x=None, dropout=0.0, deterministic=True):
        import jax.numpy as jnp

        layer = self.build(case, plan, data, dropout)
        dt = getattr(jnp, case.inputs.dtype)
        q, k, v = _flax.inputs_for(case, data, jnp, dt) if x is None else (jnp.asarray(x),) * 3
        m = None if mask is None else jnp.asarray(np.asarray(mask)[:, None])
        return layer(q, k, v, mask=m, deterministic=deterministic), layer

    def run(self, case, translation, data):
        import jax
        import jax.numpy as jnp
        from flax import nnx

        y, layer = self.apply(case, translation.plan, data, mask=data.inputs.allowed)
        state = nnx.state(layer, nnx.Param)
        leaves = jax.tree_util.tree_leaves_with_path(state)
        shapes = {"/".join(str(getattr(p, "key", p)) for p in path): tuple(a.shape)
                  for path, a in leaves}
        notes = []
        if y.dtype != getattr(jnp, case.inputs.dtype):
            notes.append(f"computed in {y.dtype}: JAX x64 is off (its default)")
        return Observation(output=to_numpy(y), parameters=int(sum(a.size for _, a in leaves)),
                           weight_shapes=shapes, notes=notes,
                           extras={"mask_polarity": "True = attend", "output_dtype": str(y.dtype)})

    def conventions(self):
        from ..weights import case_data

        def call(case, **kw):
            return to_numpy(self.apply(case, self.translate(case).plan, case_data(case), **kw)[0])
        what = "flax.nnx.MultiHeadAttention"
        return _flax.common_cells(self, call, what) + _flax_probes.flax_cells(what) + [
            Convention("size_arguments", "total_over_heads",
                       "qkv_features=8, num_heads=2: query.kernel (8, 2, 4)", "total_over_heads",
                       _flax.DOCS + "flax.nnx/nn/attention.html"),
            Convention("parameter_formula", "(E_q + 2 E_kv) F + F E_o (+ 3F + E_o), F = "
                       "qkv_features", "sum of nnx.state(layer, nnx.Param) sizes"),
            Convention("weight_layout", "query.kernel (E, H, d) in x heads x dim (LinearGeneral)",
                       "canonical Wq (H, E, d) loaded as transpose(1, 0, 2)"),
            Convention("argument_order", "query_key_value",
                       "__call__(inputs_q, inputs_k=None, inputs_v=None, *, mask=None, ...)")]
