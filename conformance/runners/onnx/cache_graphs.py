"""The decode graphs of the ONNX `Attention` cache runners (attention_cache.py): one graph
per run (the prefill, then each single-position step), built with onnx.helper from the
canonical weights as a user writing a decoder's attention layer by hand would.

- `past` (opset 23, https://onnx.ai/onnx/operators/onnx__Attention.html, KV cache use case
  1, "cache update happens inside the Attention operator"): 3-D Q, K, V of the new
  positions, `past_key`/`past_value` (B, H_kv, P, d) in, `present_key`/`present_value`
  (B, H_kv, P + T, d) out, `is_causal=1` (offset = past_sequence_length); the prefill's
  past has length 0.
- `static` (opset 24, use case 2, "cache update happens outside the Attention operator
  (for example, through the TensorScatter operator)"): a preallocated (B, H_kv, P + N, d)
  cache per tensor, the new keys/values written at `write_indices` by `TensorScatter`
  (axis 2), then `Attention` on the whole buffers (4-D Q, K, V: onnxruntime 1.32 refuses
  3-D Q with 4-D K) with `nonpad_kv_seqlen` = positions written so far and `is_causal=1`,
  whose offset is nonpad_kv_seqlen - q_sequence_length (the onnx/onnx#8068 errata).

QK-norm and RotaryEmbedding nodes (graph_parts.positional_qk) sit before the node at the
step's absolute positions.  numpy at import; onnx inside the functions.
"""
from __future__ import annotations

from dataclasses import replace

import numpy as np

from conformance.runners._export.onnx_runtime import numpy_dtype
from conformance.runners.onnx.graph_parts import ELEM, Graph, graph_inputs, in_out, positional_qk

ATTENTION_DOC = "https://onnx.ai/onnx/operators/onnx__Attention.html"
ERRATA = "https://github.com/onnx/onnx/pull/8068"


def spans(case) -> list[tuple[int, int]]:
    """(start, end) of the prefill and of each single-position step."""
    p = case.decode.prefill
    return [(0, p)] + [(t, t + 1) for t in range(p, case.inputs.query_len)]


def step_case(case, start: int, end: int):
    """The case seen by one run: positions start..end-1, causal self-attention."""
    i = case.inputs
    return replace(case, inputs=replace(i, query_len=end - start, key_len=end - start,
                                        position_offset=start, key_position_offset=start),
                   decode=None)


def _heads4(g: Graph, x: str, heads: int, d: int, tag: str) -> str:
    """(B, L, heads*d) -> (B, heads, L, d)"""
    g.node("Reshape", [x, g.const(f"{tag}_4d_shape", [0, 0, heads, d])], [f"{tag}_bshd"])
    g.node("Transpose", [f"{tag}_bshd"], [f"{tag}_4d"], perm=[0, 2, 1, 3])
    return f"{tag}_4d"


def _static_attention(g: Graph, case, q: str, k: str, v: str, attrs: dict) -> list:
    """TensorScatter into the caches, Attention on the whole buffers, heads back to 3-D;
    returns the extra graph inputs."""
    from onnx import TensorProto, helper

    a, b, elem = case.attention, case.inputs.batch, ELEM[case.inputs.dtype]
    h, hkv, dk, dv = a.num_heads, a.num_kv_heads, a.qk_head_dim, a.v_head_dim
    for tag, x, d in (("key", k, dk), ("value", v, dv)):
        g.node("TensorScatter", [f"{tag}_cache", _heads4(g, x, hkv, d, tag[0]),
                                 "write_indices"], [f"present_{tag}"], axis=2)
    g.node("Attention", [_heads4(g, q, h, dk, "q"), "present_key", "present_value", "", "", "",
                         "nonpad_kv_seqlen"], ["heads4"], **attrs)
    g.node("Transpose", ["heads4"], ["heads_bshd"], perm=[0, 2, 1, 3])
    g.node("Reshape", ["heads_bshd", g.const("heads_shape", [0, 0, h * dv])], ["heads"])
    return [helper.make_tensor_value_info(f"{t}_cache", elem, [b, hkv, "S", d])
            for t, d in (("key", dk), ("value", dv))] + [
        helper.make_tensor_value_info(n, TensorProto.INT64, [b])
        for n in ("write_indices", "nonpad_kv_seqlen")]


def step_model(case, data, start: int, end: int, cache: str):
    """(ModelProto, feed) of one run over positions start..end-1; the feed holds the
    query slice, the caller adds the cache tensors (and lengths)."""
    from onnx import helper

    a, w, sub = case.attention, data.weights, step_case(case, start, end)
    elem, b = ELEM[case.inputs.dtype], case.inputs.batch
    g = Graph(case.inputs.dtype)
    inputs, feed = graph_inputs(sub, data, elem)
    feed["query"] = np.ascontiguousarray(data.inputs.query[:, start:end]).astype(
        numpy_dtype(case.inputs.dtype))
    q = g.project("query", "q", in_out(w.wq), w.bq)
    k = g.project("query", "k", in_out(w.wk), w.bk)
    v = g.project("query", "v", in_out(w.wv), w.bv)
    q, k = positional_qk(g, sub, w, q, k)
    attrs = {"is_causal": 1, **({"scale": float(a.scale)} if a.scale is not None else {})}
    if cache == "static":
        inputs += _static_attention(g, case, q, k, v, attrs)
    else:
        inputs += [helper.make_tensor_value_info(f"past_{t}", elem, [b, a.num_kv_heads, "P", d])
                   for t, d in (("key", a.qk_head_dim), ("value", a.v_head_dim))]
        g.node("Attention", [q, k, v, "", "past_key", "past_value"],
               ["heads", "present_key", "present_value"], q_num_heads=a.num_heads,
               kv_num_heads=a.num_kv_heads, **attrs)
    g.project("heads", "o", w.wo.reshape(-1, a.output_features), w.bo, "output")
    outputs = [helper.make_tensor_value_info(n, elem, None)
               for n in ("output", "present_key", "present_value")]
    graph = helper.make_graph(g.nodes, f"attention_{cache}_cache", inputs, outputs, g.inits)
    opset = 24 if cache == "static" else 23
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)],
                             producer_name="attention-conformance"), feed


def empty_caches(case, cache: str) -> dict[str, np.ndarray]:
    """The caches before the prefill: length 0 (past) or preallocated zeros (static)."""
    a, i = case.attention, case.inputs
    n = 0 if cache == "past" else i.query_len
    npdt, prefix = numpy_dtype(i.dtype), "past_" if cache == "past" else ""
    return {f"{prefix}key" + ("" if cache == "past" else "_cache"):
            np.zeros((i.batch, a.num_kv_heads, n, a.qk_head_dim), npdt),
            f"{prefix}value" + ("" if cache == "past" else "_cache"):
            np.zeros((i.batch, a.num_kv_heads, n, a.v_head_dim), npdt)}


def decode(case, data, cache: str, evaluate) -> tuple[np.ndarray, list, object]:
    """Run the prefill and every step, feeding present_* back: (output (B, T, E), the
    present_key shape after each run, the prefill's model).  `evaluate(model, feed,
    names)` runs a graph in the runner's engine."""
    caches, outs, shapes, first = empty_caches(case, cache), [], [], None
    b = case.inputs.batch
    for start, end in spans(case):
        model, feed = step_model(case, data, start, end, cache)
        first = model if first is None else first
        if cache == "static":
            feed.update(write_indices=np.full(b, start, np.int64),
                        nonpad_kv_seqlen=np.full(b, end, np.int64))
        out, pk, pv = evaluate(model, {**feed, **caches},
                               ["output", "present_key", "present_value"])
        names = list(caches)
        caches = {names[0]: pk, names[1]: pv}
        outs.append(np.asarray(out))
        shapes.append(tuple(np.shape(pk)))
    return np.concatenate(outs, axis=1), shapes, first
