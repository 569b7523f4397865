"""What the ONNX `Attention` runners' graphs show with no oracle (attention_op.py's
`conventions()`; the cache rows add attention_cache_facts.py): the schema's facts (no
dropout, no key-padding input in Attention-23, the feature names of `schema_names`), the
4th output's shape, the API readings the ledger confirms by asking (size_arguments,
input_layout), and the number the masked scores hold at qk_matmul_output_mode=2 (the
node's output of the scores after the mask, before the softmax), which the ledger's
mask_fill probe names and reads to break a tie (masks.shown_word, masks.mask_fill_cell).
Every other axis is the ledger's (conventions/probes/). onnx inside the functions.
"""
from __future__ import annotations

import numpy as np

from conformance.contract.axes import NA, NOT_PROBED
from conformance.contract.runner import Convention
from conformance.oracle.canonical import case_data

SPEC_URL = "https://onnx.ai/onnx/operators/onnx__Attention.html"
SPEC = {"documented_source": SPEC_URL}


def facts_case(name: str, **sections):
    """The seeded case of these facts: 2 heads over 8 features, B 2, T 3, S 5."""
    from conformance.case.loader import parse_case

    raw = {"id": f"probe-{name}", "attention": {"num_heads": 2, "query_features": 8},
           "inputs": {"batch": 2, "query_len": 3, "key_len": 5, "seed": 7}, **sections}
    return parse_case(raw, "<probe>")


def schema_names(opset: int = 23) -> tuple[str, list[str], str]:
    """(what, the attribute and input names, where they are listed) of the installed onnx's
    Attention schema (features.signature_cells reads the feature axes from them)."""
    import onnx.defs

    schema = onnx.defs.get_schema("Attention", opset, "")
    return (f"ONNX Attention-{opset} (onnx.defs schema)",
            list(schema.attributes) + [i.name for i in schema.inputs], "attributes and inputs")


def held_number(held: np.ndarray) -> str:
    """The one number every masked score holds, as text ("-inf", "-3.4028235e+38"), or
    "several" where they differ: the ledger names it (masks.shown_word)."""
    values = set(np.asarray(held, np.float64).ravel().tolist())
    if len(values) != 1:
        return "several"
    (v,) = values
    return "-inf" if v == -np.inf else f"{v:.9g}"  # 9 digits: any float32 exactly


def _held(values: np.ndarray) -> str:
    return ", ".join(sorted({"-inf" if v == -np.inf else f"{v:.8g}" for v in values.ravel()}))


def mask_fill_reading(runner, graph, what: str) -> Convention:
    """What the masked scores hold at qk_matmul_output_mode=2 with a bool attn_mask fed as
    given (the positions its False entries mark), and with is_causal=1 and no mask (the
    scores below -1e30 quoted): the number the system shows (its value), no word, no
    oracle."""
    case = facts_case("op-mask-fill", mask={"attn_mask": {"random": 0.5}})
    data = case_data(case)
    model, feed = graph(case, data, attn_mask=True, qk_mode=2)
    scores = np.asarray(runner.execute(model, feed, case.inputs.dtype)[1], np.float64)
    held = scores[~np.broadcast_to(data.inputs.non_causal[:, None], scores.shape)]
    causal = facts_case("op-causal-mode2", mask={"causal": "upper_left"})
    model, feed = graph(causal, case_data(causal), is_causal=True, qk_mode=2)
    c = np.asarray(runner.execute(model, feed, causal.inputs.dtype)[1], np.float64)
    low = c[c < -1e30]
    return Convention("mask_fill", held_number(held), f"{what}: qk_matmul_output at mode 2 "
                      "(scores after the mask, before the softmax), bool attn_mask (B, 1, T, "
                      f"S) fed as given: its {held.size} False positions hold {_held(held)}; "
                      f"is_causal=1, no mask (T=3, S=5): {low.size} scores below -1e30, "
                      f"holding {_held(low) or 'nothing'} (the spec's test data: -inf)")


def _inputs_cells(runner, graph, what: str) -> list[Convention]:
    """The 4th output's shape (a 2-D input and float64 inputs are native calls the ledger
    asks: attention_op.OnnxAttentionOp.native_call)."""
    case = facts_case("op-facts")
    data, i = case_data(case), case.inputs
    model, feed = graph(case, data)
    w = np.shape(runner.execute(model, feed, i.dtype)[1])
    return [
        Convention("returned_weights", "per_head", f"{what}: the node's 4th output "
                   f"qk_matmul_output, {w} for (B, H, T, S) = ({i.batch}, "
                   f"{case.attention.num_heads}, {i.query_len}, {i.key_len}); the runner "
                   "sets qk_matmul_output_mode=3 (the softmax weights; the spec's modes 0-2: the "
                   "scores before softcap, after it, after the mask)", **SPEC)]


def _schema_cells(opset: int) -> list[Convention]:
    """dropout and weights_dropout (the schema names no dropout), implicit_mask."""
    what, names, _ = schema_names(opset)
    drop = [n for n in names if "dropout" in n]
    word = NA if not drop else NOT_PROBED
    said = f"{what}: its attributes and inputs {', '.join(names)}: " + (
        "no dropout" if not drop else f"{', '.join(drop)} (not asked here)")
    return [Convention("dropout", word, said, **SPEC),
            Convention("weights_dropout", word, said, **SPEC),
            Convention("implicit_mask", "none", "ONNX graph inputs are plain tensors: no mask "
                       "travels with them")]


def api_cells(what: str) -> list[Convention]:
    """The API readings the ledger confirms by asking (sizes.confirmed)."""
    return [
        Convention("size_arguments", "given_tensors", f"{what}: the node takes projected Q, "
                   "K, V (the projections are MatMul nodes of the graph); q_num_heads / "
                   "kv_num_heads split the hidden width: head_size = q_hidden_size / "
                   "q_num_heads", documented="given_tensors", **SPEC),
        Convention("input_layout", "batch_first", f"{what}: 3-D Q (B, T, H*d_k) graph "
                   "inputs, batch first (4-D inputs are (B, H, T, d): batch_heads_first)",
                   documented="batch_first", **SPEC)]


def facts(runner, graph, fill: bool = True) -> list[Convention]:
    """Every fact of an Attention-op runner; `graph(case, data, mask=None, **plan fields)`
    -> (model, feed) builds its graph (attention_op.build_model) with the plan's fields
    changed (qk_mode: qk_matmul_output_mode), `runner.execute(model, feed, dtype)` ->
    (output, qk_matmul_output) runs it; `fill`: the masked-score reading too (the one-call
    rows, which the ledger's mask_fill probe asks)."""
    where = "onnxruntime" if runner.engine == "ort" else "onnx.reference"
    what = f"Attention-23 graph in {where}"
    cells = api_cells(what) + _inputs_cells(runner, graph, what) + _schema_cells(23)
    return cells + ([mask_fill_reading(runner, graph, what)] if fill else [])
