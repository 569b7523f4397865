"""mla_rope_slice (conventions/probes/latent_attention.py) read against toy systems written
here: each computes the float64 oracle of the MLA case it is asked, with one reading
planted (its output rounded to float32, as a float32 system's is), so each planted port
must change the word: the rope slice taken first, the key's rope slice left unrotated (no
reading), a system that refuses MLA and one that raises on it."""
from __future__ import annotations

import numpy as np

from conformance.contract.runner import NotExpressible, Observation, Runner, Translation
from conformance.conventions.probes import latent_attention as probe
from conformance.conventions.probes.table import way_for
from conformance.oracle import latent_attention
from conformance.oracle.reference import attention


class Toy(Runner):
    """An MLA system computing `compute(case, data)`; `refuse` or `raises` MLA instead."""

    name, framework, system = "toy.mla", "toy", "toy"
    features = frozenset({"rope", "mla", "position_offset"})

    def __init__(self, compute=None, refuse=False, raises=False):
        super().__init__()
        self.compute, self.refuse, self.raises = compute, refuse, raises

    def translate(self, case):
        if self.refuse:
            return NotExpressible("the toy has no latent attention")
        return Translation("toy(mla=True)")

    def run(self, case, translation, data):
        if self.raises:
            raise ValueError("toy: kv_lora_rank unsupported")
        out = (self.compute or (lambda c, d: attention(c, d).output))(case, data)
        return Observation(out.astype(np.float32).astype(np.float64))


def rope_first(case, data):
    return latent_attention.output(case, data, rope_first=True)


def key_unrotated(case, data):
    """A port rotating the query's rope slice and not the shared key's."""
    q, k, v = latent_attention.materialised(case, data)
    _, _, c, k_pe = latent_attention.latents(case, data)
    raw = data.inputs.key @ data.weights.mla_k_rope
    k = k.copy()
    k[..., -raw.shape[-1]:] = raw[:, None]
    scores = np.einsum("bhtd,bhsd->bhts", q, k) * latent_attention.scale_of(case)
    p = np.exp(scores - scores.max(-1, keepdims=True))
    return np.einsum("bhtd,hde->bte", (p / p.sum(-1, keepdims=True)) @ v, data.weights.wo)


def test_the_oracles_reading_is_last():
    cell = probe.mla_rope_slice_cell(Toy())
    assert cell.value == "last", cell.evidence
    assert "first" in cell.evidence and "positions 7..10" in cell.evidence


def test_rope_slice_first_is_caught():
    cell = probe.mla_rope_slice_cell(Toy(rope_first))
    assert cell.value == "first", cell.evidence


def test_an_unrotated_rope_key_matches_no_reading():
    cell = probe.mla_rope_slice_cell(Toy(key_unrotated))
    assert cell.value == "other", cell.evidence


def test_a_refusal_and_an_error_are_the_systems_words():
    assert probe.mla_rope_slice_cell(Toy(refuse=True)).value == "not_probed"
    raised = probe.mla_rope_slice_cell(Toy(raises=True))
    assert raised.value == "refused" and "kv_lora_rank unsupported" in raised.evidence


def test_the_axis_is_asked_of_runners_declaring_mla():
    assert way_for(Toy(), "mla_rope_slice") is not None

    class Plain(Toy):
        features = frozenset({"rope"})

    assert way_for(Plain(), "mla_rope_slice") is None


def test_the_headline_names_both_slices_and_diff_advises_the_repacking():
    """Two systems rotating different slices: the headline names both words, and `diff`
    between them points at convert/mla.py and DeepSeek's mscale^2."""
    from conformance.report.findings import ledger_findings
    from conformance.report.porting import differences

    ledger = {"axes": [{"id": "mla_rope_slice", "title": "MLA rope slice"}],
              "systems": [{"id": "hf.deepseek_v3"}, {"id": "port.first"}],
              "cells": [{"system": "hf.deepseek_v3", "axis": "mla_rope_slice", "value": "last"},
                        {"system": "port.first", "axis": "mla_rope_slice", "value": "first"}]}
    found = ledger_findings(ledger)
    assert [f.key for f in found] == ["mla_rope_slice"]
    assert "last" in found[0].text and "first" in found[0].text
    (diff,), same = differences(ledger, "hf.deepseek_v3", "port.first")
    assert "conformance.convert.mla" in diff.advice and "1.8739" in diff.advice
    assert same == 0
