"""A module that always rotates q and k cannot carry the mask probes through its forward;
the ledger asks its attention function directly (RawCall attention_function,
conventions/probes/attention_function.py).  Checked against a toy HF-like module written
here (float32 NumPy): its forward refuses a case without a rotation, its attention function
adds a chosen fill; and against a toy whose "attention function" still rotates (the
defect the direct call exists to avoid: the mask cannot be told from the rotation)."""
from __future__ import annotations

import numpy as np
import pytest

from conformance.conventions.axes import NOT_PROBED
from conformance.contract.runner import NotExpressible, Observation, Runner, Translation
from conformance.conventions.probes import ledger_cells

F32 = np.float32


def rotate(x: np.ndarray) -> np.ndarray:
    """Half-split rotation of (B, H, L, d) by position (base 10000)."""
    d, n = x.shape[-1], x.shape[-2]
    inv = 1.0 / 10000 ** (np.arange(0, d, 2) / d)
    ang = np.arange(n)[:, None] * inv[None]
    cos, sin = np.cos(np.concatenate([ang, ang], -1)), np.sin(np.concatenate([ang, ang], -1))
    half = np.concatenate([-x[..., d // 2:], x[..., :d // 2]], -1)
    return (x * cos + half * sin).astype(F32)


class AlwaysRotates(Runner):
    """An attention module whose forward rotates q and k on every call (so its translate
    takes only cases asking for a rotation) and whose attention function adds `fill` to
    the masked scores; `leaky`: the function rotates too."""

    name, framework, system = "toy.rotary", "toy", "toy"
    answers = frozenset({"attention_function"})

    def __init__(self, fill: float, leaky: bool = False):
        super().__init__()
        self.fill, self.leaky = F32(fill), leaky

    def conventions(self):
        return []

    def translate(self, case):
        if case.attention.rope is None:
            return NotExpressible("no attention.rope: the toy rotates q and k on every call")
        return Translation("toy(x)")

    def run(self, case, translation, data):
        return Observation(self.function(case, data, rotated=True))

    def answer(self, case, data, raw):
        if raw.argument != "attention_function":
            raise NotImplementedError(raw.argument)
        return self.function(case, data, rotated=self.leaky), "toy.attention_function"

    def function(self, case, data, rotated: bool):
        w, x = data.weights, data.inputs

        def proj(t, wt, b):
            y = np.einsum("ble,hed->bhld", t.astype(F32), wt.astype(F32))
            return y if b is None else y + b[None, :, None, :].astype(F32)

        q, k, v = proj(x.query, w.wq, w.bq), proj(x.key, w.wk, w.bk), proj(x.value, w.wv, w.bv)
        if rotated:
            q, k = rotate(q), rotate(k)
        s = np.einsum("bhtd,bhsd->bhts", q, k) / F32(np.sqrt(q.shape[-1]))
        with np.errstate(all="ignore"):
            s = s + np.where(x.allowed[:, None], F32(0), self.fill)
            e = np.exp(s - s.max(-1, keepdims=True))
            p = e / e.sum(-1, keepdims=True)
        out = np.einsum("bhtd,hde->bte", p @ v, w.wo.astype(F32))
        return (out if w.bo is None else out + w.bo.astype(F32)).astype(np.float64)


def cells(runner) -> dict:
    return {c.axis: c for c in ledger_cells(runner)}


@pytest.mark.parametrize("fill, word", [(-1e9, "-1e9"), (-1e4, "-1e4"), (-np.inf, "-inf")])
def test_a_module_that_always_rotates_gets_its_fill_through_its_function(fill, word):
    got = cells(AlwaysRotates(fill))["mask_fill"]
    assert got.value == word, got.evidence
    assert "its attention function" in got.evidence
    assert "rotates q and k on every call" in got.evidence  # the forward's reason kept


def test_the_function_parts_a_masked_key_from_a_masked_value():
    """A fill added to a NaN score stays NaN (the key propagates); the function takes three
    tensors, so the two cells are measured, not left not_probed."""
    got = cells(AlwaysRotates(-1e9))
    assert got["masked_key_nonfinite"].value == "propagates"
    assert got["masked_value_nonfinite"].value == "propagates"


def test_a_function_that_still_rotates_is_not_named_a_fill():
    got = cells(AlwaysRotates(-1e9, leaky=True))["mask_fill"]
    assert got.value == "other", got.evidence


def test_a_runner_without_the_function_keeps_its_reason():
    class NoFunction(AlwaysRotates):
        answers = frozenset()

    got = cells(NoFunction(-1e9))["mask_fill"]
    assert got.value == NOT_PROBED
    assert "rotates q and k on every call" in got.evidence


def hf_runner(name: str):
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    from conformance.runners import all_runners

    return next(r for r in all_runners() if r.name == name)


def test_an_inline_attention_is_asked_through_hooks_on_its_projections():
    """MPT writes finfo.min in with masked_fill (a NaN key behind the mask is replaced),
    BLOOM adds the mask (NaN + fill stays NaN): the hooked forward shows both."""
    from conformance.conventions.probes.attention_function import FunctionAsked
    from conformance.conventions.probes.masks import masked_nonfinite_cells

    key = {r: masked_nonfinite_cells(FunctionAsked(hf_runner(r)))[0] for r in
           ("hf.mpt", "hf.bloom")}
    assert key["hf.mpt"].value == "contained", key["hf.mpt"].evidence
    assert key["hf.bloom"].value == "propagates", key["hf.bloom"].evidence


def test_a_hook_feeding_the_wrong_fused_layout_is_caught():
    """BLOOM splits its fused projection per head ([q_h; k_h; v_h]); the q | k | v blocks
    MPT's chunk reads, handed to BLOOM, are other projections: not named a fill."""
    from conformance.conventions.probes.attention_function import FunctionAsked
    from conformance.conventions.probes.masks import mask_fill_cell

    bloom, mpt = hf_runner("hf.bloom"), hf_runner("hf.mpt")
    bloom.fused_qkv = mpt.fused_qkv  # the planted defect: the wrong layout
    got = mask_fill_cell(FunctionAsked(bloom))
    assert got.value == "other", got.evidence
