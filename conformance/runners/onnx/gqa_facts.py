"""What onnxruntime's com.microsoft.GroupQueryAttention (onnx.contrib-gqa.ort) reads of its
API, as ApiFacts (contract/api_facts.py): the op's schema as the installed onnxruntime ships
it (its inputs and attributes: the sizes, the argument order, the layout, the arguments it
has none of) and the shape of the weights its output_qk returns.  The ledger asks
the rest through the runner's translate/run and `answer` (conventions/probes/: a 2-D
query and float64 inputs (native_calls.py), the scale,
its precision, float64_compute, the causal attribute, seqlens_k, the window, the rotation,
the grouped heads, QK-norm, softcap, sinks, the cache and the masks).
"""
from __future__ import annotations

from conformance.contract.api_facts import ApiFact
from conformance.contract.api_facts import NA

SCHEMA = "com.microsoft.GroupQueryAttention"


def schema_names() -> list[str]:
    """Attributes and inputs of the installed com.microsoft.GroupQueryAttention schema."""
    from onnxruntime.capi import onnxruntime_pybind11_state as C

    s = max((s for s in C.get_all_operator_schema()
             if s.name == "GroupQueryAttention" and s.domain == "com.microsoft"),
            key=lambda s: s.since_version)
    return list(s.attributes) + [i.name for i in s.inputs]


# ApiFact.about -> (value, the schema's statement): what the op's inputs and attributes say
SCHEMA_FACTS = {
    "head_size_from": ("given_tensors", "Q (B, T, num_heads*head_size), K and V (B, S, "
                       "kv_num_heads*head_size): projected tensors"),
    "inputs_order": ("query_key_value", "inputs query, key, value"),
    "tensor_layout": ("batch_first", "query (B, T, hidden)"),
    "float_mask_argument": ("added", "attention_bias is added to QxK'"),
    "mask_on_tensor": ("none", "an ONNX tensor carries no mask")}
SCHEMA_NA = {
    "mask_argument": "no boolean mask input: attention_bias is additive float (type T: "
                     "float16 / bfloat16 / float)",
    "weights_under_dropout": "no dropout", "dropout_argument": "an inference op: no dropout"}


QK_SIZES = (1, 4, 2, 8)  # B, T = S, heads, head size of the lone node weights_fact runs


def returned_qk():
    """output_qk of a lone GroupQueryAttention node at qk_output=2 (B 1, 2 heads of 8,
    T = S = 4, causal by default), in onnxruntime's CPU kernel."""
    import numpy as np
    import onnxruntime as ort
    from onnx import TensorProto, helper

    b, s, h, d = QK_SIZES
    node = helper.make_node("GroupQueryAttention", ["q", "k", "v", "", "", "seqlens_k", "t"],
                            ["out", "pk", "pv", "qk"], domain="com.microsoft", num_heads=h,
                            kv_num_heads=h, qk_output=2)
    ins = [helper.make_tensor_value_info(n, TensorProto.FLOAT, [b, s, h * d]) for n in "qkv"]
    ins += [helper.make_tensor_value_info("seqlens_k", TensorProto.INT32, [b]),
            helper.make_tensor_value_info("t", TensorProto.INT32, [])]
    outs = [helper.make_tensor_value_info(n, TensorProto.FLOAT, None)
            for n in ("out", "pk", "pv", "qk")]
    model = helper.make_model(helper.make_graph([node], "gqa_qk", ins, outs), opset_imports=[
        helper.make_opsetid("", 17), helper.make_opsetid("com.microsoft", 1)])
    x = np.random.default_rng(7).standard_normal((3, b, s, h * d)).astype(np.float32)
    session = ort.InferenceSession(model.SerializeToString(),
                                   providers=["CPUExecutionProvider"])
    return session.run(["qk"], {"q": x[0], "k": x[1], "v": x[2], "t": np.array(s, np.int32),
                                "seqlens_k": np.array([s - 1], np.int32)})[0]


def weights_fact(names: list[str], qk=returned_qk) -> list[ApiFact]:
    """What the op returns besides the output: none where its schema (`names`) has no
    qk_output; else its output_qk at qk_output=2 ("after softmax normalization", the
    schema's words; default 0, not returned) read by its shape (`qk()`): per head
    (B, H, T, S), averaged (B, T, S) or (B, 1, T, S); a shape neither gives no fact."""
    import numpy as np

    if "qk_output" not in names:
        return [ApiFact("weights_returned", "none", f"{SCHEMA} (onnxruntime schema: "
                        f"{', '.join(names)}): no qk_output: output, present_key, "
                        "present_value")]
    b, s, h, _ = QK_SIZES
    got = np.asarray(qk())
    word = {(b, h, s, s): "per_head", (b, s, s): "head_averaged",
            (b, 1, s, s): "head_averaged"}.get(got.shape)
    if word is None:
        return []
    sums = float(np.abs(got.sum(-1) - 1).max())
    return [ApiFact("weights_returned", word, f"{SCHEMA}: output_qk at qk_output=2 (the "
                    "schema: \"after softmax normalization\"; default 0: not returned): "
                    f"{got.shape} for (B, H, T, S) = ({b}, {h}, {s}, {s}), rows summing to "
                    f"1 within {sums:.1e}")]


def gqa_facts(runner) -> list[ApiFact]:
    """The schema's facts and the weights its output_qk returns (a 2-D query and float64
    inputs are native calls the ledger asks: native_calls.py)."""
    names = schema_names()
    found = [ApiFact(a, v, f"{SCHEMA} (onnxruntime schema): {e}")
             for a, (v, e) in SCHEMA_FACTS.items()] + weights_fact(names)
    return found + [ApiFact(a, NA, f"{SCHEMA} (onnxruntime schema: {', '.join(names)}): {e}")
                    for a, e in SCHEMA_NA.items()]
