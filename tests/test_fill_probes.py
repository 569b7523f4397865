"""The mask-encoding probes (contract/fill_probes.py) name the fill a system writes into
masked scores, and whether a NaN behind the mask reaches the output: checked against a toy
float32 system written here (not the probe's simulation), one per fill and encoding."""
from __future__ import annotations

import numpy as np
import pytest

from conformance.contract.fill_probes import mask_fill_cell, masked_kv_cell
from conformance.contract.runner import NotExpressible, Observation, Runner, Translation


class Toy(Runner):
    """Attention in float32 NumPy with a chosen fill: `added` adds it to the masked
    scores (NaN + fill stays NaN), otherwise np.where writes it in."""

    name, framework, system = "toy.fill", "toy", "toy"

    def __init__(self, fill: float, added: bool, self_only: bool = False):
        super().__init__()
        self.fill, self.added, self.self_only = np.float32(fill), added, self_only

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
        out = np.einsum("bhtd,hde->bte", p @ v, w.wo.astype(f)) + w.bo.astype(f)
        return Observation(out.astype(np.float64))


@pytest.mark.parametrize("fill, added, word", [
    (-np.inf, False, "-inf"), (np.finfo(np.float32).min, False, "finfo_min"),
    (-1e9, True, "-1e9"), (-1e9, False, "-1e9"), (-1e4, True, "-1e4"),
    (-1e4, False, "-1e4")])
def test_mask_fill_names_the_fill(fill, added, word):
    cell = mask_fill_cell(Toy(fill, added))
    assert (cell.axis, cell.value) == ("mask_fill", word), cell.evidence
    assert f"{word} (" in cell.evidence and " 0;" in cell.evidence or cell.evidence.endswith(" 0")


def test_an_unknown_fill_is_other_and_a_wrong_word_is_rejected():
    """A system that does not mask at all (fill 0) matches no fill well enough."""
    cell = mask_fill_cell(Toy(0.0, True))
    assert cell.value == "other", cell.evidence


@pytest.mark.parametrize("added, word", [(True, "propagates"), (False, "contained")])
def test_masked_nan_key(added, word):
    cell = masked_kv_cell(Toy(-1e9, added))
    assert cell.value == word, cell.evidence
    assert "NaN in key" in cell.evidence and "NaN in value" in cell.evidence


def test_self_attention_only_systems_get_the_nan_in_their_one_input():
    cell = masked_kv_cell(Toy(-np.inf, True, self_only=True))
    assert cell.value == "propagates" and "query row 4 not judged" in cell.evidence


def test_a_system_that_expresses_no_probe_is_not_applicable():
    class Never(Toy):
        def translate(self, case):
            return NotExpressible("never")

    assert mask_fill_cell(Never(-1e9, True)).value == "not_applicable"
    assert masked_kv_cell(Never(-1e9, True)).value == "not_applicable"
