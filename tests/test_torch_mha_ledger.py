"""nn.MultiheadAttention's runners only answer: the ledger asks torch.mha, torch.mha.no-weights
and torch.mha.fastpath (their translate/run for the asked axes, their raw answers), and the
generic judgements added for them move their cell on a planted wrong answer: a causal switch
read beside a mask (causal_hint.py), a size reading derived from the width (sizes.py), the
forms of a probe case a system takes (forms.py: self-attention, the head size derived from
the width), a training run the system refuses (training.py).  Toy systems here compute the
float64 oracle, with one planted defect each."""
from __future__ import annotations

import importlib.util

import numpy as np
import pytest

from conformance.conventions.probes.probing import output_with, probe_mask
from conformance.contract.runner import (
    NotExpressible, NotExpressibleError, Observation, Runner, Translation)
from conformance.conventions.axes import Convention
from conformance.conventions.probes import causal_hint, scores, sizes, training
from conformance.conventions.probes.flags import attn_mask_polarity_cell, causal_flag_cell
from conformance.conventions.probes.forms import first_taken, forms
from conformance.oracle.canonical import causal_mask
from conformance.oracle.reference import attention

torch_only = pytest.mark.skipif(importlib.util.find_spec("torch") is None, reason="no torch")


def _causal(case, align="upper_left"):
    i = case.inputs
    return output_with(case, causal_mask(i.query_len, i.key_len, align))


class Hint(Runner):
    """nn.MultiheadAttention's masks (True = blocked) and causal hint, in NumPy: `plant`
    "flag_wins" (the switch replaces the mask), "padding_turns_it_off" (it replaces the mask
    unless a key padding is beside it: need_weights=False's path), "alone_applies" (the
    switch alone masks causally); `self_only`: takes self-attention only."""

    name, framework, system = "toy.hint", "toy", "toy"
    answers = frozenset({"attn_mask", "is_causal", "causal_hint"})

    def __init__(self, plant: str = "", self_only: bool = False):
        super().__init__()
        self.plant, self.self_only = plant, self_only

    def answer(self, case, data, raw):
        if self.self_only and not case.inputs.self_attention:
            raise NotImplementedError("toy: self-attention only")
        if raw.argument == "attn_mask":
            return output_with(case, ~np.asarray(raw.value), data), "toy(attn_mask=m)"
        if raw.argument == "is_causal":
            if self.plant == "alone_applies":
                return _causal(case), "toy(is_causal=True)"
            if not self.self_only:
                raise RuntimeError("Need attn_mask if specifying the is_causal hint")
            return output_with(case, None, data), "toy(is_causal=True)"
        flag = self.plant == "flag_wins" or (self.plant == "padding_turns_it_off"
                                             and not raw.value["pad_nothing"])
        if flag:
            return _causal(case), "toy(attn_mask=m, is_causal=True)"
        return output_with(case, ~raw.value["attn_mask"], data), "toy(attn_mask=m, hint)"


def test_a_hint_beside_a_mask_reads_hint_only_and_a_planted_flag_that_wins_is_read():
    assert causal_flag_cell(Hint()).value == "hint_only"  # flags.py hands it over
    cell = causal_hint.causal_hint_cell(Hint("flag_wins"))
    assert cell.value == "upper_left" and "pads nothing" in cell.evidence


def test_a_hint_that_key_padding_turns_off_reads_depends():
    cell = causal_hint.causal_hint_cell(Hint("padding_turns_it_off"))
    assert cell.value == "depends"
    assert "without key padding: upper_left" in cell.evidence
    assert "pads nothing: hint_only" in cell.evidence


def test_a_self_attention_path_reads_the_switch_alone():
    """T = S hides an alignment: a switch alone that leaves the output unmasked is
    `ignored`; a planted one that applies is `not_probed`, never an alignment."""
    ignored = causal_hint.causal_hint_cell(Hint(self_only=True))
    assert ignored.value == "ignored" and "self-attention" in ignored.evidence
    applied = causal_hint.causal_hint_cell(Hint("alone_applies", self_only=True))
    assert applied.value == "not_probed" and "cannot show" in applied.evidence


def test_a_mask_refused_on_cross_attention_is_asked_as_self_attention():
    cell = attn_mask_polarity_cell(Hint(self_only=True))
    assert cell.value == "true_blocks" and "self-attention" in cell.evidence


class Derived(Runner):
    """A system with no head-size argument (d_k = E / H), computing the oracle; planted
    "takes_head_size" (it expresses a head size apart from the width), "no_scale" (its
    scores unscaled); `self_only` takes self-attention only."""

    name, framework, system = "toy.derived", "toy", "toy"

    def __init__(self, plant: str = "", self_only: bool = False):
        super().__init__()
        self.plant, self.self_only = plant, self_only

    def translate(self, case):
        a = case.attention
        if self.plant != "takes_head_size" and a.qk_head_dim * a.num_heads != \
                a.query_features:
            return NotExpressible(f"head_dim is {a.query_features} // {a.num_heads}")
        if self.self_only and not case.inputs.self_attention:
            return NotExpressible("self-attention only")
        return Translation(f"toy({a.query_features}, {a.num_heads})")

    def run(self, case, translation, data):
        scale = 1.0 if self.plant == "no_scale" else None
        return Observation(output=attention(case, data, scale).output)


OWN = Convention("size_arguments", "derived_from_width", "toy(E, H): head_dim E / H")


def test_a_derived_width_is_confirmed_on_the_twin_and_a_planted_head_size_is_not():
    cell = sizes.size_arguments_cell(Derived(), OWN)
    assert cell.value == "derived_from_width" and "not expressible" in cell.evidence
    assert "embed" not in cell.evidence and "probe-size-arguments" in cell.evidence
    planted = sizes.size_arguments_cell(Derived("takes_head_size"), OWN)
    assert planted.value == "not_probed" and "set apart from the width" in planted.evidence
    wrong = sizes.size_arguments_cell(Derived("no_scale"), OWN)
    assert wrong.value == "not_probed"


def test_forms_ask_the_first_the_system_expresses():
    cases = forms("softmax-scale", attention=scores.HEAD3)
    assert [c.id for c in cases] == [
        "probe-softmax-scale", "probe-softmax-scale-self-attention",
        "probe-softmax-scale-width-derived", "probe-softmax-scale-width-derived-self-attention"]
    assert cases[2].attention.qk_head_dim == 3 and cases[2].attention.query_features == 6
    case, got, note = first_taken(Derived(self_only=True), cases)
    assert case is cases[3] and got.answered and "head_dim is 8 // 2" in note


@pytest.mark.parametrize("plant, word", [("", "inv_sqrt_head_dim"), ("no_scale", "none")])
def test_the_scale_of_a_derived_width_system_is_read_on_its_twin(plant, word):
    cell = scores.softmax_scale_cell(Derived(plant, self_only=True))
    assert cell.value == word and "width-derived-self-attention" in cell.evidence
    assert scores.scale_precision_cell(Derived(plant)).value == (
        "float64" if not plant else "not_probed")


class Dropper(Runner):
    """Dropout answered raw: the training run refused (a path that declines training);
    planted "drops_in_eval": the inference run drops too."""

    name, framework, system = "toy.dropout", "toy", "toy"
    answers = frozenset({"dropout_training"})

    def __init__(self, plant: str = ""):
        super().__init__()
        self.plant = plant

    def answer(self, case, data, raw):
        if raw.value["training"]:
            raise NotExpressibleError("fast path not taken: training is enabled")
        out = output_with(case, None, data)
        return (out * 2 if self.plant == "drops_in_eval" else out), "toy(eval)"


def test_a_refused_training_run_reads_never_and_a_planted_drop_always():
    cell = training.dropout_cell(Dropper())
    assert cell.value == "never" and "training is enabled" in cell.evidence
    assert training.dropout_cell(Dropper("drops_in_eval")).value == "always"


@torch_only
def test_the_torch_runners_are_asked_what_they_once_probed():
    """The pinned cells, now from the ledger's probes: the fast path's asked forms ran it
    (self-attention), its declines are refusals in torch's words."""
    from conformance.conventions.probes import ledger_cells
    from conformance.runners.torch.mha import TorchMHA, TorchMHAFastPath

    fast = {c.axis: c for c in ledger_cells(TorchMHAFastPath())}
    assert fast["float_mask"].value == "refused" and "floating-point" in \
        fast["float_mask"].evidence
    assert fast["attn_mask_polarity"].value == "true_blocks"
    assert "self-attention" in fast["key_padding_polarity"].evidence
    assert fast["dropout"].value == "never" and fast["causal_flag"].value == "ignored"
    assert fast["argument_order"].value == "not_probed"  # k is v on the fast path
    plain = {c.axis: c.value for c in ledger_cells(TorchMHA(need_weights=False))}
    assert plain["causal_flag"] == "depends" and plain["dropout"] == "training_flag"


@torch_only
def test_a_planted_mha_that_drops_the_hint_moves_the_torch_cell(monkeypatch):
    """The planted defect: forward drops attn_mask whenever is_causal=True (the flag alone,
    upper left, as SDPA reads it); torch.mha's causal_flag is then upper_left."""
    import torch

    forward = torch.nn.MultiheadAttention.forward

    def flag_wins(self, q, k, v, *a, attn_mask=None, is_causal=False, **kw):
        if is_causal and attn_mask is not None:
            t, s = q.shape[1], k.shape[1]
            attn_mask = ~torch.ones(t, s, dtype=torch.bool).tril()
        return forward(self, q, k, v, *a, attn_mask=attn_mask, is_causal=False, **kw)

    from conformance.runners.torch.mha import TorchMHA

    assert causal_flag_cell(TorchMHA()).value == "hint_only"
    monkeypatch.setattr(torch.nn.MultiheadAttention, "forward", flag_wins)
    assert causal_flag_cell(TorchMHA()).value == "upper_left"


def test_probe_mask_pattern_is_defined_both_ways():
    m = probe_mask(forms("causal-hint")[1])
    assert m.any(-1).all() and (~m).any(-1).all()
