"""A cell never quotes the harness as the system, and never hangs on a harness choice
unsaid.  Planted: a runner whose dropout answer raises an exception of the suite's own
(a class the suite defines, or a harness limit) reads not_probed, not the system's word; a
program made in training mode is judged by what it holds (always where its calls drop,
never where both runs are the oracle's), which the same outputs from a system with a
training switch would not give; a runner with two harness choices whose causal switch
(or its boolean mask) reads differently under each reads `depends`, each reading named,
and the runner's own reading where they agree."""
from __future__ import annotations

import numpy as np
import pytest

from conformance.conventions.axes import DEPENDS, IGNORED, NOT_PROBED
from conformance.contract.runner import (
    NotExpressibleError, Observation, Runner, harness_limit)
from conformance.conventions.probes.flags import (
    attn_mask_polarity_cell, causal_flag_cell, float_mask_cell)
from conformance.conventions.probes.probing import output_with
from conformance.conventions.probes.training import dropout_cell
from tests.helpers import require


class SuiteCheck(RuntimeError):
    """An exception class of the suite's own (as a runner module would define one)."""


SuiteCheck.__module__ = "conformance.runners.toy"


class ToyDropout(Runner):
    """Answers dropout_training: `plant` says what a training request does ("suite": the
    suite's own exception; "limit": a harness limit; "system": the system's own error;
    "drops": an output moved by a fresh random mask on each call; "holds_none": the
    oracle's output); `program`: the answer comes from a program made in that mode."""

    name, framework, system = "toy.dropout", "toy", "toy"
    answers = frozenset({"dropout_training"})
    plant, program = "holds_none", False

    def answer(self, case, data, raw):
        out = output_with(case, None, data)
        if raw.value["training"]:
            if self.plant == "suite":
                raise SuiteCheck("the toy's graph has no training input")
            if self.plant == "limit":
                raise NotExpressibleError(harness_limit("the toy exports inference only"))
            if self.plant == "system":
                raise RuntimeError("Training mode is not supported for Dropout op")
            if self.plant == "drops":
                keep = np.random.default_rng().random(out.shape) < 0.5
                out = np.where(keep, out / 0.5, 0.0)
        call = f"toy(dropout=0.5, training={raw.value['training']})"
        if self.program:
            return Observation(out, extras={"training_set_at": "export"}), call
        return out, call


@pytest.mark.parametrize("plant", ["suite", "limit"])
def test_a_harness_exception_is_never_the_systems_word(plant):
    cell = dropout_cell(ToyDropout(plant=plant, program=True))
    assert cell.value == NOT_PROBED, cell.evidence
    assert "raised" not in cell.evidence
    # the system's own refusal is its word: the training run refused, the other one exact
    cell = dropout_cell(ToyDropout(plant="system", program=True))
    assert cell.value == "never" and "Dropout op" in cell.evidence, cell.evidence


@pytest.mark.parametrize("plant, program, word", [
    ("drops", True, "always"), ("holds_none", True, "never"),
    ("drops", False, "training_flag"), ("holds_none", False, IGNORED)])
def test_a_program_is_judged_by_what_it_holds(plant, program, word):
    """The same outputs read `training_flag` from a system whose switch is an input, and
    `always` from a program made in training mode (it drops on every call)."""
    cell = dropout_cell(ToyDropout(plant=plant, program=program))
    assert cell.value == word, cell.evidence
    assert ("run twice" in cell.evidence) == program


class ToyChoice(Runner):
    """A self-attention-only system whose causal switch applies under `impl` "sdpa" and is
    ignored under "eager" (HF's two attention functions), `impl` a harness choice; its
    boolean mask means True = attend under "sdpa", True = blocked under "eager"."""

    name, framework, system = "toy.choice", "toy", "toy"
    answers = frozenset({"is_causal", "attn_mask"})
    impl = "eager"
    harness_choices = {"impl": ("eager", "sdpa")}

    def answer(self, case, data, raw):
        if not case.inputs.self_attention:
            raise NotImplementedError("self-attention only")
        if raw.argument == "attn_mask":
            m = np.asarray(raw.value)
            m = m if m.dtype != bool or self.impl == "sdpa" else ~m
            return output_with(case, m if m.dtype == bool else m == 0, data), "toy(x, mask)"
        n = case.inputs.query_len
        mask = np.tril(np.ones((n, n), bool)) if self.impl == "sdpa" and raw.value else None
        return output_with(case, mask, data), f"toy(x, is_causal={raw.value}, impl={self.impl})"


def test_two_harness_choices_that_disagree_read_depends():
    cell = causal_flag_cell(ToyChoice())
    assert cell.value == DEPENDS, cell.evidence
    assert "under impl='eager' (the runner's): ignored" in cell.evidence
    assert "under impl='sdpa': not_probed" in cell.evidence
    assert causal_flag_cell(ToyChoice(impl="sdpa")).value == DEPENDS

    class Agreeing(ToyChoice):
        harness_choices = {"impl": ("eager", "other")}
    cell = causal_flag_cell(Agreeing())
    assert cell.value == IGNORED and "under impl='other': the same reading" in cell.evidence

    class Unchosen(ToyChoice):
        harness_choices = {}
    assert causal_flag_cell(Unchosen()).value == IGNORED


def test_a_mask_read_differently_under_each_choice_reads_depends():
    cell = attn_mask_polarity_cell(ToyChoice())
    assert cell.value == DEPENDS, cell.evidence
    assert "(the runner's): true_blocks" in cell.evidence
    assert "under impl='sdpa': true_attends" in cell.evidence
    assert float_mask_cell(ToyChoice()).value == "added"  # a float mask reads alike


def test_hf_marian_reads_both_attention_functions():
    """MarianAttention under eager ignores is_causal; under sdpa, what MarianMTModel(config)
    gets, the switch applies (not_probed at T = S): depends."""
    require("torch", "transformers")
    from conformance.runners.hf.marian import HFMarian

    cell = causal_flag_cell(HFMarian())
    assert cell.value == DEPENDS, cell.evidence
    assert "attn_implementation='eager' (the runner's): ignored" in cell.evidence
    assert "attn_implementation='sdpa': not_probed" in cell.evidence
    cell = attn_mask_polarity_cell(HFMarian())  # eager adds a boolean as 0/1
    assert cell.value == DEPENDS, cell.evidence
    assert "(the runner's): added_as_number" in cell.evidence
    assert "attn_implementation='sdpa': true_attends" in cell.evidence
