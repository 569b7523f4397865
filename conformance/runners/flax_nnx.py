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

    sets_scale = True  # through attention_fn (module docstring of _flax)

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
        args, plan = _flax.with_scale(case, kw, "nnx.dot_product_attention")
        return Translation(f"flax.nnx.MultiHeadAttention({args}, decode=False, rngs=...)", plan)

    @staticmethod
    def layer(plan, dt, dropout):
        from flax import nnx

        return nnx.MultiHeadAttention(**_flax.constructor(plan, nnx.dot_product_attention),
                                      dtype=dt, param_dtype=dt, dropout_rate=dropout,
                                      decode=False, rngs=nnx.Rngs(0))

    def apply(self, case, plan, data, mask=None, x=None, dropout=0.0, deterministic=True):
        """The layer built, loaded and called inside one jitted function (its random
        initialisation is overwritten, so XLA drops it): one compile per shape
        (float16 eager, see below)."""
        import jax
        import jax.numpy as jnp

        dt = getattr(jnp, case.inputs.dtype)

        def make():
            def fn(params, q, k, v, m):
                layer = self.layer(plan, dt, dropout)
                for name, leaves in params.items():
                    for n, a in leaves.items():
                        getattr(getattr(layer, name), n)[...] = a
                return layer(q, k, v, mask=m, deterministic=deterministic)
            # XLA:CPU rejects the float16 dot_general nnx emits under jit ("The precision
            # 'F16_F16_F32' is not supported by dot_general on CPU"): float16 stays eager
            return fn if case.inputs.dtype == "float16" else jax.jit(fn)

        fn = _flax.jitted(("nnx", repr(sorted(plan.items())), case.inputs.dtype, dropout,
                           deterministic), make)
        params = jax.tree.map(lambda a: jnp.asarray(a, dtype=dt), _flax.params_for(data.weights))
        q, k, v = _flax.inputs_for(case, data, jnp, dt) if x is None else (jnp.asarray(x),) * 3
        m = None if mask is None else jnp.asarray(np.asarray(mask)[:, None])
        return fn(params, q, k, v, m), None

    def run(self, case, translation, data):
        import jax
        import jax.numpy as jnp
        from flax import nnx

        y, _ = self.apply(case, translation.plan, data, mask=data.inputs.allowed)
        dt = getattr(jnp, case.inputs.dtype)
        layer = nnx.eval_shape(lambda: self.layer(translation.plan, dt, 0.0))  # shapes only
        leaves = jax.tree_util.tree_leaves_with_path(nnx.state(layer, nnx.Param))
        shapes = {"/".join(str(getattr(p, "key", p)) for p in path): tuple(a.shape)
                  for path, a in leaves}
        notes = []
        if y.dtype != dt:
            notes.append(f"computed in {y.dtype}: JAX x64 is off (its default)")
        return Observation(output=to_numpy(y),
                           parameters=int(sum(int(np.prod(a.shape)) for _, a in leaves)),
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
