"""Convention probes of the ONNX runners (Runner.conventions): the ONNX `Attention` op graphs
(onnx.attention-op.ort / .reference) and nn.MultiheadAttention exported by torch.onnx
(onnx.torch-export*), each run with one input passed raw; the cell is the reading the
graph's output matches (probes.closest), with every distance quoted.

Attention op: the runner's own graph (its `build(case)`), with the node's attributes set
here (softcap, qk_matmul_output_mode, scale) and the attn_mask input made float where the
probe needs it; the runner's `execute` runs it in its engine.  The axes of the raw
arguments a runner answers (Runner.answers: the one-call rows) are the ledger's
(conventions/probes/flags.py); the cache rows, which answer none, keep these probes'
cells.  softcap and every qk_matmul_output_mode are compared with NumPy candidates
computed from the canonical weights (scores, softcapped scores, + mask, softmax).

Exports: five small graphs per runner (bool attn_mask with the default call, key padding,
float mask, is_causal with a non-causal mask, a float64 module), exported with the
runner's own exporter and cached in the export cache (conformance/cache.py), so a warm
run does no export.  Where onnxruntime fails inside a graph, the cell reads the graph in
onnx.reference and quotes ORT's message.  Axes the matrix rows settle (fully_masked_row,
float64_compute, parameter_formula, weight_layout, refusals) are left to ledger.py.
"""
from __future__ import annotations

import numpy as np

from conformance.contract.axes import NA
from conformance.contract.runner import Convention
from conformance.contract.probing import (
    causal_candidates, closest, distances, feature_cells_from_names, nearest, output_with,
    probe_case, probe_mask)
from conformance.oracle.canonical import case_data, causal_mask
from conformance.contract import probe_cells as _ledger
from conformance.runners._export.onnx_runtime import split_scale, tried

SPEC = "https://onnx.ai/onnx/operators/onnx__Attention.html"
OP_DOC = {"documented_source": SPEC}
SOFTCAP = 1.0  # small enough that c * tanh(s / c) differs from s by ~0.1 on these scores
MODE_MASK = -2.0  # a finite additive mask, so "mask added" is visible in the scores


# ---- NumPy candidates for softcap and qk_matmul_output (canonical weights, float64)


def _projected(case):
    d = case_data(case)
    x, w = d.inputs, d.weights

    def proj(inp, wt, b):
        y = np.einsum("bte,hed->bhtd", inp, wt)
        return y if b is None else y + b[None, :, None, :]

    q, k, v = proj(x.query, w.wq, w.bq), proj(x.key, w.wk, w.bk), proj(x.value, w.wv, w.bv)
    return q @ k.transpose(0, 1, 3, 2) / np.sqrt(case.attention.qk_head_dim), v, w


def _softmax(s):
    e = np.exp(s - s.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


def score_candidates(case, add: np.ndarray) -> dict[str, np.ndarray]:
    """(B, H, T, S) readings of qk_matmul_output with softcap SOFTCAP and additive mask `add`
    ((B, T, S)), and the outputs of softcap applied or ignored."""
    s, v, w = _projected(case)
    capped, m = SOFTCAP * np.tanh(s / SOFTCAP), add[:, None]

    def out(p):
        y = np.einsum("bhtd,hdo->bto", p @ v, w.wo)
        return y if w.bo is None else y + w.bo

    return {"qk": s, "softcapped": capped, "softcapped+mask": capped + m, "qk+mask": s + m,
            "softmax": _softmax(capped + m), "softmax(no softcap)": _softmax(s + m),
            "out:applied": out(_softmax(capped + m)), "out:ignored": out(_softmax(s + m))}


# ---- the Attention op graphs


def _set_node(model, **attrs):
    """A copy of `model` with the Attention node's attributes set (others kept)."""
    import onnx
    from onnx import helper

    model = onnx.ModelProto.FromString(model.SerializeToString())
    node = next(n for n in model.graph.node if n.op_type == "Attention")
    kept = [a for a in node.attribute if a.name not in attrs]
    del node.attribute[:]
    node.attribute.extend(kept + [helper.make_attribute(k, v) for k, v in attrs.items()])
    return model


def _float_mask_input(model):
    from onnx import TensorProto

    for i in model.graph.input:
        if i.name == "attn_mask":
            i.type.tensor_type.elem_type = TensorProto.FLOAT
    return model


class OpProbe:
    """Runs the runner's Attention graph for a probe case, with attributes and feeds set."""

    def __init__(self, engine: str, build, execute):
        self.engine, self.build, self.execute = engine, build, execute
        where = "onnxruntime" if engine == "ort" else "onnx.reference"
        self.what = f"Attention-23 probe graph in {where}"

    def run(self, case, mask=None, float_mask=False, feed=None, **attrs):
        model, base = self.build(case)
        model = _set_node(model, **attrs) if attrs else model
        if float_mask:
            model = _float_mask_input(model)
        if mask is not None:
            base["attn_mask"] = mask[:, None]
        out, weights = self.execute(model, {**base, **(feed or {})}, case.inputs.dtype)
        return np.asarray(out, np.float64), np.asarray(weights, np.float64)


def _op_mask_cells(p: OpProbe, answered: frozenset[str] = frozenset()) -> list[Convention]:
    """attn_mask_polarity and float_mask only where the runner does not answer attn_mask
    raw (the cache rows; the one-call rows answer it and the ledger judges those axes)."""
    case = probe_case("op-mask", mask={"attn_mask": {"random": 0.5}})
    m, x = probe_mask(case), case_data(case).inputs
    cells = [] if "attn_mask" in answered else [
        _ledger.mask_polarity(case, lambda mm: p.run(case, mm)[0],
                              f"{p.what}, bool attn_mask (B, 1, T, S) fed raw",
                              documented="true_attends", **OP_DOC),
        _ledger.float_mask(case, lambda fm: p.run(case, fm.astype(np.float32),
                                                  float_mask=True)[0],
                           f"{p.what}, float attn_mask (B, 1, T, S) 0 / -1e9",
                           documented="added", **OP_DOC)]
    out = p.run(case, m)[0]
    swapped = p.run(case, m, feed={"key": x.value.astype(np.float32),
                                   "value": x.key.astype(np.float32)})[0]
    cells.append(closest("argument_order", output_with(case, m),
                         {"query_key_value": out, "query_value_key": swapped},
                         f"{p.what}: node inputs (Q, K, V, attn_mask); graph fed key/value as "
                         "given and swapped", documented="query_key_value", **OP_DOC))
    full = _ledger.matches(case, p.run(case, np.ones_like(m))[0])
    cells.append(Convention("input_layout", "batch_first", f"{p.what}: 3-D Q (B, T, H*d_k) "
                            f"read batch-first: {full:.1e}"
                            " from the oracle (4-D inputs are (B, H, T, d): batch_heads_first)",
                            documented="batch_first", **OP_DOC))
    one = p.run(case, m, scale=1.0)[0]
    d = distances(one, {"inv_sqrt_head_dim": output_with(case, m),
                        "none": output_with(case, m, scale=1.0)})
    dflt = distances(out, {"inv_sqrt_head_dim": output_with(case, m)})["inv_sqrt_head_dim"]
    cells.append(Convention("softmax_scale", "configurable", f"{p.what}: attribute scale; "
                            f"default: inv_sqrt_head_dim ({dflt:.1e} from the oracle); scale=1.0:"
                            f" none {d['none']:.1e}, inv_sqrt_head_dim "
                            f"{d['inv_sqrt_head_dim']:.1e}", documented="configurable", **OP_DOC))
    cells.append(tried("unbatched_input", lambda: p.run(case, m[0][None], feed={
        n: np.float32(v[0]) for n, v in (("query", x.query), ("key", x.key), ("value", x.value))}),
        f"{p.what}: 2-D (T, E) inputs (spec: Q is 3-D or 4-D)"))
    cells.append(tried("mixed_dtype", lambda: p.run(case, m, feed={
        "query": x.query, "key": x.key, "value": x.value}),
        f"{p.what}: float64 inputs fed to the float32 graph"))
    return cells


def _modes(p: OpProbe) -> list[Convention]:
    """softcap=SOFTCAP with a finite float mask, qk_matmul_output_mode 0..3."""
    case = probe_case("op-softcap", mask={"attn_mask": {"random": 0.5}})
    add = np.where(probe_mask(case), 0.0, MODE_MASK).astype(np.float32)
    cands = score_candidates(case, add.astype(np.float64))
    seen, texts, out = {}, [], None
    for mode in range(4):
        out, w = p.run(case, add, float_mask=True, softcap=SOFTCAP, qk_matmul_output_mode=mode)
        d = distances(w, {k: v for k, v in cands.items() if not k.startswith("out:")})
        seen[mode] = min(d, key=d.get)
        figures = ", ".join(f"{k} {v:.1e}" for k, v in d.items())
        texts.append(f"mode {mode}: {seen[mode]} ({figures})")
    do = distances(out, {k[4:]: v for k, v in cands.items() if k.startswith("out:")})
    spec0 = ("follows the spec text (mode 0 = 'the output of qk matmul', before softcap)"
             if seen[0] == "qk" else "departs from the spec text (mode 0 = 'the output of qk "
             f"matmul', before softcap): it returns {seen[0]}")
    cap = Convention("softcap", min(do, key=do.get),
                     f"{p.what}, softcap={SOFTCAP}, float mask 0/{MODE_MASK}: output "
                     f"{', '.join(f'{k} {v:.1e}' for k, v in do.items())}; "
                     f"qk_matmul_output at mode 0 {spec0}; " + "; ".join(texts),
                     documented="applied", **OP_DOC)
    weights = Convention("returned_weights", "per_head", f"{p.what}: 4th output "
                         "qk_matmul_output (B, H, T, S) per head; softmax weights at mode 3 "
                         f"(the runner's); softcap={SOFTCAP}, float mask 0/{MODE_MASK}: "
                         f"mode 0 {spec0}; " + "; ".join(texts) + "; " + _causal_mode2(p))
    return [cap, weights]


def _causal_mode2(p: OpProbe) -> str:
    """qk_matmul_output at mode 2 (scores after the mask) with is_causal=1: what the
    causally masked positions hold (the spec's backend test data: -inf)."""
    case = probe_case("op-causal-mode2", mask={"causal": "upper_left"})
    _, w = p.run(case, qk_matmul_output_mode=2)
    i = case.inputs
    hidden = ~causal_mask(i.query_len, i.key_len, "upper_left")
    held = w[:, :, hidden]
    kinds = sorted({"-inf" if v == -np.inf else f"{v:.8g}" for v in held.ravel()})
    return (f"mode 2 with is_causal=1 (T=3, S=5): the {held.size} causally masked positions "
            f"hold {', '.join(kinds)} (the spec's test data: -inf)")


def _fill_word(held: np.ndarray) -> str:
    values = set(held.ravel().tolist())
    named = {"-inf": -np.inf, "finfo_min": float(np.finfo(np.float32).min), "-1e9": -1e9,
             "-1e4": -1e4}
    return next((w for w, v in named.items() if values == {v}), "other")


def _mask_fill(p: OpProbe) -> Convention:
    """What the masked scores hold right before the softmax, read directly:
    qk_matmul_output at mode 2 (the scores after the mask and softcap) with a bool
    attn_mask, and with is_causal=1 (quoted).  The output alone cannot tell -inf from
    finfo_min (both give the same softmax); the ONNX spec's test data holds -inf there."""
    case = probe_case("op-mask", mask={"attn_mask": {"random": 0.5}})
    m = probe_mask(case)
    _, w = p.run(case, m, qk_matmul_output_mode=2)
    held = w[~np.broadcast_to(m[:, None], w.shape)]
    kinds = sorted({"-inf" if v == -np.inf else f"{v:.8g}" for v in held.ravel()})
    return Convention("mask_fill", _fill_word(held),
                      f"{p.what}: qk_matmul_output at mode 2 (scores after the mask, before "
                      f"the softmax), bool attn_mask: the {held.size} masked positions hold "
                      f"{', '.join(kinds)}; {_causal_mode2(p)}")


def _scale_precision(p: OpProbe) -> Convention:
    """float64 graph, d_k = 3, default scale: the scores (qk_matmul_output_mode=0) read
    with 1/sqrt(3) in float64 or rounded through float32 (the output quoted beside)."""
    c64 = probe_case("scale-precision", attention={"num_heads": 2, "query_features": 6},
                     inputs={"dtype": "float64", "self_attention": True, "key_len": 3})
    out, scores = p.run(c64, qk_matmul_output_mode=0)
    exact = 1 / np.sqrt(3.0)
    s = _projected(c64)[0]
    d = distances(scores, {"float64": s, "float32_rounded": s * (float(np.float32(exact)) / exact),
                           "float32_rounded (split)": s * (split_scale(3) / exact)})
    cell = nearest("scale_precision", d, f"{p.what}: float64 graph, d_k = 3, default scale, "
                   "scores (qk_matmul_output_mode=0)")
    cell = Convention(cell.axis, cell.value.split(" ")[0], cell.evidence)
    best = min(d.values())
    noisy = ("; neither reading within 1e-12: the kernel computes float64 scores below "
             "float64, so the scale's own rounding is not separable" if best > 1e-12 else "")
    return Convention(cell.axis, cell.value, f"{cell.evidence}; output "
                      f"{_ledger.matches(c64, out):.1e} from the float64 oracle{noisy}")


def float64_readings(case, out) -> dict[str, float]:
    """Distances of a float64 output from the oracle at the exact scale, the float32-rounded
    scale and the split scale (split_scale): the ledger's conventions/probes/float64.py
    reads the same three scales for every runner it asks; this copy goes when this
    module's probes move to the ledger."""
    d = case.attention.qk_head_dim
    return distances(out, {"exact scale": output_with(case, None),
                           "float32 scale": output_with(case, None,
                                                        scale=float(np.float32(1 / np.sqrt(d)))),
                           "split float32 scale": output_with(case, None, scale=split_scale(d))})


def float64_cell(run, what: str) -> Convention:
    """float64_compute from float64 probe graphs at head sizes 2, 3, 5 (`run(case) ->
    output`): float64 when, at every size, one scale reading is within 1e-12 (the
    arithmetic is float64 whichever way the scale was rounded)."""
    worst, texts = 0.0, []
    for d in (2, 3, 5):
        case = probe_case(f"float64-d{d}", attention={"num_heads": 2, "query_features": 2 * d},
                          inputs={"dtype": "float64", "self_attention": True, "key_len": 3})
        r = float64_readings(case, run(case))
        best = min(r, key=r.get)
        worst = max(worst, r[best])
        texts.append(f"d={d}: {best} {r[best]:.1e} (" + ", ".join(
            f"{k} {v:.1e}" for k, v in r.items() if k != best) + ")")
    word = "float64" if worst < 1e-12 else "below_float64"
    return Convention("float64_compute", word, f"{what}: float64 graph against the float64 "
                      f"oracle under three readings of the scale; " + "; ".join(texts))


NONPAD = (5, 2)  # valid keys of the two items of the key-padding probe


def nonpad_cell(what: str, run) -> Convention:
    """key_padding_polarity from Attention-24's nonpad_kv_seqlen (B,) (kept in Attention-25):
    `run(case, lengths) -> output` of the runner's graph with that input; read as valid
    lengths, inverted, or not applied (ignored)."""
    case = probe_case("op-nonpad", mask={"key_padding": list(NONPAD)})
    i = case.inputs
    valid = np.arange(i.key_len)[None, :] < np.array(NONPAD)[:, None]
    keys = np.broadcast_to(valid[:, None, :], (i.batch, i.query_len, i.key_len))
    return closest("key_padding_polarity", np.asarray(run(case, NONPAD), np.float64), {
        "lengths": output_with(case, keys), "true_blocks": output_with(case, ~keys),
        "ignored": output_with(case, None)},
        f"{what}: Attention-24 nonpad_kv_seqlen={list(NONPAD)} (the valid keys of each item, "
        "right-padded; no attn_mask)", documented="lengths", **OP_DOC)


def attention_op_cells(engine: str, build, execute, nonpad=None,
                       answered: frozenset[str] = frozenset()) -> list[Convention]:
    """Every probe of an Attention-op runner; `build(case) -> (model, feed)` and
    `execute(model, feed, dtype) -> (output, weights)` are the runner's own; `nonpad(case,
    lengths) -> output` runs its graph with Attention-24's nonpad_kv_seqlen (None: the
    runner's graphs are opset 23, which has no key-padding input).  `answered`: the raw
    arguments (Runner.answers) the runner passes for the ledger's probes, whose axes are
    left out here (attn_mask: attn_mask_polarity, float_mask; is_causal: causal_flag)."""
    p = OpProbe(engine, build, execute)
    cells = _op_mask_cells(p, answered) + _modes(p)
    if "is_causal" not in answered:
        causal = probe_case("op-causal", mask={"causal": "upper_left"})
        cells.append(closest("causal_flag", p.run(causal)[0], causal_candidates(causal),
                             f"{p.what}: is_causal=1, T=3 != S=5, no past_key",
                             documented="upper_left", **OP_DOC))
    cells.append(_scale_precision(p))
    cells.append(_mask_fill(p))
    cells.append(float64_cell(lambda c: p.run(c)[0], p.what))
    cells += [
        Convention("size_arguments", "given_tensors", f"{p.what}: the node takes projected Q, "
                   "K, V (the projections are MatMul nodes of the graph); q_num_heads / "
                   "kv_num_heads split the hidden width: head_size = q_hidden_size / "
                   "q_num_heads", documented="given_tensors", **OP_DOC),
        nonpad_cell(p.what.replace("Attention-23 probe graph", "probe graph"), nonpad)
        if nonpad else
        Convention("key_padding_polarity", NA, "Attention-23 has no key-padding input (its "
                   "inputs: Q, K, V, attn_mask, past_key, past_value; nonpad_kv_seqlen comes "
                   "with Attention-24): padding goes into attn_mask (True = attend), "
                   "broadcastable to (B, H, T, S)", **OP_DOC),
        Convention("dropout", NA, "Attention-23 has no dropout attribute or input", **OP_DOC),
        Convention("weights_dropout", NA, "Attention-23 has no dropout", **OP_DOC),
        Convention("implicit_mask", "none", "ONNX graph inputs are plain tensors: no mask "
                   "travels with them")]
    return cells + position_head_cells(p) + attention_schema_features()


PROBED_AXES = ("softcap", "kv_head_mapping", "rope_style", "rope_partial", "qk_norm_scope")


def attention_schema_features() -> list[Convention]:
    """The feature axes read from the installed ONNX Attention-23 schema's attributes and
    inputs (onnx.defs); softcap and the axes of position_head_cells are probed."""
    import onnx.defs

    schema = onnx.defs.get_schema("Attention", 23, "")
    names = list(schema.attributes) + [i.name for i in schema.inputs]
    return feature_cells_from_names("ONNX Attention-23 (onnx.defs schema)", names,
                                    "attributes and inputs", skip=PROBED_AXES)


def position_head_cells(p: OpProbe) -> list[Convention]:
    """kv_num_heads with distinct kv-head weights; RotaryEmbedding-23 (interleaved 0 / 1,
    rotary_embedding_dim) and RMSNormalization-23 (per head through a reshape, or over
    the projection) in front of the node: the graph a user writes for a Llama-style layer."""
    from conformance.contract import position_head_probes as php
    from conformance.runners.onnx.graph_parts import ROPE_DOC

    def run(case, data=None):
        model, feed = p.build(case, data)
        return np.asarray(p.execute(model, feed, case.inputs.dtype)[0], np.float64)

    gqa = php.gqa_case()
    cells = [php.kv_head_mapping(gqa, lambda: run(gqa), f"{p.what}, Attention(q_num_heads=4, "
                                "kv_num_heads=2)", documented="grouped", **OP_DOC)]
    half, inter = php.rope_case("half_split"), php.rope_case("interleaved")
    rope = {"documented_source": ROPE_DOC}
    cells.append(php.rope_style(half, {"RotaryEmbedding(interleaved=0)": lambda: run(half),
                                      "RotaryEmbedding(interleaved=1)": lambda: run(inter)},
                               f"{p.what} after RotaryEmbedding-23", documented="choosable",
                               **rope))
    part = php.rope_case("half_split", rotary_dim=8)
    cells.append(php.rope_partial(part, lambda: run(part), f"{p.what} after RotaryEmbedding-23 "
                                 "(rotary_embedding_dim=8)", documented="supported", **rope))
    ph, ah = php.qk_norm_case("per_head"), php.qk_norm_case("all_heads")
    cells.append(php.qk_norm_scope(
        {"RMSNormalization(axis=-1) on (B, L, H, d)": (ph, lambda d: run(ph, d)),
         "RMSNormalization(axis=-1) on (B, L, H*d)": (ah, lambda d: run(ah, d))},
        f"{p.what} after RMSNormalization-23 (ONNX has no QK-norm attribute: the graph's "
        "reshape picks the scope)"))
    return cells

