"""The Keras model a user converts for deployment: one keras.layers.MultiHeadAttention loaded
with the canonical weights, wrapped in a functional model whose inputs are the query
(value, key) and the merged (B, T, S) attention_mask (True = attend), use_causal_mask for a
causal case.  The ONNX export (onnx.keras-export) and the LiteRT conversion (litert.keras)
build it here; `keras_onnx_bytes` is that ONNX export (also the default converter of the
Keras export probe graphs, keras_export_probes.py, which litert.keras converts its own way).  keras
is passed in (the caller's worker fixed the backend); tf2onnx is imported inside.
"""
from __future__ import annotations

import os

from conformance.runners._export.keras_mha import explicit_mask, load_weights


# Keras names an unnamed model from a process-wide counter (`functional_1`, then
# `functional_2` after another model was built), and the exported graph's tensor names
# carry it: one fixed name makes them depend on the model alone, not on what ran before.
MODEL_NAME = "conformance"


def functional_model(keras, case, translation, data, calls: tuple[bool, ...]):
    """(model, layer, feeds, load notes): one layer per flag of `calls`
    (return_attention_scores), each loaded with the canonical weights (Keras refuses one
    layer called twice with and without scores in one functional model: "Output with path
    `2` is not connected to `inputs`"); each adds its output (and its scores) to the
    model's outputs, and one output alone is the model's output as it is.  `layer` is the
    first one."""
    i, a, dt = case.inputs, case.attention, case.inputs.dtype
    query = keras.Input((i.query_len, a.query_features), batch_size=i.batch, dtype=dt,
                        name="query")
    inputs, feeds = [query], [data.inputs.query]
    value = key_ = query
    if not i.self_attention:
        value = keras.Input((i.key_len, a.value_features), batch_size=i.batch, dtype=dt,
                            name="value")
        key_ = keras.Input((i.key_len, a.key_features), batch_size=i.batch, dtype=dt,
                           name="key")
        inputs += [value, key_]
        feeds += [data.inputs.value, data.inputs.key]
    kw = {}
    mask = explicit_mask(data.inputs)
    if mask is not None:
        kw["attention_mask"] = keras.Input((i.query_len, i.key_len), batch_size=i.batch,
                                           dtype="bool", name="attention_mask")
        inputs.append(kw["attention_mask"])
        feeds.append(mask)
    if case.mask.causal != "none":
        kw["use_causal_mask"] = True
    outputs, layers = [], []
    for n, scores in enumerate(calls):
        layers.append(keras.layers.MultiHeadAttention(
            **translation.plan, flash_attention=False, dtype=dt,
            name="mha" if n == 0 else f"mha_{n}"))
        result = layers[-1](query, value, **({} if i.self_attention else {"key": key_}), **kw,
                            return_attention_scores=scores)
        outputs += list(result) if scores else [result]
    model = keras.Model(inputs, outputs if len(outputs) > 1 else outputs[0], name=MODEL_NAME)
    notes = [note for layer in layers for note in load_weights(keras, layer, data.weights, dt)]
    return model, layers[0], feeds, list(dict.fromkeys(notes))


KERAS_EXPORT_FORMAT = 3  # 2: tf2onnx's name counter reset before each export; 3: named model


def keras_onnx_bytes(model, prefix: str = "conformance-keras-onnx-") -> bytes:
    """Keras 3's `model.export(format="onnx")` (tf2onnx) as bytes.  tf2onnx names the
    tensors it makes from one process-wide counter (`Reshape__3113`), so the same model
    got other names after other exports (or none, from the cache): the counter is reset
    first, and a graph's names depend on the model alone."""
    import tempfile

    import tf2onnx.utils

    tf2onnx.utils.INTERNAL_NAME = 1
    with tempfile.TemporaryDirectory(prefix=prefix) as tmp:
        path = os.path.join(tmp, "model.onnx")
        model.export(path, format="onnx", verbose=False)
        with open(path, "rb") as fh:
            return fh.read()
