"""Convention probes of the Keras layer runners (Runner.conventions, axes.py).

They run in the worker of the runner's backend, so every backend reports its
own behaviour: small layers (2 heads of width 3 on 8 features, batch 2, T 3,
S 5) loaded with the canonical weights (_keras.load_weights), called the way
the runner's rows call them (eagerly on TensorFlow and torch, `jax.jit` over
`stateless_call` on JAX), with one native argument passed raw; the cell is the
reading of that argument the output matches (probes.closest), with every
distance as the figure.  Axes the matrix rows settle (fully masked rows,
returned weights, float64, parameters, layout, refusals) are left to
conformance/conventions/ledger.py.  Keras is imported inside the functions only.
"""
from __future__ import annotations

import warnings
from dataclasses import replace

import numpy as np

from conformance.contract.axes import NA, NOT_PROBED, REFUSED
from conformance.contract.runner import Convention
from conformance.contract.probing import (
    causal_candidates, closest, output_with, probe_case, probe_mask)
from conformance.oracle.reference import attention
from conformance.oracle.canonical import case_data
from conformance.contract import probe_cells as _ledger
from conformance.runners._export.keras_mha import (
    ANSI, base_case, load_weights, storage_dtype, tensor, to_f64)
from conformance.runners.keras.common import jax_compilation_cache, numpy_zeros

DOCS = "https://keras.io/api/layers/attention_layers/multi_head_attention/"
CAST_TO_BOOL_PR = "https://github.com/keras-team/keras/pull/20511"
NEAR = 1e-3  # a reading "matches" within this (float32 probes are ~1e-7 off)


def refused(axis: str, exc: BaseException, what: str) -> Convention:
    """probes.refusal without the terminal colour codes Keras puts in its messages."""
    text = ANSI.sub("", " ".join(f"{type(exc).__name__}: {exc}".split()))
    return Convention(axis, REFUSED, f"{what}: {text[:300]}")


class Probe:
    """One runner's layer class and path on this worker's backend."""

    def __init__(self, runner):
        import keras

        keras.config.disable_flash_attention()
        self.keras, self.runner = keras, runner
        self.backend = keras.backend.backend()
        if self.backend == "jax":  # compiled probes are reused from the second session on
            jax_compilation_cache()
        self.scores = bool(getattr(runner, "scores", False))
        cls = runner.layer_cls  # a keras.layers name, or a class (a keras_hub layer)
        self.cls = getattr(keras.layers, cls) if isinstance(cls, str) else cls
        where = "keras.layers" if isinstance(cls, str) else self.cls.__module__.split(".")[0]
        self.what = (f"{where}.{self.cls.__name__} ({self.backend}, "
                     f"return_attention_scores={self.scores})")

    def layer(self, case, data=None, dtype=None, rank: int = 3, **options):
        """A layer built for `case` (or its 2-D inputs) holding the canonical weights."""
        k, data = self.keras, data or case_data(case)
        dtype = dtype or case.inputs.dtype
        layer = self.cls(
            **self.runner.translate(case).plan, **options, flash_attention=False, dtype=dtype,
            kernel_initializer=numpy_zeros(k), bias_initializer=numpy_zeros(k))
        x = data.inputs
        layer.build(*(a.shape[3 - rank:] for a in (x.query, x.value, x.key)))
        load_weights(k, layer, data.weights, dtype)
        return layer

    def invoke(self, obj, args, training=None, **kw):
        """obj(*args, **kw) as the rows call it; NumPy arrays in, backend values out."""
        k = self.keras
        args = [tensor(k, a) for a in args]
        arrays = {n: tensor(k, v) for n, v in kw.items() if isinstance(v, np.ndarray)}
        static = {n: v for n, v in kw.items() if n not in arrays}
        if training is not None:
            static["training"] = training
        if self.backend != "jax":
            return obj(*args, **static, **arrays)
        import jax

        def forward(trainable, non_trainable, args, arrays):
            return obj.stateless_call(trainable, non_trainable, *args, **static, **arrays)[0]

        return jax.jit(forward)([v.value for v in obj.trainable_variables],
                                [v.value for v in obj.non_trainable_variables], args, arrays)

    def call(self, layer, data, scores=None, rank: int = 3, **kw):
        """layer(query, value, key, **kw) positionally -> (output, weights, output dtype)."""
        scores = self.scores if scores is None else scores
        x, dtype = data.inputs, layer.dtype_policy.compute_dtype
        args = [a[0] if rank == 2 else a for a in (x.query, x.value, x.key)]
        if "dtype" not in kw:
            args = [np.asarray(a, dtype) for a in args]
        kw.pop("dtype", None)
        res = self.invoke(layer, args, return_attention_scores=scores, **kw)
        out, w = res if scores else (res, None)
        k = self.keras
        return to_f64(k, out), (None if w is None else to_f64(k, w)), storage_dtype(k, out)

    def fwd(self, case, data=None, **kw) -> np.ndarray:
        data = data or case_data(case)
        return self.call(self.layer(case, data), data, **kw)[0]


def swapped(data):
    """The same arrays with key and value exchanged (the other argument order)."""
    return replace(data, inputs=replace(data.inputs, key=data.inputs.value,
                                        value=data.inputs.key))


def layout_cells(p: Probe, case) -> list[Convention]:
    """Sizes, argument order, layout and scale from one unmasked call."""
    data = case_data(case)
    layer = p.layer(case, data)
    out = p.call(layer, data)[0]
    shape = next(tuple(v.shape) for v in layer.weights if v.path.endswith("query/kernel"))
    plan = ", ".join(f"{k}={v}" for k, v in p.runner.translate(case).plan.items())
    size = Convention(
        "size_arguments", "per_head",
        f"{p.cls.__name__}({plan}) on 8 features: query/kernel {shape}, i.e. 3 per head "
        f"(not 8 / 2 = 4, not a total of 3); output {_ledger.matches(case, out):.1e} from the "
        "oracle with d_k = 3", "per_head", DOCS)
    order = closest("argument_order", out,
                    {"query_value_key": output_with(case, None, data),
                     "query_key_value": output_with(case, None, swapped(data))},
                    f"{p.what} called layer(a, b, c) positionally with distinct b, c; "
                    "b read as value", documented="query_value_key", documented_source=DOCS)
    layout = Convention("input_layout", "batch_first",
                        f"{p.what}: (B=2, T=3, E=8) and (B, S=5, E) inputs read batch-first: "
                        f"{_ledger.matches(case, out):.1e} from the oracle", "batch_first", DOCS)
    scale = closest("softmax_scale", out, {"inv_sqrt_head_dim": output_with(case, None, data),
                                           "none": output_with(case, None, data, scale=1.0)},
                    f"{p.what}, d_k = 3, no scale argument in its signature")
    return [size, order, layout, scale]


def mask_cells(p: Probe, case) -> list[Convention]:
    """attention_mask polarity, a float mask, value_mask (key padding) and the causal flag."""
    data = case_data(case)
    layer = p.layer(case, data)

    def fwd(**kw):
        return p.call(layer, data, **kw)[0]

    cells = attention_mask_cells(p, case, fwd)
    m = probe_mask(case)
    pad = m[:, 0, :]
    kp = closest("key_padding_polarity", fwd(value_mask=pad),
                 {"true_attends": output_with(case, pad[:, None, :]),
                  "true_blocks": output_with(case, ~pad[:, None, :])},
                 f"(B, S) value_mask passed raw to {p.what} (an undocumented call argument, "
                 "the slot of the value's Keras mask)")
    causal = closest("causal_flag", fwd(use_causal_mask=True), causal_candidates(case),
                     f"use_causal_mask=True with T=3 != S=5 on {p.what}")
    return cells + [kp, causal]


def attention_mask_cells(p: Probe, case, fwd) -> list[Convention]:
    """attention_mask polarity and a float mask; fwd(**call kwargs) -> the output."""
    m = probe_mask(case)
    what = f"(B, T, S) attention_mask passed raw to {p.what}"
    cells = [_ledger.mask_polarity(case, lambda mask: fwd(attention_mask=mask),
                                   f"boolean {what}", documented="true_attends",
                                   documented_source=DOCS)]
    floats = np.where(m, 0.0, -1e9).astype(np.float32)
    cells.append(closest(
        "float_mask", fwd(attention_mask=floats),
        {"added": output_with(case, m), "cast_to_bool": output_with(case, ~m),
         "ignored": output_with(case, None)},
        f"0 / -1e9 float32 {what} (cast_to_bool: 0 blocks, -1e9 attends, the inverted "
        "reading; _compute_attention_mask casts any attention_mask to bool since "
        f"{CAST_TO_BOOL_PR}; the documentation describes a boolean mask only: '1 "
        "indicates attention and 0 indicates no attention')"))
    return cells


def dropout_cells(p: Probe, case) -> list[Convention]:
    """dropout=0.5: training=False vs True; the returned weights under training=True.
    Seeded, so the figures do not depend on what the worker ran before."""
    import keras

    keras.utils.set_random_seed(0)
    data = case_data(case)
    layer = p.layer(case, data, dropout=0.5)
    evald = _ledger.matches(case, p.call(layer, data, training=False)[0])
    out, w, _ = p.call(layer, data, training=True)
    trained = _ledger.matches(case, out)
    word = "training_flag" if trained > NEAR > evald else "always" if trained > NEAR else "never"
    routed = "" if p.scores else (" (dropout > 0 routes this call through the einsum + "
                                   "Softmax path, not the fused op)")
    cells = [Convention("dropout", word, f"{p.what}, dropout=0.5: training=False "
                        f"{evald:.1e} from the oracle, training=True {trained:.1e}{routed}",
                        "training_flag", DOCS)]
    if w is None:
        cells.append(Convention("weights_dropout", NA, f"{p.what} returns no weights "
                                "(return_attention_scores=False), so none carry dropout"))
        return cells
    pre = attention(case, data).weights
    d_pre = float(np.max(np.abs(w - pre)))
    zeros = float(np.mean(w == 0))
    cells.append(Convention(
        "weights_dropout", "pre_dropout" if d_pre < NEAR else "post_dropout",
        f"{p.what}, dropout=0.5, training=True: returned weights {d_pre:.1e} from the "
        f"oracle's softmax, {zeros:.0%} zeros, while the output is {trained:.1e} off "
        "(dropout applied to what multiplies the values only)"))
    return cells


def scale_precision(p: Probe) -> Convention:
    """A float64 layer, d_k = 3 and inputs x8 (large scores): the scale 1/sqrt(3) as a
    float64 or through float32 (a relative 1e-8 apart)."""
    case = base_case("float64")
    data = case_data(case)
    x = data.inputs
    data = replace(data, inputs=replace(x, query=8 * x.query, key=8 * x.key))
    out, _, held = p.call(p.layer(case, data), data)
    exact = 1 / np.sqrt(3.0)
    cands = {"float64": output_with(case, None, data, scale=exact),
             "float32_rounded": output_with(case, None, data, scale=float(np.float32(exact)))}
    cell = closest("scale_precision", out, cands, f"{p.what}, dtype='float64', d_k = 3, "
                   f"output dtype {held}")
    # dtype='float64' is an argument the layer takes: where the probe cannot isolate the
    # scale, that is the suite's limit (not_probed), never not_applicable
    if held != "float64":
        return Convention("scale_precision", NOT_PROBED, f"{cell.evidence}: the layer does "
                          "not compute in float64 at all (its output is float32), so the "
                          "scale's precision cannot be isolated (see float64_compute)")
    if min(_ledger_figures(cell)) > 1e-12:
        return Convention("scale_precision", NOT_PROBED, f"{cell.evidence}; neither within "
                          "1e-12: this path computes below float64 elsewhere, so the scale's "
                          "rounding cannot be isolated (see float64_compute)")
    return cell


def _ledger_figures(cell: Convention) -> list[float]:
    return [float(x.split()[-1]) for x in cell.evidence.split("reading: ")[-1].split("; ")]


def dtype_cells(p: Probe, case) -> list[Convention]:
    """A float64 input into a float32 layer, and a 2-D (T, E) input."""
    data32 = case_data(case)
    x64 = case_data(base_case("float64")).inputs
    mixed = replace(data32, inputs=x64)
    layer = p.layer(case, data32)
    what = f"float64 inputs into {p.what}, dtype='float32'"
    try:
        out, _, held = p.call(layer, mixed, dtype=False)
        word = "promoted" if held == "float64" else "cast_to_layer"
        cells = [Convention("mixed_dtype", word, f"{what}: output {held}, "
                            f"{_ledger.matches(case, out):.1e} from the float64 oracle")]
    except Exception as exc:
        cells = [refused("mixed_dtype", exc, what)]
    what = f"{p.what} on 2-D (T=3, E=8) inputs (a fresh layer built for them)"
    try:
        out = p.call(p.layer(case, data32, rank=2), data32, rank=2)[0]
        err = float(np.max(np.abs(out - output_with(case, None)[0])))
        cells.append(Convention("unbatched_input", "accepted",
                                f"{what}: output {out.shape}, batch item 0 of the oracle "
                                f"{err:.1e} away" + ("" if err < NEAR else ": accepted but "
                                                     "not read as one unbatched sequence")))
    except Exception as exc:
        cells.append(refused("unbatched_input", exc, what))
    return cells


def implicit_mask(p: Probe) -> Convention:
    """keras.layers.Embedding(mask_zero=True) -> the layer, in a functional model:
    is the padding of token id 0 applied to the attention?"""
    k, case = p.keras, base_case(self_attention=True)
    data = case_data(case)
    b, t, e = data.inputs.query.shape
    valid = np.ones((b, t), bool)
    valid[0, -2:], valid[1, -1:] = False, False
    ids = np.where(valid, np.arange(b * t).reshape(b, t) + 1, 0).astype("int32")
    table = np.concatenate([np.zeros((1, e)), data.inputs.query.reshape(-1, e)])
    x = table[ids]
    data = replace(data, inputs=replace(data.inputs, query=x, key=x, value=x))
    tokens = k.Input((t,), batch_size=b, dtype="int32")
    emb = k.layers.Embedding(b * t + 1, e, mask_zero=True)
    layer = p.cls(**p.runner.translate(case).plan, flash_attention=False)
    hidden = emb(tokens)
    with warnings.catch_warnings():  # "query (EinsumDense) ... will destroy the mask"
        warnings.simplefilter("ignore", UserWarning)
        model = k.Model(tokens, layer(hidden, hidden))
    emb.embeddings.assign(tensor(k, table, "float32"))
    load_weights(k, layer, data.weights, "float32")
    out = to_f64(k, p.invoke(model, [ids]))
    both = valid[:, :, None] & valid[:, None, :]
    return closest("implicit_mask", out, {"propagated": output_with(case, both, data),
                                          "none": output_with(case, None, data)},
                   f"Embedding(mask_zero=True) output fed to {p.cls.__name__} in a "
                   "functional model, token id 0 at 3 of 8 positions (compared on the "
                   "unpadded query rows)")


def kv_head_mapping(p: Probe) -> Convention:
    """GroupQueryAttention with 6 query heads over 3 key/value heads, distinct kv
    weights: grouped (h // 2) or tiled (h % 3)."""
    case = probe_case("keras-gqa", attention={"num_heads": 6, "num_kv_heads": 3,
                                              "query_features": 12})
    data = case_data(case)
    return closest("kv_head_mapping", p.fwd(case, data),
                   _ledger.kv_mapping_candidates(case, data),
                   f"{p.what}(head_dim=2, num_query_heads=6, num_key_value_heads=3) with "
                   "distinct per-kv-head weights (grouped: head h reads kv head h // 2; "
                   "tiled: h % 3)", documented="grouped",
                   documented_source="https://keras.io/api/layers/attention_layers/"
                   "group_query_attention/")


def layer_cells(runner) -> list[Convention]:
    """Every probe of one Keras layer runner, in its worker."""
    p = Probe(runner)
    case = base_case()
    from conformance.runners.keras.window import window_width

    grouped = [kv_head_mapping(p)] if runner.layer_cls == "GroupQueryAttention" else []
    grouped.append(window_width(p))
    return (layout_cells(p, case) + mask_cells(p, case) + dropout_cells(p, case)
            + [scale_precision(p)] + dtype_cells(p, case) + [implicit_mask(p)] + grouped)
