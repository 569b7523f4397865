"""What the ONNX `Attention` cache runners' graphs show with no oracle (attention_cache.py):
the window attribute absent from the schema their graphs import (Attention-23 / 24), the
external cache's valid lengths as the schema states nonpad_kv_seqlen (the ledger's
padding.py confirms the reading by asking), and for the past/present rows that no probe
case reaches a fully masked row.  The ledger asks the cache axes, the external cache's
fully masked item and its causal switch (conventions/probes/).  onnx inside the functions.
"""
from __future__ import annotations

from conformance.contract.axes import NA, NOT_PROBED
from conformance.contract.runner import Convention
from conformance.runners.onnx.cache_graphs import ATTENTION_DOC

SPEC = {"documented_source": ATTENTION_DOC}


def window_schema_cell(runner) -> Convention:
    """window_width read from the schema of the Attention version this runner's graphs
    use (23 / 24: no window attribute; Attention-25's run in onnx.attention-op.*)."""
    from onnx import defs

    opset = 24 if runner.cache == "static" else 23
    schema = defs.get_schema("Attention", opset, "")
    names = sorted(schema.attributes)
    window = [n for n in names if "window" in n]
    if window:  # a schema with a window: this runner does not build it
        return Convention("window_width", NOT_PROBED, f"harness limit: Attention-"
                          f"{schema.since_version} takes {', '.join(window)}; this runner's "
                          "graphs set none", **SPEC)
    return Convention("window_width", NA, f"the Attention-{schema.since_version} schema "
                      f"(opset {opset}, the one this runner's graphs import) has the "
                      f"attributes {', '.join(names)}: no window (left_window_size / "
                      "right_window_size arrive in Attention-25, run in onnx.attention-op.*)",
                      **SPEC)


def no_padding_cell() -> Convention:
    """key_padding_polarity of the past/present rows: the Attention-23 schema's inputs."""
    from onnx import defs

    inputs = [i.name for i in defs.get_schema("Attention", 23, "").inputs]
    pad = [n for n in inputs if "pad" in n or "seqlen" in n]
    return Convention("key_padding_polarity", NA if not pad else NOT_PROBED, "the Attention-23 "
                      f"schema (the one this runner's graphs import) has the inputs "
                      f"{', '.join(inputs)}: " + ("no key-padding input (nonpad_kv_seqlen "
                      "comes with Attention-24): padding goes into attn_mask (True = attend)"
                      if not pad else f"{', '.join(pad)} (not asked here)"), **SPEC)


def facts(runner) -> list[Convention]:
    cells = [window_schema_cell(runner)]
    if runner.cache == "static":
        return cells + [Convention(
            "key_padding_polarity", "lengths", "Attention-24 schema: nonpad_kv_seqlen (B,) "
            "int64, the number of valid (non-padded) keys of each item; the runner gives the "
            "case's valid key lengths", documented="lengths", **SPEC)]
    return cells + [no_padding_cell(),
        Convention("fully_masked_row", NOT_PROBED, "harness limit: the runner "
                               "runs causal decodes only (translate refuses any other case), "
                               "where every query sees at least its own key; the Attention "
                               "op's own fully masked row is onnx.attention-op.*'s cell")]
