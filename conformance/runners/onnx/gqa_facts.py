"""What onnxruntime's com.microsoft.GroupQueryAttention (onnx.contrib-gqa.ort) shows with no
oracle: the op's schema as the installed onnxruntime ships it (its inputs and attributes:
the sizes, the argument order, the layout, the arguments it has none of).  The ledger asks
the rest through the runner's translate/run and `answer` (conventions/probes/: a 2-D
query and float64 inputs (native_calls.py), the scale,
its precision, float64_compute, the causal attribute, seqlens_k, the window, the rotation,
the grouped heads, QK-norm, softcap, sinks, the cache and the masks).
"""
from __future__ import annotations

from conformance.contract.axes import NA
from conformance.contract.runner import Convention

DOC = {"documented_source": "https://github.com/microsoft/onnxruntime/blob/main/docs/"
                            "ContribOperators.md#com.microsoft.GroupQueryAttention"}
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
    """The schema's cells (a 2-D query and float64 inputs are native calls the ledger asks:
    native_calls.py)."""
    names = ", ".join(schema_names())
    cells = [Convention(a, v, e, **DOC) for a, (v, e) in SCHEMA_FACTS.items()]
    cells += [Convention(a, NA, f"{SCHEMA} (onnxruntime schema: {names}): {e}")
              for a, e in SCHEMA_NA.items()]
    return cells
