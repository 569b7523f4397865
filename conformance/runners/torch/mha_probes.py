"""Convention probes of nn.MultiheadAttention (torch.mha, torch.mha.no-weights,
torch.mha.fastpath): each runs the module on a small seeded probe case with one
argument passed raw and names the reading the output matches, with figures.

`mode` "ordinary": train() with dropout 0 under no_grad (forward stays off the
fast path), forward with the runner's need_weights; "fast": eval under
inference_mode, need_weights=False, and every cell says whether the native fast
path ran (a spy on torch._native_multi_head_attention).  The axes the matrix
rows settle (fully_masked_row, float64_compute, parameter_formula,
weight_layout, refusals) are left to ledger.py.  torch arrives as an argument.
"""
from __future__ import annotations

from dataclasses import replace

import numpy as np

from conformance.contract.axes import DEPENDS, IGNORED, NA, NOT_PROBED, REFUSED
from conformance.contract.runner import Convention, to_numpy
from conformance.contract.probing import (
    causal_candidates, closest, distances, output_with, probe_case, probe_mask, refusal)
from conformance.oracle.canonical import case_data
from conformance.contract import probe_cells as _ledger
from conformance.runners.torch.common import fast_call
from conformance.runners._export.torch_mha import (
    MHA_DOC, float_mask_cell, key_padding_cell, per_head, probe_mha, scale_precision_cell,
    scale_probe_case)

DOC = {"documented_source": MHA_DOC}
SELF = {"self_attention": True, "query_len": 5, "key_len": 5}
# torch's own reasons for declining the fast path (`why_not_fast_path` in
# MultiheadAttention.forward, torch/nn/modules/activation.py, torch 2.13 lines 1326-1395):
# no error is raised, forward falls back to the ordinary path, so a fast-path cell that
# needs one of these is the fast path's refusal, quoted (as the runner's refusals cell
# counts the rows that fall back)
DECLINES = {"float_mask": "floating-point masks are not supported for fast path.",
            "unbatched": "input not batched; expected query.dim() of 3 but got 2",
            "training": "training is enabled"}


def declined(axis: str, why: str, what: str, then: str) -> Convention:
    """A fast-path cell torch declines: `refused`, quoting torch's reason, and what the
    ordinary path it falls back to does instead (`then`)."""
    return Convention(axis, REFUSED, f"{what}: torch declines the fast path "
                      f"(why_not_fast_path: '{DECLINES[why]}'), no error raised; forward "
                      f"falls back to the ordinary path: {then}")


class _Probe:
    """One forward of a probe module in the runner's mode; remembers whether the fast
    path engaged on every call (`engaged` holds one bool per call)."""

    def __init__(self, torch, mode: str, need_weights: bool):
        self.torch, self.mode, self.need_weights = torch, mode, need_weights
        self.what = ("fast path (eval, inference_mode, need_weights=False)" if mode == "fast"
                     else f"ordinary path, need_weights={need_weights}")
        self.engaged: list[bool] = []

    def case(self, name: str, **inputs):
        """Probe case; the fast path needs self-attention (query is key is value)."""
        return probe_case(name, inputs={**(SELF if self.mode == "fast" else {}), **inputs})

    def call(self, mha, args, **kw):
        torch = self.torch
        if self.mode == "fast":
            out, weights, ran = fast_call(torch, mha, args, need_weights=False, **kw)
            self.engaged.append(ran)
            return to_numpy(out), weights
        mha.train()
        with torch.no_grad():
            out, weights = mha(*args, need_weights=self.need_weights, **kw)
        return to_numpy(out), weights

    def where(self, label: str) -> str:
        path = ""
        if self.mode == "fast":
            path = (" [fast path ran]" if self.engaged and self.engaged[-1] else
                    " [fast path NOT taken: forward fell back]")
        return f"probe_case {label}, {self.what}{path}"


def _masks(p: _Probe) -> list[Convention]:
    torch = p.torch
    case = p.case("mask")
    mha, args = probe_mha(torch, case)

    def attn(m):
        return p.call(mha, args, attn_mask=per_head(torch, case, m))[0]

    def kpm(m):
        return p.call(mha, args, key_padding_mask=torch.from_numpy(m))[0]

    cells = [_ledger.mask_polarity(case, attn, "", documented="true_blocks", **DOC)]
    cells[0] = replace(cells[0], evidence=p.where(f"{case.id} attn_mask (B*H, T, S) bool")
                       + cells[0].evidence)
    kp = key_padding_cell(case, kpm, "", documented="true_blocks", **DOC)
    cells.append(replace(kp, evidence=p.where(f"{case.id} key_padding_mask (B, S) bool")
                         + kp.evidence))
    fm = float_mask_cell(case, lambda m: attn(m.astype(np.float32)), "", documented="added",
                         **DOC)
    if p.mode == "fast" and not p.engaged[-1]:
        fm = declined("float_mask", "float_mask", p.where(f"{case.id} float attn_mask"),
                      f"{fm.value}{fm.evidence}")
    cells.append(replace(fm, evidence=p.where(f"{case.id} float attn_mask") + fm.evidence)
                 if not fm.evidence.startswith("probe_case") else fm)
    return cells


def _causal(p: _Probe) -> Convention:
    """is_causal=True beside a non-causal attn_mask: does the output follow the mask
    (hint_only) or the flag (an alignment)?  The ordinary path is read without and with
    a key_padding_mask (F.multi_head_attention_forward, torch/nn/functional.py 6817-6836:
    with need_weights=False and no key_padding_mask the flag replaces the attn_mask and
    goes to SDPA; a key_padding_mask turns the hint off); the fast path (T = S) with the
    mask and alone, where an output that stays unmasked means the flag is `ignored`."""
    torch = p.torch
    case = p.case("causal-hint")
    mha, args = probe_mha(torch, case)
    m = probe_mask(case)
    cands = {"hint_only": output_with(case, m),
             **{k: v for k, v in causal_candidates(case).items() if k != "ignored"}}
    label = f"{case.id} is_causal=True with a non-causal attn_mask (B*H, T, S)"
    out, _ = p.call(mha, args, attn_mask=per_head(torch, case, ~m), is_causal=True)
    cell = closest("causal_flag", out, cands, p.where(label), documented="hint_only", **DOC)
    try:
        alone, _ = p.call(mha, args, is_causal=True)
    except Exception as exc:  # the ordinary path requires the mask beside the hint
        alone = f"without attn_mask: {type(exc).__name__}: {str(exc)[:90]}"
    if p.mode == "fast":
        return _fast_causal(p, case, cell, alone)
    kpm = torch.zeros(case.inputs.batch, case.inputs.key_len, dtype=torch.bool)
    out_k, _ = p.call(mha, args, attn_mask=per_head(torch, case, ~m), is_causal=True,
                      key_padding_mask=kpm)
    with_kpm = closest("causal_flag", out_k, cands, "with an all-False key_padding_mask "
                       "(B, S)")
    tail = alone if isinstance(alone, str) else "is_causal=True without attn_mask runs"
    if with_kpm.value == cell.value:
        return replace(cell, evidence=f"{cell.evidence}; {with_kpm.evidence}; {tail}")
    return Convention("causal_flag", DEPENDS, f"{p.where(case.id)}, is_causal=True with a "
                      f"non-causal attn_mask (B*H, T, S): without key_padding_mask: "
                      f"{cell.value} ({cell.evidence.split(': ', 1)[1]}) | "
                      f"{with_kpm.evidence.split(':', 1)[0]}: {with_kpm.value} "
                      f"({with_kpm.evidence.split(': ', 1)[1]}); {tail}", documented="hint_only",
                      **DOC)


def _fast_causal(p: _Probe, case, with_mask: Convention, alone) -> Convention:
    """The fast path never reads is_causal (merge_masks gets attn_mask and
    key_padding_mask only): with the mask the output follows the mask, alone it stays
    unmasked.  Self-attention only (T = S), so an applied flag's alignment cannot show."""
    from conformance.oracle.canonical import causal_mask

    i = case.inputs
    if isinstance(alone, str):  # refused alone: the mask is all the path reads
        return replace(with_mask, evidence=f"{with_mask.evidence}; {alone}")
    ran = p.engaged[-1]
    d = distances(alone, {"ignored": output_with(case, None), "applied": output_with(
        case, causal_mask(i.query_len, i.key_len, "upper_left"))})
    figures = (f"{p.where(case.id)}: is_causal=True without attn_mask, T = S = {i.query_len}: "
               f"output {d['ignored']:.1e} from the unmasked oracle, {d['applied']:.1e} from "
               f"the causal one; with a non-causal attn_mask it follows the mask: "
               f"{with_mask.evidence.split(': ', 1)[1]}")
    if ran and d["ignored"] < 1e-3 <= d["applied"]:
        return Convention("causal_flag", IGNORED, f"is_causal=True accepted and dropped: "
                          f"{figures}", documented="hint_only", **DOC)
    if ran and d["applied"] < 1e-3:
        return Convention("causal_flag", NOT_PROBED, f"the flag applies, but the fast path "
                          f"needs self-attention (T = S), so its alignment cannot show: "
                          f"{figures}", documented="hint_only", **DOC)
    return replace(with_mask, evidence=f"{with_mask.evidence}; alone: {figures}")


def _layout(p: _Probe) -> list[Convention]:
    torch = p.torch
    case = p.case("layout", **SELF)
    x = torch.tensor(case_data(case).inputs.query, dtype=torch.float32)
    mha, _ = probe_mha(torch, case, batch_first=False)  # the constructor's default
    as_is, _ = p.call(mha, (x, x, x))
    xt = x.transpose(0, 1).contiguous()
    seq, _ = p.call(mha, (xt, xt, xt))
    layout = closest("input_layout", output_with(case, None),
                     {"batch_first": as_is, "sequence_first": seq.transpose(1, 0, 2)},
                     p.where(f"{case.id} nn.MultiheadAttention(8, 2) (batch_first omitted) on "
                             "(B, T, E) as given and on (T, B, E)"), documented="sequence_first",
                     **DOC)
    if p.mode == "fast":
        layout = replace(layout, evidence=f"{layout.evidence}; the fast path itself needs "
                         "batch_first=True ('batch_first was not True' declines it)")
    return [layout, _unbatched(p, case)]


def _unbatched(p: _Probe, case) -> Convention:
    torch = p.torch
    mha, args = probe_mha(torch, case)
    try:
        out, _ = p.call(mha, tuple(a[0] for a in args[:1]) * 3)
    except Exception as exc:
        return refusal("unbatched_input", exc, p.where(case.id))
    d = float(np.max(np.abs(out - output_with(case, None)[0])))
    if p.mode == "fast" and not p.engaged[-1]:
        return declined("unbatched_input", "unbatched", f"{p.where(case.id)} (T, E) input",
                        f"accepted, output {out.shape}, {d:.1e} from the oracle item 0")
    return Convention("unbatched_input", "accepted", f"{p.where(case.id)} (T, E) input: output "
                      f"{out.shape}, max |output - oracle item 0| {d:.1e}", documented="accepted",
                      **DOC)


def _order_and_scale(p: _Probe) -> list[Convention]:
    torch = p.torch
    case = probe_case("order")  # cross-attention: k, v distinct (the fast path then declines)
    mha, args = probe_mha(torch, case)
    out, _ = p.call(mha, args)
    data = case_data(case)
    swapped = replace(data, inputs=replace(data.inputs, key=data.inputs.value,
                                           value=data.inputs.key))
    order = closest("argument_order", out, {"query_key_value": output_with(case, None),
                                            "query_value_key": output_with(case, None, swapped)},
                    p.where(f"{case.id} forward(q, k, v), k and v distinct"))
    sc = p.case("scale")
    mha_s, args_s = probe_mha(torch, sc)
    out_s, _ = p.call(mha_s, args_s)
    scale = _ledger.softmax_scale(sc, lambda m: out_s, p.where(sc.id) + " (no scale argument)")
    c64 = scale_probe_case()
    mha64, args64 = probe_mha(torch, c64)
    out64, _ = p.call(mha64, args64)
    prec = scale_precision_cell(c64, out64, p.where(f"{c64.id} float64 module, d_k=3"))
    return [order, scale, prec]


def _weights(p: _Probe) -> list[Convention]:
    """What the default call returns besides the output; dropout and returned weights."""
    torch = p.torch
    case = p.case("weights")
    mha, args = probe_mha(torch, case)
    if p.mode == "fast":
        out, w, ran = fast_call(torch, mha, args)  # the default need_weights=True
        word = "none" if w is None else ("head_averaged" if w.dim() == 3 else "per_head")
        returned = Convention("returned_weights", word, f"probe_case {case.id}, eval, "
                              "inference_mode, default need_weights=True: weights "
                              f"{None if w is None else tuple(w.shape)}, fast path ran: {ran}")
    else:
        mha.train()
        with torch.no_grad():
            _, w = mha(*args, need_weights=p.need_weights)
        word = "none" if w is None else ("head_averaged" if w.dim() == 3 else "per_head")
        returned = Convention("returned_weights", word, f"{p.where(case.id)}: weights "
                              f"{None if w is None else tuple(w.shape)} for (B, H, T, S) = "
                              "(2, 2, 3, 5)", documented="head_averaged" if p.need_weights
                              else "none", **DOC)
    return [returned, *_dropout(p, case)]


def _dropout(p: _Probe, case) -> list[Convention]:
    torch = p.torch
    mha, args = probe_mha(torch, case, dropout=0.5)
    torch.manual_seed(0)
    if p.mode == "fast":
        return _fast_dropout(p, case, mha, args)
    mha.eval()
    with torch.no_grad():
        evald = _ledger.matches(case, to_numpy(mha(*args, need_weights=False)[0]))
    out, w = p.call(mha, args)
    trained = _ledger.matches(case, out)
    drop = Convention("dropout", "training_flag", f"{p.where(case.id)}, dropout=0.5, seed 0: "
                      f"max |output - oracle| eval {evald:.1e}, train {trained:.1e}")
    if w is None:  # the runner's call: forward(..., need_weights=False) -> (output, None)
        return [Convention("weights_dropout", NA, f"{p.where(case.id)}: need_weights=False "
                           "returns no weights"), drop]
    return [_weights_cell(w, f"{p.where(case.id)}, dropout=0.5, train, seed 0"), drop]


def _weights_cell(w, what: str) -> Convention:
    """Returned weights under dropout: rows that no longer sum to one were dropped."""
    sums = w.double().sum(-1)
    dev = float((sums - 1).abs().max())
    word = "post_dropout" if dev > 1e-6 else "pre_dropout"
    return Convention("weights_dropout", word, f"{what}: returned weights' row sums span "
                      f"{float(sums.min()):.3f}..{float(sums.max()):.3f} (max |sum - 1| "
                      f"{dev:.2f})")


def _fast_dropout(p: _Probe, case, mha, args) -> list[Convention]:
    """dropout=0.5 on the fast path: eval (the path runs, does it drop?) and train (torch
    declines the path: 'training is enabled'; the fallback's weights are quoted)."""
    torch = p.torch
    what = f"probe_case {case.id}, dropout=0.5, inference_mode, need_weights=True"
    mha.eval()
    out, _, ran_eval = fast_call(torch, mha, args, need_weights=True)
    evald = _ledger.matches(case, to_numpy(out))
    mha.train()
    torch.manual_seed(0)
    out_t, w, ran_train = fast_call(torch, mha, args, need_weights=True)
    trained = _ledger.matches(case, to_numpy(out_t))
    p.engaged.append(ran_train)
    runs = (f"eval: fast path ran {ran_eval}, output {evald:.1e} from the undropped oracle; "
            f"train, seed 0: fast path ran {ran_train}, output {trained:.1e}")
    if ran_train:  # a torch whose fast path runs in training: read it
        weights = _weights_cell(w, f"{what}, train, seed 0 [fast path ran]")
        word = "training_flag" if trained > 1e-3 > evald else ("always" if evald > 1e-3
                                                               else IGNORED)
    else:
        weights = declined("weights_dropout", "training", f"{what}, train", "its "
                           f"{_weights_cell(w, 'weights').evidence}")
        # the path itself runs only in eval, where it does not drop: dropout never applies
        word = "never" if ran_eval and evald < 1e-3 else ("always" if ran_eval else NOT_PROBED)
    return [weights, Convention("dropout", word, f"{what}: {runs}")]


def _mixed(p: _Probe) -> Convention:
    torch = p.torch
    case = p.case("mixed-dtype")
    mha, args = probe_mha(torch, case)
    x64 = tuple(a.double() for a in args[:1]) * 3 if p.mode == "fast" else tuple(
        a.double() for a in args)
    try:
        out, _ = p.call(mha, x64)
    except Exception as exc:
        p.engaged.append(False)  # 'dtypes of query (torch.float64) and ... don't match'
        return refusal("mixed_dtype", exc, p.where(f"{case.id} float64 input, float32 module"),
                       value=REFUSED)
    return Convention("mixed_dtype", "promoted" if out.dtype == np.float64 else "cast_to_layer",
                      f"{p.where(case.id)}: float64 input ran")


def mha_conventions(torch, mode: str, need_weights: bool = True) -> list[Convention]:
    """Every axis the probes settle for nn.MultiheadAttention in `mode`."""
    p = _Probe(torch, mode, need_weights)
    size = probe_mha(torch, probe_case("size"))[0]
    try:
        torch.nn.MultiheadAttention(10, 4)
        odd = "MultiheadAttention(10, 4) constructs"
    except AssertionError as exc:
        odd = f"MultiheadAttention(10, 4): AssertionError: {exc}"
    cells = [Convention("size_arguments", "derived_from_width",
                        f"probe_case probe-size MultiheadAttention(8, 2): head_dim "
                        f"{size.head_dim}, in_proj_weight {tuple(size.in_proj_weight.shape)}; "
                        f"{odd}", documented="derived_from_width", **DOC)]
    cells += _order_and_scale(p) + _layout(p) + _masks(p) + [_causal(p)] + _weights(p)
    cells += [_mixed(p), Convention(
        "implicit_mask", "none", "a torch.Tensor carries no mask (nothing like Keras's "
        "_keras_mask); forward reads masks only from key_padding_mask and attn_mask")]
    return cells
