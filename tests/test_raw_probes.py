"""The ledger's raw-argument probes (conventions/probes/flags.py): a runner only passes the
argument to its system (Runner.answer); the ledger names the reading.  Checked against toy
systems written here in NumPy (not the oracle): one reading masks as True = attend, planted
ones reading them inverted, ignoring the causal switch, or refusing."""
from __future__ import annotations

import numpy as np

from conformance.contract.api_facts import ApiFact
from conformance.contract.runner import NotExpressible, Runner
from conformance.conventions.probes import ledger_cells
from conformance.conventions.probes.flags import (
    attn_mask_polarity_cell, causal_flag_cell, float_mask_cell)


def _attend(data, allowed=None, add=None):
    w, x = data.weights, data.inputs

    def proj(t, wt, b):
        return np.einsum("ble,hed->bhld", t, wt) + (0 if b is None else b[None, :, None])

    q, k, v = proj(x.query, w.wq, w.bq), proj(x.key, w.wk, w.bk), proj(x.value, w.wv, w.bv)
    s = q @ k.transpose(0, 1, 3, 2) / np.sqrt(q.shape[-1])
    if add is not None:
        s = s + add[:, None]
    if allowed is not None:
        s = np.where(allowed[:, None], s, -np.inf)
    p = np.exp(s - s.max(-1, keepdims=True))
    out = np.einsum("bhtd,hde->bte", (p / p.sum(-1, keepdims=True)) @ v, w.wo)
    return out if w.bo is None else out + w.bo


def _attend_scores(data, scores):
    """Attention whose scores are `scores` (B, T, S) for every head: what float32 keeps of
    q.k when -1e9 is added to it."""
    w, x = data.weights, data.inputs
    v = np.einsum("ble,hed->bhld", x.value, w.wv) + (0 if w.bv is None else w.bv[None, :, None])
    s = np.asarray(scores, np.float64)[:, None]
    p = np.exp(s - s.max(-1, keepdims=True))
    out = np.einsum("bhtd,hde->bte", (p / p.sum(-1, keepdims=True)) @ v, w.wo)
    return out if w.bo is None else out + w.bo


class Toy(Runner):
    name, framework, system = "toy.raw", "toy", "toy"
    answers = frozenset({"attn_mask", "is_causal"})

    def __init__(self, invert=False, causal="upper_left", raises=False, float_as=""):
        super().__init__()
        self.invert, self.causal, self.raises = invert, causal, raises
        self.float_as = float_as  # "keras<3.7": a float mask m added as (1 - m) * -1e9

    def answer(self, case, data, raw):
        if self.raises:
            raise TypeError("attn_mask must be an int8 tensor")
        if raw.argument == "attn_mask":
            m = np.asarray(raw.value)
            if m.dtype == bool:
                return _attend(data, ~m if self.invert else m), "toy(attn_mask=m)"
            if self.float_as == "keras<3.7":  # float32: every score drowned, -1e9 or -1e18
                add = ((1 - m) * -1e9).astype(np.float32)
                s = np.zeros_like(add) + add  # the scores vanish beside the fill
                return _attend_scores(data, s), "toy(attn_mask=(1 - m) * -1e9)"
            if self.float_as == "garbage":
                return _attend(data) * 0 + 7.0, "toy(attn_mask=float)"
            return _attend(data, add=m), "toy(attn_mask=float)"
        t, s = case.inputs.query_len, case.inputs.key_len
        if self.causal == "ignored":
            return _attend(data), "toy(is_causal=True)"
        shift = s - t if self.causal == "lower_right" else 0
        tri = np.arange(s)[None, :] <= np.arange(t)[:, None] + shift
        return _attend(data, np.broadcast_to(tri, (data.inputs.query.shape[0], t, s))), "toy"

    def translate(self, case):  # no matrix path: the ledger's other probes say so
        return NotExpressible("toy: raw calls only")

    def conventions(self):
        return [ApiFact("mask_argument", "true_blocks", "the runner's own (stale)")]


def test_the_ledger_names_what_the_system_did(tmp_path, monkeypatch):
    (tmp_path / "toy.raw.yaml").write_text("documented:\n  attn_mask_polarity:\n    word: "
                                           "true_attends\n    source: https://example.org\n")
    monkeypatch.setattr("conformance.conventions.expectations.EXPECTATIONS_DIR", tmp_path)
    toy = Toy()
    cell = attn_mask_polarity_cell(toy)
    assert cell.value == "true_attends" and cell.documented == "true_attends"
    assert "toy(attn_mask=m)" in cell.evidence
    assert float_mask_cell(toy).value == "added"
    assert causal_flag_cell(toy).value == "upper_left"


def test_a_float_mask_added_as_one_minus_m_reads_uniform_where_zero():
    """Keras before 3.7 (the drift matrix): (1 - m) * -1e9 drowns every score in float32,
    so the weights are uniform over the keys where m is 0; a reading far from every
    candidate is no reading: the readings it cannot tell apart are named, never the
    nearest (resolution.py)."""
    cell = float_mask_cell(Toy(float_as="keras<3.7"))
    assert cell.value == "uniform_where_zero" and "uniform_where_zero" in cell.evidence
    far = float_mask_cell(Toy(float_as="garbage"))
    assert far.value == "not_probed" and "added alike at this input" in far.evidence


def test_planted_defects_are_named():
    assert attn_mask_polarity_cell(Toy(invert=True)).value == "true_blocks"
    assert causal_flag_cell(Toy(causal="lower_right")).value == "lower_right"
    assert causal_flag_cell(Toy(causal="ignored")).value == "ignored"
    refused = attn_mask_polarity_cell(Toy(raises=True))
    assert refused.value == "refused" and "int8 tensor" in refused.evidence


def test_a_runner_that_answers_gets_the_ledger_s_cell_and_one_that_does_not_keeps_its_own():
    cells = {c.axis: c for c in ledger_cells(Toy())}
    assert cells["attn_mask_polarity"].value == "true_attends"  # the stale own cell is gone

    class Silent(Toy):
        answers = frozenset()

    kept = {c.axis: c for c in ledger_cells(Silent())}
    assert kept["attn_mask_polarity"].evidence == "the runner's own (stale)"
    assert "causal_flag" not in kept
