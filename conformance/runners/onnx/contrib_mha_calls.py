"""The native calls of onnx.contrib-mha.ort beyond its matrix graph, for the ledger's probes
(conformance/conventions/probes/): a decode through the op's own past_key/past_value ->
present_key/present_value (cache.py reads the output and the present tensors' shapes), the
graph with one argument passed raw (Runner.answer: a (B, T, S) mask, the `unidirectional`
attribute), and what only the op's schema and onnxruntime show (observations with no
oracle: the schema's attributes and inputs as ApiFacts, contract/api_facts.py).
onnx / onnxruntime are imported inside the functions.
"""
from __future__ import annotations

from dataclasses import replace

import numpy as np

from conformance.case.loader import parse_case
from conformance.contract.api_facts import NA
from conformance.contract.api_facts import ApiFact
from conformance.contract.runner import Observation, RawCall, to_numpy
from conformance.oracle.canonical import case_data
from conformance.runners._export.onnx_runtime import numpy_dtype, ort_session
from conformance.runners.onnx.common import built_parameters
from conformance.runners.onnx import contrib_mha_graph as graph
from conformance.runners.onnx.graph_parts import ELEM, Graph, in_out
from conformance.runners.onnx.native_calls import NATIVE_CALLS, native_call

DOC = ("https://github.com/microsoft/onnxruntime/blob/main/docs/ContribOperators.md"
       "#com.microsoft.MultiHeadAttention")
OP = "com.microsoft.MultiHeadAttention"
CACHE_TENSORS = "two tensors (past_key, past_value in; present_key, present_value out)"


def decode_model(case, data, past: bool):
    """The runner's graph for a causal self-attention decode: projections, one
    MultiHeadAttention node with unidirectional=1 (past_key/past_value (B, H, P, d) in where
    `past`), present_key/present_value out beside the projected output."""
    from onnx import helper

    a, i, w = case.attention, case.inputs, data.weights
    elem, b = ELEM[i.dtype], i.batch
    g = Graph(i.dtype)
    inputs = [helper.make_tensor_value_info("query", elem, [b, "L", a.query_features])]
    args = [g.project("query", t, in_out(wt), bt)
            for t, wt, bt in (("q", w.wq, w.bq), ("k", w.wk, w.bk), ("v", w.wv, w.bv))]
    if past:  # bias, key_padding_mask, attention_bias empty
        args += ["", "", "", "past_key", "past_value"]
        inputs += [helper.make_tensor_value_info(n, elem, [b, a.num_heads, "P", d])
                   for n, d in (("past_key", a.qk_head_dim), ("past_value", a.v_head_dim))]
    attrs = {"scale": float(a.scale)} if a.scale is not None else {}
    g.node("MultiHeadAttention", args, ["heads", "present_key", "present_value"],
           domain="com.microsoft", num_heads=a.num_heads, unidirectional=1, **attrs)
    g.project("heads", "o", w.wo.reshape(-1, a.output_features), w.bo, "output")
    outputs = [helper.make_tensor_value_info("output", elem, [b, "L", a.output_features]),
               *(helper.make_tensor_value_info(n, elem, None)
                 for n in ("present_key", "present_value"))]
    return g.contrib_model("contrib_mha_decode", inputs, outputs, 17)


def decode_observation(case, data) -> Observation:
    """The prefill (no past), then one position per step with the last run's present_key /
    present_value fed back as past_key / past_value: every position's output, and the
    present key's shape after each run (extras cache_shapes, cache_tensors)."""
    x = data.inputs.query.astype(numpy_dtype(case.inputs.dtype))
    p, names = case.decode.prefill, ["output", "present_key", "present_value"]
    what = f"{OP} decode graph in {case.inputs.dtype}"
    first = ort_session(decode_model(case, data, False).SerializeToString(), what)
    model = decode_model(case, data, True)
    step = ort_session(model.SerializeToString(), what)
    out, k, v = first.run(names, {"query": x[:, :p]})
    outs, shapes = [out], [tuple(k.shape)]
    for t in range(p, p + case.decode.steps):
        out, k, v = step.run(names, {"query": x[:, t:t + 1], "past_key": k, "past_value": v})
        outs.append(out)
        shapes.append(tuple(k.shape))
    return Observation(
        output=to_numpy(np.concatenate(outs, axis=1)), parameters=built_parameters(model),
        weight_shapes={t.name: tuple(t.dims) for t in model.graph.initializer},
        notes=["unidirectional=1 at the prefill and at every step (a node attribute)"],
        extras={"cache_shapes": shapes, "cache_tensors": CACHE_TENSORS,
                "cache_note": f"present_key after each run: {shapes}"})


def _bool_mask_words() -> str:
    """onnxruntime's answer to a bool key_padding_mask (its type M is int32)."""
    case = raw_case()
    model = _masked_model(case, "key_padding_mask", 9)
    try:
        ort_session(model.SerializeToString(), f"{OP} probe graph")
    except Exception as exc:  # onnxruntime's type check (M: int32)
        return f"a bool key_padding_mask refused: {' '.join(str(exc).split(' : ')[-1].split())}"
    return "a bool key_padding_mask loads"


def _masked_model(case, name: str, elem: int):
    """The matrix graph of `case` without masks, with a raw (B, T, S) `key_padding_mask`
    (the op takes "(batch_size, sequence_length, total_sequence_length)") or a
    (B, 1, T, S) `attention_bias` input of type `elem`."""
    from onnx import helper

    data = case_data(case)
    model, _ = graph.build_model(case, replace(data, inputs=replace(data.inputs, allowed=None)))
    node = next(n for n in model.graph.node if n.op_type == "MultiHeadAttention")
    del node.input[3:]
    i = case.inputs
    if name == "key_padding_mask":
        node.input.extend(["", name])
        shape = [i.batch, i.query_len, i.key_len]
    else:
        node.input.extend(["", "", name])
        shape = [i.batch, 1, i.query_len, i.key_len]
    model.graph.input.append(helper.make_tensor_value_info(name, elem, shape))
    return model


def raw_output(case, data, argument: str, value) -> tuple[np.ndarray | Observation, str]:
    """Runner.answer: the graph with `attn_mask` fed raw (a bool (B, T, S) array as the
    int32 key_padding_mask, 1 = its True; a float one as attention_bias (B, 1, T, S)) or
    `is_causal` as the unidirectional attribute, no mask; the native calls (native_calls.py)
    on the graph with no mask."""
    feed_data = replace(data, inputs=replace(data.inputs, allowed=None))
    if argument in NATIVE_CALLS:
        model, feed = graph.build_model(case, feed_data)
        return native_call(model, feed, RawCall(argument, value), f"onnxruntime {OP}")
    if argument == "is_causal":
        model, feed = graph.build_model(case, feed_data, int(bool(value)))
        call = f"{OP}(unidirectional={int(bool(value))}), no mask"
    else:
        value = np.asarray(value)
        _, feed = graph.build_model(case, feed_data)
        if value.dtype == np.bool_:
            model = _masked_model(case, "key_padding_mask", 6)
            feed["key_padding_mask"] = value.astype(np.int32)
            call = (f"{OP}: key_padding_mask (B, T, S) int32, the array's True as 1 "
                    f"({_bool_mask_words()})")
        else:
            model = _masked_model(case, "attention_bias", ELEM[case.inputs.dtype])
            feed["attention_bias"] = value[:, None].astype(numpy_dtype(case.inputs.dtype))
            call = f"{OP}: attention_bias (B, 1, T, S), the float array as given"
    session = ort_session(model.SerializeToString(), f"{OP} probe graph")
    return np.asarray(session.run(["output"], feed)[0], np.float64), call


def raw_case():
    return parse_case({"id": "probe-contrib-mask3d", "attention": {
        "num_heads": 2, "query_features": 8}, "inputs": {
        "batch": 2, "query_len": 3, "key_len": 5, "seed": 7}}, "<probe>")


def facts(runner, names: list[str]) -> list[ApiFact]:
    """What the op's schema (`names`: its attributes and inputs) states, as ApiFacts: no
    dropout and no returned weights, the projected tensors it takes and their layout, its
    key_padding_mask (the ledger's padding probe confirms the polarity the runner feeds it
    in by asking; a 2-D query and float64 inputs are native calls: native_calls.py)."""
    schema = f"{OP} (attributes and inputs: {', '.join(names)})"
    return [
        ApiFact("weights_under_dropout", NA, f"{schema}: returns no weights"),
        ApiFact("dropout_argument", NA, f"{schema}: an inference op: no dropout"),
        ApiFact("head_size_from", "given_tensors", f"{schema}: Q/K/V are projected tensors "
                "(B, L, H*d) with num_heads; the op splits heads"),
        ApiFact("inputs_order", "query_key_value", f"{schema}: inputs query, key, value"),
        ApiFact("tensor_layout", "batch_first", f"{schema}: query (batch_size, "
                "sequence_length, hidden_size)"),
        ApiFact("mask_on_tensor", "none", "an ONNX tensor carries no mask"),
        ApiFact("padding_argument", "true_attends", f"{schema}: key_padding_mask (B, S) of "
                "type M (int32), its description stating no polarity; the runner feeds the "
                "case's attended keys as 1")]
