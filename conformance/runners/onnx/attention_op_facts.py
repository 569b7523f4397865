"""What the ONNX `Attention` runners read of the operator's API (attention_op.py's
`conventions()`; the cache rows add attention_cache_facts.py), as ApiFacts
(contract/api_facts.py): the schema's arguments (no dropout, the feature names of
`schema_names`), the 4th output's shape, the tensors the node takes and their layout (the
ledger confirms both by asking), and the number the masked scores hold at
qk_matmul_output_mode=2 (the node's output of the scores after the mask, before the
softmax), which the ledger's mask_fill probe reads to break a tie the outputs cannot
(fill_names.shown_word).  Every measurement is the ledger's (conventions/probes/); what
the spec states is the `documented:` section of each runner's expectations file.
onnx inside the functions.
"""
from __future__ import annotations

import numpy as np

from conformance.contract.api_facts import ApiFact
from conformance.contract.api_facts import NA
from conformance.oracle.canonical import case_data


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


def held_text(values: np.ndarray) -> str:
    """The distinct numbers `values` hold, as text (8 digits; -inf)."""
    return ", ".join(sorted({"-inf" if v == -np.inf else f"{v:.8g}" for v in values.ravel()}))


def masked_score_fact(runner, graph, what: str) -> ApiFact:
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
    return ApiFact("masked_score", held_number(held), f"{what}: qk_matmul_output at mode 2 "
                   "(scores after the mask, before the softmax), bool attn_mask (B, 1, T, "
                   f"S) fed as given: its {held.size} False positions hold {held_text(held)}; "
                   f"is_causal=1, no mask (T=3, S=5): {low.size} scores below -1e30, "
                   f"holding {held_text(low) or 'nothing'} (the spec's test data: -inf)")


def _returned(runner, graph, what: str) -> list[ApiFact]:
    """The 4th output's shape (a 2-D input and float64 inputs are native calls the ledger
    asks: attention_op.OnnxAttentionOp.native_call)."""
    case = facts_case("op-facts")
    data, i = case_data(case), case.inputs
    model, feed = graph(case, data)
    w = np.shape(runner.execute(model, feed, i.dtype)[1])
    return [
        ApiFact("weights_returned", "per_head", f"{what}: the node's 4th output "
                f"qk_matmul_output, {w} for (B, H, T, S) = ({i.batch}, "
                f"{case.attention.num_heads}, {i.query_len}, {i.key_len}) at "
                "qk_matmul_output_mode=3 (the softmax weights; the spec's modes 0-2: the "
                "scores before softcap, after it, after the mask)")]


def _schema_facts(opset: int) -> list[ApiFact]:
    """The dropout argument and the weights under dropout (the schema names no dropout: a
    schema with one gives no fact, the ledger's fallback reads it), and the plain tensors
    the graph takes."""
    what, names, _ = schema_names(opset)
    said = f"{what}: its attributes and inputs {', '.join(names)}: no dropout"
    dropout = [] if any("dropout" in n for n in names) else [
        ApiFact("dropout_argument", NA, said), ApiFact("weights_under_dropout", NA, said)]
    return dropout + [ApiFact("mask_on_tensor", "none", "ONNX graph inputs are plain "
                              "tensors: no mask travels with them")]


def api_facts(what: str) -> list[ApiFact]:
    """The tensors the node takes and their layout, which the ledger confirms by asking
    (sizes.confirmed)."""
    return [
        ApiFact("head_size_from", "given_tensors", f"{what}: the node takes projected Q, "
                "K, V (the projections are MatMul nodes of the graph); q_num_heads / "
                "kv_num_heads split the hidden width: head_size = q_hidden_size / "
                "q_num_heads"),
        ApiFact("tensor_layout", "batch_first", f"{what}: 3-D Q (B, T, H*d_k) graph "
                "inputs, batch first (4-D inputs are (B, H, T, d): batch_heads_first)")]


def facts(runner, graph, fill: bool = True) -> list[ApiFact]:
    """Every fact of an Attention-op runner; `graph(case, data, mask=None, **plan fields)`
    -> (model, feed) builds its graph (attention_op.build_model) with the plan's fields
    changed (qk_mode: qk_matmul_output_mode), `runner.execute(model, feed, dtype)` ->
    (output, qk_matmul_output) runs it; `fill`: the masked-score reading too (the one-call
    rows, which the ledger's mask_fill probe asks)."""
    where = "onnxruntime" if runner.engine == "ort" else "onnx.reference"
    what = f"Attention-23 graph in {where}"
    found = api_facts(what) + _returned(runner, graph, what) + _schema_facts(23)
    return found + ([masked_score_fact(runner, graph, what)] if fill else [])
