"""The Keras model a user converts for deployment: one keras.layers.MultiHeadAttention loaded
with the canonical weights, wrapped in a functional model whose inputs are the query
(value, key) and the merged (B, T, S) attention_mask (True = attend), use_causal_mask for a
causal case.  The ONNX export (onnx.keras-export) and the LiteRT conversion (litert.keras)
build it here.  keras is passed in (the caller's worker fixed the backend).
"""
from __future__ import annotations

from conformance.runners.keras.common import explicit_mask, load_weights


def functional_model(keras, case, translation, data, calls: tuple[bool, ...]):
    """(model, layer, feeds, load notes): the layer called once per flag of `calls`
    (return_attention_scores); each call adds its output (and its scores) to the model's
    outputs; one output alone is the model's output as it is."""
    i, a, dt = case.inputs, case.attention, case.inputs.dtype
    layer = keras.layers.MultiHeadAttention(**translation.plan, flash_attention=False,
                                            dtype=dt, name="mha")
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
    outputs = []
    for scores in calls:
        result = layer(query, value, **({} if i.self_attention else {"key": key_}), **kw,
                       return_attention_scores=scores)
        outputs += list(result) if scores else [result]
    model = keras.Model(inputs, outputs if len(outputs) > 1 else outputs[0])
    notes = load_weights(keras, layer, data.weights, dt)
    return model, layer, feeds, notes
