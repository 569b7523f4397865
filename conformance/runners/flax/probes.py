"""Convention probes of the Flax attention layers (linen.MultiHeadDotProductAttention,
nnx.MultiHeadAttention) for the axes _flax.common_cells leaves open: key padding,
dropout in the sown weights, causal alignment, the scale in a float64 layer,
float64 input into a float32 layer and implicit masks.  The layers are built
here from the canonical weights (_flax.params_for), independently of the
runners' own apply/build; jax and flax are imported inside functions only.
"""
from __future__ import annotations

import numpy as np

from conformance.contract.axes import NA, NOT_PROBED
from conformance.contract.runner import Convention, to_numpy
from conformance.contract.probing import (
    causal_candidates, closest, output_with, probe_case, refusal)
from conformance.oracle.canonical import case_data
from conformance.runners.flax import common as _flax

LINEN, NNX = "flax.linen.MultiHeadDotProductAttention", "flax.nnx.MultiHeadAttention"


def _inputs(case, dtype=None):
    x = case_data(case).inputs
    return tuple(np.asarray(a, dtype or case.inputs.dtype) for a in (x.query, x.key, x.value))


def run(api: str, case, *, dtype: str = "float32", x=None, dropout: float = 0.0,
        deterministic: bool = True, **call):
    """-> (output, sown attention weights or None) of the layer built in `dtype`; a case
    with attention.qk_norm builds it with normalize_qk=True, its query_ln / key_ln
    scales the canonical q_norm / k_norm."""
    import jax
    import jax.numpy as jnp

    dt = getattr(jnp, dtype)
    a, w = case.attention, case_data(case).weights
    kw = {"num_heads": a.num_heads, "qkv_features": a.num_heads * a.qk_head_dim,
          "dtype": dt, "param_dtype": dt, "dropout_rate": dropout}
    params = _flax.params_for(w)
    if case.grouped:
        kw["num_kv_heads"] = a.num_kv_heads  # nnx only (linen has no such field)
    if a.qk_norm is not None:
        kw["normalize_qk"] = True
        params.update(query_ln={"scale": w.q_norm}, key_ln={"scale": w.k_norm})
    q, k, v = x if x is not None else _inputs(case)
    if api == LINEN:
        import flax.linen as nn

        layer = nn.MultiHeadDotProductAttention(**kw)
        y, state = layer.apply({"params": jax.tree.map(lambda p: jnp.asarray(p, dt), params)},
                               q, k, v, deterministic=deterministic, mutable=["intermediates"],
                               rngs={"dropout": jax.random.key(0)}, **call)
        sown = state.get("intermediates", {}).get("attention_weights")
        return y, None if sown is None else sown[0]
    from flax import nnx

    layer = nnx.MultiHeadAttention(in_features=a.query_features, **kw, decode=False,
                                   rngs=nnx.Rngs(0))
    for m, d in params.items():
        for n, p in d.items():
            getattr(getattr(layer, m), n).value = jnp.asarray(p, dt)
    y = layer(q, k, v, deterministic=deterministic, **call)
    sown = getattr(layer, "attention_weights", None)
    return y, None if sown is None else sown.value[0]


def key_padding(api: str) -> Convention:
    return Convention("key_padding_polarity", NA, f"{api}.__call__ takes one `mask` (True = "
                      "attend) and no key-padding argument; padding is folded into it with "
                      "flax's make_attention_mask(query_padding, key_padding)",
                      documented_source=_doc(api))


def _doc(api: str) -> str:
    return _flax.DOCS + ("flax.linen/layers.html" if api == LINEN else
                         "flax.nnx/nn/attention.html")


def weights_dropout(api: str) -> Convention:
    case = _flax.probe("weights-dropout")
    _, w = run(api, case, dropout=0.5, deterministic=False, sow_weights=True)
    what = (f"{api} on {case.id}, dropout_rate=0.5, deterministic=False, dropout key 0, "
            "sow_weights=True")
    if w is None:
        return Convention("weights_dropout", NA, f"{what}: no attention_weights sown")
    sums = np.asarray(w, np.float64).sum(-1)
    dev = float(np.abs(sums - 1).max())
    return Convention("weights_dropout", "post_dropout" if dev > 1e-6 else "pre_dropout",
                      f"{what}: the sown attention_weights' row sums span {sums.min():.3f}.."
                      f"{sums.max():.3f} (max |sum - 1| {dev:.1e})")


def causal(api: str) -> Convention:
    if api == LINEN:
        return Convention("causal_flag", NA, f"{api}.__call__ has no causal flag (mask, "
                          "deterministic, dropout_rng, sow_weights); causality is a mask "
                          "built with flax.linen.make_causal_mask", documented_source=_doc(api))
    case = probe_case("causal")  # T 3, S 5, key and value distinct
    out, _ = run(api, case, is_causal=True)
    return closest("causal_flag", to_numpy(out), causal_candidates(case),
                   f"{api} on {case.id} (T 3, S 5), is_causal=True, no mask (flax builds "
                   "jnp.tril(ones((T, S))))")


def scale_precision(api: str) -> Convention:
    case = probe_case("scale-precision", attention={"num_heads": 2, "query_features": 12},
                      inputs={"self_attention": True, "key_len": 3, "dtype": "float64"})
    import jax

    try:
        out, _ = run(api, case, dtype="float64")
    except Exception as exc:
        return refusal("scale_precision", exc, f"{api} with dtype=float64")
    d = float(np.max(np.abs(to_numpy(out) - output_with(case, None))))
    if str(out.dtype) == "float64":  # x64 on: a float64 layer, whose scale can be read
        from conformance.contract.probing import closest

        s32 = float(np.float32(1 / np.sqrt(case.attention.qk_head_dim)))
        cands = {"float64": output_with(case, None),
                 "float32_rounded": output_with(case, None, scale=s32)}
        cell = closest("scale_precision", to_numpy(out), cands, f"{api} on {case.id}, "
                       "dtype=param_dtype=jnp.float64, jax_enable_x64=True")
        gap = float(np.max(np.abs(cands["float64"] - cands["float32_rounded"])))
        if d < gap / 2 or cell.value == "float32_rounded" and \
                float(np.max(np.abs(to_numpy(out) - cands["float32_rounded"]))) < gap / 2:
            return cell
        # a measurement limit, not the layer's word: nnx without dropout calls
        # jax.nn.dot_product_attention, whose softmax is float32 ('Softmax and it is always
        # carried out in fp32', jax/_src/nn/functions.py, jax 0.10.2 line 969)
        return Convention("scale_precision", NOT_PROBED, f"{cell.evidence}: both readings "
                          f"farther than their gap {gap:.1e}: the layer is below float64 "
                          "elsewhere (see float64_compute), so the scale's rounding cannot "
                          "show")
    # x64 off (this runner's setting, JAX's default): the float64 layer the probe needs
    # cannot be built here (the .x64 runner measures it), a harness limit
    return Convention("scale_precision", NOT_PROBED, f"{api} on {case.id} with dtype="
                      f"param_dtype=jnp.float64 and float64 inputs, jax_enable_x64="
                      f"{jax.config.jax_enable_x64} (this runner's setting): output "
                      f"{out.dtype}, {d:.1e} from the float64 oracle: no float64 layer to read "
                      "a scale in (the .x64 runner of this layer measures it)")


def float64_compute(api: str) -> Convention:
    """A float64 layer (dtype=param_dtype=jnp.float64, float64 inputs) against the float64
    oracle: float64 within 1e-12.  With JAX's x64 switch off JAX truncates it to float32."""
    import jax

    case = probe_case("float64", attention={"num_heads": 2, "query_features": 12},
                      inputs={"self_attention": True, "key_len": 3, "dtype": "float64"})
    what = (f"{api} on {case.id}, dtype=param_dtype=jnp.float64, float64 inputs, "
            f"jax_enable_x64={jax.config.jax_enable_x64}")
    try:
        out, _ = run(api, case, dtype="float64")
    except Exception as exc:
        return refusal("float64_compute", exc, what)
    d = float(np.max(np.abs(to_numpy(out) - output_with(case, None))))
    return Convention("float64_compute", "float64" if d < 1e-12 else "below_float64",
                      f"{what}: output {out.dtype}, {d:.1e} from the float64 oracle "
                      "(float64 needs <= 1e-12)")


def mixed_dtype(api: str) -> Convention:
    import jax

    case = _flax.probe("mixed-dtype")
    what = f"{api} on {case.id}: float64 NumPy inputs into a float32 layer"
    try:
        out, _ = run(api, case, x=_inputs(case, "float64"))
    except Exception as exc:
        return refusal("mixed_dtype", exc, what)
    d = float(np.max(np.abs(to_numpy(out) - output_with(case, None))))
    word = "promoted" if str(out.dtype) == "float64" else "cast_to_layer"
    how = ("the layer's promote_dtype casts the float64 inputs to its dtype=float32" if
           jax.config.jax_enable_x64 else "JAX stores the float64 NumPy inputs as float32 "
           "before the layer sees them; with x64 on the layer's promote_dtype casts them to "
           "its dtype (the .x64 runner)")
    return Convention("mixed_dtype", word, f"{what}: output {out.dtype}, {d:.1e} from the "
                      f"oracle (jax_enable_x64={jax.config.jax_enable_x64}: {how})")


def implicit_mask(api: str) -> Convention:
    case = _flax.probe("implicit-mask")
    out, _ = run(api, case)
    d = float(np.max(np.abs(to_numpy(out) - output_with(case, None))))
    return Convention("implicit_mask", "none", f"{api} on {case.id}: a jax.Array carries no "
                      "mask (nothing like Keras's _keras_mask); the layer reads only its mask "
                      f"argument: with mask=None, {d:.1e} from the unmasked oracle")


def qk_norm_scope(api: str) -> Convention:
    """normalize_qk=True: flax's LayerNorm(use_bias=False) on each head's d values, or
    over all heads?  The oracle's LayerNorm with zero bias under each scope."""
    from dataclasses import replace

    from conformance.oracle.reference import attention

    def case_for(scope):
        return probe_case("qk-norm", attention={"qk_norm": {"kind": "layer", "scope": scope}})

    per = case_for("per_head")
    data = case_data(per)
    w = data.weights
    zero = replace(w, q_norm_bias=np.zeros_like(w.q_norm), k_norm_bias=np.zeros_like(w.k_norm))
    h = per.attention.num_heads
    over = replace(zero, q_norm=np.tile(w.q_norm, (h, 1)), k_norm=np.tile(w.k_norm, (h, 1)),
                   q_norm_bias=np.zeros((h, w.q_norm.size)),
                   k_norm_bias=np.zeros((h, w.k_norm.size)))
    out, _ = run(api, per)
    return closest("qk_norm_scope", to_numpy(out), {
        "per_head": attention(per, replace(data, weights=zero)).output,
        "all_heads": attention(case_for("all_heads"), replace(data, weights=over)).output},
        f"{api}(normalize_qk=True) on {per.id}: query_ln / key_ln LayerNorm(use_bias=False) "
        "scales set to one seeded (head dim,) vector each, against the oracle's LayerNorm "
        "(zero bias) per head and over all heads", documented_source=_doc(api))


def kv_head_mapping(api: str) -> list[Convention]:
    """nnx's num_kv_heads with 6 query heads over 3 kv heads, distinct kv weights
    (linen has no such field: its cell comes from the signature)."""
    if api == LINEN:
        return []
    from conformance.contract.probe_cells import kv_mapping_candidates

    case = probe_case("flax-gqa", attention={"num_heads": 6, "num_kv_heads": 3,
                                             "query_features": 12})
    out, _ = run(api, case)
    return [closest("kv_head_mapping", to_numpy(out),
                    kv_mapping_candidates(case, case_data(case)),
                    f"{api}(num_heads=6, num_kv_heads=3, qkv_features=12) with distinct "
                    "per-kv-head key/value kernels (E, 3, 2) (grouped: head h reads kv head "
                    "h // 2; tiled: h % 3)", documented_source=_doc(api))]


def features(api: str) -> list[Convention]:
    """softcap and the other feature axes, read from the installed layer's fields and call
    signature (probing.feature_cells); the axes probed here are skipped."""
    from flax import linen, nnx

    from conformance.contract.probing import feature_cells

    cls = linen.MultiHeadDotProductAttention if "linen" in api else nnx.MultiHeadAttention
    skip = ("qk_norm_scope",) if "linen" in api else ("qk_norm_scope", "kv_head_mapping")
    return feature_cells(api, cls.__init__, cls.__call__, skip=skip)


def flax_cells(api: str) -> list[Convention]:
    from conformance.contract.axes import FEATURE_ARGUMENTS
    from conformance.contract.cache_probes import override
    from conformance.runners.flax.cache_probes import cache_cells

    feature_axes = sorted(override([qk_norm_scope(api), *kv_head_mapping(api), *features(api)],
                            cache_cells(api)),
                   key=lambda c: list(FEATURE_ARGUMENTS).index(c.axis))  # the axes' order
    return [key_padding(api), weights_dropout(api), causal(api), scale_precision(api),
            float64_compute(api), mixed_dtype(api), implicit_mask(api), *feature_axes]
