"""Flax `flax.nnx.MultiHeadAttention`.

As linen's layer, but with explicit `in_features` and one `in_kv_features`
for keys and values (so key and value widths must be equal), `num_kv_heads`
for grouped-query heads, and an `is_causal` call flag.  Parameters are
nnx.Param leaves of the module's state: query.kernel (E, H, d), in x out.

decode=True (runner flax.nnx.decode, #20) decodes the case's `decode` section through the
layer's own cache: `decode=True`, `init_cache((B, P + N, E))`, then one position per call
(nnx refuses more: "Autoregressive cache shape error, expected query shape (B, 1, ...)"),
so the prefill of P positions is P single steps too.  The calls pass no causal flag: the
layer masks the cache slots past `cache_index` itself.  With `is_causal=True` a step sees
key 0 only (`jnp.tril(ones((1, max_length)))`, google/flax#5591): the ledger's
cache_causal_alignment probe asks it (`answer`, step_is_causal) and quotes it, and
tests/test_flax_decode.py shows it.  The whole loop is traced in one jitted function per
shape (float16 eager, as below).  The ledger's probes of flax.nnx and flax.nnx.decode alike
run their decodes through the cache and their single calls with decode off.
"""
from __future__ import annotations

from conformance.contract.runner import NotExpressible, harness_limit, to_numpy
from conformance.runners.flax import common as _flax

STEP_KEYS = ("step_mask", "nan")  # a step_mask probe's plan keys (answer), read by make

FLAX_5591 = "https://github.com/google/flax/issues/5591"
DOC = _flax.DOCS + "flax.nnx/nn/attention.html"


class FlaxNnx(_flax.FlaxRunner):
    # without dropout nnx.dot_product_attention calls jax.nn.dot_product_attention, which
    # writes -0.7 * finfo(float32).max (_get_large_negative)
    documented_fill = ("-0.7*finfo_max", "https://github.com/google/flax/blob/v0.12.8/flax/"
                       "nnx/nn/attention.py#L288")
    name = "flax.nnx"
    system = api = "flax.nnx.MultiHeadAttention"
    short = "nnx.MultiHeadAttention"
    typed_system = "flax.nnx"
    description = "`flax.nnx.MultiHeadAttention` (`qkv_features` = total over heads)"
    gqa = kv_one_width = True
    base_fn = "nnx.dot_product_attention"
    call_suffix = ", decode=False, rngs=..."
    decode_suffix = (", decode=True, rngs=...); layer.init_cache((B, P + N, E)); "
                     "layer(x[:, t:t + 1]) for each position (no is_causal)")
    answers = _flax.FlaxRunner.answers | {"is_causal", "step_is_causal", "step_mask"}
    probe_takes = _flax.PROBE_TAKES | {"grouped"}  # num_key_value_heads... by shape
    sizes = _flax.SizeFacts(
        "qkv_features=8, num_heads=2: query.kernel (8, 2, 4)", "flax.nnx/nn/attention.html",
        "(E_q + 2 E_kv) F + F E_o (+ 3F + E_o), F = qkv_features",
        "sum of nnx.state(layer, nnx.Param) sizes",
        "query.kernel (E, H, d) in x heads x dim (LinearGeneral)")

    decode: bool = False  # flax.nnx.decode: decode=True, init_cache, one position per call

    @property
    def decodes_only(self) -> bool:
        """flax.nnx.decode translates decode cases only (a harness choice)."""
        return self.decode

    def __init__(self, **params):
        super().__init__(**params)
        if self.decode:
            self.name = "flax.nnx.decode"
            self.path = "decode=True, init_cache, one position per call"
            self.features = _flax.FlaxRunner.features | {"decode"}
            self.description = (
                "`flax.nnx.MultiHeadAttention(decode=True)` decoding through its own cache "
                "(`init_cache`, then one position per call, the prefill too)")

    def translate(self, case):
        if self.decode and case.decode is None:
            return NotExpressible(harness_limit("this runner decodes: the case has no decode "
                                                "section (the plain call is flax.nnx)"))
        if self.decode and case.has_non_causal_mask:
            return NotExpressible(harness_limit(
                "a decode is causal self-attention with no other mask"))
        return self.translation(case, decode=self.decode)

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
    def layer(plan, dt, dropout, decode: bool = False):
        from flax import nnx

        plan = {k: v for k, v in plan.items() if k not in STEP_KEYS}  # the call's keys
        return nnx.MultiHeadAttention(**_flax.constructor(plan, nnx.dot_product_attention),
                                      dtype=dt, param_dtype=dt, dropout_rate=dropout,
                                      decode=decode, rngs=nnx.Rngs(0))

    def layer_class(self):
        from flax import nnx

        return nnx.MultiHeadAttention

    def answer_more(self, case, plan, data, raw):
        """is_causal=value on the call (no mask); step_is_causal: the decode with
        is_causal=value passed at every one-position call too (google/flax#5591)."""
        if raw.argument == "is_causal":
            return (self.apply(case, {**plan, "is_causal": bool(raw.value)}, data)[0],
                    f"is_causal={bool(raw.value)}, no mask")
        if raw.argument == "step_is_causal" and plan.get("decode"):
            return (self.apply(case, {**plan, "step_is_causal": bool(raw.value)}, data)[0],
                    f"is_causal={bool(raw.value)} at every step ({FLAX_5591})")
        return super().answer_more(case, plan, data, raw)

    def answer(self, case, data, raw):
        """step_mask (flax.nnx.decode): the decode through the layer's cache, each step t
        given the case's mask row t over the cache slots as mask= (B, 1, 1, max_length), which
        the layer combines with its own `arange(max_length) <= cache_index`; NaN written into
        cached_key or cached_value after the prefill where `raw.value` asks.  The rest:
        FlaxRunner.answer."""
        if raw.argument != "step_mask" or not self.decode:
            return super().answer(case, data, raw)
        t = self.translation(case, decode=True)
        if isinstance(t, NotExpressible):
            raise NotImplementedError(f"{self.name}: {t.reason}")
        nan = raw.value
        plan = {**t.plan, "step_mask": True,
                "nan": (nan["nan"], nan["item"], nan["slot"]) if nan else None}
        y = self.apply(case, plan, data, mask=data.inputs.allowed)[0]
        return to_numpy(y), (f"{t.call}; each step layer(x_t, mask=<bool (B, 1, 1, "
                             "max_length) row t, True = attend>)")

    def sown_weights(self, case, plan, data, rate: float):
        """The attention weights the layer sows (sow_weights=True) with dropout_rate=rate,
        deterministic=False, rngs=nnx.Rngs(0): (B, H, T, S)."""
        import jax.numpy as jnp

        layer = self.layer(plan, jnp.float32, rate)
        for name, leaves in _flax.params_for(data.weights).items():
            for n, a in leaves.items():
                getattr(getattr(layer, name), n)[...] = jnp.asarray(a)
        q, k, v = _flax.inputs_for(case, data, jnp, jnp.float32)
        layer(q, k, v, deterministic=False, sow_weights=True)
        sown = getattr(layer, "attention_weights", None)
        return None if sown is None else sown.value[0]

    def run(self, case, translation, data):
        obs = super().run(case, translation, data)
        if translation.plan.get("decode"):  # a decode (a probe's single call is none)
            d = case.decode
            obs.notes.append(f"prefill {d.prefill} and {d.steps} steps, all one position per "
                             "call through the layer's cache (cached_key (B, max_length, "
                             f"H_kv, d), preallocated); no is_causal ({FLAX_5591})")
        return obs

    def make(self, plan, dt, dropout, deterministic):
        """The layer built, loaded and called inside one jitted function (its random
        initialisation is overwritten, so XLA drops it): one compile per shape
        (float16 eager, see below)."""
        import jax

        prefill = plan.get("decode")
        step = {"is_causal": True} if plan.get("step_is_causal") else {}
        call = {"is_causal": True} if plan.get("is_causal") else {}

        def fn(params, q, k, v, m):
            layer = self.layer(plan, dt, dropout, bool(prefill))
            for name, leaves in params.items():
                for n, a in leaves.items():
                    getattr(getattr(layer, name), n)[...] = a
            if not prefill:
                return layer(q, k, v, mask=m, deterministic=deterministic, **call)
            layer.init_cache(q.shape, dtype=dt)  # every position's slot, then one a call
            outs, keys, nan = [], [], plan.get("nan")
            for t in range(q.shape[1]):
                row = {"mask": m[:, :, t:t + 1]} if plan.get("step_mask") and t >= prefill else {}
                outs.append(layer(q[:, t:t + 1], **step, **row))
                if nan and t == prefill - 1:  # RawCall step_mask: NaN into the cache
                    held = layer.cached_key if nan[0] == "key" else layer.cached_value
                    held[...] = held[...].at[nan[1], nan[2]].set(float("nan"))
                if t in (prefill - 1, q.shape[1] - 1):
                    keys.append(layer.cached_key[...])
            return jax.numpy.concatenate(outs, axis=1), keys
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
