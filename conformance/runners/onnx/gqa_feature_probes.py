"""The probes of onnxruntime's GroupQueryAttention for softcaps, sinks and windows:
its `softcap` attribute and where it sits against the mask, its `head_sink` input, its
`local_window_size` read as keys counted and a fully masked row of `attention_bias`.  Each
runs the runner's own graph in onnxruntime and names the reading of the oracle it matches.
Its past/present cache is the ledger's (conventions/probes/cache.py asks the runner's own
decode).
"""
from __future__ import annotations

from dataclasses import replace

import numpy as np

from conformance.contract import cache_probes as cp
from conformance.contract.probing import closest, output_with, probe_case
from conformance.contract.runner import Convention, Translation

DOC = {"documented_source": "https://github.com/microsoft/onnxruntime/blob/main/docs/"
                            "ContribOperators.md#com.microsoft.GroupQueryAttention"}
WHAT = "GroupQueryAttention probe graph in onnxruntime"
CAP = 2.0  # small enough that a cap after a -1e4 mask would leave the masked keys in play


def _case(name: str, **sections):
    """2 heads of 8 (the CPU kernel's head sizes are multiples of 8), self-attention."""
    sections.setdefault("inputs", {})
    sections["inputs"] = {"self_attention": True, "query_len": 6, "key_len": 6,
                          **sections["inputs"]}
    att = {"num_heads": 2, "query_features": 16, **sections.pop("attention", {})}
    return probe_case(f"gqa-{name}", attention=att, **sections)


def _run(runner, case, **plan):
    from conformance.oracle.canonical import case_data

    t = Translation("probe", replace(runner.translate(case).plan, **plan))
    return np.asarray(runner.run(case, t, case_data(case)).output, np.float64)


def _with(case, **att):
    return replace(case, attention=replace(case.attention, **att))


def softcap_cells(runner) -> list[Convention]:
    case = _case("softcap")
    out = _run(runner, case, softcap=CAP)
    applied = closest("softcap", out, {"applied": output_with(_with(case, softcap=CAP), None),
                                       "ignored": output_with(case, None)},
                      f"{WHAT}: softcap={CAP}, no mask", **DOC)
    masked = _case("softcap-order", mask={"attn_mask": {"random": 0.5}, "fill": "-1e4"})
    from conformance.oracle.canonical import case_data

    add = np.where(case_data(masked).inputs.allowed, 0.0, -1e4)
    order = cp.softcap_order(masked, CAP, add, _run(runner, masked, softcap=CAP),
                             f"{WHAT}, attention_bias 0 / -1e4", **DOC)
    return [applied, order]


def sinks_cell(runner) -> Convention:
    case = _case("sinks", attention={"sinks": True})
    out = _run(runner, case, head_sink=True)
    return closest("sinks", out, {"applied": output_with(case, None),
                                  "ignored": output_with(_with(case, sinks=False), None)},
                   f"{WHAT}: head_sink = the canonical sink logits (H,)", **DOC)


def window_cell(runner) -> Convention:
    case = _case("window", inputs={"query_len": 8, "key_len": 8},
                 mask={"causal": "upper_left"})
    return cp.window_width(3, {"local_window_size=3, causal=1": (
        case, lambda: _run(runner, case, local_window_size=3))},
        f"{WHAT} (the window counts the current token since https://github.com/microsoft/"
        "onnxruntime/pull/25927, 'Fix Local Attention off by 1 bug', 1.23: w + 1 keys "
        "before)", **DOC)


def fully_masked_cell(runner) -> Convention:
    """Row 2 of every item masked through attention_bias (0 / finfo.min)."""
    from conformance.oracle.reference import attention

    case = _case("masked-row", mask={"masked_rows": [2]})
    out = _run(runner, case)[:, 2]
    exp = attention(case)
    if np.isnan(out).all():
        return Convention("fully_masked_row", "nan", f"{WHAT}: row 2 fully masked through "
                          "attention_bias (finfo.min): NaN", **DOC)
    return closest("fully_masked_row", out, {
        "zeros": exp.output_if_zeros[:, 2], "uniform": exp.output_if_uniform[:, 2],
        "unmasked": output_with(case, None)[:, 2]},
        f"{WHAT}: row 2 fully masked through attention_bias (finfo.min)", **DOC)


def gqa_feature_cells(runner) -> list[Convention]:
    """The cache's alignment and layout are the ledger's (the runner's ledger_axes)."""
    return [*softcap_cells(runner), sinks_cell(runner), window_cell(runner),
            fully_masked_cell(runner)]

