"""Probes of positions and heads: rope_style, rope_partial (rotary embeddings),
kv_head_mapping and qk_norm_scope (grouped heads, QK-norm), observed by running a system
on a small seeded case and naming the reading of the float64 oracle its output matches
(probing.closest), every distance quoted.

kv_head_mapping: with distinct weights per key/value head, query head h reading kv head
h // g (grouped) and h % H_kv (tiled) give different outputs.  The tiled reading is the
oracle's own (grouped) attention with the query heads reordered: the query head sitting
at grouped slot s is s' = (s % g) * H_kv + s // g, whose tiled kv head s' % H_kv = s // g
is the kv head slot s reads; its W_q, b_q and W_o rows move with it, so the output sum
over heads is the tiled layer's.

Only the case, the oracle and the contract are imported: systems stay in the runners.
"""
from __future__ import annotations

from dataclasses import replace
from typing import Callable

import numpy as np

from conformance.case.loader import Case
from conformance.contract.axes import IGNORED, NA, REFUSED
from conformance.conventions.probes.probing import closest, distances, output_with, probe_case
from conformance.contract.runner import Convention
from conformance.oracle.canonical import CaseData, case_data

NEAR = 1e-3  # a float32 system lands ~1e-6 from its reading; other readings are O(0.1)


def gqa_case(num_heads: int = 4, num_kv_heads: int = 2, head_dim: int = 16, **sections) -> Case:
    """Self-attention with grouped heads (distinct canonical weights per kv head)."""
    sections.setdefault("inputs", {})
    sections["inputs"] = {"self_attention": True, "query_len": 5, **sections["inputs"]}
    att = {"num_heads": num_heads, "num_kv_heads": num_kv_heads,
           "query_features": num_heads * head_dim, **sections.pop("attention", {})}
    return probe_case(f"gqa-{num_heads}q-{num_kv_heads}kv", attention=att, **sections)


def tiled_data(case: Case, data: CaseData | None = None) -> CaseData:
    """The canonical data with query heads reordered so that the (grouped) oracle computes
    the tiled mapping h % H_kv (module docstring)."""
    data = data or case_data(case)
    h, kv = case.attention.num_heads, case.attention.num_kv_heads
    g = h // kv
    order = np.array([(s % g) * kv + s // g for s in range(h)])
    w = data.weights
    return replace(data, weights=replace(
        w, wq=w.wq[order], wo=w.wo[order], bq=None if w.bq is None else w.bq[order]))


def head_mapping_candidates(case: Case) -> dict[str, np.ndarray]:
    return {"grouped": output_with(case, None),
            "tiled": output_with(case, None, tiled_data(case))}


def kv_head_mapping(case: Case, run: Callable[[], np.ndarray], what: str,
                    **documented) -> Convention:
    """The mapping the system's output on the grouped `case` matches, or its refusal."""
    a = case.attention
    what = (f"{what}: {a.num_heads} query heads, {a.num_kv_heads} kv heads with distinct "
            "weights")
    try:
        out = run()
    except Exception as exc:  # the system's refusal is the observation
        return Convention("kv_head_mapping", REFUSED, f"{what}: {_quote(exc)}", **documented)
    return closest("kv_head_mapping", out, head_mapping_candidates(case), what, **documented)


def rope_case(style: str = "half_split", rotary_dim: int | None = None,
              head_dim: int = 16, **inputs) -> Case:
    """2 heads of `head_dim`, self-attention over 5 positions, with RoPE."""
    rope = {"style": style, **({} if rotary_dim is None else {"rotary_dim": rotary_dim})}
    return probe_case(f"rope-{style}-{rotary_dim or head_dim}",
                      attention={"num_heads": 2, "query_features": 2 * head_dim, "rope": rope},
                      inputs={"self_attention": True, "query_len": 5, **inputs})


def _with_rope(case: Case, **changes) -> Case:
    a = case.attention
    rope = None if changes.get("style") == "none" else replace(a.rope, **changes)
    return replace(case, attention=replace(a, rope=rope))


def style_candidates(case: Case) -> dict[str, np.ndarray]:
    """Outputs of the two pairings (and of no rotation) for the rope `case`."""
    return {s: output_with(_with_rope(case, style=s), None)
            for s in ("half_split", "interleaved", "none")}


def rope_style(case: Case, runs: dict[str, Callable[[], np.ndarray]], what: str,
               **documented) -> Convention:
    """`runs`: the system's setting (as its words) -> its output on `case`.  One setting:
    the pairing it matches.  Several: `choosable` when they reach both pairings."""
    cands, found, texts = style_candidates(case), {}, []
    for setting, run in runs.items():
        try:
            d = distances(run(), cands)
        except Exception as exc:
            texts.append(f"{setting}: {_quote(exc)}")
            continue
        found[setting] = min(d, key=d.get) if min(d.values()) < NEAR else "neither"
        texts.append(f"{setting}: {found[setting]} (" + "; ".join(
            f"{k} {v:.1e}" for k, v in d.items()) + ")")
    words = set(found.values()) - {"neither", "none"}
    value = ("choosable" if {"half_split", "interleaved"} <= words
             else words.pop() if len(words) == 1
             else REFUSED if not found  # every setting raised: the system's own errors
             else IGNORED if set(found.values()) == {"none"}  # accepted, nothing rotates
             else NA)
    return Convention("rope_style", value, f"{what}: max |output - oracle| under each "
                      f"pairing: {' | '.join(texts)}", **documented)


def rope_partial(case: Case, run: Callable[[], np.ndarray], what: str,
                 **documented) -> Convention:
    """`case` rotates part of each head: `supported` when the output matches that, else
    what it matched instead (the whole head rotated, none) or the system's refusal."""
    r, d = case.attention.rope, case.attention.qk_head_dim
    try:
        out = run()
    except Exception as exc:
        return Convention("rope_partial", REFUSED, f"{what}: rotary_dim {r.rotary_dim} of "
                          f"{d}: {_quote(exc)}", **documented)
    cands = {"supported": output_with(case, None),
             "whole head": output_with(_with_rope(case, rotary_dim=d), None),
             "none": output_with(_with_rope(case, style="none"), None)}
    cell = closest("rope_partial", out, cands, f"{what}: rotary_dim {r.rotary_dim} of {d}")
    if cell.value == "supported":
        return replace(cell, **documented)
    # accepted, and the output is that of another rotation: the setting is silently dropped
    return Convention("rope_partial", IGNORED, f"{cell.evidence}: rotary_dim accepted, but "
                      f"not partially rotated ({cell.value})", **documented)


def qk_norm_case(scope: str, kind: str = "rms", head_dim: int = 8) -> Case:
    return probe_case(f"qk-norm-{scope}", attention={
        "num_heads": 2, "query_features": 2 * head_dim,
        "qk_norm": {"kind": kind, "scope": scope}},
        inputs={"self_attention": True, "query_len": 5})


def unit_norm_data(case: Case) -> CaseData:
    """The case's data with QK-norm scales 1 (biases 0): the scope alone then decides the
    output, so readings under either scope are comparable."""
    data = case_data(case)
    w = data.weights

    def ones(x, fill=1.0):
        return None if x is None else np.full_like(x, fill)

    return replace(data, weights=replace(w, q_norm=ones(w.q_norm), k_norm=ones(w.k_norm),
                                         q_norm_bias=ones(w.q_norm_bias, 0.0),
                                         k_norm_bias=ones(w.k_norm_bias, 0.0)))


def qk_norm_scope(runs: dict[str, tuple[Case, Callable[[CaseData], np.ndarray]]], what: str,
                  **documented) -> Convention:
    """`runs`: the system's setting -> (the case it runs, run(data) -> output).  Each run
    gets unit_norm_data(case) and is read against per-head and all-heads normalisation."""
    found, texts = {}, []
    for setting, (case, run) in runs.items():
        try:
            out = run(unit_norm_data(case))
        except Exception as exc:
            texts.append(f"{setting}: {_quote(exc)}")
            continue
        d = {}
        for scope in ("per_head", "all_heads"):
            other = _scoped(case, scope)
            d[scope] = float(np.max(np.abs(out - output_with(other, None,
                                                            unit_norm_data(other)))))
        found[setting] = min(d, key=d.get) if min(d.values()) < NEAR else "neither"
        texts.append(f"{setting} ({case.attention.qk_norm.kind}): {found[setting]} (" +
                     "; ".join(f"{k} {v:.1e}" for k, v in d.items()) + ")")
    words = set(found.values()) - {"neither"}
    value = ("choosable" if len(words) == 2 else words.pop() if words
             else REFUSED if not found else NA)  # every setting raised: its own errors
    return Convention("qk_norm_scope", value, f"{what}, unit scales: max |output - oracle| "
                      f"per scope: {' | '.join(texts)}", **documented)


def _scoped(case: Case, scope: str) -> Case:
    a = case.attention
    return replace(case, attention=replace(a, qk_norm=replace(a.qk_norm, scope=scope)))


def _quote(exc: BaseException) -> str:
    return " ".join(f"{type(exc).__name__}: {exc}".split())[:300]
