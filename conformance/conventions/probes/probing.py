"""Shared tools of the convention probes (Runner.conventions, axes.py).

A probe runs the system on a small seeded configuration with one native
argument passed *raw* (a boolean mask as the system receives it, a float
mask, a causal flag with T != S ...), and names the convention by which
candidate reading of that argument the output matches: the float64 oracle
is evaluated under each reading, and the closest one wins, with every
distance quoted as the evidence.  So a cell is observed, never asserted.
"""
from __future__ import annotations

from dataclasses import replace

import numpy as np

from conformance.case.loader import Case, parse_case
from conformance.conventions.axes import FEATURE_ARGUMENTS, Convention
from conformance.conventions.probes.resolution import alike, tie_cell
from conformance.oracle.reference import attention
from conformance.oracle.canonical import CaseData, case_data, causal_mask

PROBE_SOURCE = "<probe>"


def probe_case(probe: str, **sections) -> Case:
    """A small seeded case for a probe: 2 heads, 8 features, batch 2, T 3, S 5 unless
    overridden; its id names the probe (the evidence quotes it)."""
    raw = {"id": f"probe-{probe}", "attention": {"num_heads": 2, "query_features": 8},
           "inputs": {"batch": 2, "query_len": 3, "key_len": 5, "seed": 7}}
    for name, values in sections.items():
        raw[name] = {**raw.get(name, {}), **values}
    return parse_case(raw, PROBE_SOURCE)


def probe_mask(case: Case, seed: int = 11) -> np.ndarray:
    """(B, T, S) boolean pattern, True on about half the positions, never a full row
    of False nor of True (so both readings of it are defined and differ)."""
    i = case.inputs
    m = np.random.default_rng(seed).random((i.batch, i.query_len, i.key_len)) < 0.5
    m[..., 0], m[..., -1] = True, False
    return m


def output_with(case: Case, allowed: np.ndarray | None, data: CaseData | None = None,
                scale: float | None = None) -> np.ndarray:
    """The oracle's output when `allowed` (True = may attend, (B, T, S) or (T, S)) is
    the whole mask; NaN on rows it fully masks."""
    data = data or case_data(case)
    i = case.inputs
    if allowed is not None:
        allowed = np.broadcast_to(allowed, (i.batch, i.query_len, i.key_len))
    fully = ~allowed.any(-1) if allowed is not None else np.zeros((i.batch, i.query_len), bool)
    inputs = replace(data.inputs, allowed=allowed, fully_masked=fully)
    return attention(case, replace(data, inputs=inputs), scale).output


def output_added(case: Case, add: np.ndarray, scale: float | None = None) -> np.ndarray:
    """The oracle's output when `add` ((B, T, S) floats) is added to the scaled scores and
    nothing is masked: how a system reads a mask it adds instead of applying."""
    from conformance.oracle.reference import projected_heads

    d, a = case_data(case), case.attention
    w = d.weights
    q, k, v = projected_heads(case, d)  # MLA: its materialised heads
    scale = a.scale if scale is None else scale
    s = q @ k.transpose(0, 1, 3, 2) * (1 / np.sqrt(a.qk_head_dim) if scale is None else scale)
    s = s + np.asarray(add, np.float64)[:, None]
    p = np.exp(s - s.max(-1, keepdims=True))
    out = np.einsum("bhtd,hde->bte", (p / p.sum(-1, keepdims=True)) @ v, w.wo)
    return out if w.bo is None else out + w.bo


def causal_candidates(case: Case) -> dict[str, np.ndarray]:
    """Outputs of the two causal alignments (T != S), and of no mask (ignored)."""
    i = case.inputs
    return {"upper_left": output_with(case, causal_mask(i.query_len, i.key_len, "upper_left")),
            "lower_right": output_with(case, causal_mask(i.query_len, i.key_len, "lower_right")),
            "ignored": output_with(case, None)}


def distances(observed: np.ndarray, candidates: dict[str, np.ndarray]) -> dict[str, float]:
    """max |observed - candidate| per candidate over positions both define (inf if
    the shapes differ or nothing is comparable)."""
    obs = np.asarray(observed, dtype=np.float64)
    found = {}
    for word, cand in candidates.items():
        if cand.shape != obs.shape:
            found[word] = float("inf")
            continue
        both = np.isfinite(cand) & np.isfinite(obs)
        found[word] = float(np.max(np.abs(obs[both] - cand[both]))) if both.any() else \
            float("inf")
    return found


def closest(axis: str, observed: np.ndarray, candidates: dict[str, np.ndarray], what: str,
            **documented) -> Convention:
    """The candidate the observation matches, with every distance as evidence; where the
    input cannot tell it from another candidate (resolution.alike), the tie, never the
    nearest."""
    d = distances(observed, candidates)
    ties = alike(d, candidates)
    if len(ties) > 1:
        return tie_cell(axis, ties, d, what, **documented)
    return nearest(axis, d, what, **documented)


def nearest(axis: str, d: dict[str, float], what: str, **documented) -> Convention:
    """The reading at the least distance `d` (distances()), every distance as evidence."""
    word = min(d, key=d.get)
    figures = "; ".join(f"{k} {v:.1e}" for k, v in d.items())
    return Convention(axis, word, f"{what}: max |output - oracle| under each reading: "
                      f"{figures}", **documented)


def refusal(axis: str, exc: BaseException, what: str, value: str = "refused",
            **documented) -> Convention:
    """A probe the system rejected: the cell quotes its own message (one line, bounded)."""
    text = " ".join(f"{type(exc).__name__}: {exc}".split())
    return Convention(axis, value, f"{what}: {text[:300]}", **documented)


def signature_names(*callables) -> tuple[list[str], list[str]]:
    """The parameter names of `callables` (introspection of the installed version, so an
    upgrade that adds an argument shows up), and the callables whose signature cannot
    be read.  A builtin is read from its docstring's signature."""
    import inspect

    seen, unreadable = [], []
    for fn in callables:
        try:
            seen += [p for p in inspect.signature(fn).parameters if p not in ("self", "args",
                                                                             "kwargs")]
        except (TypeError, ValueError):  # a builtin: its docstring's signature
            head = (getattr(fn, "__doc__", "") or "").strip()
            inside = head[head.find("(") + 1:head.find(")")] if "(" in head else ""
            params = [a.split("=")[0].strip(" *") for a in inside.split(",") if a.strip()]
            seen += params
            if not params:
                unreadable.append(getattr(fn, "__qualname__", repr(fn)))
    return seen, unreadable


def absent_among(axis: str, names: tuple[str, ...], what: str, seen: list[str],
                 source: str = "parameters") -> Convention:
    """axes.NA when none of `names` is among the names `seen` (a signature's parameters,
    an operator schema's attributes and inputs); `not_probed` naming the ones found."""
    found = sorted(set(names) & set(seen))
    if found:
        return Convention(axis, "not_probed", f"{what} takes {found}: a probe is needed")
    # the count, not the list: the list repeated on every feature axis of every system
    # was a quarter of conventions.json; an added argument of one of `names` flips the cell
    return Convention(axis, "not_applicable", f"{what}: no argument among {list(names)} "
                      f"in its {len(dict.fromkeys(seen))} {source}")


def no_such_argument(axis: str, names: tuple[str, ...], what: str, *callables) -> Convention:
    """axes.NA for a system whose API takes none of `names`: read from the signatures
    of the callables it is driven through.  A callable whose signature cannot be read
    is named as such."""
    seen, unreadable = signature_names(*callables)
    cell = absent_among(axis, names, what, seen)
    if unreadable and cell.value == "not_applicable":
        cell = replace(cell, evidence=f"{cell.evidence} (signature not readable: "
                       f"{', '.join(unreadable)})")
    return cell


def feature_cells(what: str, *callables, skip: tuple[str, ...] = ()) -> list[Convention]:
    """One cell per axis of axes.FEATURE_ARGUMENTS (softcap, rotary embeddings, grouped
    heads, QK-norm, ALiBi, caches, windows, sinks), read from the signatures of the
    callables a system is driven through: `not_applicable` where it takes none of the
    axis's argument names, `not_probed` (a probe is needed) where it takes one.  Axes a
    runner probes itself are in `skip`."""
    return [no_such_argument(axis, names, what, *callables)
            for axis, names in FEATURE_ARGUMENTS.items() if axis not in skip]


def feature_cells_from_names(what: str, seen: list[str], source: str,
                             skip: tuple[str, ...] = ()) -> list[Convention]:
    """feature_cells for a system described by names rather than a Python signature (an
    ONNX operator schema's attributes and inputs, a documented option list)."""
    return [absent_among(axis, names, what, seen, source)
            for axis, names in FEATURE_ARGUMENTS.items() if axis not in skip]
