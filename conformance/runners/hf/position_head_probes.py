"""Ledger probes of the HF runners for positions and heads: rope_style, rope_partial,
alibi_slopes (rotary embeddings, ALiBi), kv_head_mapping, qk_norm_scope (grouped heads,
QK-norm).

Each probe runs the runner's own translate() and run() (its config call, its
converter, its model's rotary or ALiBi tensors) on a small seeded case and
compares the output with the oracle under each reading: the half-split and the
interleaved pairing of the same weights, partial and full rotary, the grouped
(h // g) and the tiled (h % H_kv) head mapping of the same distinct per-kv-head
weights, a per-head and an all-heads RMS norm with unit scales, the paper's
ALiBi slopes for six heads.  A runner without the part gets no cell here
(probing.feature_cells reads `not_applicable` from its signatures), except where
its signature names an argument that is something else (T5's position_bias).
"""
from __future__ import annotations

from dataclasses import replace

import numpy as np

from conformance.contract.axes import IGNORED, NA, NOT_PROBED, REFUSED
from conformance.contract.probing import closest, distances, probe_case
from conformance.contract.runner import Convention, NotExpressible, to_numpy
from conformance.contract import probe_cells as _ledger
from conformance.oracle import positional
from conformance.oracle.canonical import case_data
from conformance.oracle.reference import attention

NEAR = _ledger.NEAR


def _case(runner, probe: str, attention_: dict, **inputs):
    att = {"num_heads": 2, "query_features": 16, **runner.probe_attention, **attention_}
    return probe_case(probe, attention=att, inputs={"self_attention": True, "query_len": 4,
                                                    "key_len": 4, **inputs})


def _output(runner, case, data=None):
    """The runner's output on `case` (with `data`), or its refusal's reason (a str)."""
    t = runner.translate(case)
    if isinstance(t, NotExpressible):
        return t.reason
    return runner.run(case, t, data or case_data(case)).output


def _with(case, **att):
    return replace(case, attention=replace(case.attention, **att))


def rope_style(runner) -> Convention:
    outs, cands = {}, {}
    base = _case(runner, "rope-style", {"rope": {"style": "half_split"}}, position_offset=3)
    data = case_data(base)
    for style in ("half_split", "interleaved"):
        case = _with(base, rope=replace(base.attention.rope, style=style))
        outs[style] = _output(runner, case, data)
        cands[style] = attention(case, data).output
    ran = {s: o for s, o in outs.items() if not isinstance(o, str)}
    what = (f"{runner.name} on {base.id} (head size 8, positions 3..6), the same weights under "
            "both pairings")
    refused = "; ".join(f"{s} refused: {o}" for s, o in outs.items() if isinstance(o, str))
    if len(ran) == 2 and all(distances(o, {s: cands[s]})[s] < NEAR for s, o in ran.items()):
        return Convention("rope_style", "choosable", f"{what}: each style matches its oracle")
    style, out = next(iter(ran.items()))
    cell = closest("rope_style", out, cands, f"{what}: asked {style}")
    return replace(cell, evidence=f"{cell.evidence}; {refused} (source: {runner.rope_source})")


def rope_partial(runner) -> Convention:
    """rotary_dim 4 of head size 8.  A runner whose config has a partial-rotary setting
    (`partial_setting`: the Llama family's rope_parameters['partial_rotary_factor']) is run
    with it set and without it (its own config, its model's rotary module): the output
    against the partial-rotary and the full-rotary oracles and against the run without it
    says supported, ignored (accepted, output unchanged) or refused (its own error).  The
    others run the case through translate and run (GPT-J's rotary_dim, GPT-NeoX's
    rotary_pct)."""
    style = getattr(runner, "native_style", "half_split")
    case = _case(runner, "rope-partial", {"rope": {"style": style, "rotary_dim": 4}},
                 position_offset=3)
    what = f"{runner.name} on {case.id}: {style} rotary_dim 4 of head size 8"
    data = case_data(case)
    full = attention(_with(case, rope=replace(case.attention.rope, rotary_dim=8)), data).output
    cands = {"partial": attention(case, data).output, "full": full}
    if getattr(runner, "partial_setting", ""):
        return _partial_setting(runner, case, data, cands, what)
    out = _output(runner, case)
    if isinstance(out, str):  # the runner's own limit, not the system's
        return Convention("rope_partial", NOT_PROBED, f"{what}: the runner cannot build the "
                          f"case: {out}")
    d = distances(out, cands)
    word = "supported" if d["partial"] < NEAR else NOT_PROBED
    return Convention("rope_partial", word, f"{what}: {d['partial']:.1e} from the partial-rotary "
                      f"oracle, {d['full']:.1e} from the full-rotary one"
                      + ("" if word == "supported" else "; neither reading matches"))


def _partial_setting(runner, case, data, cands, what) -> Convention:
    from conformance.contract.probing import refusal
    from conformance.runners.hf.common import import_torch

    torch = import_torch()
    factor = case.attention.rope.rotary_dim / case.attention.qk_head_dim
    setting = f"{runner.partial_setting}={factor:g}"
    plan = {**runner.config_call(case)[1], "attn_implementation": runner.attn_implementation,
            "dropout": 0.0}
    x = torch.tensor(data.inputs.query, dtype=torch.float32)
    outs = {}
    for label, extra in (("full", {}), ("set", {"partial_rotary_factor": factor})):
        try:
            module = runner.module_for(torch, case, {**plan, **extra}, data.weights)
            with torch.no_grad():
                outs[label] = to_numpy(runner.forward(module, x, None)[0])
        except Exception as exc:
            if label == "full":
                raise
            return refusal("rope_partial", exc, f"{what}, {setting}", value=REFUSED)
    d = distances(outs["set"], cands)
    moved = float(np.max(np.abs(outs["set"] - outs["full"])))
    figures = (f"output {moved:.1e} from the run without it, {d['partial']:.1e} from the "
               f"partial-rotary oracle, {d['full']:.1e} from the full-rotary one")
    if d["partial"] < NEAR:
        return Convention("rope_partial", "supported", f"{what}: {setting}: {figures}")
    if d["full"] < NEAR and moved < NEAR:
        line = f" ({runner.partial_line})" if runner.partial_line else ""
        return Convention("rope_partial", IGNORED, f"{what}: {setting} accepted: {figures}; "
                          f"the default rope takes dim = head_dim{line}")
    return Convention("rope_partial", NOT_PROBED, f"{what}: {setting}: {figures}; neither "
                      "reading matches")


def kv_head_mapping(runner) -> Convention:
    case = _case(runner, "kv-head-mapping", {"num_heads": 4, "num_kv_heads": 2}, query_len=3,
                 key_len=3)
    data = case_data(case)
    out = _output(runner, case, data)
    what = f"{runner.name} on {case.id}: 4 query heads, 2 kv heads with distinct seeded weights"
    if isinstance(out, str):  # the runner's own limit, not the system's
        return Convention("kv_head_mapping", NOT_PROBED, f"{what}: the runner cannot build "
                          f"the case: {out}")
    w, tile = data.weights, np.arange(4) % 2
    tiled_w = replace(w, wk=w.wk[tile], wv=w.wv[tile],
                      bk=None if w.bk is None else w.bk[tile],
                      bv=None if w.bv is None else w.bv[tile],
                      k_norm=w.k_norm if w.k_norm is None or w.k_norm.ndim == 1
                      else w.k_norm[tile])
    cands = {"grouped": attention(case, data).output,
             "tiled": attention(_with(case, num_kv_heads=4), replace(data, weights=tiled_w)).output}
    return closest("kv_head_mapping", out, cands, f"{what}; query head h reads kv head")


def qk_norm_scope(runner) -> Convention:
    outs, cands = {}, {}
    what = f"{runner.name}: RMS QK-norm with unit scales, 2 heads of 8, the same weights"
    for scope in ("per_head", "all_heads"):
        case = _case(runner, "qk-norm-scope", {"qk_norm": {"kind": "rms", "scope": scope}})
        data = case_data(case)
        w = data.weights
        unit = replace(w, q_norm=np.ones_like(w.q_norm), k_norm=np.ones_like(w.k_norm))
        data = replace(data, weights=unit)
        outs[scope] = _output(runner, case, data)
        cands[scope] = attention(case, data).output
    ran = {s: o for s, o in outs.items() if not isinstance(o, str)}
    if len(ran) == 2:
        return Convention("qk_norm_scope", "choosable", f"{what}: both scopes run")
    scope, out = next(iter(ran.items()))
    refused = "; ".join(f"{s} refused: {o}" for s, o in outs.items() if isinstance(o, str))
    cell = closest("qk_norm_scope", out, cands, f"{what}: asked {scope}")
    return replace(cell, evidence=f"{cell.evidence}; {refused}")


def alibi_slopes(runner) -> Convention:
    case = _case(runner, "alibi-slopes", {"num_heads": 6, "query_features": 24, "alibi": True},
                 query_len=5, key_len=5)
    out = _output(runner, case)
    paper = positional.alibi_slopes(6)
    own = runner.native_slopes(6)
    d = float(np.max(np.abs(out - attention(case).output)))
    slopes = ", ".join(f"2^{np.log2(s):.0f}" for s in own)
    word = "paper" if d < NEAR and np.allclose(own, paper, rtol=1e-6) else "other"
    return Convention("alibi_slopes", word, f"{runner.name} on {case.id} (6 heads, not a power "
                      f"of two): the system's slopes [{slopes}], {np.max(np.abs(own - paper)):.1e}"
                      f" from the paper's; output {d:.1e} from the oracle with the paper's slopes")


def position_head_cells(runner) -> list[Convention]:
    cells = []
    if "rope" in runner.features:
        cells += [rope_style(runner), rope_partial(runner)]
    if runner.refusals.gqa:
        cells.append(kv_head_mapping(runner))
    if "qk_norm" in runner.features:
        cells.append(qk_norm_scope(runner))
    if "alibi" in runner.features:
        cells.append(alibi_slopes(runner))
    if getattr(runner, "alibi_na", ""):
        cells.append(Convention("alibi_slopes", NA, runner.alibi_na))
    if getattr(runner, "window_probe", False):  # a config window beside the matrix's
        from conformance.runners.hf.decoder_probes import window_width

        cells.append(window_width(runner))
    return cells
