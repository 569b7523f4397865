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

from conformance.contract.axes import NA, REFUSED
from conformance.contract.runner import Convention, NotExpressibleError, Observation
from conformance.oracle.canonical import case_data
from conformance.runners._export.keras_mha import ANSI, base_case, mha_translation

ANSWERS = frozenset({"attn_mask", "is_causal", "key_padding", "window", "dropout_training"})


# where the training switch of a dropout answer was set: in the exported model's call,
# since the program takes no training input (RAW_ARGUMENTS "dropout_training")
TRAINING_SET_AT = {"training_set_at": "export"}


def answer(g, case, data, raw) -> tuple[np.ndarray, str]:
    """The graph of `case` with `raw` passed as given, run in the runtime, and the call."""
    name, value = raw.argument, raw.value
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


def _error(exc: BaseException) -> str:
    return ANSI.sub("", " ".join(f"{type(exc).__name__}: {exc}".split()))[:300]


def _tried(axis: str, fn, what: str) -> Convention:
    try:
        out = fn()
    except Exception as exc:  # the runtime's refusal is the observation
        return Convention(axis, REFUSED, f"{what}: {_error(exc)}")
    return Convention(axis, "accepted" if axis == "unbatched_input" else "promoted",
                      f"{what}: ran, output {np.shape(out)}")


def facts(g) -> list[Convention]:
    """The API facts of the exported layer: its size arguments and layout (the ledger
    confirms them by asking), its named inputs, what a 2-D and a float64 input give, that
    no dropout and no Keras mask travel with the graph."""
    case = base_case()
    s = g.session(case, mask="bool")
    x, m = case_data(case).inputs, np.ones((2, 3, 5), bool)
    names = [i.name for i in s.get_inputs()]
    return [
        Convention("size_arguments", "per_head", f"{g.what}: the exported layer is "
                   f"{mha_translation(case).call}; key_dim=3 is per head (query kernel "
                   "(8, 2, 3) in the layer the graph is traced from)"),
        Convention("input_layout", "batch_first", f"{g.what}: inputs (B, T, E), batch first, "
                   "as the keras.Model declares them"),
        Convention("weights_dropout", NA, f"{g.what}: the exported graphs are inference "
                   "graphs with no training input, so the weights the scores graph returns "
                   "carry no dropout"),
        Convention("argument_order", NA, f"{g.what}: graph inputs are named, {names}, in the "
                   "order the exported keras.Model declares; the layer inside is called "
                   "layer(query, value, key=key) (Keras: query_value_key)"),
        Convention("implicit_mask", "none", f"{g.what}: {g.artifact} inputs are plain tensors; "
                   f"no mask travels with a tensor into {g.runtime} (a Keras mask inside the "
                   "exported model is traced as ops)"),
        _tried("unbatched_input", lambda: s.run(None, {
            "query": np.float32(x.query[0]), "value": np.float32(x.value[0]),
            "key": np.float32(x.key[0]), "attention_mask": m[0]}),
            f"2-D (T, E) inputs fed to the {g.what} (exported with batch 2)"),
        _tried("mixed_dtype", lambda: s.run(None, {"query": x.query, "value": x.value,
                                                   "key": x.key, "attention_mask": m}),
               f"float64 inputs fed to the float32 {g.what}")]
