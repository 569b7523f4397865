"""Convention probes of onnxruntime's com.microsoft.GroupQueryAttention (onnx.contrib-gqa.ort):
the runner's own graph run on small seeded cases (contract/modern_probes.py names the
reading), and the other cells from the op's schema as the installed onnxruntime ships it.
"""
from __future__ import annotations

from conformance.contract.axes import NA
from conformance.contract.probing import closest, feature_cells_from_names, output_with
from conformance.contract.runner import Convention

DOC = {"documented_source": "https://github.com/microsoft/onnxruntime/blob/main/docs/"
                            "ContribOperators.md#com.microsoft.GroupQueryAttention"}
WHAT = "GroupQueryAttention probe graph in onnxruntime"


def schema_names() -> list[str]:
    """Attributes and inputs of the installed com.microsoft.GroupQueryAttention schema."""
    from onnxruntime.capi import onnxruntime_pybind11_state as C

    s = max((s for s in C.get_all_operator_schema()
             if s.name == "GroupQueryAttention" and s.domain == "com.microsoft"),
            key=lambda s: s.since_version)
    return list(s.attributes) + [i.name for i in s.inputs]


def gqa_cells(runner) -> list[Convention]:
    from conformance.contract import modern_probes as mp
    from conformance.oracle.canonical import case_data

    def run(case, data=None):
        return runner.run(case, runner.translate(case), data or case_data(case)).output

    gqa = mp.gqa_case()
    half, inter = mp.rope_case("half_split"), mp.rope_case("interleaved")
    part = mp.rope_case("half_split", rotary_dim=16, head_dim=32)
    per_head = mp.qk_norm_case("per_head", head_dim=16)
    cells = [
        mp.kv_head_mapping(gqa, lambda: run(gqa), f"{WHAT}, num_heads=4, kv_num_heads=2",
                           documented="grouped", **DOC),
        mp.rope_style(half, {"rotary_interleaved=0": lambda: run(half),
                             "rotary_interleaved=1": lambda: run(inter)},
                      f"{WHAT}, do_rotary=1, head_size 16", documented="choosable", **DOC),
        mp.rope_partial(part, lambda: run(part), f"{WHAT}, do_rotary=1, cos_cache (P, 8) "
                        "for head_size 32", **DOC),
        mp.qk_norm_scope({"q_norm_weight/k_norm_weight (head_size,)": (
            per_head, lambda d: run(per_head, d))}, f"{WHAT}: the op's QK-norm inputs",
            documented="per_head", **DOC)]
    causal = mp.gqa_case(mask={"causal": "upper_left"})
    cells.append(closest("causal_flag", run(causal),
                         {"upper_left": output_with(causal, causal_allowed(causal)),
                          "ignored": output_with(causal, None)},
                         f"{WHAT}: causal=1 on a prompt (T = S = 5, no past)", **DOC))
    fixed = {"size_arguments": ("given_tensors", "Q (B, T, num_heads*head_size), K and V (B, "
                                "S, kv_num_heads*head_size): projected tensors"),
             "argument_order": ("query_key_value", "inputs query, key, value"),
             "input_layout": ("batch_first", "query (B, T, hidden)"),
             "float_mask": ("added", "attention_bias is added to QxK'"),
             "softmax_scale": ("configurable", "scale attribute (default 1/sqrt(head_size))"),
             "implicit_mask": ("none", "an ONNX tensor carries no mask"),
             "returned_weights": ("none", "qk_output not requested: output, present_key, "
                                  "present_value")}
    cells += [Convention(a, v, e, **DOC) for a, (v, e) in fixed.items()]
    na = {"attn_mask_polarity": "no boolean mask input: attention_bias is additive float",
          "key_padding_polarity": "seqlens_k counts the valid keys of a right-padded batch "
          "with a past cache; the runner passes masks as attention_bias",
          "weights_dropout": "no dropout", "dropout": "an inference op: no dropout",
          "unbatched_input": "query is 3-D (B, S, hidden) by the op's schema",
          "mixed_dtype": "a graph has one element type per tensor; ORT checks types at load",
          "scale_precision": "no float64 kernel (the float64 rows quote ORT)"}
    cells += [Convention(a, NA, e) for a, e in na.items()]
    from conformance.contract.cache_probes import override
    from conformance.runners.onnx.gqa_feature_probes import gqa_feature_cells

    probed = ("kv_head_mapping", "rope_style", "rope_partial", "qk_norm_scope")
    return override(cells + feature_cells_from_names(
        "com.microsoft.GroupQueryAttention", schema_names(),
        "attributes and inputs (onnxruntime schema)", skip=probed), gqa_feature_cells(runner))


def causal_allowed(case):
    from conformance.oracle.canonical import causal_mask

    return causal_mask(case.inputs.query_len, case.inputs.key_len, "upper_left")
