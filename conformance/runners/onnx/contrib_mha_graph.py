"""The graph of onnx.contrib-mha.ort (com.microsoft.MultiHeadAttention between MatMul+Add
projections) and the op's schema names, shared by its runner (contrib_mha.py) and its
native calls for the ledger's probes (contrib_mha_calls.py).  onnx inside the functions.
"""
from __future__ import annotations

import numpy as np

from conformance.runners._export.onnx_runtime import numpy_dtype
from conformance.runners.onnx.graph_parts import ELEM, Graph, graph_inputs, in_out

FILL = -10000.0  # MultiHeadAttention's mask_filter_value default
OP_NAME = "com.microsoft.MultiHeadAttention"
CONTRIB_DOC = ("https://github.com/microsoft/onnxruntime/blob/main/docs/ContribOperators.md"
               "#com.microsoft.MultiHeadAttention")
PROBE, DECODE = "ledger probe", "decode"  # the plans probe_translate gives
# The op's attributes and inputs, as onnxruntime's operator documentation
# (ContribOperators.md, com.microsoft.MultiHeadAttention) lists them: the names the
# ledger's feature axes look for.
CONTRIB_MHA_NAMES = ["num_heads", "mask_filter_value", "scale", "unidirectional", "query", "key",
                     "value", "bias", "key_padding_mask", "attention_bias", "past_key",
                     "past_value", "past_sequence_length", "cache_indirection"]


def split_masks(allowed: np.ndarray | None):
    """(key_padding (B, S) int32 or None, attention_bias (B, 1, T, S) or None)."""
    if allowed is None:
        return None, None
    valid = allowed.any(axis=1)  # a key no query of the item may attend is padding
    rest = allowed | ~valid[:, None, :]
    kpm = None if valid.all() else valid.astype(np.int32)
    bias = None if rest.all() else np.where(rest, 0.0, FILL)[:, None]
    return kpm, bias


def build_model(case, data, unidirectional: int = 0):
    """The graph and its feed; `unidirectional=1` sets the op's causal attribute (the
    convention probe), `attention.scale` its `scale` attribute; no bias, no Add node."""
    from onnx import helper

    a, i, w = case.attention, case.inputs, data.weights
    elem, b, t, s = ELEM[i.dtype], i.batch, i.query_len, i.key_len
    g = Graph(i.dtype)
    inputs, feed = graph_inputs(case, data, elem)
    xk, xv = ("query", "query") if i.self_attention else ("key", "value")
    args = [g.project("query", "q", in_out(w.wq), w.bq), g.project(xk, "k", in_out(w.wk), w.bk),
            g.project(xv, "v", in_out(w.wv), w.bv), ""]
    kpm, bias = split_masks(data.inputs.allowed)
    args.append("key_padding_mask" if kpm is not None else "")
    args.append("attention_bias" if bias is not None else "")
    if kpm is not None:
        feed["key_padding_mask"] = kpm
        inputs.append(helper.make_tensor_value_info("key_padding_mask", 6, [b, s]))
    if bias is not None:
        feed["attention_bias"] = bias.astype(numpy_dtype(i.dtype))
        inputs.append(helper.make_tensor_value_info("attention_bias", elem, [b, 1, t, s]))
    while args[-1] == "":
        args.pop()
    attrs = {"unidirectional": unidirectional} if unidirectional else {}
    if a.scale is not None:
        attrs["scale"] = float(a.scale)
    g.node("MultiHeadAttention", args, ["heads"], domain="com.microsoft",
           num_heads=a.num_heads, **attrs)
    g.project("heads", "o", w.wo.reshape(-1, a.output_features), w.bo, "output")
    return g.contrib_model("contrib_mha", inputs, [helper.make_tensor_value_info(
        "output", elem, [b, t, a.output_features])], 17), feed
