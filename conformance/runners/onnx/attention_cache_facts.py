"""What the ONNX `Attention` cache runners read of the schema their graphs import
(attention_cache.py), as ApiFacts (contract/api_facts.py): the window argument that
Attention-23 / 24 lack, and the key-padding input (none in Attention-23; Attention-24's
nonpad_kv_seqlen, whose reading the ledger's padding probe confirms by asking), and for
the external cache the number its padded keys' scores hold (qk_matmul_output at mode 2),
which names a tie of the ledger's mask_fill probe.  Every
measurement is the ledger's: the past rows' fully masked step and mask fill through their
decode's step masks (conventions/probes/decode_masks.py), the external cache's fully padded
item and causal switch through its one call (rows.py, flags.py).  onnx inside the functions.
"""
from __future__ import annotations

from conformance.contract.api_facts import ApiFact
from conformance.contract.api_facts import NA


def _opset(runner) -> int:
    """The Attention version this runner's graphs import (24: the external cache's
    nonpad_kv_seqlen; 23: past_key / past_value)."""
    return 24 if runner.cache == "static" else 23


def window_fact(runner) -> list[ApiFact]:
    """The window argument of the Attention schema this runner's graphs import: none in
    Attention-23 / 24 (left_window_size / right_window_size arrive in Attention-25, run in
    onnx.attention-op.*); a schema with one gives no fact (the ledger reads it then)."""
    from onnx import defs

    schema = defs.get_schema("Attention", _opset(runner), "")
    names = sorted(schema.attributes)
    if any("window" in n for n in names):
        return []
    return [ApiFact("window_argument", NA, f"the Attention-{schema.since_version} schema "
                    f"(opset {_opset(runner)}, the one this runner's graphs import) has the "
                    f"attributes {', '.join(names)}: no window (left_window_size / "
                    "right_window_size arrive in Attention-25, run in onnx.attention-op.*)")]


def padding_fact(runner) -> list[ApiFact]:
    """The key-padding input of the schema this runner's graphs import: Attention-24's
    nonpad_kv_seqlen (valid key counts), or none in Attention-23 (padding goes into
    attn_mask); a schema the reading does not fit gives no fact."""
    from onnx import defs

    schema = defs.get_schema("Attention", _opset(runner), "")
    inputs = {i.name: i.description for i in schema.inputs}
    where = (f"the Attention-{schema.since_version} schema (the one this runner's graphs "
             f"import) has the inputs {', '.join(inputs)}")
    pad = [n for n in inputs if "pad" in n or "seqlen" in n]
    if not pad:
        return [ApiFact("padding_argument", NA, f"{where}: no key-padding input "
                        "(nonpad_kv_seqlen comes with Attention-24): padding goes into "
                        "attn_mask (True = attend)")]
    if pad != ["nonpad_kv_seqlen"]:
        return []
    said = " ".join(inputs["nonpad_kv_seqlen"].split()).split(". ")[0]
    return [ApiFact("padding_argument", "lengths", f"{where}: nonpad_kv_seqlen: \"{said}\"; "
                    "the runner gives the case's valid key lengths")]


def padded_score_fact(runner) -> list[ApiFact]:
    """The number the external cache's Attention-24 writes into the scores of the keys past
    each item's nonpad_kv_seqlen, shown by its qk_matmul_output at mode 2 (the scores after
    the mask, before the softmax): the one-call rows' masked_score, read where this row's
    mask is (the ledger's mask_fill probe names a tie of the outputs with it)."""
    from dataclasses import replace

    import numpy as np

    from conformance.oracle.canonical import case_data
    from conformance.runners.onnx.attention_op import attention_plan, build_model
    from conformance.runners.onnx.attention_op_facts import facts_case, held_number, held_text

    case, lengths = facts_case("static-padded-score"), (4, 2)
    plan = replace(attention_plan(case), nonpad=lengths, qk_mode=2)
    model, feed = build_model(case, case_data(case), plan)
    scores = np.asarray(runner.execute(model, feed, case.inputs.dtype)[1], np.float64)
    padded = np.arange(case.inputs.key_len)[None, :] >= np.array(lengths)[:, None]
    held = scores[np.broadcast_to(padded[:, None, None, :], scores.shape)]
    return [ApiFact("masked_score", held_number(held), f"Attention-24 graph in "
                    f"{runner.backend}: qk_matmul_output at mode 2 (scores after the mask, "
                    f"before the softmax), nonpad_kv_seqlen={list(lengths)} over S = "
                    f"{case.inputs.key_len} keys: the {held.size} scores of keys past each "
                    f"item's length hold {held_text(held)}")]


def facts(runner) -> list[ApiFact]:
    """The cache rows' facts in place of the one-call op's of the same name; the external
    cache's the number its padded keys' scores hold too."""
    static = padded_score_fact(runner) if runner.cache == "static" else []
    return window_fact(runner) + padding_fact(runner) + static
