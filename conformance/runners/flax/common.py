"""What the Flax runners share: limits, the canonical weights in Flax's
DenseGeneral layout (kernel (E_in, H, d), out kernel (H, d, E_o), in x out),
masks (True = attend, (B, 1, T, S)) and what the layers answer the ledger: the raw calls
(`FlaxRunner.answer`), the probe cases it takes beyond the matrix's (`probe_translate`:
a decode through the layer's own cache, QK-norm) and the axes it hands to the ledger's
generic probes (`probe_takes`); the layers' API facts are observations.py's.

JAX runs at its default (x64 off): a float64 case is computed in float32
(declared as a known mismatch in expectations/flax.*.yaml).  The `.x64` variants
(x64=True) run the same layers in a worker process with JAX_ENABLE_X64=1: JAX's
switch is process-wide, so it is a condition of its own runner, not noise.  jax and flax are
imported inside functions only.

Speed: each runner jits one function per configuration (`jitted`), built
inside the trace, so a case costs one XLA compile per shape instead of one per
eager op, and JAX's persistent compilation cache (`compilation_cache`, the
same folder as the Keras JAX rows) makes a later session reuse the compiles.

Scale: neither layer takes a scale, but both take `attention_fn` ("dot_product_
attention or compatible function"); a case's attention.scale is expressed by
the default function with the query pre-multiplied by scale * sqrt(head dim)
(the default divides it by sqrt(head dim)): Flax's own softmax, mask and
dropout path, only the factor changes.
"""
from __future__ import annotations

import math
from typing import NamedTuple

import numpy as np

from conformance.contract.runner import (
    Count, NotExpressible, NotExpressibleError, Observation, Runner, Translation, harness_limit,
    to_numpy)

DOCS = "https://flax.readthedocs.io/en/v0.12.8/api_reference/"


def limits(case, *, gqa: bool, kv_one_width: bool, name: str) -> str | None:
    a = case.attention
    if a.num_kv_heads != a.num_heads and not gqa:
        return (f"grouped-query (num_kv_heads={a.num_kv_heads}): {name} has one key/value head "
                "per query head (no num_kv_heads)")
    if a.qk_head_dim != a.v_head_dim:
        return (f"qk_head_dim={a.qk_head_dim} != v_head_dim={a.v_head_dim}: qkv_features is one "
                "total for queries, keys and values (head dim = qkv_features // num_heads)")
    if kv_one_width and a.key_features != a.value_features:
        return (f"key_features={a.key_features} != value_features={a.value_features}: "
                "in_kv_features is one width for keys and values")
    return None


def kwargs_for(case) -> dict:
    a = case.attention
    kw = {"num_heads": a.num_heads, "qkv_features": a.num_heads * a.qk_head_dim}
    if a.output_features != a.query_features:
        kw["out_features"] = a.output_features
    if not a.bias:
        kw["use_bias"] = False
    return kw


def with_scale(case, kw: dict, base: str) -> tuple[str, dict]:
    """(the call's arguments, the plan): the constructor keywords, and, when the case
    sets attention.scale, `query_scale` = scale * sqrt(head dim) for attention_fn."""
    args = ", ".join(f"{k}={v!r}" for k, v in kw.items())
    scale = case.attention.scale
    if scale is None:
        return args, kw
    factor = scale * case.attention.qk_head_dim ** 0.5
    return (f"{args}, attention_fn=lambda q, k, v, **kw: {base}(q * {factor!r}, k, v, **kw)",
            {**kw, "query_scale": factor})


# plan keys that are no constructor keyword: how the layer is called (a decode through its
# cache, the nnx call's is_causal, the decode steps' is_causal)
CALL_KEYS = ("query_scale", "decode", "is_causal", "step_is_causal")


def constructor(plan: dict, base) -> dict:
    """The plan as constructor keywords: `query_scale` becomes an attention_fn
    wrapping `base` (the layer's default dot_product_attention); CALL_KEYS dropped."""
    kw = {k: v for k, v in plan.items() if k not in CALL_KEYS}
    factor = plan.get("query_scale")
    if factor is not None:
        def attention_fn(query, key, value, **rest):
            return base(query * factor, key, value, **rest)
        kw["attention_fn"] = attention_fn
    return kw


def compilation_cache() -> None:
    """JAX's persistent compilation cache, its entries signed and verified before JAX
    loads them (runners/jax_cache.py; the Keras JAX rows share it): keyed by JAX's own
    cache key (HLO, versions, flags), so it cannot change a result."""
    from conformance.runners.jax_cache import signed_compilation_cache

    signed_compilation_cache()


_JITTED: dict = {}


def jitted(key: tuple, make):
    """The jitted function of one configuration (`make()` builds it once): jax.jit
    then compiles once per input shape, and reuses it for every case of that shape."""
    if key not in _JITTED:
        compilation_cache()
        if len(_JITTED) >= 64:
            _JITTED.clear()
        _JITTED[key] = make()
    return _JITTED[key]


def params_for(weights, qk_norm: bool = False) -> dict:
    """Canonical per-head arrays -> {module: {kernel, bias}} in Flax's layout; with
    `qk_norm` (normalize_qk=True) the QK-norm scales as query_ln / key_ln, whose
    LayerNorm(use_bias=False) takes no bias (a non-zero one cannot be loaded)."""
    p = {n: {"kernel": w.transpose(1, 0, 2)} for n, w in
         (("query", weights.wq), ("key", weights.wk), ("value", weights.wv))}
    p["out"] = {"kernel": weights.wo}
    if weights.bq is not None:
        for n, b in (("query", weights.bq), ("key", weights.bk), ("value", weights.bv),
                     ("out", weights.bo)):
            p[n]["bias"] = b
    if qk_norm:
        if any(b is not None and np.any(b) for b in (weights.q_norm_bias,
                                                      weights.k_norm_bias)):
            raise NotExpressibleError("normalize_qk=True: query_ln / key_ln are "
                                      "LayerNorm(use_bias=False): no QK-norm bias to load")
        p["query_ln"], p["key_ln"] = {"scale": weights.q_norm}, {"scale": weights.k_norm}
    return p


def inputs_for(case, data, jnp, dtype):
    x = data.inputs
    q = jnp.asarray(x.query, dtype=dtype)
    if case.inputs.self_attention:
        return q, q, q
    return q, jnp.asarray(x.key, dtype=dtype), jnp.asarray(x.value, dtype=dtype)


def project(jnp, x, w, b):
    """(B, L, E) x (H, E, d) -> (B, L, H, d) (+ bias (H, d)): JAX's BTNH layout."""
    y = jnp.einsum("ble,hed->blhd", x, w)
    return y if b is None else y + b


def heads_out(jnp, heads, w):
    """(B, T, N, H) heads through the canonical output projection (H, d_v, E_o)."""
    out = jnp.einsum("bthd,hde->bte", heads, w["wo"])
    return out + w["bo"] if "bo" in w else out


def mask_for(jnp, allowed):
    return None if allowed is None else jnp.asarray(allowed[:, None])


def numpy_out(y) -> np.ndarray:
    return to_numpy(y)


class SizeFacts(NamedTuple):
    """A Flax layer's size cells: size_arguments (total_over_heads), parameter_formula,
    weight_layout."""

    size: str  # what the probe layer's kernel shows
    page: str  # the API reference page under DOCS
    formula: str
    counted: str  # how the count is taken
    layout: str


# the probe cases both layers take beyond the matrix's features, through translate/run
# (probe_translate: a decode through the layer's own cache, its normalize_qk)
PROBE_TAKES = frozenset({"float64", "qk_norm", "decode", "cache_tensors"})
CACHE_TENSORS = "two tensors (cached_key, cached_value) and a cache_index"


class FlaxRunner(Runner):
    """A Flax attention layer: subclasses give its limits, constructor keywords, the
    jitted function of one configuration and the parameter shapes."""

    framework = "flax"
    seconds = 0.8
    backend = "jax"
    requires = ("jax", "flax")
    sets_scale = True  # through attention_fn (module docstring)
    harness_scale = True  # ... a wrapper of the suite's: the layers take no scale argument
    # the ledger's raw probes (conventions/probes/: flags.py, training.py) ask `answer`
    answers = frozenset({"attn_mask", "dropout_training", "input_dtype", "unbatched",
                         "dropout_weights"})
    probe_takes = PROBE_TAKES

    x64: bool = False  # run in a worker with JAX_ENABLE_X64=1 (a process-wide switch)
    api = ""  # the layer's name as typed, e.g. "flax.linen.MultiHeadDotProductAttention"
    short = ""  # its name in the limits' reasons
    gqa = False
    kv_one_width = False
    base_fn = ""  # the default attention_fn as typed
    call_suffix = ""  # the call's arguments after the constructor keywords
    decode_suffix = ""  # the same for a decode through the layer's cache
    sizes: SizeFacts

    def __init__(self, **params):
        """x64=True: the same layer in its own worker process started with JAX_ENABLE_X64=1,
        so the ledger shows the cells that JAX's process-wide x64 switch changes (float64
        computation, float64 input into a float32 layer) beside the default ones."""
        super().__init__(**params)
        if self.x64:
            from conformance.contract.runner import WorkerSpec

            self.name = self.name if "name" in params else f"{type(self).name}.x64"
            self.path = "JAX x64 on (JAX_ENABLE_X64=1)"
            self.worker = WorkerSpec(key="jax-x64", env={"JAX_ENABLE_X64": "1"})

    def layer_class(self):
        """The layer's class (its signature is what the ledger reads the feature axes
        from)."""
        raise NotImplementedError

    @property
    def doc(self) -> str:
        """The layer's API reference page."""
        return DOCS + self.sizes.page

    def signatures(self):
        cls = self.layer_class()
        return (self.api, (cls.__init__, cls.__call__))

    def kwargs(self, case) -> dict:
        return kwargs_for(case)

    def translate(self, case):
        return self.translation(case)

    def translation(self, case, extra: dict | None = None, decode: bool = False):
        """The call for `case` with `extra` constructor keywords; `decode`: through the
        layer's cache (the plan's "decode" is the prefill length)."""
        reason = limits(case, gqa=self.gqa, kv_one_width=self.kv_one_width, name=self.short)
        if reason:
            return NotExpressible(reason)
        args, plan = with_scale(case, {**self.kwargs(case), **(extra or {})}, self.base_fn)
        if decode:
            return Translation(f"{self.api}({args}{self.decode_suffix})",
                               {**plan, "decode": case.decode.prefill})
        return Translation(f"{self.api}({args}{self.call_suffix})", plan)

    def probe_translate(self, case):
        """A ledger probe's case: the matrix's call, and beyond the matrix's cases a decode
        through the layer's own cache (decode=True, one position per call, as its users
        decode) and QK-norm (normalize_qk=True: LayerNorm(use_bias=False) over each head's
        d values, the only kind and scope it has)."""
        qk = case.attention.qk_norm
        if qk is not None and (qk.kind, qk.scope) != ("layer", "per_head"):
            return NotExpressible(f"qk_norm {qk.kind} {qk.scope}: normalize_qk=True is a "
                                  "LayerNorm(use_bias=False) over each head's d values, no "
                                  "other kind or scope")
        if case.decode is not None and case.has_non_causal_mask:
            return NotExpressible(harness_limit(
                "a decode is causal self-attention with no other mask"))
        return self.translation(case, {"normalize_qk": True} if qk is not None else None,
                                decode=case.decode is not None)

    def make(self, plan: dict, dt, dropout: float, deterministic: bool):
        """The function (params, q, k, v, mask) -> output of one configuration; with
        plan["decode"] (the prefill P) -> (output of every position, the cache's key
        tensor after the prefill and after the last step)."""
        raise NotImplementedError

    def shapes(self, plan: dict, dt, params: dict) -> dict[str, tuple]:
        """Each parameter's name and shape, from the framework's own accounting."""
        raise NotImplementedError

    def abstract_shapes(self, case, plan: dict, dt) -> dict[str, tuple]:
        """`shapes` with no array made: the layer's parameters under jax.eval_shape."""
        raise NotImplementedError

    def count(self, case):
        """The parameter shapes by jax.eval_shape (abstract: nothing allocated)."""
        import jax.numpy as jnp

        shapes = self.abstract_shapes(case, self.translate(case).plan,
                                      getattr(jnp, case.inputs.dtype))
        return Count(sum(math.prod(s) for s in shapes.values()), shapes, "jax.eval_shape")

    def apply(self, case, plan, data, mask=None, x=None, dropout=0.0, deterministic=True):
        """-> (output, the params it ran with, the cache's key tensors after the prefill and
        after the last step: () unless the plan decodes)."""
        import jax
        import jax.numpy as jnp

        dt = getattr(jnp, case.inputs.dtype)
        fn = jitted((self.name, repr(sorted(plan.items())), case.inputs.dtype, dropout,
                     deterministic), lambda: self.make(plan, dt, dropout, deterministic))
        params = jax.tree.map(lambda a: jnp.asarray(a, dtype=dt), params_for(
            data.weights, bool(plan.get("normalize_qk"))))
        q, k, v = inputs_for(case, data, jnp, dt) if x is None else (jnp.asarray(x),) * 3
        m = None if mask is None else jnp.asarray(np.asarray(mask)[:, None])
        y = fn(params, q, k, v, m)
        return (y[0], params, tuple(y[1])) if plan.get("decode") else (y, params, ())

    def run(self, case, translation, data):
        import jax.numpy as jnp

        plan = translation.plan
        y, params, keys = self.apply(case, plan, data, mask=data.inputs.allowed)
        dt = getattr(jnp, case.inputs.dtype)
        shapes = self.shapes(plan, dt, params)
        notes = []
        if y.dtype != dt:
            notes.append(f"computed in {y.dtype}: JAX x64 is off (its default)")
        extras = {"mask_polarity": "True = attend", "output_dtype": str(y.dtype)}
        if keys:
            extras.update(cache_shapes=[list(k.shape) for k in keys],
                          cache_tensors=CACHE_TENSORS, cache_preallocated=True,
                          cache_note="cached_key (B, max_length, H_kv, d) allocated up "
                          "front; cache_index counts the steps")
        return Observation(output=to_numpy(y),
                           parameters=int(sum(int(np.prod(s)) for s in shapes.values())),
                           weight_shapes=shapes, notes=notes, extras=extras)

    def answer(self, case, data, raw):
        """The layer on `case` with one argument raw: a (B, T, S) mask, boolean or float, as
        mask= (B, 1, T, S) (the layer's own jnp.where(mask, ...)); dropout_rate=rate with
        deterministic = not training (dropout key 0); a subclass adds its own."""
        t = self.probe_translate(case)
        if isinstance(t, NotExpressible):
            raise NotImplementedError(f"{self.name}: {t.reason}")
        if raw.argument == "attn_mask":
            m = np.asarray(raw.value)
            y = self.apply(case, t.plan, data, mask=m)[0]
            said = f"mask=<{m.dtype} (B, 1, T, S)>"
        elif raw.argument == "dropout_training":
            rate, training = raw.value["rate"], bool(raw.value["training"])
            y = self.apply(case, t.plan, data, dropout=rate, deterministic=not training)[0]
            said = f"dropout_rate={rate}; deterministic={not training}, dropout key 0"
        elif raw.argument in ("input_dtype", "unbatched", "dropout_weights"):
            return self.native_call(case, t, data, raw)
        else:
            y, said = self.answer_more(case, t.plan, data, raw)
        return to_numpy(y), f"{t.call} called with {said}"

    def native_call(self, case, t, data, raw):
        """The calls answered with an Observation: one input array x (query = key = value,
        so self-attention cases only) as float64 NumPy into the layer built in the case's
        dtype, or item 0's (T, E) x; dropout_rate=rate with deterministic=False (dropout key
        0), the attention weights it sows beside the output.  The output's own dtype and
        JAX's process-wide x64 switch are reported as they were."""
        import jax

        from conformance.contract.runner import Observation

        if raw.argument == "dropout_weights":
            rate = raw.value["rate"]
            y = self.apply(case, t.plan, data, dropout=rate, deterministic=False)[0]
            w = self.sown_weights(case, t.plan, data, rate)
            return Observation(output=to_numpy(y), native_dtype=str(y.dtype),
                               attention_weights=None if w is None else np.asarray(w, np.float64),
                               weights_returned="none" if w is None else "per_head"), (
                f"{t.call} called with dropout_rate={rate}, deterministic=False, dropout key "
                "0, sow_weights=True")
        if not case.inputs.self_attention:
            raise NotImplementedError(f"{self.name}: passes one input array x (query = key = "
                                      "value) for this call")
        x = np.asarray(data.inputs.query, raw.value if raw.argument == "input_dtype"
                       else case.inputs.dtype)
        x = x if raw.argument == "input_dtype" else x[0]
        y = self.apply(case, t.plan, data, x=x)[0]
        return Observation(output=to_numpy(y), native_dtype=str(y.dtype)), (
            f"{t.call} called on x {x.dtype} {x.shape} (jax_enable_x64="
            f"{jax.config.jax_enable_x64})")

    def answer_more(self, case, plan, data, raw):
        """(output, what was passed) for a raw argument only this layer takes."""
        raise NotImplementedError(f"{self.name} passes no raw {raw.argument}")

    def conventions(self):
        """What the layer's API shows (observations.py); the ledger asks the rest."""
        from conformance.runners.flax.observations import layer_cells

        return layer_cells(self)
