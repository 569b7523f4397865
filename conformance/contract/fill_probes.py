"""The two mask-encoding axes of #20, probed through a runner's own `translate` and `run`
(so every executed runner gets them with no framework code of its own):

- mask_fill: what the system writes into masked scores before the softmax.  A probe
  case with inputs x 1e5 makes the scores O(1e10) in float32, so the candidate fills
  give different outputs: -inf (NaN, or zeros, on a fully masked row), finfo.min
  (uniform there), -1e9 added (the masked scores keep their order: s - 1e9 is not
  uniform at this size) or written in (loses to an unmasked score below -1e9), -1e4
  (added it hardly moves a score of 1e10: the mask does nothing there, so the same case
  at inputs x 1 tells it from no mask at all).  Each candidate is
  simulated in float32 on the oracle's scores; the cell names the one matching the
  most output rows, with every count as evidence.
- masked_kv_nonfinite: a NaN in a key (then a value) position that every query masks:
  does it reach the output?

The mask reaches the system as the runner translates the case's explicit boolean mask
(a key-padding mask where the runner takes no attention mask), so a runner that builds
a float mask itself shows its own fill.  Only contract, case and oracle are imported.
"""
from __future__ import annotations

from dataclasses import replace

import numpy as np

from conformance.case.loader import parse_case
from conformance.contract.runner import Convention, NotExpressible
from conformance.contract.probing import PROBE_SOURCE
from conformance.oracle.canonical import case_data
from conformance.oracle.reference import attention, project

# inputs x 1e5: float32 scores of O(1e10), where the fills part; x 1: -1e4 added masks
FILL_SCALES = (1e5, 1.0)
# self-attention (B=2, T=S=6): row 1 of item 0 and row 3 of item 1 fully masked; every row
# of item 1 masks key 4
_MASK = [[[1, 1, 0, 1, 0, 1], [0, 0, 0, 0, 0, 0], [0, 1, 1, 0, 1, 1], [1, 0, 0, 0, 0, 1],
          [0, 0, 1, 1, 0, 0], [1, 1, 1, 1, 1, 0]],
         [[1, 0, 1, 1, 0, 1], [1, 1, 0, 1, 0, 0], [0, 1, 1, 1, 0, 1], [0, 0, 0, 0, 0, 0],
          [1, 1, 1, 1, 0, 1], [0, 1, 0, 0, 0, 1]]]
FILLS32 = {"-inf": -np.inf, "finfo_min": float(np.finfo(np.float32).min), "-1e9": -1e9,
           "-1e4": -1e4}
NO_MASK = "0 (no mask)"  # a candidate too: a system that ignores the mask is "other"


def _case(name: str, mask: dict, attention: dict, **inputs):
    raw = {"id": f"probe-{name}", "attention": {"num_heads": 2, "query_features": 8,
                                                **attention},
           "inputs": {"batch": 2, "query_len": 6, "key_len": 6, "seed": 7,
                      "self_attention": True, **inputs},
           "mask": mask}
    return parse_case(raw, PROBE_SOURCE)


def _output(runner, case):
    """The system's raw output (a runner may define `probe_output` to skip a guard of its
    rows, e.g. one refusing a non-finite float32 output)."""
    t = runner.translate(case)
    if isinstance(t, NotExpressible):
        return None, t.reason
    run = getattr(runner, "probe_output", None)
    try:
        return (run(case, t, case_data(case)) if run else
                runner.run(case, t, case_data(case)).output), None
    except Exception as exc:  # the system's refusal is the observation
        return None, f"{type(exc).__name__}: {' '.join(str(exc).split())[:200]}"


def _observe(runner, name: str, padding: list[int], *variants: dict):
    """Run the probe with each inputs variant in turn (cross-attention, then self-attention,
    for systems that take only one), with the explicit mask, else with key padding
    `padding` (beside a causal mask for a causal-only system), with projection biases or
    without (and unscaled, T5); (case, output) or (None, why none is expressible)."""
    tried = []
    masks = ({"attn_mask": _MASK}, {"key_padding": padding},
             {"key_padding": padding, "causal": "upper_left"})
    for inputs in variants:
        for attn in ({}, {"bias": False}, {"bias": False, "scale": 1.0}):
            for mask in masks:
                case = _case(name, mask, attn, **inputs)
                out, why = _output(runner, case)
                if why is None:
                    return case, out
                tried.append(why)
    return None, "; ".join(dict.fromkeys(tried))


def _simulated(case, fill: float, added: bool, zeroed: bool = False) -> np.ndarray:
    """The output when masked float32 scores get `fill` (added or written in), softmax in
    float64 of the float32 logits; NaN on a row whose logits are all -inf.  `zeroed`:
    the masked weights are then set to 0 without renormalising (Keras's Softmax layer)."""
    data = case_data(case)
    w, x = data.weights, data.inputs
    q, k = project(x.query, w.wq, w.bq), project(x.key, w.wk, w.bk)
    v = project(x.value, w.wv, w.bv)
    scale = case.attention.scale or 1 / np.sqrt(case.attention.qk_head_dim)
    s = np.einsum("bhtd,bhsd->bhts", q, k) * scale
    s32 = s.astype(np.float32)
    allowed = np.broadcast_to(x.allowed[:, None], s.shape)
    with np.errstate(over="ignore", invalid="ignore"):
        logits = (s32 + np.where(allowed, np.float32(0), np.float32(fill)) if added
                  else np.where(allowed, s32, np.float32(fill))).astype(np.float64)
        e = np.exp(logits - logits.max(-1, keepdims=True))
        probs = e / e.sum(-1, keepdims=True)
    probs = np.where(allowed, probs, 0.0) if zeroed else probs
    out = np.einsum("bhtd,hde->bte", probs @ v, w.wo)
    return out if w.bo is None else out + w.bo


def _candidates(case) -> dict[str, dict[str, np.ndarray]]:
    """Per fill word, its variants: added, written in, written in with the masked weights
    zeroed after the softmax, and for -inf the fully masked rows answered with zeros
    (output bias) as some systems do."""
    cands = {word: {"added": _simulated(case, f, True), "written in": _simulated(case, f, False),
                    "written in, masked weights then zeroed": _simulated(case, f, False, True)}
             for word, f in FILLS32.items()}
    cands[NO_MASK] = {"added": _simulated(case, 0.0, True)}
    exp = attention(case)
    fully = exp.fully_masked[..., None]
    cands["-inf"]["written in, fully masked rows zeroed"] = np.where(
        fully, exp.output_if_zeros, cands["-inf"]["written in"])
    return cands


def _rows_off(obs: np.ndarray, cand: np.ndarray) -> int:
    """Output rows (b, t) that differ: NaN against a number, or off by > 1e-3 of the
    output's size (scores of 1e9 leave a float32 system a little way from a simulation)."""
    size = np.nanmax(np.abs(cand)) if np.isfinite(cand).any() else 1.0
    with np.errstate(invalid="ignore"):
        same = (np.isnan(obs) & np.isnan(cand)) | (np.abs(obs - cand) <= 1e-3 * size)
    return int((~same.all(-1)).sum())


def mask_fill_cell(runner, what: str = "", **documented) -> Convention:
    """The fill the runner's system writes into masked scores, read from its output at
    inputs x 1e5 (the fills part) and x 1 (-1e4 added parts from no mask at all)."""
    label = what or runner.name
    counts: dict[str, dict[str, int]] = {}
    rows = 0
    for scale in FILL_SCALES:
        case, out = _observe(runner, "mask-fill", [4, 0], {"scale": scale},
                             {"scale": scale, "self_attention": False})
        if case is None:
            return Convention("mask_fill", "not_applicable", f"{label}: the fill probe (a "
                              f"masked float32 case) cannot run: {out}")
        obs = np.asarray(out, np.float64)
        rows += obs.shape[0] * obs.shape[1]
        for word, variants in _candidates(case).items():
            for v, c in variants.items():
                counts.setdefault(word, {}).setdefault(v, 0)
                counts[word][v] += _rows_off(obs, c)
    best = {word: min((n, v) for v, n in variants.items()) for word, variants in counts.items()}
    word = min(best, key=lambda k: best[k][0])
    value = word if best[word][0] <= rows // 8 and word != NO_MASK else "other"
    figures = "; ".join(f"{k} ({v}) {n}" for k, (n, v) in best.items())
    ties = [k for k in best if best[k][0] == best[word][0] and k != word]
    if ties:  # e.g. -inf with zeroed rows and finfo.min with zeroed weights look alike
        figures += f" ({word} and {', '.join(ties)} alike here: the first is named)"
    return Convention("mask_fill", value, f"{label}, probe {case.id} (float32, inputs x "
                      f"{' and x '.join(f'{s:g}' for s in FILL_SCALES)}; mask "
                      f"{_mask_words(case)}): output rows of {rows} unlike each simulated "
                      f"fill: {figures}", **documented)


def _mask_words(case) -> str:
    if case.mask.key_padding is None:
        return "explicit (B, T, S) boolean"
    return f"key padding {list(case.mask.key_padding)}" + (
        ", causal" if case.mask.causal != "none" else "")


def _nan(tensor: str) -> dict:
    return {"nonfinite": [{"tensor": tensor, "batch": 1, "position": 4, "feature": 1,
                           "value": "nan"}]}


def masked_kv_cell(runner, what: str = "", **documented) -> Convention:
    """NaN in a key (then a value) position that every query of item 1 masks (key 4);
    a system that takes only self-attention gets the NaN in its one input there (query
    row 4 is then undefined and not judged)."""
    label = what or runner.name
    found, word = {}, "contained"
    for tensor in ("key", "value"):
        case, out = _observe(runner, f"masked-{tensor}-nan", [6, 4],
                             {"self_attention": False, **_nan(tensor)}, _nan("query"))
        if case is None:
            return Convention("masked_kv_nonfinite", "not_applicable", f"{label}: the probe "
                              f"(a masked key position) cannot run: {out}")
        obs = np.asarray(out, np.float64)[1]
        clean = attention(replace(case, inputs=replace(case.inputs, nonfinite=()))).output[1]
        judged = ~attention(case).fully_masked[1]  # a fully masked row is another axis
        if case.inputs.self_attention:
            judged &= np.arange(obs.shape[0]) != 4
        bad = int((~np.isfinite(obs[judged])).any(-1).sum())
        rows = judged & np.isfinite(obs).all(-1)
        d = (f", the others {np.nanmax(np.abs(obs[rows] - clean[rows])):.1e} from the oracle "
             "without the NaN" if rows.any() else "")
        where = "the one input (self-attention; query row 4 not judged)" \
            if case.inputs.self_attention else tensor
        found[tensor] = f"NaN in {where}: {bad} of {int(judged.sum())} rows non-finite{d}"
        word = "propagates" if bad and tensor == "key" or word == "propagates" else word
        if case.inputs.self_attention:
            break
    return Convention("masked_kv_nonfinite", word, f"{label}, item 1 key 4 masked for every "
                      f"query (mask {_mask_words(case)}): {'; '.join(found.values())}",
                      **documented)


def mask_encoding_cells(runner, what: str = "") -> list[Convention]:
    """Both cells, for a runner's `conventions`."""
    return [mask_fill_cell(runner, what), masked_kv_cell(runner, what)]


def ledger_conventions(runner) -> list:
    """`runner.conventions()` plus the mask-encoding cells it does not give itself, probed
    through its own translate and run, so every executed runner has them without
    framework code of its own.  The ledger's probe items and the workers call this."""
    cells = list(runner.conventions())
    have = {c.axis for c in cells}
    if {"mask_fill", "masked_kv_nonfinite"} <= have:
        return cells
    return cells + [c for c in mask_encoding_cells(runner) if c.axis not in have]
