"""Convention probes of onnx.keras-export and litert.keras (Runner.conventions), in the
TensorFlow worker.

Small Keras models around keras.layers.MultiHeadAttention (2 heads of width 3
on 8 features, batch 2, T 3, S 5, the canonical weights) are exported the way
the runner exports (model.export(format="onnx"), tf2onnx) and run in
onnxruntime with one input passed raw; the cell is the reading the graph's
output matches (probes.closest).  Four small graphs, cached like the runner's
exports (conformance/cache.py, keyed by probe, versions and format), so only
the first session pays for the conversion.
"""
from __future__ import annotations


import numpy as np

from conformance.contract.axes import NA, REFUSED
from conformance.cache import key
from conformance.contract.runner import Convention
from conformance.contract.probing import causal_candidates, closest, output_with, probe_mask
from conformance.oracle.canonical import case_data
from conformance.contract import probe_cells as _ledger
from conformance.runners._export.keras_mha import load_weights, mha_translation
from conformance.runners._export.keras_mha import ANSI, base_case
from conformance.runners._export.keras_export import (
    KERAS_EXPORT_FORMAT, MODEL_NAME, keras_onnx_bytes)
from conformance.runners._export.onnx_runtime import CACHE, FORMAT, ort_session

PROBE_FORMAT = 1  # bump when a probe graph changes
WHAT = "onnx.keras-export graph in onnxruntime"


def _model(keras, case, mask: str | None, causal: bool, dropout: float,
           value_mask: bool = False):
    """keras.Model(query, value, key[, attention_mask][, value_mask]) -> MultiHeadAttention
    output (value_mask: a (B, S) bool input passed to the layer's value_mask, its
    key-padding slot)."""
    i, a, dt = case.inputs, case.attention, case.inputs.dtype
    layer = keras.layers.MultiHeadAttention(**mha_translation(case).plan, dropout=dropout,
                                            flash_attention=False, dtype=dt, name="mha")
    shapes = {"query": (i.query_len, a.query_features), "value": (i.key_len, a.value_features),
              "key": (i.key_len, a.key_features)}
    inputs = [keras.Input(s, batch_size=i.batch, dtype=dt, name=n) for n, s in shapes.items()]
    kw = {"use_causal_mask": True} if causal else {}
    if mask:
        kw["attention_mask"] = keras.Input((i.query_len, i.key_len), batch_size=i.batch,
                                           dtype=mask, name="attention_mask")
        inputs.append(kw["attention_mask"])
    if value_mask:
        kw["value_mask"] = keras.Input((i.key_len,), batch_size=i.batch, dtype="bool",
                                       name="value_mask")
        inputs.append(kw["value_mask"])
    model = keras.Model(inputs, layer(inputs[0], inputs[1], key=inputs[2], **kw), name=MODEL_NAME)
    x = case_data(case).inputs
    load_weights(keras, layer, case_data(case).weights, dt)
    feeds = [x.query, x.value, x.key] + ([np.ones((i.batch, i.query_len, i.key_len), mask)]
                                         if mask else []) + (
        [np.ones((i.batch, i.key_len), bool)] if value_mask else [])
    model(feeds)  # the exporter needs a called model
    return model


class Graphs:
    """One exported probe graph per configuration, from the cache when it holds it."""

    def __init__(self, versions: list[str], what: str = WHAT, label="onnx.keras-export probe",
                 convert=None, cache=CACHE, opener=None, runtime="onnxruntime",
                 artifact="ONNX graph"):
        """`convert(model) -> bytes` and `opener(blob, what) -> session` (get_inputs(),
        run(None, feed)) default to the ONNX export and onnxruntime; litert.keras passes
        its conversion and interpreter, its cache and its `what` for the evidence."""
        import keras

        self.keras, self.versions, self.what, self.label = keras, versions, what, label
        self.convert = convert or (lambda m: keras_onnx_bytes(m, "conformance-keras-onnx-probe-"))
        self.cache, self.opener = cache, opener or ort_session
        self.runtime, self.artifact = runtime, artifact
        self.exported = 0

    def session(self, case, mask=None, causal=False, dropout=0.0, value_mask=False):
        def make():
            self.exported += 1
            return self.convert(_model(self.keras, case, mask, causal, dropout, value_mask))

        extra = ("value_mask",) if value_mask else ()  # the other graphs keep their keys
        k = key(self.label, case.fingerprint(), mask, causal, dropout, *extra,
                self.versions, FORMAT, PROBE_FORMAT, KERAS_EXPORT_FORMAT)
        blob, _ = self.cache.get_or_make(k, make)
        self.keras.backend.clear_session(free_memory=False)
        return self.opener(blob, f"probe graph (mask={mask}, causal={causal})")

    @staticmethod
    def run(session, case, data=None, **feeds) -> np.ndarray:
        """Feed query, value, key (as float32 unless given) and the extra inputs by name."""
        x = (data or case_data(case)).inputs
        named = {"query": x.query, "value": x.value, "key": x.key}
        named = {n: np.asarray(v, np.float32) for n, v in named.items()} | feeds
        names = [i.name for i in session.get_inputs()]
        if not set(names) <= set(named):  # the exporter renamed them: the model's order
            names = dict(zip(names, named))
            return session.run(None, {n: named[m] for n, m in names.items()})[0]
        return np.asarray(session.run(None, {n: named[n] for n in names})[0], np.float64)


def _refused(axis: str, fn, what: str) -> Convention:
    try:
        out = fn()
    except Exception as exc:  # onnxruntime's refusal is the observation
        text = ANSI.sub("", " ".join(f"{type(exc).__name__}: {exc}".split()))
        return Convention(axis, REFUSED, f"{what}: {text[:300]}")
    return Convention(axis, "accepted" if axis == "unbatched_input" else "promoted",
                      f"{what}: ran, output {np.shape(out)}")


def bool_graph_cells(g: Graphs, case) -> list[Convention]:
    """One graph with a bool attention_mask input and dropout=0.5 in the layer."""
    s = g.session(case, mask="bool", dropout=0.5)
    data, m = case_data(case), probe_mask(case)
    full = g.run(s, case, attention_mask=np.ones_like(m))
    names = [i.name for i in s.get_inputs()]
    x = data.inputs
    return [
        _ledger.mask_polarity(case, lambda mask: g.run(s, case, attention_mask=mask),
                              f"boolean (B, T, S) attention_mask fed raw to the {g.what}"),
        Convention("input_layout", "batch_first", f"{g.what}: (B=2, T=3, E=8) inputs read "
                   f"batch-first: {_ledger.matches(case, full):.1e} from the oracle"),
        closest("softmax_scale", full, {"inv_sqrt_head_dim": output_with(case, None),
                                        "none": output_with(case, None, scale=1.0)},
                f"{g.what}, d_k = 3, all-True mask"),
        Convention("dropout", "never", f"{g.what} of a layer with dropout=0.5: output "
                   f"{_ledger.matches(case, full):.1e} from the oracle without dropout (the "
                   "export traces the inference call; the graph has no training input)"
                   if _ledger.matches(case, full) < _ledger.NEAR else
                   f"{g.what}, dropout=0.5: {_ledger.matches(case, full):.1e} off"),
        Convention("weights_dropout", NA, f"{g.what}: the exported graphs are inference "
                   "graphs with no dropout (a dropout=0.5 layer exports to output "
                   f"{_ledger.matches(case, full):.1e} from the oracle), so "
                   "the weights the scores graph returns carry none"),
        Convention("argument_order", NA, f"{g.what}: graph inputs are named, {names}, in the "
                   "order the exported keras.Model declares; the layer inside is called "
                   "layer(query, value, key=key) (Keras: query_value_key)"),
        _refused("unbatched_input", lambda: s.run(None, {"query": np.float32(x.query[0]),
                                                         "value": np.float32(x.value[0]),
                                                         "key": np.float32(x.key[0]),
                                                         "attention_mask": m[0]}),
                 f"2-D (T, E) inputs fed to the {g.what} (exported with batch 2)"),
        _refused("mixed_dtype", lambda: s.run(None, {"query": x.query, "value": x.value,
                                                     "key": x.key, "attention_mask": m}),
                 f"float64 inputs fed to the float32 {g.what}"),
    ]


def onnx_cells(versions: list[str], g: Graphs | None = None) -> list[Convention]:
    """Every probe of onnx.keras-export (four small graphs, cached); `g` converts and runs
    them another way (litert.keras)."""
    g, case = g or Graphs(versions), base_case()
    cells = bool_graph_cells(g, case)
    m = probe_mask(case)
    floats = np.where(m, 0.0, -1e9).astype(np.float32)
    cells.append(closest(
        "float_mask", g.run(g.session(case, mask="float32"), case, attention_mask=floats),
        {"added": output_with(case, m), "cast_to_bool": output_with(case, ~m),
         "ignored": output_with(case, None)},
        f"0 / -1e9 float32 attention_mask input fed to the {g.what} (cast_to_bool: 0 blocks, "
        "-1e9 attends; Keras casts the mask to bool inside the traced layer)"))
    cells.append(closest("causal_flag", g.run(g.session(case, causal=True), case),
                         causal_candidates(case),
                         f"use_causal_mask=True (T=3 != S=5) exported, in {g.runtime}"))
    cells += [
        Convention("size_arguments", "per_head", f"{g.what}: the exported layer is "
                   f"{mha_translation(case).call}; key_dim=3 is per head (query kernel "
                   "(8, 2, 3) in the layer the graph is traced from)"),
        key_padding_cell(g, case),
        Convention("implicit_mask", "none", f"{g.what}: {g.artifact} inputs are plain tensors; "
                   f"no mask travels with a tensor into {g.runtime} (a Keras mask inside the "
                   "exported model is traced as ops)"),
        scale_precision_cell(g)]
    return cells


def key_padding_cell(g: Graphs, case) -> Convention:
    """A model exported with a (B, S) bool value_mask input (MultiHeadAttention's key-padding
    slot, an undocumented call argument), fed raw: which polarity the graph reads.  A
    converter or runtime error on that model is its own refusal, quoted."""
    pad = probe_mask(case)[:, 0, :]
    what = (f"(B, S) bool value_mask input (MultiHeadAttention's value_mask) fed raw to the "
            f"{g.what}")
    try:
        out = g.run(g.session(case, value_mask=True), case, value_mask=pad)
    except (AttributeError, NameError):  # the suite's own slip: never a refusal
        raise
    except Exception as exc:  # the exporter, converter or runtime refuses it
        text = ANSI.sub("", " ".join(f"{type(exc).__name__}: {exc}".split()))
        return Convention("key_padding_polarity", REFUSED, f"{what}: {text[:300]}")
    return closest("key_padding_polarity", out,
                   {"true_attends": output_with(case, pad[:, None, :]),
                    "true_blocks": output_with(case, ~pad[:, None, :])}, what)


def scale_precision_cell(g: Graphs) -> Convention:
    """A float64 layer exported: the scale 1/sqrt(3) as float64 or through float32 (a
    converter or runtime that refuses the float64 model: refused, quoting its message)."""
    case = base_case("float64")
    x = case_data(case).inputs
    try:
        out = g.run(g.session(case), case, query=x.query, value=x.value, key=x.key)
    except (AttributeError, NameError):  # the suite's own slip: never a refusal
        raise
    except Exception as exc:  # the converter or the runtime refuses a float64 model
        text = ANSI.sub("", " ".join(f"{type(exc).__name__}: {exc}".split()))
        return Convention("scale_precision", REFUSED, f"{g.what}, dtype='float64' layer "
                          f"exported, d_k = 3: refused: {text[:300]}")
    exact = 1 / np.sqrt(3.0)
    return closest("scale_precision", out,
                   {"float64": output_with(case, None, scale=exact),
                    "float32_rounded": output_with(case, None, scale=float(np.float32(exact)))},
                   f"{g.what}, dtype='float64' layer exported, d_k = 3")


def window_cell(g: Graphs, what: str, w: int = 3) -> Convention:
    # `what`: the whole description the evidence opens with
    """window_width of a converted Keras layer: MultiHeadAttention(sliding_window=w)
    converted by `g` and run in its runtime, without and with use_causal_mask (does the
    band survive the conversion?)."""
    from dataclasses import replace

    from conformance.case.model import Window
    from conformance.contract import cache_probes as cp
    from conformance.runners._export.keras_mha import SOURCE

    runs = {}
    for causal in (False, True):
        case = cp.window_case(causal=causal)
        windowed = replace(case, mask=replace(case.mask, window=Window(w - 1, 0 if causal
                                                                       else w - 1)))
        runs[f"sliding_window={w}{', use_causal_mask=True' if causal else ', no causal mask'}"
             ] = (case, lambda c=windowed, k=causal: g.run(g.session(c, causal=k), c))
    return cp.window_width(w, runs, what, documented="2w_minus_1_keys",
                           documented_source=SOURCE)
