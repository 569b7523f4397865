"""The probe graphs of onnx.keras-export and litert.keras, in the TensorFlow worker: small
Keras models around keras.layers.MultiHeadAttention (a probe case's sizes and canonical
weights) exported the way the runner exports (model.export(format="onnx"), tf2onnx; or
litert.keras's conversion) with one input of their own (a boolean or float attention_mask,
a value_mask) or one layer argument (use_causal_mask, dropout, sliding_window), cached like
the runner's exports (conformance/cache.py, keyed by probe, versions and format), and run in
the runtime with that input passed raw.  Nothing here reads an output against the oracle:
the ledger's probes ask through the runners' `answer` (keras_export_answers.py) and judge.
"""
from __future__ import annotations


import numpy as np

from conformance.cache import key
from conformance.oracle.canonical import case_data
from conformance.runners._export.keras_mha import load_weights, mha_translation
from conformance.runners._export.keras_export import (
    KERAS_EXPORT_FORMAT, MODEL_NAME, keras_onnx_bytes)
from conformance.runners._export.onnx_runtime import CACHE, FORMAT, ort_session

PROBE_FORMAT = 1  # bump when a probe graph changes
WHAT = "onnx.keras-export graph in onnxruntime"


def _model(keras, case, mask: str | None, causal: bool, dropout: float,
           value_mask: bool = False, options: tuple = (), call_options: tuple = ()):
    """keras.Model(query, value, key[, attention_mask][, value_mask]) -> MultiHeadAttention
    output (value_mask: a (B, S) bool input passed to the layer's value_mask, its
    key-padding slot; `options`: (name, value) layer arguments, e.g. sliding_window;
    `call_options`: (name, value) arguments of the layer's call in the model, e.g.
    training=True)."""
    i, a, dt = case.inputs, case.attention, case.inputs.dtype
    layer = keras.layers.MultiHeadAttention(**mha_translation(case).plan, dropout=dropout,
                                            flash_attention=False, dtype=dt, name="mha",
                                            **dict(options))
    shapes = {"query": (i.query_len, a.query_features), "value": (i.key_len, a.value_features),
              "key": (i.key_len, a.key_features)}
    inputs = [keras.Input(s, batch_size=i.batch, dtype=dt, name=n) for n, s in shapes.items()]
    kw = {"use_causal_mask": True} if causal else {}
    kw.update(call_options)
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
                 artifact="ONNX graph", shared=None):
        """`convert(model) -> bytes` and `opener(blob, what) -> session` (get_inputs(),
        run(None, feed)) default to the ONNX export and onnxruntime; litert.keras passes
        its conversion and interpreter, its cache and its `what` for the evidence, and
        `shared(make_model, key_of) -> bytes`, which converts for its sibling runner too
        (key_of(label): this graph's key under another runner's label)."""
        import keras

        self.keras, self.versions, self.what, self.label = keras, versions, what, label
        self.convert = convert or (lambda m: keras_onnx_bytes(m, "conformance-keras-onnx-probe-"))
        self.cache, self.opener = cache, opener or ort_session
        self.runtime, self.artifact, self.shared = runtime, artifact, shared
        self.exported = 0

    def session(self, case, mask=None, causal=False, dropout=0.0, value_mask=False,
                options: tuple = (), call_options: tuple = ()):
        def model():
            self.exported += 1
            return _model(self.keras, case, mask, causal, dropout, value_mask, options,
                          call_options)

        # the other graphs keep their keys
        extra = (("value_mask",) if value_mask else ()) + tuple(options) + tuple(
            ("call", *o) for o in call_options)

        def key_of(label: str) -> str:
            return key(label, case.fingerprint(), mask, causal, dropout, *extra,
                       self.versions, FORMAT, PROBE_FORMAT, KERAS_EXPORT_FORMAT)

        if self.shared is not None:
            blob = self.shared(model, key_of)
        else:
            blob, _ = self.cache.get_or_make(key_of(self.label), lambda: self.convert(model()))
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
