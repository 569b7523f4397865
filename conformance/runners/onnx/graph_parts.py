"""Pieces of hand-built ONNX graphs that the graph runners share (the `Attention` op graph,
onnxruntime's contrib GroupQueryAttention graph): the node/initializer builder, and the
standard operators a user puts between the projections and attention (rotary embeddings, QK-norm).

- Rotary embeddings: `RotaryEmbedding` (opset 23; https://onnx.ai/onnx/operators/
  onnx__RotaryEmbedding.html) on the 3-D projection (B, L, heads*d) with `num_heads`,
  `interleaved` (0: "splitting the embedding vector into two halves", 1: "interleaving
  every alternate token") and `rotary_embedding_dim` (partial rotary), cos/sin caches of
  shape (max position + 1, rotary_dim / 2) gathered by `position_ids` (B, L): the absolute
  positions of the case (inputs.position_offset + t; keys from key_position_offset).
- QK-norm: `RMSNormalization` / `LayerNormalization` (opset 23) over the last axis, on the
  projection reshaped to (B, L, heads, d) for `per_head`, or on (B, L, heads*d) as it is for
  `all_heads` (the canonical scales, (d,) or (heads, d) flattened head-major).

- lone_node_verdict: whether onnxruntime loads the `Attention` node of a graph alone (a
  refused graph's message says whether the kernel itself lacks the dtype).

numpy at import; onnx inside the functions.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from conformance.runners._export.onnx_runtime import numpy_dtype

ROPE_DOC = "https://onnx.ai/onnx/operators/onnx__RotaryEmbedding.html"
ROPE_BUFFERS = ("_cos", "_sin")  # initializer names of the caches: constants, not parameters
ELEM = {"float32": 1, "float16": 10, "float64": 11, "bfloat16": 16}  # TensorProto codes


@dataclass
class Graph:
    """Nodes and initializers of the graph being built, in the case dtype."""

    dtype: str
    inits: list = field(default_factory=list)
    nodes: list = field(default_factory=list)
    inputs: list = field(default_factory=list)  # value infos, where a builder keeps them here

    def node(self, op: str, inputs, outputs, **attrs) -> None:
        from onnx import helper

        self.nodes.append(helper.make_node(op, inputs, outputs, **attrs))

    def init(self, name: str, array) -> str:
        from onnx import numpy_helper

        self.inits.append(numpy_helper.from_array(
            np.ascontiguousarray(array).astype(numpy_dtype(self.dtype)), name))
        return name

    def const(self, name: str, values) -> str:
        from onnx import numpy_helper

        self.inits.append(numpy_helper.from_array(np.array(values, dtype=np.int64), name))
        return name

    def project(self, x: str, tag: str, weight, bias, out: str | None = None) -> str:
        """x (B, L, E) @ (E, heads*d) [+ bias], named `out` (default `<tag>_proj`)."""
        out = out or f"{tag}_proj"
        y = f"{tag}_matmul" if bias is not None else out
        self.node("MatMul", [x, self.init(f"W_{tag}", weight)], [y])
        if bias is None:
            return y
        self.node("Add", [y, self.init(f"b_{tag}", bias.ravel())], [out])
        return out

    def contrib_model(self, name: str, inputs, outputs, opset: int):
        """The ModelProto of this graph with the ONNX domain at `opset` and
        com.microsoft 1 (onnxruntime's contrib operators)."""
        from onnx import helper

        graph = helper.make_graph(self.nodes, name, inputs, outputs, self.inits)
        return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset),
                                                       helper.make_opsetid("com.microsoft", 1)])


def graph_inputs(case, data, elem: int):
    """The value infos and the feed of the query (key, value) graph inputs."""
    from onnx import helper

    a, i, npdt = case.attention, case.inputs, numpy_dtype(case.inputs.dtype)
    b, t, s = i.batch, i.query_len, i.key_len
    inputs = [helper.make_tensor_value_info("query", elem, [b, t, a.query_features])]
    feed = {"query": data.inputs.query.astype(npdt)}
    if not i.self_attention:
        inputs += [helper.make_tensor_value_info("key", elem, [b, s, a.key_features]),
                   helper.make_tensor_value_info("value", elem, [b, s, a.value_features])]
        feed.update(key=data.inputs.key.astype(npdt), value=data.inputs.value.astype(npdt))
    return inputs, feed


def float_attributes(**values) -> dict[str, float]:
    """The node attributes among `values` that are set (not None), as floats."""
    return {k: float(v) for k, v in values.items() if v is not None}


def in_out(w3) -> np.ndarray:
    """canonical (heads, E, d) -> (E, heads*d), head-major columns."""
    return w3.transpose(1, 0, 2).reshape(w3.shape[1], -1)


def rope_caches(positions: np.ndarray, rotary_dim: int, base: float):
    """cos, sin (max position + 1, rotary_dim / 2), in float64 (the graph rounds them)."""
    from conformance.oracle.positional import rope_angles

    theta = rope_angles(np.arange(int(np.max(positions)) + 1), rotary_dim, base)
    return np.cos(theta), np.sin(theta)


def rope_node(g: Graph, case, x: str, tag: str, heads: int, positions: np.ndarray) -> str:
    """RotaryEmbedding on the 3-D projection `x` of `heads` heads at `positions` (L,)."""
    r, b = case.attention.rope, case.inputs.batch
    cos, sin = rope_caches(positions, r.rotary_dim, r.base)
    pos = np.broadcast_to(np.asarray(positions, np.int64), (b, len(positions)))
    g.inits.append(_int64(pos, f"{tag}_position_ids"))
    g.node("RotaryEmbedding", [x, g.init(f"{tag}_cos", cos), g.init(f"{tag}_sin", sin),
                               f"{tag}_position_ids"], [f"{tag}_rope"], num_heads=heads,
           interleaved=int(r.style == "interleaved"), rotary_embedding_dim=r.rotary_dim)
    return f"{tag}_rope"


def _int64(array, name: str):
    from onnx import numpy_helper

    return numpy_helper.from_array(np.ascontiguousarray(array, dtype=np.int64), name)


def norm_node(g: Graph, case, x: str, tag: str, heads: int, scale, bias) -> str:
    """QK-norm of the 3-D projection `x` (B, L, heads*d): per head through a (B, L, heads, d)
    reshape, over all heads as it is."""
    n, d = case.attention.qk_norm, case.attention.qk_head_dim
    op = "RMSNormalization" if n.kind == "rms" else "LayerNormalization"
    args = [g.init(f"{tag}_norm_scale", np.ravel(scale))]
    if bias is not None:
        args.append(g.init(f"{tag}_norm_bias", np.ravel(bias)))
    if n.scope == "all_heads":
        g.node(op, [x, *args], [f"{tag}_normed"], axis=-1, epsilon=n.eps)
        return f"{tag}_normed"
    g.node("Reshape", [x, g.const(f"{tag}_heads_shape", [0, 0, heads, d])], [f"{tag}_4d"])
    g.node(op, [f"{tag}_4d", *args], [f"{tag}_normed4"], axis=-1, epsilon=n.eps)
    g.node("Reshape", [f"{tag}_normed4", g.const(f"{tag}_flat_shape", [0, 0, heads * d])],
           [f"{tag}_normed"])
    return f"{tag}_normed"


def positional_qk(g: Graph, case, weights, q: str, k: str) -> tuple[str, str]:
    """QK-norm then RoPE (the oracle's order) on the 3-D projections q and k."""
    from conformance.oracle.canonical import positions

    a = case.attention
    if a.qk_norm is not None:
        q = norm_node(g, case, q, "q", a.num_heads, weights.q_norm, weights.q_norm_bias)
        k = norm_node(g, case, k, "k", a.num_kv_heads, weights.k_norm, weights.k_norm_bias)
    if a.rope is not None:
        qpos, kpos = positions(case)
        q = rope_node(g, case, q, "q", a.num_heads, qpos)
        k = rope_node(g, case, k, "k", a.num_kv_heads, kpos)
    return q, k


def rope_words(case) -> str:
    """The RotaryEmbedding/normalisation nodes as a call shows them ('' without them)."""
    a, parts = case.attention, []
    if a.qk_norm is not None:
        op = "RMSNormalization" if a.qk_norm.kind == "rms" else "LayerNormalization"
        where = "per head" if a.qk_norm.scope == "per_head" else "over heads*d"
        parts.append(f"{op}(axis=-1, {where})")
    if a.rope is not None:
        r = a.rope
        parts.append(f"RotaryEmbedding(interleaved={int(r.style == 'interleaved')}, "
                     f"rotary_embedding_dim={r.rotary_dim}, position_ids)")
    return " -> ".join(parts)


def lone_node_verdict(model, opset: int) -> str:
    """Load a graph of the Attention node alone in ORT: 'loads' or ORT's error."""
    from onnx import helper

    from conformance.contract.runner import NotExpressibleError
    from conformance.runners._export.onnx_runtime import ort_session

    node = next(n for n in model.graph.node if n.op_type == "Attention")
    elem = model.graph.input[0].type.tensor_type.elem_type
    names = [n for n in node.input[:3]]
    graph = helper.make_graph(
        [helper.make_node("Attention", names, ["y"], **{a.name: helper.get_attribute_value(a)
                                                         for a in node.attribute
                                                         if a.name != "qk_matmul_output_mode"})],
        "lone_attention", [helper.make_tensor_value_info(n, elem, None) for n in names],
        [helper.make_tensor_value_info("y", elem, None)])
    try:
        ort_session(helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
                    .SerializeToString(), "lone Attention node", exported=False)
    except NotExpressibleError as exc:
        return str(exc).split(": ", 1)[-1]
    return "loads (the missing kernel is elsewhere in the graph)"
