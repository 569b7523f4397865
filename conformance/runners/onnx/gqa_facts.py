"""What onnxruntime's com.microsoft.GroupQueryAttention (onnx.contrib-gqa.ort) shows with no
oracle: the op's schema as the installed onnxruntime ships it (its inputs and attributes:
the sizes, the argument order, the layout, the arguments it has none of) and the engine's
own refusals of a 2-D query and of float64 inputs fed to a float32 graph.  The ledger asks
the rest through the runner's translate/run and `answer` (conventions/probes/: the scale,
its precision, float64_compute, the causal attribute, seqlens_k, the window, the rotation,
the grouped heads, QK-norm, softcap, sinks, the cache and the masks).
"""
from __future__ import annotations

import numpy as np

from conformance.contract.axes import NA
from conformance.contract.runner import Convention

DOC = {"documented_source": "https://github.com/microsoft/onnxruntime/blob/main/docs/"
                            "ContribOperators.md#com.microsoft.GroupQueryAttention"}
WHAT = "GroupQueryAttention probe graph in onnxruntime"
SCHEMA = "com.microsoft.GroupQueryAttention"


def schema_names() -> list[str]:
    """Attributes and inputs of the installed com.microsoft.GroupQueryAttention schema."""
    from onnxruntime.capi import onnxruntime_pybind11_state as C

    s = max((s for s in C.get_all_operator_schema()
             if s.name == "GroupQueryAttention" and s.domain == "com.microsoft"),
            key=lambda s: s.since_version)
    return list(s.attributes) + [i.name for i in s.inputs]


# axis -> (word, the schema's statement): what the op's inputs and attributes say
SCHEMA_FACTS = {
    "size_arguments": ("given_tensors", "Q (B, T, num_heads*head_size), K and V (B, S, "
                       "kv_num_heads*head_size): projected tensors"),
    "argument_order": ("query_key_value", "inputs query, key, value"),
    "input_layout": ("batch_first", "query (B, T, hidden)"),
    "float_mask": ("added", "attention_bias is added to QxK'"),
    "implicit_mask": ("none", "an ONNX tensor carries no mask"),
    "returned_weights": ("none", "qk_output not requested: output, present_key, "
                         "present_value")}
SCHEMA_NA = {
    "attn_mask_polarity": "no boolean mask input: attention_bias is additive float (type T: "
                          "float16 / bfloat16 / float)",
    "weights_dropout": "no dropout", "dropout": "an inference op: no dropout"}


def gqa_facts(runner) -> list[Convention]:
    """The schema's cells and the engine's two refusals (unbatched_input, mixed_dtype)."""
    names = ", ".join(schema_names())
    cells = [Convention(a, v, e, **DOC) for a, (v, e) in SCHEMA_FACTS.items()]
    cells += [Convention(a, NA, f"{SCHEMA} (onnxruntime schema: {names}): {e}")
              for a, e in SCHEMA_NA.items()]
    return cells + refusal_cells(runner)


def refusal_cells(runner) -> list[Convention]:
    """unbatched_input (a 2-D query into the node), mixed_dtype (float64 fed to the float32
    graph): onnxruntime's own words for each."""
    import onnx

    from conformance.case.loader import parse_case
    from conformance.oracle.canonical import case_data
    from conformance.runners._export.onnx_runtime import ort_session, tried

    case = parse_case({"id": "probe-gqa-refusals", "attention": {
        "num_heads": 2, "query_features": 16}, "inputs": {
        "batch": 2, "query_len": 6, "key_len": 6, "seed": 7, "self_attention": True}},
        "<probe>")
    model, feed = runner.graph(case, case_data(case), runner.translate(case).plan)
    session = ort_session(model.SerializeToString(), "GroupQueryAttention probe graph")
    rankless = onnx.ModelProto.FromString(model.SerializeToString())
    rankless.graph.input[0].type.tensor_type.ClearField("shape")  # the node sees 2-D
    loose = ort_session(rankless.SerializeToString(), "GroupQueryAttention probe graph")
    x = feed["query"]
    return [
        tried("unbatched_input", lambda: loose.run(["output"], {"query": x[0]}),
              f"{WHAT}: a 2-D (T, E) query (the graph's query input without a declared "
              "shape, so the node itself checks it)"),
        tried("mixed_dtype", lambda: session.run(["output"], {"query": x.astype(np.float64)}),
              f"{WHAT}: float64 inputs fed to the float32 graph")]
