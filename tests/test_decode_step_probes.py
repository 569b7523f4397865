"""The ledger asks a runner that decodes only its mask axes through its own decode
(conventions/probes/decode_masks.py, RawCall step_mask): checked against toy float32
decoders written here (a prefill, then one position per step over a growing cache, each
step given its mask row), one per way of filling masked scores, and against toys whose
decode ignores the step's mask or leaks the next step's key."""
from __future__ import annotations

import numpy as np
import pytest

from conformance.conventions.axes import NOT_PROBED, Convention
from conformance.contract.runner import NotExpressible, Observation, Runner, Translation
from conformance.conventions.probes import ledger_cells

F32 = np.float32


class ToyDecoder(Runner):
    """A decode-only float32 NumPy system: `fill` written into (or `added` to) the masked
    scores of each step; `zero_fully`: a fully masked step answers zeros (SDPA's kernels);
    `ignore_mask`: the steps see every cached key whatever the mask says."""

    name, framework, system = "toy.decoder", "toy", "toy"
    decodes_only = True
    answers = frozenset({"step_mask"})

    def __init__(self, fill: float = float(np.finfo(F32).min), added: bool = False,
                 zero_fully: bool = False, ignore_mask: bool = False):
        super().__init__()
        self.fill, self.added = F32(fill), added
        self.zero_fully, self.ignore_mask = zero_fully, ignore_mask

    def translate(self, case):
        if case.decode is None:
            return NotExpressible("this toy decodes only")
        return Translation("toy decode")

    def run(self, case, translation, data):
        return Observation(self.decode(case, data, None, None))

    def answer(self, case, data, raw):
        return self.decode(case, data, data.inputs.allowed, raw.value), "toy(mask=row)"

    def decode(self, case, data, rows, nan):
        w, x = data.weights, data.inputs

        def proj(wt, b):
            y = np.einsum("ble,hed->bhld", x.query.astype(F32), wt.astype(F32))
            return y if b is None else y + b[None, :, None, :].astype(F32)

        q, k, v = proj(w.wq, w.bq), proj(w.wk, w.bk), proj(w.wv, w.bv)
        p, n = case.decode.prefill, case.inputs.query_len
        outs = []
        for t in range(n):
            if t == p and nan:
                (k if nan["nan"] == "key" else v)[nan["item"], :, nan["slot"]] = np.nan
            seen = np.ones((x.query.shape[0], t + 1), bool)
            if t >= p and rows is not None and not self.ignore_mask:
                seen = rows[:, t, :t + 1]
            outs.append(self.attend(q[:, :, t], k[:, :, :t + 1], v[:, :, :t + 1], seen))
        heads = np.stack(outs, 2)  # (B, H, T, d)
        out = np.einsum("bhtd,hde->bte", heads, w.wo.astype(F32))
        return (out if w.bo is None else out + w.bo.astype(F32)).astype(np.float64)

    def attend(self, q, k, v, seen):
        s = np.einsum("bhd,bhsd->bhs", q, k) / F32(np.sqrt(q.shape[-1]))
        m = seen[:, None]
        with np.errstate(all="ignore"):
            s = s + np.where(m, F32(0), self.fill) if self.added else np.where(m, s, self.fill)
            e = np.exp(s - s.max(-1, keepdims=True))
            p = e / e.sum(-1, keepdims=True)
        if self.zero_fully:
            p = np.where(m.any(-1, keepdims=True), p, F32(0))
        return np.einsum("bhs,bhsd->bhd", p, v)


def cells(runner) -> dict[str, Convention]:
    return {c.axis: c for c in ledger_cells(runner)}


def test_fully_masked_step_that_is_the_mean_of_v_reads_uniform():
    got = cells(ToyDecoder())
    assert got["fully_masked_row"].value == "uniform", got["fully_masked_row"].evidence
    assert got["mask_fill"].value == "huge_finite", got["mask_fill"].evidence
    assert "step rows of 24" in got["mask_fill"].evidence
    assert "items 0.0e+00" in got["batch_invariance"].evidence, got["batch_invariance"]
    assert "decoded" in got["batch_invariance"].evidence


def test_written_in_fill_contains_a_masked_nan_key_but_not_a_value():
    got = cells(ToyDecoder())
    assert got["masked_key_nonfinite"].value == "contained", got["masked_key_nonfinite"]
    assert got["masked_value_nonfinite"].value == "propagates", got["masked_value_nonfinite"]
    assert "6 of 6 step rows non-finite" in got["masked_value_nonfinite"].evidence


def test_added_minus_inf_gives_nan_on_the_fully_masked_step_and_passes_the_nan_key():
    got = cells(ToyDecoder(-np.inf, added=True))
    assert got["fully_masked_row"].value == "nan"
    assert got["mask_fill"].value == "-inf", got["mask_fill"].evidence
    assert got["masked_key_nonfinite"].value == "propagates"


def test_zeroed_fully_masked_step_reads_zeros():
    assert cells(ToyDecoder(-np.inf, zero_fully=True))["fully_masked_row"].value == "zeros"


@pytest.mark.parametrize("fill, word", [(-1e9, "-1e9"), (-1e4, "-1e4")])
def test_finite_fills_written_in_part_from_a_huge_one(fill, word):
    """The steps that open one key are where a written-in fill loses to a huge one."""
    got = cells(ToyDecoder(fill))["mask_fill"]
    assert got.value == word, got.evidence


def test_a_decode_that_ignores_the_step_mask_is_caught():
    got = cells(ToyDecoder(ignore_mask=True))
    assert got["mask_fill"].value == "other", got["mask_fill"].evidence
    assert got["masked_key_nonfinite"].value == "propagates"


def test_a_decode_only_runner_without_the_step_call_is_asked_its_single_call():
    """Without step_mask the single-call probes ask its translate, which takes decodes
    only: not_probed, quoting the runner's reason (never the old blanket harness limit)."""

    class NoSteps(ToyDecoder):
        answers = frozenset()

    got = cells(NoSteps())
    assert got["mask_fill"].value == NOT_PROBED
    assert "this toy decodes only" in got["mask_fill"].evidence
    assert "items 0.0e+00" in got["batch_invariance"].evidence


class Shows(ToyDecoder):
    """A decoder that reports the number its masked scores hold (onnxruntime's
    qk_matmul_output), as an Observation's extras."""

    def __init__(self, held: str, **kw):
        super().__init__(**kw)
        self.held = held

    def answer(self, case, data, raw):
        out, call = super().answer(case, data, raw)
        return Observation(output=out, extras={"masked_scores_hold": self.held}), call


def test_a_tie_of_the_steps_is_named_by_the_number_the_masked_scores_hold():
    """-inf with zeroed fully masked rows ties finfo_min with zeroed masked weights at every
    input: unnamed alone, named by the number the system shows, never by one outside it."""
    tie = cells(ToyDecoder(-np.inf, zero_fully=True))["mask_fill"]
    assert tie.value == NOT_PROBED, tie.evidence
    shown = cells(Shows("-3.40282347e+38", fill=-np.inf, zero_fully=True))["mask_fill"]
    assert shown.value == "finfo_min", shown.evidence
    outside = cells(Shows("-10000", fill=-np.inf, zero_fully=True))["mask_fill"]
    assert outside.value == NOT_PROBED, outside.evidence
