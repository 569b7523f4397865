"""#20 probes of the ONNX attention graphs: the cache of `Attention`-23 (past_key /
past_value in, present_key / present_value out; onnxruntime's contrib MultiHeadAttention's
cache is asked by the ledger through its runner, onnx/contrib_mha_calls.py), and the order
of `Attention`'s softcap against a float mask.

Cache: the runner's own graph for a one-query step at position P = 3 whose first 3
projected keys/values go in as past_key/past_value (4-D) and the last as K/V, with the
node's causal switch on (`is_causal=1`): the switch is a node
attribute, so the graph its users run for the prefill and for every step carries it (the
users' decode), and the Attention schema aligns it to the past (onnx/defs, Attention-23:
"causal masking is applied with bottom-right (offset-aware) alignment: query `i` attends
key `j` iff `j <= i + past_sequence_length`").  The step's output names the alignment
(contract/cache_probes.py) and present_key's shape the layout.  The
prefill is the same graph with T = S = 3 and no past.  Softcap: softcap=1 with a finite
float mask 0 / -2, so softcap(s) + m and softcap(s + m) differ (the spec's reference
code caps before the mask; microsoft/onnxruntime#28379 changed ORT's CPU order).
onnx / onnxruntime are imported inside the functions.
"""
from __future__ import annotations

import numpy as np

from conformance.contract import cache_probes as cp
from conformance.contract.probing import probe_case, probe_mask
from conformance.contract.runner import Convention
from conformance.oracle.canonical import case_data

SPEC = {"documented_source": "https://onnx.ai/onnx/operators/onnx__Attention.html"}
CAP, FILL = 1.0, -2.0


def _with_outputs(model, *names: str):
    """A copy of `model` whose graph also outputs `names` (the node's present_*)."""
    import onnx
    from onnx import helper

    model = onnx.ModelProto.FromString(model.SerializeToString())
    elem = model.graph.output[0].type.tensor_type.elem_type
    model.graph.output.extend(helper.make_tensor_value_info(n, elem, None) for n in names)
    return model


def evaluate(engine: str, model, feed: dict, names: list[str]) -> list[np.ndarray]:
    if engine == "reference":
        from onnx.reference import ReferenceEvaluator

        return ReferenceEvaluator(model).run(names, feed)
    import onnxruntime as ort

    return ort_run(ort.InferenceSession(model.SerializeToString(),
                                        providers=["CPUExecutionProvider"]), feed, names)


def ort_run(session, feed, names):
    known = {i.name for i in session.get_inputs()}
    return session.run(names, {k: v for k, v in feed.items() if k in known})


def _step_rows(case, build, engine: str):
    """(prefill output, step output, present_key shape) of the Attention graph: the
    prefill a causal self-attention graph over the first P positions, the step a
    one-query graph whose first P keys/values are the past (lower-right offset)."""
    from dataclasses import replace

    data, n = case_data(case), case.inputs.query_len
    x = data.inputs.query.astype(np.float32)
    pre = replace(case, inputs=replace(case.inputs, query_len=n - 1, key_len=n - 1))
    model, feed = build(pre, data)
    prefill = evaluate(engine, model, {"query": x[:, :-1]}, ["output"])[0]
    step = replace(case, inputs=replace(case.inputs, query_len=1, self_attention=False),
                   mask=replace(case.mask, causal="lower_right"))
    model, feed = build(step, data)
    out, present = evaluate(engine, _with_outputs(model, "present_key"),
                             {"query": x[:, -1:], "key": x, "value": x},
                             ["output", "present_key"])
    return prefill, out, tuple(np.shape(present))


def attention_cache_cells(engine: str, build) -> list[Convention]:
    """`build(case, data) -> (model, feed)`: the runner's graph (attention_op.build_model
    with its plan); a lower_right case with S > T puts the first S - T keys in the past."""
    case = cp.decode_case()
    where = "onnxruntime" if engine == "ort" else "onnx.reference"
    what = f"Attention-23 graph in {where}, is_causal=1, past_key/past_value (B, H_kv, 3, d)"
    prefill, step, present = _step_rows(case, build, engine)
    align = cp.cache_alignment(case, step, what, prefill, documented="lower_right", **SPEC)
    past = (case.inputs.batch, case.attention.num_kv_heads, 3, case.attention.qk_head_dim)
    layout = Convention("cache_layout", cp.layout_words(
        case, [past, present], "two tensors (past_key, past_value in; present_key, "
        "present_value out)"), f"{what}: past_key {past} in, present_key {present} out "
        "(past concatenated with the step's key on axis 2; the caller feeds it back)", **SPEC)
    return [align, layout]


def softcap_order_cell(engine: str, p) -> Convention:
    """p: probes.OpProbe of the runner (its graph, its engine)."""
    case = probe_case("op-softcap", mask={"attn_mask": {"random": 0.5}})
    add = np.where(probe_mask(case), 0.0, FILL)
    out = p.run(case, add.astype(np.float32), float_mask=True, softcap=CAP)[0]
    return cp.softcap_order(case, CAP, add, out, f"{p.what}, qk_matmul_output_mode=3",
                            documented="before_mask", **SPEC)


def attention_op_cells_20(engine: str, build, execute) -> list[Convention]:
    """The cache, softcap-order and window cells of an Attention-op runner (its graph,
    engine)."""
    from conformance.runners.onnx.probes import OpProbe

    return attention_cache_cells(engine, build) + [
        softcap_order_cell(engine, OpProbe(engine, build, execute)),
        window_cell(engine, build, execute)]


def window_cell(engine: str, build, execute) -> Convention:
    """Attention-25 left_window_size=2, right_window_size=1 over 8 positions, no causal
    mask: the asymmetric band tells a left/right reading from every reading of one number
    (here 2) as keys counted."""
    from dataclasses import replace

    from conformance.case.model import Window
    from conformance.contract.probing import closest, output_with
    from conformance.oracle.positional import window_allowed

    plain = cp.window_case()
    case = replace(plain, mask=replace(plain.mask, window=Window(2, 1)))
    model, feed = build(case, case_data(case))
    out = np.asarray(execute(model, feed, "float32")[0], np.float64)
    pos = np.arange(plain.inputs.query_len)
    cands = {"left_right": output_with(plain, window_allowed(pos, pos, 2, 1)),
             **cp.window_candidates(plain, 2)}
    where = "onnxruntime" if engine == "ort" else "onnx.reference"
    cell = closest("window_width", out, cands, f"Attention-25 graph in {where}, "
                   "left_window_size=2, right_window_size=1, self-attention over 8 positions, "
                   "no causal mask (the others read the number 2)", documented="left_right",
                   **SPEC)
    return cell if cell.value != "no window" else replace(cell, value="not_applicable")
