"""Convention probes of onnxruntime's com.microsoft.GroupQueryAttention (onnx.contrib-gqa.ort):
the runner's own graph run on small seeded cases (contract/position_head_probes.py names the
reading), and the other cells from the op's schema as the installed onnxruntime ships it.
"""
from __future__ import annotations

from dataclasses import replace

import numpy as np

from conformance.contract.axes import NA
from conformance.contract.probing import (
    closest, feature_cells_from_names, output_with, probe_case)
from conformance.contract.runner import Convention, Translation

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
    from conformance.contract import position_head_probes as php
    from conformance.oracle.canonical import case_data

    def run(case, data=None):
        return runner.run(case, runner.translate(case), data or case_data(case)).output

    # kv_head_mapping, rope_style, rope_partial, qk_norm_scope: the ledger's (ledger_axes;
    # heads.py, positions.py, qk_norm.py at the runner's probe_head_size)
    causal = php.gqa_case(mask={"causal": "upper_left"})
    cells = [closest("causal_flag", run(causal),
                     {"upper_left": output_with(causal, causal_allowed(causal)),
                      "ignored": output_with(causal, None)},
                     f"{WHAT}: causal=1 on a prompt (T = S = 5, no past)", **DOC)]
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
    names = ", ".join(schema_names())
    na = {"attn_mask_polarity": "no boolean mask input: attention_bias is additive float "
          "(type T: float16 / bfloat16 / float)",
          "weights_dropout": "no dropout", "dropout": "an inference op: no dropout"}
    cells += [Convention(a, NA, f"com.microsoft.GroupQueryAttention (onnxruntime schema: "
                         f"{names}): {e}") for a, e in na.items()]
    cells += [key_padding_cell(runner), *refusal_cells(runner)]
    # softcap, softcap_order, sinks, window_width, fully_masked_row: the ledger's (the
    # runner's ledger_axes), which then drops the schema's feature cells of them
    probed = ("kv_head_mapping", "rope_style", "rope_partial", "qk_norm_scope")
    return cells + feature_cells_from_names(
        "com.microsoft.GroupQueryAttention", schema_names(),
        "attributes and inputs (onnxruntime schema)", skip=probed)


def causal_allowed(case):
    from conformance.oracle.canonical import causal_mask

    return causal_mask(case.inputs.query_len, case.inputs.key_len, "upper_left")


def _small(name: str, **sections):
    """2 heads of 8 (the CPU kernel's head sizes are multiples of 8), self-attention, T 6."""
    inputs = {"self_attention": True, "query_len": 6, "key_len": 6, **sections.pop("inputs", {})}
    return probe_case(f"gqa-{name}", attention={"num_heads": 2, "query_features": 16},
                      inputs=inputs, **sections)


LENGTHS = (4, 3)  # valid keys of the two items


def key_padding_cell(runner) -> Convention:
    """seqlens_k (B,), "Equivalent to (total_sequence_lengths - 1)", on a right-padded
    prompt with causal=0: the rows of valid queries read against the valid keys (lengths),
    the inverted reading (true_blocks) and no padding at all (ignored)."""
    from conformance.oracle.canonical import case_data

    case = _small("seqlens", mask={"key_padding": list(LENGTHS)})
    plan = replace(runner.translate(case).plan, causal=False, attention_bias=False,
                   seqlens=LENGTHS)
    out = np.asarray(runner.run(case, Translation("probe", plan), case_data(case)).output,
                     np.float64)
    i = case.inputs
    valid = np.arange(i.key_len)[None, :] < np.array(LENGTHS)[:, None]  # (B, S)
    keys = np.broadcast_to(valid[:, None, :], (i.batch, i.query_len, i.key_len))
    rows = valid[:, :, None]  # padded query rows are the kernel's own business

    def on_rows(x):
        return np.where(rows, x, 0.0)

    return closest("key_padding_polarity", on_rows(out), {
        "lengths": on_rows(output_with(case, keys)), "true_blocks": on_rows(output_with(
            case, ~keys)), "ignored": on_rows(output_with(case, None))},
        f"{WHAT}, causal=0, seqlens_k={[n - 1 for n in LENGTHS]} (valid lengths {list(LENGTHS)}"
        " - 1 of a right-padded prompt, total_sequence_length 6), rows of valid queries",
        documented="lengths", **DOC)


def refusal_cells(runner) -> list[Convention]:
    """unbatched_input (a 2-D query into the node), mixed_dtype (float64 fed to the float32
    graph), scale_precision (a float64 graph): the op's schema has each input, and
    onnxruntime refuses each, in its own words."""
    import onnx

    from conformance.oracle.canonical import case_data
    from conformance.runners._export.onnx_runtime import ort_session, tried

    case = _small("refusals")
    model, feed = runner.graph(case, case_data(case), runner.translate(case).plan)
    session = ort_session(model.SerializeToString(), "GroupQueryAttention probe graph")
    rankless = onnx.ModelProto.FromString(model.SerializeToString())
    rankless.graph.input[0].type.tensor_type.ClearField("shape")  # the node sees 2-D
    loose = ort_session(rankless.SerializeToString(), "GroupQueryAttention probe graph")
    x = feed["query"]
    c64 = _small("scale-precision", inputs={"dtype": "float64"})
    return [
        tried("unbatched_input", lambda: loose.run(["output"], {"query": x[0]}),
              f"{WHAT}: a 2-D (T, E) query (the graph's query input without a declared "
              "shape, so the node itself checks it)"),
        tried("mixed_dtype", lambda: session.run(["output"], {"query": x.astype(np.float64)}),
              f"{WHAT}: float64 inputs fed to the float32 graph"),
        tried("scale_precision", lambda: [runner.run(c64, runner.translate(c64),
                                                     case_data(c64)).output],
              f"{WHAT}: a float64 graph (the axis needs a float64 layer; type T of the "
              "schema is float16 / bfloat16 / float)")]
