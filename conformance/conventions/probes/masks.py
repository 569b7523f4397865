"""The mask-encoding axes, owned by the ledger and asked of every executed runner through its
own translate and run (request.ask), so no runner carries their judgement:

- mask_fill: what the system writes into masked scores before the softmax.  A probe
  case with inputs x 1e5 makes the scores O(1e10) in float32, so the candidate fills
  give different outputs: -inf (NaN, or zeros, on a fully masked row), a huge finite
  fill (finfo.min, -0.7 * finfo.max: uniform there), -1e9 added (the masked scores keep
  their order: s - 1e9 is not uniform at this size) or written in (loses to an unmasked
  score below -1e9), -1e4 (added it hardly moves a score of 1e10: the mask does nothing
  there, so the same case at inputs x 1 tells it from no mask at all).  Each candidate is
  simulated in float32 on the oracle's scores (with the weights the program stores, where
  it stores them in a narrower type: oracle/stored.py); the cell names the fill by the
  number that matches the most output rows, with every count as evidence.  Resolution
  before naming: where finite fills still match as many rows as the best (-1e4 and
  float16's -65504 both lose to scores of 1e10 and both mask scores of 1), the probe asks
  again at the inputs of PARTING_SCALES, one at a time, until they part; a tie left is
  named by fill_names.named (a number shown, held or documented; huge_finite; else
  not_probed naming the tie), never by the nearest.  finfo.min and -0.7 * finfo.max give
  the same outputs at any score a probe can make, so no input is asked to part them.  A
  system reading the boolean mask the other way round shows its number too (the fill
  written where the mask says attend: attn_mask_polarity names the inversion).
- masked_key_nonfinite, masked_value_nonfinite: a NaN in a key position, then in a value
  position, that every query of item 1 masks: does it reach the output?  Two facts: a
  NaN value behind a mask reaches every row where the masked weight is an exact 0
  (0 * NaN = NaN in P @ V) even when the key's NaN is contained.

The mask reaches the system as the runner translates the case's explicit boolean mask
(a key-padding mask where the runner takes no attention mask), so a runner that builds
a float mask itself shows its own fill.
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace

import numpy as np

from conformance.case.loader import parse_case
from conformance.conventions.axes import NOT_PROBED, REFUSED, Convention
from conformance.conventions.probes.choices import under_choices
from conformance.conventions.probes.probing import PROBE_SOURCE
from conformance.conventions.probes.request import Answer, first_answer
from conformance.conventions.probes.fill_names import (  # noqa: F401 (shown_word: re-export)
    FILLS32, HUGE, named, shown_word)
from conformance.oracle.canonical import case_data
from conformance.oracle.reference import projected_heads
from conformance.oracle.reference import attention
from conformance.oracle.stored import as_stored, rounds

# inputs x 1e5: float32 scores of O(1e10), where the fills part; x 1: -1e4 added masks
FILL_SCALES = (1e5, 1.0)
# inputs x these, asked one at a time while finite fills stay alike: scores of O(1e4) to
# O(1e8) part -1e4 from float16's -65504 (written in, x 300: 2 of 12 rows; added: 4) and
# both from -1e9
PARTING_SCALES = (300.0, 1e3, 1e4, 30.0)
# self-attention (B=2, T=S=6): row 1 of item 0 and row 3 of item 1 fully masked; every row
# of item 1 masks key 4
_MASK = [[[1, 1, 0, 1, 0, 1], [0, 0, 0, 0, 0, 0], [0, 1, 1, 0, 1, 1], [1, 0, 0, 0, 0, 1],
          [0, 0, 1, 1, 0, 0], [1, 1, 1, 1, 1, 0]],
         [[1, 0, 1, 1, 0, 1], [1, 1, 0, 1, 0, 0], [0, 1, 1, 1, 0, 1], [0, 0, 0, 0, 0, 0],
          [1, 1, 1, 1, 0, 1], [0, 1, 0, 0, 0, 1]]]
NO_MASK = "0 (no mask)"  # a candidate too: a system that ignores the mask is "other"
# the fill written where the boolean mask says attend: the number of a system that reads the
# mask the other way round (attn_mask_polarity says so); rows the mask leaves open differ
INVERTED = "written in, the mask read inverted"


def _case(name: str, mask: dict, attention: dict, **inputs):
    raw = {"id": f"probe-{name}", "attention": {"num_heads": 2, "query_features": 8,
                                                **attention},
           "inputs": {"batch": 2, "query_len": 6, "key_len": 6, "seed": 7,
                      "self_attention": True, **inputs},
           "mask": mask}
    return parse_case(raw, PROBE_SOURCE)


def _variants(name: str, padding: list[int], *inputs_variants: dict):
    """The probe case in each form a system may take, in order: each inputs variant
    (cross-attention, then self-attention, for systems that take only one), with the
    explicit mask, else with key padding `padding` (beside a causal mask for a causal-only
    system), with projection biases or without (and unscaled, T5; heads of 8)."""
    masks = ({"attn_mask": _MASK}, {"key_padding": padding},
             {"key_padding": padding, "causal": "upper_left"})
    for inputs in inputs_variants:
        # heads of 8 last: a kernel taking head sizes in multiples of 8 only (onnxruntime's
        # CPU GroupQueryAttention)
        for attn in ({}, {"bias": False}, {"bias": False, "scale": 1.0},
                     {"query_features": 16, "bias": False}):
            for mask in masks:
                yield _case(name, mask, attn, **inputs)


def unanswered(axis: str, label: str, probe: str, got: Answer) -> Convention:
    """The cell of a probe no form of which the runner answered: the system's own error is
    `refused`; anything else is `not_probed` with the reasons: the harness's limit, or a
    runner whose translate takes none of the probe's forms (its reasons quote what the
    case lacks: a rotation the module always applies, a causal-only LM...), which is no
    signature's evidence that the system lacks the argument (never not_applicable)."""
    if got.raised:
        return Convention(axis, REFUSED, f"{label}: {probe}: the system raised: {got.raised}")
    if got.unasked:
        return Convention(axis, NOT_PROBED, f"{label}: the suite cannot ask {probe} of this "
                          f"runner: {got.unasked}")
    return Convention(axis, NOT_PROBED, f"{label}: {probe} takes none of the probe's forms "
                      f"here: {got.inexpressible}")


def _simulated(case, fill: float, added: bool, zeroed: bool = False,
               inverted: bool = False, weights_dtype: str = "") -> np.ndarray:
    """The output when masked float32 scores get `fill` (added or written in), softmax in
    float64 of the float32 logits; NaN on a row whose logits are all -inf.  `zeroed`:
    the masked weights are then set to 0 without renormalising (Keras's Softmax layer).
    `inverted`: the fill goes where the mask says attend (a system reading the boolean
    mask the other way round still shows its number).  `weights_dtype`: the type the
    program stores its weights in (their rounding is the program's, not its fill's)."""
    data = as_stored(case_data(case), weights_dtype)
    w, x = data.weights, data.inputs
    q, k, v = projected_heads(case, data)  # MLA: its materialised heads
    scale = case.attention.scale or 1 / np.sqrt(case.attention.qk_head_dim)
    s = np.einsum("bhtd,bhsd->bhts", q, k) * scale
    s32 = s.astype(np.float32)
    allowed = np.broadcast_to(x.allowed[:, None] != inverted, s.shape)
    with np.errstate(over="ignore", invalid="ignore"):
        logits = (s32 + np.where(allowed, np.float32(0), np.float32(fill)) if added
                  else np.where(allowed, s32, np.float32(fill))).astype(np.float64)
        e = np.exp(logits - logits.max(-1, keepdims=True))
        probs = e / e.sum(-1, keepdims=True)
    probs = np.where(allowed, probs, 0.0) if zeroed else probs
    out = np.einsum("bhtd,hde->bte", probs @ v, w.wo)
    return out if w.bo is None else out + w.bo


def _candidates(case, weights_dtype: str = "") -> dict[str, dict[str, np.ndarray]]:
    """Per fill word, its variants: added, written in, written in with the masked weights
    zeroed after the softmax, and for -inf the fully masked rows answered with zeros
    (output bias) as some systems do."""
    def sim(fill, added, **how):
        return _simulated(case, fill, added, weights_dtype=weights_dtype, **how)

    cands = {word: {"added": sim(f, True), "written in": sim(f, False),
                    "written in, masked weights then zeroed": sim(f, False, zeroed=True),
                    INVERTED: sim(f, False, inverted=True)}
             for word, f in FILLS32.items()}
    cands[NO_MASK] = {"added": sim(0.0, True)}
    exp = attention(case, as_stored(case_data(case), weights_dtype))
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


@dataclass
class FillTally:
    """Output rows unlike each simulated fill, summed over the inputs asked so far."""

    counts: dict[str, dict[str, int]] = field(default_factory=dict)  # word -> variant -> rows
    rows: int = 0
    scales: list[float] = field(default_factory=list)
    case: object = None  # the probe case last asked
    held: tuple[float, ...] = ()  # the scalar constants the program holds (Answer)
    weights_dtype: str = ""  # the type the program stores its weights in (Answer)

    def add(self, case, got: Answer, scale: float) -> None:
        obs = got.output
        self.case, self.held = case, got.held_scalars or self.held
        self.weights_dtype = got.weights_dtype
        self.rows += obs.shape[0] * obs.shape[1]
        self.scales.append(scale)
        for word, variants in _candidates(case, got.weights_dtype).items():
            for v, c in variants.items():
                n = self.counts.setdefault(word, {}).setdefault(v, 0)
                self.counts[word][v] = n + _rows_off(obs, c)

    def best(self) -> dict[str, tuple[int, str]]:
        """word -> (its fewest rows unlike, the variant)."""
        return {w: min((n, v) for v, n in vs.items()) for w, vs in self.counts.items()}

    def ties(self) -> list[str]:
        """The words matching as many rows as the best: one count apart is the probe's
        resolution, so these cannot be told apart by the inputs asked so far."""
        best = self.best()
        least = min(n for n, _ in best.values())
        return [w for w, (n, _) in best.items() if n == least]

    def parts_more(self) -> bool:
        """Whether other inputs may part the tie: two or more words, not the huge fills
        alone (alike at every score a float32 probe can make) nor no mask."""
        ties = self.ties()
        return len(ties) > 1 and not set(ties) <= set(HUGE) and NO_MASK not in ties


def _ask_fill(runner, tally: FillTally, scale: float) -> Answer | None:
    """Ask the fill probe at inputs x `scale` into `tally`; the answer where none came."""
    case, got = first_answer(runner, _variants("mask-fill", [4, 0], {"scale": scale},
                                               {"scale": scale, "self_attention": False}))
    if case is None:
        return got
    tally.add(case, got, scale)
    return None


def mask_fill_cell(runner, what: str = "", reading: Convention | None = None) -> Convention:
    """The fill the runner's system writes into masked scores, read from its output at
    inputs x 1e5 (the fills part) and x 1 (-1e4 added parts from no mask at all), then at
    PARTING_SCALES while finite fills stay alike.  `reading`: the runner's own reading of
    the number (its masked scores, where the system shows them), which names a tie of the
    outputs when it is one of the tied words.  Asked under each harness choice the runner
    names (choices.py): the mask reaches HF's eager function as an additive float, its sdpa
    function as a boolean that torch's SDPA fills itself."""
    return under_choices(runner, lambda r: _fill_cell(
        r, what, reading if r is runner else None))


def _fill_cell(runner, what: str, reading: Convention | None) -> Convention:
    """mask_fill_cell under the runner's own choices (`reading`: its own, or None)."""
    label = what or runner.name
    tally = FillTally()
    for scale in FILL_SCALES:
        missing = _ask_fill(runner, tally, scale)
        if missing is not None:
            return unanswered("mask_fill", label, "the fill probe (a masked float32 case)",
                              missing)
    for scale in PARTING_SCALES:
        if not tally.parts_more() or _ask_fill(runner, tally, scale) is not None:
            break
    best = tally.best()
    word = min(best, key=lambda k: best[k][0])
    figures = "; ".join(f"{k} ({v}) {n}" for k, (n, v) in best.items())
    evidence = _fill_evidence(label, tally, figures)
    if best[word][0] > tally.rows // 8 or word == NO_MASK:
        return Convention("mask_fill", "other", evidence)
    value, note = named(runner, word, tally.ties(), reading, tally.held)
    return Convention("mask_fill", value, evidence + note, *_documented(runner))


def _named(runner, word: str, ties: list[str],
           reading: Convention | None = None) -> tuple[str, str]:
    """fill_names.named, for a probe that reads no program (decode_masks.py)."""
    return named(runner, word, ties, reading)


def _documented(runner) -> tuple[str | None, str]:
    """(word, source) of the fill the runner's documentation or source states, if any."""
    doc = runner.documented_fill
    return (doc[0], doc[1]) if doc else (None, "")


def _fill_evidence(label: str, tally: FillTally, figures: str) -> str:
    case = tally.case
    return (f"{label}, probe {case.id} (float32, inputs x "
            f"{' and x '.join(f'{s:g}' for s in tally.scales)}; mask {_mask_words(case)}"
            + (f"; simulated with the weights as the program stores them, "
               f"{tally.weights_dtype}" if rounds(tally.weights_dtype) else "") + "): "
            f"output rows of {tally.rows} unlike each simulated fill: {figures}")


def _mask_words(case) -> str:
    if case.mask.key_padding is None:
        return "explicit (B, T, S) boolean"
    return f"key padding {list(case.mask.key_padding)}" + (
        ", causal" if case.mask.causal != "none" else "")


def _nan(tensor: str) -> dict:
    return {"nonfinite": [{"tensor": tensor, "batch": 1, "position": 4, "feature": 1,
                           "value": "nan"}]}


MASKED_AXES = {"key": "masked_key_nonfinite", "value": "masked_value_nonfinite"}


def masked_nonfinite_cells(runner, what: str = "") -> list[Convention]:
    """Two cells: a NaN in a key position, then in a value position, that every query of
    item 1 masks (key 4).  A system that takes only self-attention gets the NaN in its one
    input (key and value at once; query row 4 is then undefined and not judged): a NaN
    kept out of the output there is kept out of both; one that reaches it cannot be laid
    on either, so both cells say so (`not_probed`)."""
    label = what or runner.name
    cells = []
    for tensor, axis in MASKED_AXES.items():
        case, got = first_answer(runner, _variants(
            f"masked-{tensor}-nan", [6, 4], {"self_attention": False, **_nan(tensor)},
            _nan("query")))
        if case is None:
            cells.append(unanswered(axis, label, f"the probe (a NaN in a masked {tensor})",
                                    got))
            continue
        bad, text = _nan_rows(case, got.output)
        where = f"(mask {_mask_words(case)}, item 1 key 4 masked for every query)"
        if case.inputs.self_attention and bad:
            cells.append(Convention(axis, NOT_PROBED, f"{label} {where}: self-attention only, "
                                    f"so key and value are one tensor: {text}; which of the "
                                    "two carries it cannot be told"))
        else:
            cells.append(Convention(axis, "propagates" if bad else "contained",
                                    f"{label} {where}: {text}"))
    return cells


def _nan_rows(case, out: np.ndarray) -> tuple[int, str]:
    """How many judged rows of item 1 are non-finite, and the evidence."""
    obs = np.asarray(out, np.float64)[1]
    clean = attention(replace(case, inputs=replace(case.inputs, nonfinite=()))).output[1]
    judged = ~attention(case).fully_masked[1]  # a fully masked row is another axis
    if case.inputs.self_attention:
        judged &= np.arange(obs.shape[0]) != 4
    bad = int((~np.isfinite(obs[judged])).any(-1).sum())
    rows = judged & np.isfinite(obs).all(-1)
    d = (f", the others {np.nanmax(np.abs(obs[rows] - clean[rows])):.1e} from the oracle "
         "without the NaN" if rows.any() else "")
    tensor = case.inputs.nonfinite[0].tensor
    where = "the one input (self-attention; query row 4 not judged)" \
        if case.inputs.self_attention else tensor
    return bad, f"NaN in {where}: {bad} of {int(judged.sum())} rows non-finite{d}"
