"""Probes of the ONNX `Attention` cache runners (attention_cache.py), through the runner's
own translate and run: a prefill of 3 and one step (cache_causal_alignment, cache_layout;
is_causal=1 at every run, the graph's attribute as its users run it: onnx/cache_probes.py);
for the external-cache rows (Attention-24, nonpad_kv_seqlen) also the errata of
onnx/onnx#8068 on a one-call graph (causal_flag: is_causal=1 with nonpad_kv_seqlen = S for
T=3 < S=5), key padding given as lengths, and an item with nonpad_kv_seqlen = 0.
The other cells are the Attention op's (attention_op's probes on its plain graph) and the
mask-encoding probes (conventions/probes/masks.py) through this runner's own translate.
"""
from __future__ import annotations

from dataclasses import replace

import numpy as np

from conformance.case.model import Decode
from conformance.contract import cache_probes as cp
from conformance.contract.axes import NA, NOT_PROBED
from conformance.contract.probing import causal_candidates, closest, output_with, probe_case
from conformance.contract.runner import Convention, Translation
from conformance.oracle.canonical import case_data
from conformance.runners.onnx.cache_graphs import ATTENTION_DOC, ERRATA

SPEC = {"documented_source": ATTENTION_DOC}
WORDS = {"past": "two tensors (past_key, past_value in; present_key, present_value out)",
         "static": "two preallocated tensors (key and value caches written by TensorScatter, "
                   "returned whole)"}


def _run(runner, case, plan=None):
    t = runner.translate(case) if plan is None else Translation("probe", plan)
    return runner.run(case, t, case_data(case))


def cache_cells(runner) -> list[Convention]:
    case = replace(cp.decode_case(), decode=Decode(cp.PREFILL, 1))
    obs = _run(runner, case)
    out = np.asarray(obs.output, np.float64)
    shapes = [tuple(int(n) for n in s) for s in _shapes(obs.extras["cache_layout"])]
    what = f"{runner.name}: {WORDS[runner.cache]}, is_causal=1 at every run"
    align = cp.cache_alignment(case, out[:, -1:], what, out[:, :-1], documented="lower_right",
                               **SPEC)
    layout = Convention("cache_layout", cp.layout_words(
        case, shapes, WORDS[runner.cache], preallocated=runner.cache == "static"),
        f"{what}: present_key {shapes[0]} after the prefill, {shapes[-1]} after the step",
        **SPEC)
    return [align, layout]


def _shapes(text: str) -> list[tuple]:
    import ast

    return ast.literal_eval(text.split(": ", 1)[1])


def errata_cells(runner) -> list[Convention]:
    """The external-cache cells of the static rows (one Attention-24 call each)."""
    from conformance.runners.onnx.attention_op import AttentionPlan

    case = probe_case("external-cache-causal", mask={"causal": "upper_left"})
    b, t, s = case.inputs.batch, case.inputs.query_len, case.inputs.key_len
    a = case.attention
    plan = AttentionPlan(a.num_heads, a.num_kv_heads, is_causal=True, nonpad=(s,) * b)
    causal = closest("causal_flag", _run(runner, case, plan).output, causal_candidates(case),
                     f"{runner.name}: is_causal=1 with nonpad_kv_seqlen={[s] * b} and no "
                     f"past_key (an external cache), T={t} < S={s}; the errata {ERRATA} "
                     "makes the offset nonpad_kv_seqlen - q_sequence_length",
                     documented="lower_right", **SPEC)
    pad = probe_case("nonpad-lengths", mask={"key_padding": [5, 2]})
    valid = np.arange(s)[None, :] < np.array([5, 2])[:, None]
    allowed = np.broadcast_to(valid[:, None, :], (b, t, s))
    lengths = closest("key_padding_polarity", _run(runner, pad).output, {
        "lengths": output_with(pad, allowed), "true_blocks": output_with(pad, ~allowed)},
        f"{runner.name}: nonpad_kv_seqlen=[5, 2] (the valid keys of each item, right-padded)",
        documented="lengths", **SPEC)
    return [causal, lengths, _empty_item(runner)]


def _empty_item(runner) -> Convention:
    """Item 1 with nonpad_kv_seqlen = 0: every query row of it has no key."""
    from conformance.oracle.reference import attention

    case = probe_case("nonpad-zero", mask={"key_padding": [5, 0]})
    out = np.asarray(_run(runner, case).output, np.float64)[1]
    what = f"{runner.name}: nonpad_kv_seqlen=[5, 0], item 1 has no valid key"
    if np.isnan(out).all():
        return Convention("fully_masked_row", "nan", f"{what}: NaN", **SPEC)
    exp = attention(case)
    return closest("fully_masked_row", out, {
        "zeros": exp.output_if_zeros[1], "uniform": exp.output_if_uniform[1],
        "unmasked": output_with(case, None)[1]}, what, documented="zeros", **SPEC)


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


def cache_runner_cells(runner) -> list[Convention]:
    cells = cache_cells(runner) + [window_schema_cell(runner)]
    if runner.cache == "static":
        return cells + errata_cells(runner)
    return cells + [Convention("fully_masked_row", NOT_PROBED, "harness limit: the runner "
                               "runs causal decodes only (translate refuses any other case), "
                               "where every query sees at least its own key; the Attention "
                               "op's own fully masked row is onnx.attention-op.*'s cell")]
