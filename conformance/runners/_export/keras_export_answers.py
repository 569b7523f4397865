"""What onnx.keras-export and litert.keras answer the ledger (Runner.answer) and report of
their API (their own cells, with no oracle), through the probe graphs of
keras_export_probes.Graphs: Keras's MultiHeadAttention exported (tf2onnx, or converted to
LiteRT) with the requested input or argument, run in the runtime with the value as given.
The exporters trace the model's call without a training argument (keras/src/export/onnx.py,
get_concrete_fn) or with training=False (keras/src/export/litert.py, _convert_to_tflite): a
program has no training input, so a dropout request with the training switch on exports a
model whose layer call says training=True (Keras's own way to a training-mode forward pass in
an export: ExportArchive's `call_training` example, keras/src/export/saved_model.py) and
runs that program (Observation.extras TRAINING_SET_AT): the ledger reads what it holds.  The
ledger's probes (conformance/conventions/probes/) judge.  Keras is imported inside the functions.
"""
from __future__ import annotations

import numpy as np

from conformance.contract.api_facts import ApiFact
from conformance.contract.api_facts import NA
from conformance.contract.runner import NotExpressible, NotExpressibleError, Observation
from conformance.oracle.canonical import case_data
from conformance.runners._export.keras_mha import base_case, mha_translation
from conformance.runners._export.torch_native_calls import unwrapped

NATIVE_CALLS = frozenset({"input_dtype", "unbatched", "dropout_weights"})
ANSWERS = frozenset({"attn_mask", "is_causal", "key_padding", "window",
                     "dropout_training"}) | NATIVE_CALLS


# where the training switch of a dropout answer was set: in the exported model's call,
# since the program takes no training input (RAW_ARGUMENTS "dropout_training")
TRAINING_SET_AT = {"training_set_at": "export"}


def answer(g, case, data, raw) -> tuple[np.ndarray, str]:
    """The graph of `case` with `raw` passed as given, run in the runtime, and the call."""
    name, value = raw.argument, raw.value
    if name in NATIVE_CALLS:
        return native_call(g, case, data, raw)
    what = f"{g.what}: MultiHeadAttention exported"
    if name == "attn_mask":
        value = np.asarray(value)
        kind = "bool" if value.dtype == bool else "float32"
        s = g.session(case, mask=kind)
        return g.run(s, case, data, attention_mask=value.astype(kind)), (
            f"{what} with a {kind} attention_mask input, fed raw")
    if name == "is_causal":
        return g.run(g.session(case, causal=bool(value)), case, data), (
            f"{what} with use_causal_mask={bool(value)}")
    if name == "key_padding":
        s = g.session(case, value_mask=True)
        return g.run(s, case, data, value_mask=np.asarray(value, bool)), (
            f"{what} with a (B, S) bool value_mask input (its key-padding slot), fed raw")
    if name == "window":
        causal = case.mask.causal != "none"
        s = g.session(case, causal=causal, options=(("sliding_window", value),))
        return g.run(s, case, data), (
            f"{g.what}: MultiHeadAttention(sliding_window={value!r}) exported"
            + (" with use_causal_mask=True" if causal else ""))
    if name == "dropout_training":
        rate, training = value["rate"], bool(value["training"])
        s = _loaded(g, case, dropout=rate, call_options=(("training", True),) if training
                    else ())
        called = "called with training=True in the model" if training else \
            "called as users call it (no training argument)"
        return Observation(output=g.run(s, case, data), extras=dict(TRAINING_SET_AT)), (
            f"{g.what}: MultiHeadAttention(dropout={rate}) {called}, exported, the program "
            "run once")
    raise NotImplementedError(f"the exported graph passes no raw {name}")


def _loaded(g, case, **graph):
    """g.session(case, **graph); where the runtime refuses to load the program, its own
    error with its last words kept (onnxruntime names the op it lacks after a long listing
    of the node: "No Op registered for StatelessRandomUniformV2")."""
    try:
        return g.session(case, **graph)
    except NotExpressibleError as exc:
        cause = exc.__cause__
        if cause is None:
            raise
        text = " ".join(str(cause).split())
        raise RuntimeError(f"{g.runtime} refuses to load the program: {type(cause).__name__}: "
                           f"{text[:60]} ... {text[-150:]}") from exc


def native_call(g, case, data, raw) -> tuple[Observation, str]:
    """The probe program fed query, value and key in raw.value's dtype or without the batch
    axis, as they are; or MultiHeadAttention(dropout=rate) called with training=True and
    return_attention_scores=True in the model, exported, run once: its output in the dtype
    the runtime gave, and the scores it returns."""
    t = mha_translation(case)
    if isinstance(t, NotExpressible):
        raise NotImplementedError(f"{g.what} passes no raw {raw.argument} on {case.id}: "
                                  f"{t.reason}")
    x = (data or case_data(case)).inputs
    named = {"query": x.query, "value": x.value, "key": x.key}
    if raw.argument == "dropout_weights":
        rate = float(raw.value["rate"])
        s = unwrapped(lambda: g.session(case, dropout=rate, call_options=(
            ("return_attention_scores", True), ("training", True))))
        out, scores = (np.asarray(a) for a in _outputs(s, {n: np.float32(v) for n, v in
                                                         named.items()})[:2])
        return Observation(output=out.astype(np.float64), native_dtype=str(out.dtype),
                           attention_weights=scores.astype(np.float64),
                           weights_returned="per_head", extras=dict(TRAINING_SET_AT)), (
            f"{g.what}: MultiHeadAttention(dropout={rate}) called with training=True and "
            "return_attention_scores=True in the model, exported, the program run once")
    if raw.argument == "input_dtype":
        feed = {n: np.asarray(v, raw.value) for n, v in named.items()}
        said = f"query, value and key fed as {raw.value} to the {case.inputs.dtype} program"
    else:
        feed = {n: np.float32(v[0]) for n, v in named.items()}
        said = "item 0's query, value and key fed without the batch axis, (T, E) each"
    out = np.asarray(unwrapped(lambda: _outputs(g.session(case), feed))[0])
    return Observation(output=out.astype(np.float64), native_dtype=str(out.dtype)), (
        f"{g.what}: MultiHeadAttention exported, {said}")


def _outputs(session, named: dict) -> list:
    """Every output of one run of `session` on the arrays by input name (in the model's
    order where the exporter renamed them), as the runtime gave them."""
    names = [i.name for i in session.get_inputs()]
    if not set(names) <= set(named):
        return session.run(None, dict(zip(names, named.values())))
    return session.run(None, {n: named[n] for n in names})


def facts(g) -> list[ApiFact]:
    """What the exported layer's API shows: its size arguments and layout (the ledger
    confirms them by asking), its named inputs, and that no Keras mask travels with the
    graph."""
    case = base_case()
    s = g.session(case, mask="bool")
    names = [i.name for i in s.get_inputs()]
    return [
        ApiFact("head_size_from", "per_head", f"{g.what}: the exported layer is "
                f"{mha_translation(case).call}; key_dim=3 is per head (query kernel "
                "(8, 2, 3) in the layer the graph is traced from)"),
        ApiFact("tensor_layout", "batch_first", f"{g.what}: inputs (B, T, E), batch first, "
                "as the keras.Model declares them"),
        ApiFact("inputs_order", NA, f"{g.what}: graph inputs are named, {names}, in the "
                "order the exported keras.Model declares; the layer inside is called "
                "layer(query, value, key=key) (Keras: query_value_key)"),
        ApiFact("mask_on_tensor", "none", f"{g.what}: {g.artifact} inputs are plain "
                f"tensors; no mask travels with a tensor into {g.runtime} (a Keras mask "
                "inside the exported model is traced as ops)")]
