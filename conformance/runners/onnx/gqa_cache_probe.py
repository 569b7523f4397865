"""onnxruntime's GroupQueryAttention cache: a prefill of 3 positions (causal=1, no past),
then one position with the prefill's present_key/present_value as past_key/past_value
(seqlens_k = total - 1, total_sequence_length = total), on projected tensors (the node
alone; the canonical projections and the output projection in NumPy around it).  Which
keys the step attends names cache_causal_alignment; the present tensors' shapes name
cache_layout.
"""
from __future__ import annotations

import numpy as np

from conformance.contract import cache_probes as cp
from conformance.contract.runner import Convention

DOC = {"documented_source": "https://github.com/microsoft/onnxruntime/blob/main/docs/"
                            "ContribOperators.md#com.microsoft.GroupQueryAttention"}


def _model(b: int, t: int, h: int, d: int, past: int):
    from onnx import TensorProto, helper

    f = TensorProto.FLOAT
    names = ["query", "key", "value", "past_key", "past_value"]
    shapes = [[b, t, h * d]] * 3 + [[b, h, past, d]] * 2
    inputs = [helper.make_tensor_value_info(n, f, s) for n, s in zip(names, shapes)]
    inputs += [helper.make_tensor_value_info("seqlens_k", TensorProto.INT32, [b]),
               helper.make_tensor_value_info("total_sequence_length", TensorProto.INT32, [])]
    node = helper.make_node("GroupQueryAttention", names + ["seqlens_k",
                                                           "total_sequence_length"],
                            ["out", "present_key", "present_value"], domain="com.microsoft",
                            num_heads=h, kv_num_heads=h, causal=1)
    outputs = [helper.make_tensor_value_info(n, f, None)
               for n in ("out", "present_key", "present_value")]
    graph = helper.make_graph([node], "gqa_cache", inputs, outputs)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21),
                                                   helper.make_opsetid("com.microsoft", 1)])


def _steps(case):
    """(outputs of every position after the output projection, present shapes)."""
    from conformance.oracle.canonical import case_data
    from conformance.oracle.reference import project
    from conformance.runners._export.onnx_runtime import ort_session

    data = case_data(case)
    w, x = data.weights, data.inputs.query
    b, n = x.shape[0], x.shape[1]
    h, d = case.attention.num_heads, case.attention.qk_head_dim

    def flat(a):  # (B, H, L, d) -> (B, L, H*d) float32
        return np.ascontiguousarray(a.transpose(0, 2, 1, 3).reshape(b, a.shape[2], h * d),
                                    np.float32)

    q, k, v = (flat(project(x, wt, bt)) for wt, bt in ((w.wq, w.bq), (w.wk, w.bk),
                                                        (w.wv, w.bv)))
    past_k = past_v = np.zeros((b, h, 0, d), np.float32)
    outs, shapes = [], []
    for lo, hi in ((0, cp.PREFILL), (cp.PREFILL, n)):
        model = _model(b, hi - lo, h, d, past_k.shape[2])
        session = ort_session(model.SerializeToString(), "GroupQueryAttention cache probe")
        out, past_k, past_v = session.run(None, {
            "query": q[:, lo:hi], "key": k[:, lo:hi], "value": v[:, lo:hi],
            "past_key": past_k, "past_value": past_v,
            "seqlens_k": np.full(b, hi - 1, np.int32),
            "total_sequence_length": np.array(hi, np.int32)})
        y = out.astype(np.float64) @ w.wo.reshape(h * d, -1)
        outs.append(y if w.bo is None else y + w.bo)
        shapes.append(tuple(past_k.shape))
    return outs, shapes


def cache_cells() -> list[Convention]:
    case = cp.decode_case(num_heads=2, query_features=16)
    outs, shapes = _steps(case)
    what = ("com.microsoft.GroupQueryAttention(causal=1): a prefill of 3, then one position "
            "with present_* fed back as past_*")
    align = cp.cache_alignment(case, outs[-1], what, outs[0], **DOC)
    layout = Convention("cache_layout", cp.layout_words(
        case, shapes, "two tensors (present_key, present_value)"),
        f"{what}: present_key {shapes[0]} after the prefill, {shapes[1]} after the step", **DOC)
    return [align, layout]
