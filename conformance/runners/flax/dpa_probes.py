"""Convention probes of `jax.nn.dot_product_attention` (runner jax.dpa): the canonical
projections made in jnp (BTNH), the function called with one argument passed raw, the
heads projected back and compared with the float64 oracle under each reading
(contract/probing.py).  Parameter formula, weight layout, fully masked rows, float64 and
refusals are left to the matrix rows (ledger.py); mask_fill, masked_key_nonfinite and
masked_value_nonfinite are the ledger's, asked through the runner's own translate and run
(conventions/probes/masks.py), the fill then named from the source; the mask polarity,
the float mask and the causal flag are the ledger's own probes
(conventions/probes/flags.py), answered by JaxDPA.answer.  jax is imported inside the
functions only.
"""
from __future__ import annotations

from dataclasses import replace

import numpy as np

from conformance.contract import cache_probes as cp
from conformance.contract import probe_cells as _ledger
from conformance.contract.axes import DEPENDS, IGNORED, NA, NOT_PROBED
from conformance.contract.probing import (
    closest, distances, feature_cells, output_with, probe_case, refusal)
from conformance.contract.runner import Convention, to_numpy
from conformance.oracle.canonical import case_data
from conformance.oracle.positional import window_allowed

SOURCE = "https://github.com/jax-ml/jax/blob/jax-v0.10.2/jax/_src/nn/functions.py"
DOC = "https://docs.jax.dev/en/latest/_autosummary/jax.nn.dot_product_attention.html"
DOCUMENTED = {"documented_source": DOC}


def forward(case, layout: str = "btnh"):
    """fwd(x=None, **kw) -> (B, T, E_o) NumPy output on `case`:
    q, k, v projected in jnp (float32), the call, the output projection; `layout`
    "bnth" hands it (B, N, T, H) arrays instead, transposed back after."""
    import jax
    import jax.numpy as jnp

    from conformance.runners.flax.common import heads_out, project

    d = case_data(case)
    w = {n: jnp.asarray(a, jnp.float32) for n, a in d.weights.arrays().items()}
    qkv = [project(jnp, jnp.asarray(getattr(d.inputs, n), jnp.float32), w[wn], w.get(bn))
           for n, wn, bn in (("query", "wq", "bq"), ("key", "wk", "bk"), ("value", "wv", "bv"))]

    def fwd(x=None, **kw):
        a, b, c = x or qkv
        if layout == "bnth":
            a, b, c = (t.transpose(0, 2, 1, 3) for t in (a, b, c))
        h = jax.nn.dot_product_attention(a, b, c, **kw)
        h = h.transpose(0, 2, 1, 3) if layout == "bnth" else h
        return to_numpy(heads_out(jnp, h, w))

    return fwd, qkv


def _layout_cells(case) -> list[Convention]:
    what = f"probe_case {case.id}"
    sq = probe_case("dpa-layout", inputs={"self_attention": True, "key_len": 3})
    layout = closest("input_layout", output_with(sq, None),
                     {"batch_first": forward(sq)[0](),
                      "batch_heads_first": forward(sq, "bnth")[0]()},
                     f"probe_case {sq.id}: q, k, v as (B, T, N, H) and as (B, N, T, H)",
                     documented="batch_first", **DOCUMENTED)
    swapped = case_data(case)
    swapped = replace(swapped, inputs=replace(swapped.inputs, key=swapped.inputs.value,
                                              value=swapped.inputs.key))
    fwd, (q, k, v) = forward(case)
    order = closest("argument_order", fwd(), {
        "query_key_value": output_with(case, None),
        "query_value_key": output_with(case, None, swapped)},
        f"{what}: dot_product_attention(q, k, v) with k and v distinct")
    import jax

    one = jax.nn.dot_product_attention(q[0], k[0], v[0])
    full = jax.nn.dot_product_attention(q, k, v)[0]
    unb = Convention("unbatched_input", "accepted", f"{what}: 3-D (T, N, H) q, k, v: output "
                     f"{tuple(one.shape)}, max |3-D - 4-D item 0| "
                     f"{float(np.max(np.abs(np.asarray(one) - np.asarray(full)))):.1e} (the "
                     "docstring: shape (BTNH|TNH))", documented="accepted", **DOCUMENTED)
    return [layout, order, unb]


def _mask_cells(case) -> list[Convention]:
    fwd, _ = forward(case)
    what = f"probe_case {case.id}"
    lengths = np.asarray([5, 3], np.int32)
    valid = np.arange(case.inputs.key_len)[None, :] < lengths[:, None]
    out = fwd(key_value_seq_lengths=lengths)
    d = distances(out, {"lengths": output_with(case, valid[:, None, :]),
                        "no padding": output_with(case, None)})
    # accepted and the output unmoved: ignored; neither reading: a measurement to redo
    word = "lengths" if d["lengths"] < 1e-3 else (IGNORED if d["no padding"] < 1e-3 else
                                                   NOT_PROBED)
    return [Convention("key_padding_polarity", word, f"{what}: key_value_seq_lengths="
                            f"{lengths.tolist()} (int32 lengths, not a mask): " + "; ".join(
                                f"{k} {v:.1e}" for k, v in d.items()) + _query_lengths(
                                    case, fwd), documented="lengths", **DOCUMENTED)]


def _query_lengths(case, fwd) -> str:
    """query_seq_lengths=[2, 3]: the rows past a length come back as zero heads (the
    output bias after the projection), the others unmasked."""
    lengths = np.asarray([2, 3], np.int32)
    out = fwd(query_seq_lengths=lengths)
    past = np.arange(case.inputs.query_len)[None, :] >= lengths[:, None]
    bias = case_data(case).weights.bo
    zeros = float(np.max(np.abs(out[past] - (0 if bias is None else bias))))
    kept = float(np.max(np.abs(out[~past] - output_with(case, None)[~past])))
    return (f"; query_seq_lengths={lengths.tolist()}: rows past the length {zeros:.1e} from "
            f"zero heads (the output bias), the others {kept:.1e} from the unmasked oracle")


def _flag_cells(case) -> list[Convention]:
    fwd, (q, k, v) = forward(case)
    what = f"probe_case {case.id}"
    scale = _ledger.softmax_scale(case, lambda m: fwd(), what, configurable=(
        "scale= keyword (default None: 1/sqrt(H)); scale=1.0 gives "
        f"{_ledger.matches(case, fwd(scale=1.0)):.1e} from the default-scale oracle"))
    import jax

    out = jax.nn.dot_product_attention(q, k, v, return_residual=True)
    cells = [scale,
             Convention("returned_weights", "none", f"{what}: returns the output "
                        f"{tuple(out[0].shape)}; return_residual=True adds the logsumexp "
                        f"{tuple(out[1].shape)} (B, T, N), never the weights", **DOCUMENTED),
             Convention("weights_dropout", NA, "returns no attention weights"),
             Convention("dropout", NA, "no dropout argument: the signature is (query, key, "
                        "value, bias, mask, *, scale, is_causal, query_seq_lengths, "
                        "key_value_seq_lengths, local_window_size, implementation, "
                        "return_residual)", **DOCUMENTED),
             Convention("implicit_mask", "none", "a jax.Array carries no mask; the function "
                        "reads only its mask, bias, lengths, is_causal and window")]
    return cells


def _dtype_cells(case) -> list[Convention]:
    """float64 q with float32 k, v, and the scale in float64: read in the runner's setting
    (jax_enable_x64 off, JAX's default, where float64 NumPy becomes float32 before the
    call) and inside jax.enable_x64(True), where the function sees the float64 array."""
    import jax

    fwd, (q, k, v) = forward(case)
    what = f"probe_case {case.id}"
    x64 = jax.config.jax_enable_x64
    q64 = np.asarray(q, np.float64)
    seen = {}
    for on in sorted({x64, True}):
        with jax.enable_x64(on):
            seen[on] = _mixed(q64, np.asarray(k), np.asarray(v), f"jax_enable_x64={on}")
    words = {c.value for c in seen.values()}
    figures = " | ".join(f"{c.value}: {c.evidence}" for c in seen.values())
    mixed = Convention("mixed_dtype", words.pop() if len(words) == 1 else DEPENDS,
                       f"{what}: float64 NumPy q with float32 k, v: {figures}", **DOCUMENTED)
    if x64:
        return [mixed]
    c64 = probe_case("scale-precision", attention={"num_heads": 2, "query_features": 6},
                     inputs={"dtype": "float64", "self_attention": True, "key_len": 3})
    out = _float64_run(c64)
    s32 = float(np.float32(1 / np.sqrt(c64.attention.qk_head_dim)))
    d = distances(out, {"float64": output_with(c64, None),
                        "float32_rounded": output_with(c64, None, scale=s32)})
    gap = float(np.max(np.abs(output_with(c64, None) - output_with(c64, None, scale=s32))))
    # a measurement limit, not a word of the function: no float64 array exists in the
    # runner's setting, and under enable_x64 the softmax is float32 ('Softmax and it is
    # always carried out in fp32', jax/_src/nn/functions.py, jax 0.10.2 line 969)
    scale = Convention("scale_precision", NOT_PROBED, f"jax_enable_x64={x64} (JAX's default, "
                       "this runner's setting): no float64 array exists to round a scale in "
                       f"(float64 NumPy becomes float32); {c64.id} under jax.enable_x64(True): "
                       + "; ".join(f"{n} {v:.1e}" for n, v in d.items()) + f", gap {gap:.1e}: "
                       "the float32 softmax hides the scale's rounding", **DOCUMENTED)
    return [mixed, scale]


def _float64_run(case) -> np.ndarray:
    """`case` projected and attended in float64 inside jax.enable_x64(True)."""
    import jax
    import jax.numpy as jnp

    from conformance.runners.flax.common import heads_out, project

    d = case_data(case)
    with jax.enable_x64(True):
        w = {n: jnp.asarray(a, jnp.float64) for n, a in d.weights.arrays().items()}
        q, k, v = (project(jnp, jnp.asarray(getattr(d.inputs, n), jnp.float64), w[wn],
                           w.get(bn)) for n, wn, bn in (("query", "wq", "bq"),
                                                        ("key", "wk", "bk"), ("value", "wv", "bv")))
        return np.asarray(to_numpy(heads_out(jnp, jax.nn.dot_product_attention(q, k, v), w)),
                          np.float64)


def _mixed(q64, k, v, what: str) -> Convention:
    import jax
    import jax.numpy as jnp

    try:
        out = jax.nn.dot_product_attention(q64, k, v)
    except Exception as exc:  # the function's own dtype check
        return refusal("mixed_dtype", exc, what)
    return Convention("mixed_dtype", "promoted" if out.dtype == jnp.float64 else
                      "cast_to_layer", f"{what}: output {out.dtype}" + (
                          "" if jax.config.jax_enable_x64 else " (the float64 NumPy q is "
                          "stored as float32 before the call)"))


def kv_mapping_cell() -> Convention:
    """4 query heads on 2 kv heads of distinct weights: k, v (B, S, 2, H)."""
    from conformance.contract.position_head_probes import gqa_case, kv_head_mapping

    case = gqa_case()
    fwd, _ = forward(case)
    return kv_head_mapping(case, fwd, f"probe_case {case.id}: q (B, T, 4, H), k and v "
                           "(B, S, 2, H) (the function reshapes q to (B, T, K, G, H))",
                           documented="grouped", **DOCUMENTED)


def window_cell(w: int = 3) -> Convention:
    """local_window_size=w (an int), without and with is_causal, against the readings of
    w; then the pair (2, 1), read as (left, right) or (right, left)."""
    plain, causal = cp.window_case(causal=False), cp.window_case(causal=True)
    cell = cp.window_width(w, {
        f"local_window_size={w}, no causal mask": (plain, lambda: forward(plain)[0](
            local_window_size=w)),
        f"local_window_size={w}, is_causal=True": (causal, lambda: forward(causal)[0](
            local_window_size=w, is_causal=True))},
        "jax.nn.dot_product_attention, self-attention over 8 positions", **DOCUMENTED)
    pos = np.arange(plain.inputs.query_len)
    d = distances(forward(plain)[0](local_window_size=(2, 1)), {
        "left_right": output_with(plain, window_allowed(pos, pos, 2, 1)),
        "right_left": output_with(plain, window_allowed(pos, pos, 1, 2))})
    word = "left_right" if d["left_right"] < 1e-3 else cell.value
    return Convention("window_width", word, f"{cell.evidence} | local_window_size=(2, 1): " +
                      "; ".join(f"{k} {v:.1e}" for k, v in d.items()) + " (an int w is "
                      "(w, w): 'interpreted as a symmetric window'; a pair is (left, right), "
                      "inclusive, _get_window_mask)", documented="left_right",
                      documented_source=SOURCE)


def dpa_cells(runner) -> list[Convention]:
    import jax

    case = probe_case("dpa")
    _, (q, _k, _v) = forward(case)
    cells = [Convention("size_arguments", "given_tensors", f"probe_case {case.id}: the "
                        f"function takes projected tensors, e.g. q {tuple(q.shape)} (B, T, N, "
                        "H); value must have the key's head size", documented="given_tensors",
                        **DOCUMENTED)]
    cells += _layout_cells(case) + _mask_cells(case) + _flag_cells(case) + _dtype_cells(case)
    cells += [kv_mapping_cell(), window_cell()]
    return cells + feature_cells("jax.nn.dot_product_attention",
                                 jax.nn.dot_product_attention,
                                 skip=("kv_head_mapping", "window_width"))
