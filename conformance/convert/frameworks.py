"""PyTorch nn.MultiheadAttention, Keras MultiHeadAttention, Flax linen
MultiHeadDotProductAttention and MATLAB selfAttentionLayer layouts.

No framework is imported here: state dicts go in as mappings of any arrays
and come out as NumPy; only `keras_weights` / `set_keras_weights` touch a
layer, through its own `weights` list.
"""
from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from conformance.oracle.canonical import CanonicalWeights
from conformance.convert._core import (
    ConversionError, LinearNames, all_or_no_biases, as_numpy, dims_of, expect, expect_ndim,
    from_einsum, from_linear, kv_heads_or, take, to_einsum, to_linear)

TORCH = "torch.nn.MultiheadAttention"
_TORCH_SEPARATE = LinearNames(("q_proj_weight", "k_proj_weight", "v_proj_weight",
                               "out_proj.weight"), ("bq", "bk", "bv", "out_proj.bias"))
KERAS_PREFIXES = ("query", "key", "value", "attention_output")
FLAX_PREFIXES = ("query", "key", "value", "out")
MATLAB = LinearNames(("QueryWeights", "KeyWeights", "ValueWeights", "OutputWeights"),
                     ("QueryBias", "KeyBias", "ValueBias", "OutputBias"), column_bias=True)


def to_torch(weights: CanonicalWeights, packed: bool | None = None) -> dict[str, np.ndarray]:
    """Canonical -> nn.MultiheadAttention state dict (all arrays (out, in)).

    packed=None does what the module does: `in_proj_weight` (3E, E) when key
    and value widths equal embed_dim, else `q/k/v_proj_weight` (the kdim/vdim
    layout). Biases: `in_proj_bias` (3E,) and `out_proj.bias`, all or none.
    """
    d = dims_of(weights)
    kv_heads_or(d.heads, d.kv_heads, TORCH)
    e = d.e_q
    if not (d.heads * d.d_k == d.heads * d.d_v == e == d.e_o):
        raise ConversionError(
            f"{TORCH} needs num_heads * head size == embed_dim == output width; the weights "
            f"have num_heads={d.heads}, d_k={d.d_k}, d_v={d.d_v}, query width {e}, output "
            f"width {d.e_o}")
    same = d.e_k == d.e_v == e
    packed = same if packed is None else packed
    if packed and not same:
        raise ConversionError(f"in_proj_weight packs q, k, v as (3E, E): key width {d.e_k} "
                              f"and value width {d.e_v} must equal embed_dim {e}")
    bias = all_or_no_biases(weights, ("bq", "bk", "bv", "bo"), TORCH)
    lin = to_linear(weights, _TORCH_SEPARATE, TORCH)
    q, k, v = (lin.pop(n) for n in _TORCH_SEPARATE.weights[:3])
    if packed:
        lin["in_proj_weight"] = np.concatenate([q, k, v])
    else:
        lin.update(q_proj_weight=q, k_proj_weight=k, v_proj_weight=v)
    if bias:
        lin["in_proj_bias"] = np.concatenate([lin.pop(n) for n in ("bq", "bk", "bv")])
    order = ("in_proj_weight", "q_proj_weight", "k_proj_weight", "v_proj_weight",
             "in_proj_bias", "out_proj.weight", "out_proj.bias")  # the module's own order
    return {n: lin[n] for n in order if n in lin}


def from_torch(state: Mapping[str, Any], num_heads: int,
               num_kv_heads: int | None = None) -> CanonicalWeights:
    """nn.MultiheadAttention state dict (packed or kdim/vdim layout) -> canonical."""
    kv_heads_or(num_heads, num_kv_heads, TORCH)
    packed = "in_proj_weight" in state
    weights = (("in_proj_weight",) if packed else _TORCH_SEPARATE.weights[:3]) + (
        "out_proj.weight",)
    arrs = take(state, weights, ("in_proj_bias", "out_proj.bias"), what=TORCH)
    o = arrs["out_proj.weight"]
    expect_ndim("out_proj.weight", o, 2, "(out, in)")
    e = o.shape[1]
    expect("out_proj.weight", o, (e, e))
    if e % num_heads:
        raise ConversionError(f"out_proj.weight: embed_dim {e} does not split into "
                              f"num_heads={num_heads} heads")
    lin: dict[str, np.ndarray] = {"out_proj.weight": o}
    if packed:
        expect("in_proj_weight", arrs["in_proj_weight"], (3 * e, e))
        lin.update(zip(_TORCH_SEPARATE.weights[:3], np.split(arrs["in_proj_weight"], 3)))
    else:
        expect("q_proj_weight", arrs["q_proj_weight"], (e, e))
        lin.update((n, arrs[n]) for n in _TORCH_SEPARATE.weights[:3])
    if ("in_proj_bias" in arrs) != ("out_proj.bias" in arrs):
        missing = "out_proj.bias" if "in_proj_bias" in arrs else "in_proj_bias"
        raise ConversionError(f"{TORCH}: missing key {missing!r}; the module has both biases "
                              "or neither")
    if "in_proj_bias" in arrs:
        expect("in_proj_bias", arrs["in_proj_bias"], (3 * e,))
        lin.update(zip(("bq", "bk", "bv"), np.split(arrs["in_proj_bias"], 3)))
        lin["out_proj.bias"] = arrs["out_proj.bias"]
    return from_linear(lin, _TORCH_SEPARATE, num_heads, num_heads, TORCH)


MLX = LinearNames(("query_proj.weight", "key_proj.weight", "value_proj.weight",
                   "out_proj.weight"),
                  ("query_proj.bias", "key_proj.bias", "value_proj.bias", "out_proj.bias"))


def to_mlx(weights: CanonicalWeights) -> dict[str, np.ndarray]:
    """Canonical -> mlx.nn.MultiHeadAttention parameters (nn.Linear, (out, in));
    one `bias` flag, so all four biases or none."""
    all_or_no_biases(weights, ("bq", "bk", "bv", "bo"), "mlx.nn.MultiHeadAttention")
    return to_linear(weights, MLX, "mlx.nn.MultiHeadAttention")


def to_keras(weights: CanonicalWeights, grouped: bool = False) -> dict[str, np.ndarray]:
    """Canonical -> keras.layers.MultiHeadAttention variables keyed by path suffix:
    'query/kernel' (E_q, H, d_k), 'query/bias' (H, d_k), ..., 'attention_output/
    kernel' (H, d_v, E_o), 'attention_output/bias' (E_o,).  `grouped`: also
    GroupQueryAttention's (key/value kernels (E, H_kv, d))."""
    return to_einsum(weights, KERAS_PREFIXES, "keras MultiHeadAttention", grouped)


def from_keras(state: Mapping[str, Any], num_heads: int | None = None,
               num_kv_heads: int | None = None) -> CanonicalWeights:
    """Keras MultiHeadAttention variables (keyed by path suffix) -> canonical;
    num_heads is read from the kernels and checked when given."""
    if num_heads is not None:
        kv_heads_or(num_heads, num_kv_heads, "keras MultiHeadAttention")
    return from_einsum(state, KERAS_PREFIXES, num_heads, "keras MultiHeadAttention")


def _suffix(path: str) -> str | None:
    for p in KERAS_PREFIXES:
        for kind in ("kernel", "bias"):
            s = f"{p}/{kind}"
            if path == s or path.endswith("/" + s):
                return s
    return None


def keras_weights(layer: Any) -> dict[str, np.ndarray]:
    """A built Keras MultiHeadAttention's variables as NumPy, keyed by path suffix
    (feed to from_keras)."""
    out = {}
    for var in layer.weights:
        s = _suffix(var.path)
        if s is None:
            raise ConversionError(f"keras layer: variable {var.path!r} is not one of "
                                  f"{', '.join(p + '/kernel|bias' for p in KERAS_PREFIXES)}")
        out[s] = as_numpy(var)
    return out


def set_keras_weights(layer: Any, state: Mapping[str, Any]) -> None:
    """Assign to_keras-style arrays to a *built* Keras MultiHeadAttention: every
    variable of the layer must get one array of its own shape, and back."""
    arrs = take(state, (), [f"{p}/{k}" for p in KERAS_PREFIXES for k in ("kernel", "bias")],
                what="keras weights")
    by_suffix = {}
    for var in layer.weights:
        s = _suffix(var.path)
        if s is None or s not in arrs:
            raise ConversionError(f"keras layer: variable {var.path!r} has no array; given "
                                  f"keys: {', '.join(sorted(arrs))}")
        expect(var.path, arrs[s], tuple(int(n) for n in var.shape))
        by_suffix[s] = var
    for s in arrs:
        if s not in by_suffix:
            raise ConversionError(f"keras layer has no variable for {s!r} (use_bias=False, "
                                  "or not built?)")
    for s, var in by_suffix.items():
        var.assign(arrs[s].astype(var.dtype))


def to_flax(weights: CanonicalWeights) -> dict[str, dict[str, np.ndarray]]:
    """Canonical -> flax.linen.MultiHeadDotProductAttention params (what goes
    under {'params': ...}): {'query': {'kernel': (E_q, H, d_k), 'bias': (H, d_k)},
    'key', 'value', 'out': {'kernel': (H, d_v, E_o), 'bias': (E_o,)}}."""
    flat = to_einsum(weights, FLAX_PREFIXES, "flax MultiHeadDotProductAttention")
    nested: dict[str, dict[str, np.ndarray]] = {}
    for key, arr in flat.items():
        mod, kind = key.split("/")
        nested.setdefault(mod, {})[kind] = arr
    return nested


def from_flax(state: Mapping[str, Any], num_heads: int | None = None,
              num_kv_heads: int | None = None) -> CanonicalWeights:
    """Flax linen params (nested, with or without the 'params' level) -> canonical."""
    what = "flax MultiHeadDotProductAttention"
    if num_heads is not None:
        kv_heads_or(num_heads, num_kv_heads, what)
    if set(state) == {"params"}:
        state = state["params"]
    flat = {}
    for mod, inner in state.items():
        if not isinstance(inner, Mapping):
            raise ConversionError(f"{what}: {mod!r} should hold {{'kernel', 'bias'}}, found "
                                  f"{type(inner).__name__}")
        flat.update({f"{mod}/{kind}": arr for kind, arr in inner.items()})
    return from_einsum(flat, FLAX_PREFIXES, num_heads, what)


def to_matlab(weights: CanonicalWeights) -> dict[str, np.ndarray]:
    """Canonical -> selfAttentionLayer learnables: QueryWeights (NumKeyChannels,
    InputSize) with head i the contiguous channel block i, QueryBias
    (NumKeyChannels, 1), ..., OutputWeights (OutputSize, NumValueChannels)."""
    d = dims_of(weights)
    kv_heads_or(d.heads, d.kv_heads, "MATLAB selfAttentionLayer")
    return to_linear(weights, MATLAB, "MATLAB selfAttentionLayer")


def from_matlab(state: Mapping[str, Any], num_heads: int,
                num_kv_heads: int | None = None) -> CanonicalWeights:
    kv_heads_or(num_heads, num_kv_heads, "MATLAB selfAttentionLayer")
    return from_linear(state, MATLAB, num_heads, num_heads, "MATLAB selfAttentionLayer")
