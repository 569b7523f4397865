"""The ledger's mask-encoding probes (conventions/probes/masks.py) name the fill a system
writes into masked scores, and whether a NaN behind the mask, in a key and in a value,
reaches the output: checked against a toy float32 system written here (not the probe's
simulation), one per fill and encoding."""
from __future__ import annotations

import numpy as np
import pytest

from conformance.contract.runner import (
    NotExpressible, Observation, Runner, Translation, harness_limit)
from conformance.conventions.probes.masks import mask_fill_cell, masked_nonfinite_cells


class Toy(Runner):
    """Attention in float32 NumPy with a chosen fill: `added` adds it to the masked
    scores (NaN + fill stays NaN), otherwise np.where writes it in."""

    name, framework, system = "toy.fill", "toy", "toy"

    def __init__(self, fill: float, added: bool, self_only: bool = False,
                 zero_masked: bool = False):
        super().__init__()
        self.fill, self.added, self.self_only = np.float32(fill), added, self_only
        self.zero_masked = zero_masked  # masked weights set to an exact 0 after the softmax

    def translate(self, case):
        if self.self_only and not case.inputs.self_attention:
            return NotExpressible("self-attention only")
        return Translation("toy()")

    def run(self, case, translation, data):
        w, x = data.weights, data.inputs
        f = np.float32

        def proj(t, wt, b):
            y = np.einsum("ble,hed->bhld", t.astype(f), wt.astype(f))
            return y if b is None else y + b[None, :, None, :].astype(f)

        q, k, v = proj(x.query, w.wq, w.bq), proj(x.key, w.wk, w.bk), proj(x.value, w.wv, w.bv)
        s = np.einsum("bhtd,bhsd->bhts", q, k) / f(np.sqrt(q.shape[-1]))
        m = np.broadcast_to(x.allowed[:, None], s.shape)
        with np.errstate(all="ignore"):
            s = s + np.where(m, f(0), self.fill) if self.added else np.where(m, s, self.fill)
            e = np.exp(s - s.max(-1, keepdims=True))
            p = e / e.sum(-1, keepdims=True)
            if self.zero_masked:
                p = np.where(m, p, f(0))
        out = np.einsum("bhtd,hde->bte", p @ v, w.wo.astype(f)) + w.bo.astype(f)
        return Observation(out.astype(np.float64))


@pytest.mark.parametrize("fill, added, word", [
    (-np.inf, False, "-inf"), (-1e9, True, "-1e9"), (-1e9, False, "-1e9"),
    (-1e4, True, "-1e4"), (-1e4, False, "-1e4")])
def test_mask_fill_names_the_fill(fill, added, word):
    cell = mask_fill_cell(Toy(fill, added))
    assert (cell.axis, cell.value) == ("mask_fill", word), cell.evidence
    assert f"{word} (" in cell.evidence


@pytest.mark.parametrize("fill", [np.finfo(np.float32).min, -0.7 * np.finfo(np.float32).max])
def test_a_huge_finite_fill_is_named_by_the_documented_number_or_huge_finite(fill):
    """finfo.min and -0.7 * finfo.max give alike outputs: without documentation the cell
    says so (huge_finite, never the nearest name); a runner's documented number names it,
    the same word for the same number in every system."""
    cell = mask_fill_cell(Toy(fill, False))
    assert cell.value == "huge_finite" and "alike here" in cell.evidence, cell.evidence
    toy = Toy(fill, False)
    toy.documented_fill = ("-0.7*finfo_max", "https://example.org/source")
    named = mask_fill_cell(toy)
    assert named.value == "-0.7*finfo_max" and "example.org" in named.evidence
    assert named.documented == "-0.7*finfo_max"


def test_a_documented_number_outside_the_tie_does_not_name_it():
    toy = Toy(-1e9, True)
    toy.documented_fill = ("-0.7*finfo_max", "https://example.org/source")
    cell = mask_fill_cell(toy)
    assert (cell.value, cell.documented) == ("-1e9", "-0.7*finfo_max"), cell.evidence


def test_an_unknown_fill_is_other_and_a_wrong_word_is_rejected():
    """A system that does not mask at all (fill 0) matches no fill well enough."""
    cell = mask_fill_cell(Toy(0.0, True))
    assert cell.value == "other", cell.evidence


def _cells(toy) -> dict:
    return {c.axis: c for c in masked_nonfinite_cells(toy)}


@pytest.mark.parametrize("added, key, value", [
    (True, "propagates", "propagates"),  # NaN + fill stays NaN; exp(-1e9) is an exact 0
    (False, "contained", "propagates")])  # written in: the key's NaN is gone, 0 * NaN is not
def test_masked_key_and_value_are_two_facts(added, key, value):
    cells = _cells(Toy(-1e9, added))
    assert (cells["masked_key_nonfinite"].value, cells["masked_value_nonfinite"].value) == (
        key, value), [c.evidence for c in cells.values()]
    assert "NaN in key" in cells["masked_key_nonfinite"].evidence
    assert "NaN in value" in cells["masked_value_nonfinite"].evidence


def test_a_masked_value_kept_out_is_contained():
    """A system that drops masked positions before P @ V (here: masked weights zeroed and
    the NaN value never read, as a gather of the kept keys would) reads contained."""
    class Gather(Toy):
        def run(self, case, translation, data):
            from dataclasses import replace

            x = data.inputs
            clean = {n: np.nan_to_num(getattr(x, n), nan=0.0) for n in ("key", "value")}
            if x.key is x.query:
                return super().run(case, translation, data)
            return super().run(case, translation, replace(data, inputs=replace(x, **clean)))

    cells = _cells(Gather(-np.inf, False))
    assert cells["masked_value_nonfinite"].value == "contained"
    assert cells["masked_key_nonfinite"].value == "contained"


def test_self_attention_only_systems_cannot_lay_a_nan_on_key_or_value():
    cells = _cells(Toy(-np.inf, True, self_only=True))
    for c in cells.values():
        assert c.value == "not_probed" and "query row 4 not judged" in c.evidence, c.evidence


def test_a_runner_that_takes_no_probe_form_is_not_probed_never_not_applicable():
    class Never(Toy):
        def translate(self, case):
            return NotExpressible("never")

    cell = mask_fill_cell(Never(-1e9, True))
    assert cell.value == "not_probed" and "never" in cell.evidence
    assert {c.value for c in masked_nonfinite_cells(Never(-1e9, True))} == {"not_probed"}


def test_a_harness_limit_is_not_probed_and_a_raise_is_refused():
    """A limit of the suite's harness is never a cell of the system; the system's own error
    is `refused`, quoted."""
    class Harness(Toy):
        def translate(self, case):
            return NotExpressible(harness_limit("the probe graph cannot hold a mask"))

    class Raises(Toy):
        def run(self, case, translation, data):
            raise ValueError("masks are not supported on this device")

    cell = mask_fill_cell(Harness(-1e9, True))
    assert cell.value == "not_probed" and "cannot hold a mask" in cell.evidence
    cell = mask_fill_cell(Raises(-1e9, True))
    assert cell.value == "refused" and "not supported on this device" in cell.evidence


def test_a_decode_only_runner_is_asked_the_single_call_probes_it_takes():
    """A decode-only runner that answers no step_mask (decode_masks.py) is asked the
    single-call probes through its translate (probe_translate where it has one): what it
    takes is measured, never a blanket not_probed."""
    from conformance.conventions.probes import ledger_cells

    class Decoder(Toy):
        decodes_only = True

    cells = {c.axis: c for c in ledger_cells(Decoder(-1e9, True))}
    assert cells["mask_fill"].value == "-1e9", cells["mask_fill"].evidence
    assert cells["masked_key_nonfinite"].value == "propagates"


def test_a_tie_is_named_by_the_number_the_system_shows_before_its_documentation():
    """onnxruntime's Attention shows its masked scores (qk_matmul_output): that reading
    names a tie of the outputs; a reading outside the tie does not."""
    from conformance.conventions.axes import Convention

    toy = Toy(np.finfo(np.float32).min, False)
    toy.documented_fill = ("-0.7*finfo_max", "https://example.org/source")
    shown = Convention("mask_fill", "-3.40282347e+38", "masked scores hold -3.4028235e+38")
    cell = mask_fill_cell(toy, reading=shown)
    assert cell.value == "finfo_min" and "-3.4028235e+38" in cell.evidence
    outside = Convention("mask_fill", "-1000000000", "a stale reading")
    assert mask_fill_cell(toy, reading=outside).value == "-0.7*finfo_max"
