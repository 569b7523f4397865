"""Probes of the #20 axes a system's own API settles: cache_causal_alignment and
cache_layout (a prefill, then one single-position step through the system's cache),
window_width (the system's window number read as keys counted) and softcap_order
(softcap before or after a finite additive mask).  Each names the reading of the
float64 oracle the system's output matches (probing.closest), every distance quoted;
the runners give the system's output (frameworks stay in the runners).

A one-position step at position P over a growing cache: lower_right = it sees keys
0..P (the cache and itself, a correct decode); upper_left = the causal diagonal not
shifted, key 0 only.  (`full`, every slot of a preallocated cache, is the same keys as
lower_right for a growing cache, so the probes quote the slots they saw.)

The cell is the system's own decode called the way its users call it (each runner's
module cites what that call is: no causal flag at T = 1 for torch SDPA, the layer's own
cache mask for Flax's decode=True, ...).  What a causal flag means for one query over a
longer cache is the causal_flag axis's question, not the cache's: where a runner also
runs the step with its flag passed and the flag reads differently, `flag_fact` words it as
a separate fact in the cache cell's evidence, the value staying the users' decode.
"""
from __future__ import annotations

from dataclasses import replace
from typing import Callable

import numpy as np

from conformance.case.loader import Case
from conformance.conventions.axes import IGNORED, Convention
from conformance.conventions.probes.probing import closest, distances, output_with, probe_case
from conformance.oracle.canonical import case_data
from conformance.oracle.positional import window_allowed
from conformance.oracle.reference import projected_heads

PREFILL = 3


def decode_case(prefill: int = PREFILL, **attention) -> Case:
    """Causal self-attention over prefill + 1 positions, 2 heads of 4 (batch 2)."""
    att = {"num_heads": 2, "query_features": 8, **attention}
    return probe_case("cache-step", attention=att, mask={"causal": "upper_left"},
                      inputs={"self_attention": True, "query_len": prefill + 1,
                              "key_len": prefill + 1})


def step_candidates(case: Case) -> dict[str, np.ndarray]:
    """(B, 1, E) outputs of the last position under each alignment of the step."""
    n = case.inputs.query_len
    causal = np.tril(np.ones((n, n), bool))
    first = causal.copy()
    first[-1] = False
    first[-1, 0] = True
    return {"lower_right": output_with(case, causal)[:, -1:],
            "upper_left": output_with(case, first)[:, -1:]}


def cache_alignment(case: Case, step: np.ndarray, what: str, prefill: np.ndarray | None = None,
                    **documented) -> Convention:
    """The alignment the step's output `step` (B, 1, E) matches; `prefill` (B, P, E), when
    given, is quoted against the causal forward's first P rows."""
    cell = closest("cache_causal_alignment", step, step_candidates(case),
                   f"{what}: prefill {case.inputs.query_len - 1}, then one step", **documented)
    if prefill is None:
        return cell
    n = case.inputs.query_len
    full = output_with(case, np.tril(np.ones((n, n), bool)))[:, :-1]
    d = distances(prefill, {"causal": full})["causal"]
    return replace(cell, evidence=f"{cell.evidence}; the prefill rows {d:.1e} from the "
                   "causal forward")


def flag_fact(case: Case, step: np.ndarray, setting: str) -> str:
    """A sentence for a cache cell's evidence: the step `step` (B, 1, E) run with the
    call's causal flag `setting` passed (not the users' decode call), the keys it attends
    and which reading of the flag that is (a causal_flag fact, quoted beside the cell)."""
    d = distances(step, step_candidates(case))
    word = min(d, key=d.get)
    figures = "; ".join(f"{k} {v:.1e}" for k, v in d.items())
    seen = {"upper_left": "key 0 only: that is the flag's upper-left reading",
            "lower_right": "the cache and itself: that is the flag's lower-right reading"}
    return (f"with {setting} passed at the step, it attends {seen[word]}, causal_flag "
            f"({figures})")


def with_fact(cell: Convention, fact: str) -> Convention:
    """`cell` with `fact` appended to its evidence (value and sources kept)."""
    return replace(cell, evidence=f"{cell.evidence}; {fact}")


def layout_words(case: Case, shapes: list[tuple[int, ...]], tensors: str,
                 preallocated: bool = False) -> str:
    """'BNSH'/'BSNH' read from a cache tensor's shape after the prefill and after the step
    (`shapes`), with how many tensors and whether it grows."""
    a, i = case.attention, case.inputs
    b, h, d = i.batch, a.num_kv_heads, a.qk_head_dim

    def order(shape) -> str:
        s = shape[2] if len(shape) == 4 and shape[:2] == (b, h) else shape[1]
        named = {(b, h, s, d): "BNSH", (b, s, h, d): "BSNH"}
        return named.get(tuple(shape), f"shape {tuple(shape)}")

    words = [order(s) for s in shapes]
    growth = ("preallocated" if preallocated else "growing" if
              len({s for s in shapes}) > 1 else "fixed size")
    sizes = " -> ".join(str(tuple(s)) for s in shapes)
    return f"{words[-1]}, {tensors}, {growth} ({sizes})"


def override(cells: list[Convention], probed: list[Convention]) -> list[Convention]:
    """`cells` with the cell of every axis `probed` gives replaced by the probed one (a
    signature-read `not_probed` cell gives way to its probe), in place."""
    new = {c.axis: c for c in probed}
    kept = [new.pop(c.axis, c) for c in cells]
    return kept + list(new.values())


# ---- windows


def window_case(causal: bool = False, length: int = 8) -> Case:
    """Self-attention over `length` positions (S > every width read), no mask of its own."""
    return probe_case("window", inputs={"self_attention": True, "query_len": length,
                                        "key_len": length},
                      mask={"causal": "upper_left"} if causal else {})


def window_readings(w: int) -> dict[str, tuple[int | None, int | None]]:
    """The (left, right) window each reading of the number `w` gives (inclusive)."""
    return {"w_keys": (w - 1, 0), "w_plus_1_keys": (w, 0), "2w_plus_1_keys": (w, w),
            "2w_minus_1_keys": (w - 1, w - 1), "no window": (None, None)}


def window_candidates(case: Case, w: int) -> dict[str, np.ndarray]:
    """The oracle output under each reading of `w`.  The words count the keys a query sees,
    so under the case's causal mask a symmetric reading that leaves the same keys as a
    one-sided one is that reading (2w - 1 keys are w keys, 2w + 1 are w + 1): such
    readings are one candidate, named by the one-sided word, never a tie of two."""
    n = case.inputs.query_len
    pos = np.arange(n)
    causal = np.tril(np.ones((n, n), bool)) if case.mask.causal != "none" else True
    masks: dict[str, np.ndarray] = {}
    for word, (left, right) in window_readings(w).items():
        allowed = window_allowed(pos, pos, left, right) & causal
        if not any(np.array_equal(allowed, seen) for seen in masks.values()):
            masks[word] = allowed
    return {word: output_with(case, allowed) for word, allowed in masks.items()}


def window_width(w: int, runs: dict[str, tuple[Case, Callable[[], np.ndarray]]], what: str,
                 **documented) -> Convention:
    """`runs`: a setting's words -> (its case, its output).  The cell is the reading of the
    first run (a window without a causal mask: the only one where w + 1 and 2w + 1 differ);
    the others are quoted."""
    cells = []
    for setting, (case, run) in runs.items():
        cells.append(closest("window_width", run(), window_candidates(case, w),
                             f"{setting}", **documented))
    texts = " | ".join(c.evidence for c in cells)
    if cells[0].value == "no window":  # the number was accepted and masks nothing
        return Convention("window_width", IGNORED, f"{what}: accepted, the output is the "
                          f"unwindowed one: {texts}", **documented)
    return Convention("window_width", cells[0].value, f"{what}: {texts}", **documented)


# ---- softcap order


def softcap_order_candidates(case: Case, cap: float, add: np.ndarray) -> dict[str, np.ndarray]:
    """Outputs with softcap `cap` applied before a finite additive mask `add` (B, T, S)
    (softmax(cap * tanh(s / cap) + m)) and after it (softmax(cap * tanh((s + m) / cap)))."""
    data = case_data(case)
    w = data.weights
    q, k, v = projected_heads(case, data)  # MLA: its materialised heads
    s = q @ k.transpose(0, 1, 3, 2) / np.sqrt(case.attention.qk_head_dim)
    m = add[:, None]

    def out(scores):
        p = np.exp(scores - scores.max(-1, keepdims=True))
        y = np.einsum("bhtd,hdo->bto", (p / p.sum(-1, keepdims=True)) @ v, w.wo)
        return y if w.bo is None else y + w.bo

    return {"before_mask": out(cap * np.tanh(s / cap) + m),
            "after_mask": out(cap * np.tanh((s + m) / cap)),
            "no softcap": out(s + m)}


def softcap_order(case: Case, cap: float, add: np.ndarray, out: np.ndarray, what: str,
                  **documented) -> Convention:
    cell = closest("softcap_order", out, softcap_order_candidates(case, cap, add),
                   f"{what}: softcap={cap}, finite float mask 0 / {add.min():g}", **documented)
    if cell.value == "no softcap":  # the cap was accepted and the scores are uncapped
        return replace(cell, value=IGNORED, evidence=f"{cell.evidence}: accepted, the output "
                       "is the uncapped one")
    return cell
