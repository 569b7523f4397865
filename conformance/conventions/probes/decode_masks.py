"""The mask axes of a runner that decodes only, asked through its own decode: mask_fill,
masked_key_nonfinite, masked_value_nonfinite and the fully masked row.

A decode-only runner's translate takes causal decodes, where every query sees its own key,
so the single-call probes (masks.py, rows.py) cannot reach its masked scores.  The system
behind it takes a mask at every step all the same (torch SDPA's attn_mask, MLX's mask=, a
Keras layer's attention_mask over its cache slots): the ledger asks the runner's `answer`
for RawCall("step_mask") on a decode probe case (a prefill of 4, then 6 single-position
steps, causal self-attention) whose boolean mask gives each step its own row over the keys
the cache holds.  The steps' outputs are judged, the prefill is as the system runs it:

- mask_fill: the fill candidates of masks.py, each simulated in float32 on the oracle's
  scores of each step over the keys its cache holds (a fill written in that wins spreads
  the weight over the masked keys of the cache, not over positions still to come),
  compared on the step rows, at inputs x 1e5 and x 1, then at masks.py's parting scales
  while finite fills stay alike (a tie no input parts is named as masks.py names it).
  Item 0's last step (position 9, over all 10 keys) is fully masked, so the -inf fill
  (NaN), a huge finite fill (the mean of v: uniform) and a zeroed row part there.
- fully_masked_row: that step, named nan, zeros or uniform (within rows.MATCH), else
  finite_other.
- masked_key_nonfinite / masked_value_nonfinite: NaN written into the cached key, then
  the cached value, of item 1 at position 2 after the prefill (a padded slot of a cache:
  every step of item 1 masks it); a step row of item 1 that turns non-finite is the
  system letting it through.  The cache holds keys and values apart, so the two cells
  part even though a decode is self-attention.

A runner whose `answers` lack step_mask gets the single-call probes through its
probe_translate (the call every step makes, where its runner takes it: the ONNX external
cache's nonpad_kv_seqlen), their reasons quoted where it takes none.
"""
from __future__ import annotations

import numpy as np

from conformance.case.loader import Case, parse_case
from conformance.conventions.axes import NOT_PROBED, Convention
from conformance.contract.runner import RawCall
from conformance.conventions.probes.asked import documented
from conformance.conventions.probes.masks import (
    FILL_SCALES, FILLS32, HUGE, MASKED_AXES, NO_MASK, PARTING_SCALES, _documented, _named,
    _rows_off, unanswered)
from conformance.conventions.probes.probing import PROBE_SOURCE, distances
from conformance.conventions.probes.request import Answer, ask_raw
from conformance.oracle.canonical import case_data
from conformance.oracle.reference import projected_heads
from conformance.oracle.reference import attention

PREFILL, LENGTH = 4, 10
ARGUMENT = "step_mask"
# each item's step rows (positions 4..9) over the keys the cache holds then.  A row with
# one key open is where a fill written in parts from a huge one (its one score below the
# fill lets the masked keys win), so most rows open one key; item 0's last step is fully
# masked; item 1 masks key 2 at every step (the NaN's slot)
STEP_ROWS = ([[1, 0, 0, 0, 0], [0, 1, 0, 0, 0, 0], [1, 0, 1, 1, 0, 1, 0],
              [0, 0, 0, 1, 0, 0, 0, 0], [0, 0, 0, 0, 0, 1, 0, 0, 0], [0] * 10],
             [[0, 1, 0, 0, 0], [1, 1, 0, 1, 0, 1], [0, 0, 0, 1, 0, 0, 0],
              [1, 0, 0, 0, 0, 0, 0, 0], [0, 0, 0, 0, 1, 0, 0, 0, 0],
              [1, 0, 0, 1, 0, 1, 1, 0, 1, 1]])
FULLY = (0, LENGTH - 1)  # (item, position) of the fully masked step
NAN_ITEM, NAN_SLOT = 1, 2
MATCH = 1e-4  # a fully masked step within this of a reading is that reading (rows.py)
# what a probe case may carry for the system to take it: projection biases or none (and
# unscaled: T5), heads of 8 (a kernel taking multiples of 8 only)
FORMS = ({}, {"bias": False}, {"bias": False, "scale": 1.0},
         {"query_features": 16, "bias": False})


def step_mask() -> list[list[list[int]]]:
    """(B, T, S): the prefill's rows causal, then each item's STEP_ROWS (0 after them)."""
    causal = [[int(s <= t) for s in range(LENGTH)] for t in range(PREFILL)]
    return [causal + [row + [0] * (LENGTH - len(row)) for row in rows] for rows in STEP_ROWS]


def step_case(scale: float = 1.0, attention: dict | None = None, needs: dict | None = None
              ) -> Case:
    """The decode probe case: causal self-attention over 7 positions (prefill 4, 3 steps),
    the step mask beside the causal one, inputs x `scale`."""
    raw = {"id": "probe-decode-step-mask",
           "attention": {"num_heads": 2, "query_features": 8, **(attention or {}),
                         **(needs or {})},
           "inputs": {"batch": 2, "query_len": LENGTH, "key_len": LENGTH, "seed": 7,
                      "self_attention": True, "scale": scale},
           "mask": {"causal": "upper_left", "attn_mask": step_mask()},
           "decode": {"prefill": PREFILL, "steps": LENGTH - PREFILL}}
    return parse_case(raw, PROBE_SOURCE)


def ask_steps(runner, scale: float, nan: dict | None = None) -> tuple[Case | None, Answer]:
    """The first form of the step case the runner's decode answers, and its answer."""
    needs = dict(runner.probe_needs)
    last = Answer(None, unasked="no form asked")
    for form in FORMS:
        case = step_case(scale, form, needs)
        got = ask_raw(runner, case, RawCall(ARGUMENT, nan))
        if got.answered:
            return case, got
        last = got
        if got.unasked:  # the harness cannot make the request: no other form will do
            break
    return None, last


def _said(runner, case: Case, got: Answer) -> str:
    return (f"{runner.name}, probe {case.id} (prefill {PREFILL}, then {LENGTH - PREFILL} "
            f"single-position steps through the cache, each given its own mask row: "
            f"{got.call})")


def _simulated_steps(case, fill: float, added: bool, zeroed: bool = False) -> np.ndarray:
    """(B, steps, E_o): each step's output when its masked float32 scores over the cache's
    keys get `fill` (added or written in), softmax in float64; `zeroed`: the masked
    weights then set to 0 (Keras's Softmax layer).  Positions after the step are not in
    its cache: they take no part."""
    data = case_data(case)
    w, x = data.weights, data.inputs
    q, k, v = projected_heads(case, data)  # MLA: its materialised heads
    scale = case.attention.scale or 1 / np.sqrt(case.attention.qk_head_dim)
    s32 = (np.einsum("bhtd,bhsd->bhts", q, k) * scale).astype(np.float32)
    allowed = np.broadcast_to(x.allowed[:, None], s32.shape)
    cached = np.broadcast_to(np.tril(np.ones(s32.shape[-2:], bool)), s32.shape)
    with np.errstate(over="ignore", invalid="ignore"):
        logits = (s32 + np.where(allowed, np.float32(0), np.float32(fill)) if added
                  else np.where(allowed, s32, np.float32(fill))).astype(np.float64)
        logits = np.where(cached, logits, -np.inf)
        e = np.exp(logits - logits.max(-1, keepdims=True))
        probs = e / e.sum(-1, keepdims=True)
    probs = np.where(allowed, probs, 0.0) if zeroed else probs
    out = np.einsum("bhtd,hde->bte", probs @ v, w.wo)[:, PREFILL:]
    return out if w.bo is None else out + w.bo


def step_candidates(case) -> dict[str, dict[str, np.ndarray]]:
    """Per fill word, its variants on the step rows (masks.py's, but over each step's
    cache): added, written in, written in with the masked weights zeroed, and for -inf
    the fully masked steps answered with zeros (the output bias)."""
    cands = {word: {"added": _simulated_steps(case, f, True),
                    "written in": _simulated_steps(case, f, False),
                    "written in, masked weights then zeroed": _simulated_steps(case, f, False,
                                                                               True)}
             for word, f in FILLS32.items()}
    cands[NO_MASK] = {"added": _simulated_steps(case, 0.0, True)}
    exp = attention(case)
    fully = exp.fully_masked[:, PREFILL:, None]
    cands["-inf"]["written in, fully masked rows zeroed"] = np.where(
        fully, exp.output_if_zeros[:, PREFILL:], cands["-inf"]["written in"])
    return cands


def _tally(counts: dict, steps: np.ndarray, case: Case) -> None:
    """Add the step rows unlike each simulated fill at one input scale to `counts`."""
    for word, variants in step_candidates(case).items():
        for v, c in variants.items():
            counts.setdefault(word, {}).setdefault(v, 0)
            counts[word][v] += _rows_off(steps, c)


def _ties(best: dict) -> list[str]:
    least = min(n for n, _ in best.values())
    return [w for w, (n, _) in best.items() if n == least]


def step_fill_cell(runner) -> tuple[Convention, Convention | None]:
    """mask_fill read from the step rows at inputs x 1e5 and x 1, then at masks.py's
    PARTING_SCALES while finite fills stay alike; the fully masked step's reading
    (fully_masked_row) from the x 1 run.  (the fill cell, None) where the runner's decode
    answered no form."""
    counts: dict[str, dict[str, int]] = {}
    rows, scales, unit = 0, [], None
    for scale in (*FILL_SCALES, *PARTING_SCALES):
        best = {w: min((n, v) for v, n in vs.items()) for w, vs in counts.items()}
        ties = _ties(best) if best else []
        if scale in PARTING_SCALES and (len(ties) < 2 or set(ties) <= set(HUGE)
                                        or NO_MASK in ties):
            break
        case, got = ask_steps(runner, scale)
        if case is None:
            if scale in FILL_SCALES:
                return unanswered("mask_fill", runner.name, "the decode's step-mask probe",
                                  got), None
            break
        steps = got.output[:, PREFILL:]
        rows += steps.shape[0] * steps.shape[1]
        scales.append(scale)
        _tally(counts, steps, case)
        unit = (case, got) if scale == 1.0 else unit
    best = {w: min((n, v) for v, n in vs.items()) for w, vs in counts.items()}
    word = min(best, key=lambda k: best[k][0])
    figures = "; ".join(f"{k} ({v}) {n}" for k, (n, v) in best.items())
    text = (f"{_said(runner, *unit)}, float32, inputs x "
            f"{' and x '.join(f'{s:g}' for s in scales)}: step rows of {rows} unlike "
            f"each simulated fill: {figures}")
    row = fully_masked_step_cell(runner, *unit)
    if best[word][0] > rows // 8 or word == NO_MASK:
        return Convention("mask_fill", "other", text), row
    named, note = _named(runner, word, _ties(best), shown(*unit))
    return Convention("mask_fill", named, text + note, *_documented(runner)), row


def shown(case: Case, got: Answer) -> Convention | None:
    """The number the system showed its masked scores hold during the steps (its answer's
    extras["masked_scores_hold"]: onnxruntime's qk_matmul_output), as masks.py's tie-break
    reads it; None where it showed none."""
    held = got.extras.get("masked_scores_hold")
    if held is None:
        return None
    return Convention("mask_fill", held, f"{runner_words(case, got)}: the masked scores of "
                      f"every step hold {held}")


def runner_words(case: Case, got: Answer) -> str:
    return f"probe {case.id}, {got.call}"


def fully_masked_step_cell(runner, case: Case, got: Answer) -> Convention:
    """Item 0's last step, every key masked: NaN, zeros (the output bias alone) or the
    mean of the cache's values (uniform weights), else finite_other."""
    b, t = FULLY
    row = got.output[b, t]
    text = (f"{_said(runner, case, got)}: item {b}'s step at position {t} masks all "
            f"{t + 1} keys")
    if np.isnan(row).any():
        return Convention("fully_masked_row", "nan", f"{text}: NaN",
                          **documented(runner, "fully_masked_row"))
    exp = attention(case)  # the step at the last position holds every key
    d = distances(row, {"zeros": exp.output_if_zeros[b, t],
                        "uniform": exp.output_if_uniform[b, t]})
    word = min(d, key=d.get) if min(d.values()) <= MATCH else "finite_other"
    return Convention("fully_masked_row", word, f"{text}: max |row - reading| " + "; ".join(
        f"{k} {v:.1e}" for k, v in d.items()) + " (uniform: the mean of the cached values)",
        **documented(runner, "fully_masked_row"))


def step_nonfinite_cells(runner) -> list[Convention]:
    """A NaN written into the cached key, then the cached value, of item 1 at a position
    each of its steps masks: how many of its step rows turn non-finite."""
    cells = []
    for tensor, axis in MASKED_AXES.items():
        nan = {"nan": tensor, "item": NAN_ITEM, "slot": NAN_SLOT}
        case, got = ask_steps(runner, 1.0, nan)
        if case is None:
            cells.append(unanswered(axis, runner.name, f"the decode's probe (a NaN in a "
                                    f"masked cached {tensor})", got))
            continue
        steps = got.output[NAN_ITEM, PREFILL:]
        bad = int((~np.isfinite(steps)).any(-1).sum())
        clean = attention(case).output[NAN_ITEM, PREFILL:]
        ok = np.isfinite(steps).all(-1)
        d = (f", the others {np.abs(steps[ok] - clean[ok]).max():.1e} from the oracle "
             "without the NaN" if ok.any() else "")
        other = int((~np.isfinite(got.output[1 - NAN_ITEM])).any(-1).sum())
        cells.append(Convention(
            axis, "propagates" if bad else "contained",
            f"{_said(runner, case, got)}: NaN written into the cached {tensor} of item "
            f"{NAN_ITEM} at position {NAN_SLOT} after the prefill, masked at every step: "
            f"{bad} of {len(steps)} step rows non-finite{d} (item {1 - NAN_ITEM}: {other} "
            "rows non-finite)"))
    return cells


def decode_mask_cells(runner, own: list[Convention]) -> list[Convention]:
    """The mask axes of a decode-only runner through its decode's step mask, and its
    fully_masked_row where no cell reads it or its cell is not_probed (a causal decode
    has no such row)."""
    fill, row = step_fill_cell(runner)
    cells = [fill, *step_nonfinite_cells(runner)]
    mine = {c.axis: c for c in own}
    kept = mine.get("fully_masked_row")
    if row is not None and (kept is None or kept.value == NOT_PROBED):
        cells.append(row)
    return cells


def answers_steps(runner) -> bool:
    return ARGUMENT in runner.answers
