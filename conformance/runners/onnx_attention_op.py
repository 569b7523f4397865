"""The standard ONNX `Attention` operator (opset 23), in onnxruntime and in onnx's reference.

Spec: https://onnx.ai/onnx/operators/onnx__Attention.html (Attention-23; the
text quoted below is the schema shipped with the installed onnx,
`onnx.defs.get_schema("Attention", 23).doc`).

No framework exports this graph: it is built with onnx.helper from the
canonical weights, as a user writing ONNX by hand would: MatMul + Add
projections to 3-D Q (B, T, H*d_k), K (B, S, H_kv*d_k), V (B, S, H_kv*d_v);
one `Attention` node with q_num_heads / kv_num_heads ("Group-query Attention
... q_num_heads % kv_num_heads == 0", heads interleaved: query head h uses
key/value head h // (H / H_kv), as in the canonical weights); MatMul + Add
output projection.  The spec sizes V independently (`v_head_size`) and takes
the scale default "1/sqrt(head_size)" from Q/K, so per-head widths unrelated
to the input width are expressible.  The boolean attn_mask is ONNX polarity,
"a value of True indicates that the element should take part in attention",
the same as ours: key padding and explicit masks are ANDed into one
(B, 1, T, S) input.  Per-head weights come from the optional 4th output,
qk_matmul_output with qk_matmul_output_mode=3 ("the output after the softmax").

Causal alignment: `is_causal` is "bottom-right (offset-aware): query i attends
key j iff j <= i + past_sequence_length"; without a past cache the offset is
0, so for T != S it is upper-left.  lower_right is expressed through the
operator's own offset: the first S - T projected keys/values go in as
past_key/past_value (4-D, (B, H_kv, S - T, d)), the last T as K/V.  With
S < T no past length can be negative: not expressible.

Two rows, one graph: `onnx.attention-op.ort` (onnxruntime CPU; its kernel
has no bfloat16 path, and the row quotes ORT's own error) and
`onnx.attention-op.reference` (onnx.reference.ReferenceEvaluator, NumPy).
onnx / onnxruntime are imported inside `run` only.
"""
from __future__ import annotations

import numpy as np

from .. import onnx_accounting
from . import NotExpressible, NotExpressibleError, Observation, Runner, Translation, to_numpy
from .onnx_export import numpy_dtype, ort_session, short

OPSET = 23
SPEC_CAUSAL = ("is_causal: \"causal masking is applied with bottom-right (offset-aware) "
               "alignment: query `i` attends key `j` iff `j <= i + past_sequence_length`\"")


def _plan(case) -> dict:
    """The Attention node's arguments a user would choose for this case."""
    a, i = case.attention, case.inputs
    plan = {"q_num_heads": a.num_heads, "kv_num_heads": a.num_kv_heads}
    if case.mask.causal != "none":
        plan["is_causal"] = 1
        if case.mask.causal == "lower_right" and i.key_len > i.query_len:
            plan["past_length"] = i.key_len - i.query_len
    from ..weights import case_data

    if case_data(case).inputs.non_causal is not None:
        plan["attn_mask"] = "bool (B, 1, T, S), True = attend"
    return plan


def build_model(case, data, plan: dict):
    """(ModelProto, feed) for the case; initializers in the case dtype."""
    from onnx import TensorProto, helper, numpy_helper

    a, i, w = case.attention, case.inputs, data.weights
    elem = {"float32": TensorProto.FLOAT, "float64": TensorProto.DOUBLE,
            "float16": TensorProto.FLOAT16, "bfloat16": TensorProto.BFLOAT16}[i.dtype]
    npdt = numpy_dtype(i.dtype)
    b, t, s = i.batch, i.query_len, i.key_len
    inits, nodes = [], []

    def init(name, array):
        inits.append(numpy_helper.from_array(np.ascontiguousarray(array).astype(npdt), name))
        return name

    def const(name, values):
        inits.append(numpy_helper.from_array(np.array(values, dtype=np.int64), name))
        return name

    def project(x, tag, weight, bias):  # x (B, L, E) @ (E, heads*d) [+ bias]
        y = f"{tag}_matmul" if bias is not None else f"{tag}_proj"
        nodes.append(helper.make_node("MatMul", [x, init(f"W_{tag}", weight)], [y]))
        if bias is None:
            return y
        nodes.append(helper.make_node("Add", [y, init(f"b_{tag}", bias.ravel())], [f"{tag}_proj"]))
        return f"{tag}_proj"

    def in_out(w3):  # canonical (heads, E, d) -> (E, heads*d), head-major columns
        return w3.transpose(1, 0, 2).reshape(w3.shape[1], -1)

    inputs = [helper.make_tensor_value_info("query", elem, [b, t, a.query_features])]
    feed = {"query": data.inputs.query.astype(npdt)}
    xk = xv = "query"
    if not i.self_attention:
        inputs += [helper.make_tensor_value_info("key", elem, [b, s, a.key_features]),
                   helper.make_tensor_value_info("value", elem, [b, s, a.value_features])]
        feed.update(key=data.inputs.key.astype(npdt), value=data.inputs.value.astype(npdt))
        xk, xv = "key", "value"
    q = project("query", "q", in_out(w.wq), w.bq)
    k = project(xk, "k", in_out(w.wk), w.bk)
    v = project(xv, "v", in_out(w.wv), w.bv)
    mask = ""
    if "attn_mask" in plan:
        feed["attn_mask"] = data.inputs.non_causal[:, None]
        inputs.append(helper.make_tensor_value_info("attn_mask", TensorProto.BOOL, [b, 1, t, s]))
        mask = "attn_mask"
    past = plan.get("past_length", 0)
    args, outs = [q, k, v, mask], ["heads", "", "", "weights"]
    if past:  # lower-right causal: the first S - T keys/values become the "past"
        splits = const("split", [past, s - past])
        for x, d, tag in ((k, a.qk_head_dim, "k"), (v, a.v_head_dim, "v")):
            nodes.append(helper.make_node("Split", [x, splits], [f"{tag}_past3", f"{tag}_now"],
                                          axis=1))
            nodes.append(helper.make_node("Reshape", [f"{tag}_past3", const(
                f"{tag}_past_shape", [b, past, a.num_kv_heads, d])], [f"{tag}_past4"]))
            nodes.append(helper.make_node("Transpose", [f"{tag}_past4"], [f"past_{tag}"],
                                          perm=[0, 2, 1, 3]))
        args = [q, "k_now", "v_now", mask, "past_k", "past_v"]
        outs = ["heads", "present_key", "present_value", "weights"]
    attrs = {n: plan[n] for n in ("q_num_heads", "kv_num_heads", "is_causal") if n in plan}
    nodes.append(helper.make_node("Attention", args, outs, qk_matmul_output_mode=3, **attrs))
    out = project("heads", "o", w.wo.reshape(-1, a.output_features), w.bo)
    nodes.append(helper.make_node("Identity", [out], ["output"]))
    graph = helper.make_graph(
        nodes, "canonical_attention", inputs,
        [helper.make_tensor_value_info("output", elem, [b, t, a.output_features]),
         helper.make_tensor_value_info("weights", elem, [b, a.num_heads, t, s])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)],
                              producer_name="attention-conformance")
    return model, feed


def _lone_node_verdict(model) -> str:
    """Load a graph of the Attention node alone in ORT: 'loads' or ORT's error."""
    from onnx import helper

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
        ort_session(helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)])
                    .SerializeToString(), "lone Attention node", exported=False)
    except NotExpressibleError as exc:
        return str(exc).split(": ", 1)[-1]
    return "loads (the missing kernel is elsewhere in the graph)"


class OnnxAttentionOpORT(Runner):
    name = "onnx.attention-op.ort"
    framework = "onnx"
    requires = ("onnx", "onnxruntime")
    sections = onnx_accounting.SECTIONS
    backend = "onnxruntime CPUExecutionProvider"

    def translate(self, case):
        i = case.inputs
        if case.mask.causal == "lower_right" and i.key_len < i.query_len:
            return NotExpressible(
                f"lower-right causal with key_len {i.key_len} < query_len {i.query_len}: "
                f"Attention-23 {SPEC_CAUSAL}, and past_sequence_length cannot be negative")
        plan = _plan(case)
        args = ", ".join(f"{k}={v!r}" for k, v in plan.items() if k not in ("attn_mask",
                                                                           "past_length"))
        extra = [f"attn_mask={plan['attn_mask']}"] if "attn_mask" in plan else []
        if "past_length" in plan:
            extra.append(f"past_key/past_value = first {plan['past_length']} projected keys/"
                         "values (lower-right offset)")
        call = (f"MatMul+Add -> Attention(Q, K, V, {', '.join([args] + extra)}) "
                f"[opset {OPSET}] -> MatMul+Add; run in {self.backend}")
        return Translation(call, plan)

    def execute(self, model, feed, dtype: str):
        try:
            session = ort_session(model.SerializeToString(), f"Attention-{OPSET} graph in {dtype}",
                                  exported=False)
        except NotExpressibleError as exc:  # say whether the Attention kernel itself lacks it
            raise NotExpressibleError(f"{exc}; a lone Attention node in {dtype}: "
                                      f"{_lone_node_verdict(model)}") from exc
        return session.run(["output", "weights"], feed)

    def run(self, case, translation, data):
        import onnx

        model, feed = build_model(case, data, translation.kwargs)
        try:
            onnx.checker.check_model(model, full_check=True)
        except onnx.checker.ValidationError as exc:
            raise NotExpressibleError(f"onnx.checker rejects the graph: {short(exc)}") from exc
        acc = onnx_accounting.account(model, data.weights.arrays())
        out, weights = self.execute(model, feed, case.inputs.dtype)
        notes = ["per-head weights from qk_matmul_output (qk_matmul_output_mode=3)",
                 "holds the canonical weights as initializers, rearranged to (in, heads*d)"]
        if "past_length" in translation.kwargs:
            notes.append("lower-right causal via past_key/past_value: is_causal's offset is "
                         "past_sequence_length (upper-left without a past)")
        return Observation(
            output=to_numpy(out), attention_weights=to_numpy(weights), weights_returned="per_head",
            parameters=acc["exported_weights"],
            weight_shapes={t.name: tuple(t.dims) for t in model.graph.initializer
                           if t.data_type != onnx.TensorProto.INT64},
            notes=notes,
            extras={"mask_polarity": "True = attend", "graphs": {"Attention-23": acc}})


class OnnxAttentionOpReference(OnnxAttentionOpORT):
    """The same graph in onnx.reference.ReferenceEvaluator (the spec's NumPy code)."""

    name = "onnx.attention-op.reference"
    requires = ("onnx",)
    backend = "onnx.reference.ReferenceEvaluator"

    def execute(self, model, feed, dtype: str):
        from onnx.reference import ReferenceEvaluator

        try:
            return ReferenceEvaluator(model).run(["output", "weights"], feed)
        except NotImplementedError as exc:
            raise NotExpressibleError(f"ReferenceEvaluator cannot run the {dtype} graph: "
                                      f"{short(exc)}") from exc
