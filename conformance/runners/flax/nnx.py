"""Flax `flax.nnx.MultiHeadAttention`.

As linen's layer, but with explicit `in_features` and one `in_kv_features`
for keys and values (so key and value widths must be equal), `num_kv_heads`
for grouped-query heads, and an `is_causal` call flag.  Parameters are
nnx.Param leaves of the module's state: query.kernel (E, H, d), in x out.
"""
from __future__ import annotations

from conformance.runners.flax import common as _flax
from conformance.runners.flax.probes import flax_cells


class FlaxNnx(_flax.FlaxRunner):
    name = "flax.nnx"
    system = api = "flax.nnx.MultiHeadAttention"
    short = "nnx.MultiHeadAttention"
    typed_system = "flax.nnx"
    description = "`flax.nnx.MultiHeadAttention` (`qkv_features` = total over heads)"
    gqa = kv_one_width = True
    base_fn = "nnx.dot_product_attention"
    call_suffix = ", decode=False, rngs=..."
    sizes = _flax.SizeFacts(
        "qkv_features=8, num_heads=2: query.kernel (8, 2, 4)", "flax.nnx/nn/attention.html",
        "(E_q + 2 E_kv) F + F E_o (+ 3F + E_o), F = qkv_features",
        "sum of nnx.state(layer, nnx.Param) sizes",
        "query.kernel (E, H, d) in x heads x dim (LinearGeneral)")

    def kwargs(self, case):
        a = case.attention
        kw = {"num_heads": a.num_heads, "in_features": a.query_features,
              **{k: v for k, v in _flax.kwargs_for(case).items() if k != "num_heads"}}
        if a.key_features != a.query_features:
            kw["in_kv_features"] = a.key_features
        if case.grouped:
            kw["num_kv_heads"] = a.num_kv_heads
        return kw

    @staticmethod
    def layer(plan, dt, dropout):
        from flax import nnx

        return nnx.MultiHeadAttention(**_flax.constructor(plan, nnx.dot_product_attention),
                                      dtype=dt, param_dtype=dt, dropout_rate=dropout,
                                      decode=False, rngs=nnx.Rngs(0))

    def probe_cells(self):
        return flax_cells(self.api)

    def make(self, plan, dt, dropout, deterministic):
        """The layer built, loaded and called inside one jitted function (its random
        initialisation is overwritten, so XLA drops it): one compile per shape
        (float16 eager, see below)."""
        import jax

        def fn(params, q, k, v, m):
            layer = self.layer(plan, dt, dropout)
            for name, leaves in params.items():
                for n, a in leaves.items():
                    getattr(getattr(layer, name), n)[...] = a
            return layer(q, k, v, mask=m, deterministic=deterministic)
        # XLA:CPU rejects the float16 dot_general nnx emits under jit ("The precision
        # 'F16_F16_F32' is not supported by dot_general on CPU"): float16 stays eager
        return fn if dt == jax.numpy.float16 else jax.jit(fn)

    def shapes(self, plan, dt, params):
        """From the layer's own nnx.Param state (shapes only: nnx.eval_shape)."""
        import jax
        from flax import nnx

        layer = nnx.eval_shape(lambda: self.layer(plan, dt, 0.0))
        leaves = jax.tree_util.tree_leaves_with_path(nnx.state(layer, nnx.Param))
        return {"/".join(str(getattr(p, "key", p)) for p in path): tuple(a.shape)
                for path, a in leaves}

    def abstract_shapes(self, case, plan, dt):
        return self.shapes(plan, dt, None)  # nnx.eval_shape already
