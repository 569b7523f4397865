"""The HF runners only answer for the cache axes: the ledger's cache probes
(conventions/probes/cache.py) ask each of them a decode probe case through its own decode
(hf/cache_decode.py, or the model's mask builder for the decoding runners), with what the
module applies on every call (probe_needs), and a planted wrong answer moves the cell.
The generic pieces are tested on toy runners too: a harness limit found on running is
`not_probed`, never the system's `refused`; a decode probe case carries probe_needs."""
from __future__ import annotations

import importlib.util
from dataclasses import replace

import numpy as np
import pytest

from conformance.contract.runner import (
    NotExpressible, NotExpressibleError, Observation, Runner, Translation, harness_limit)
from conformance.conventions.probes.cache import (
    cache_causal_alignment_cell, cache_layout_cell, decode_probe_case)
from conformance.conventions.probes.request import ask
from conformance.conventions.probes.probing import output_with
from conformance.oracle.reference import attention

needs_hf = pytest.mark.skipif(
    importlib.util.find_spec("transformers") is None or importlib.util.find_spec("torch") is None,
    reason="transformers/torch not installed (pip install -e '.[hf]')")


class ToyDecoder(Runner):
    """A bias-free system decoding with the oracle: each row sees the keys up to it
    (lower_right), or with `first_key_only` the step sees key 0 alone (upper_left)."""

    name = "toy.decoder"
    probe_needs = {"bias": False}
    first_key_only = False
    fails_with = ""  # a NotExpressibleError's message run raises

    def translate(self, case):
        if case.attention.bias:
            return NotExpressible("this toy system has no biases")
        return Translation("toy(q, cache)", {})

    def run(self, case, translation, data):
        if self.fails_with:
            raise NotExpressibleError(self.fails_with)
        n = case.inputs.query_len
        allowed = np.broadcast_to(np.tril(np.ones((n, n), bool)), (case.inputs.batch, n, n))
        if self.first_key_only:
            allowed = allowed.copy()
            allowed[:, -1, 1:] = False
        return Observation(output_with(case, allowed, data),
                           extras={"cache_shapes": [(2, 2, 3, 4), (2, 2, 4, 4)],
                                   "cache_tensors": "two toy tensors"})


def test_the_decode_probe_case_carries_what_the_system_always_applies():
    """probe_needs reach the decode case: the bias-free toy answers it (lower_right, BNSH);
    without them its translate refuses the biased case and the cells are not_probed."""
    assert decode_probe_case(ToyDecoder()).attention.bias is False
    assert decode_probe_case().attention.bias is True
    toy = ToyDecoder()
    assert cache_causal_alignment_cell(toy).value == "lower_right"
    assert cache_layout_cell(toy).value.startswith("BNSH, two toy tensors, growing")

    class Bare(ToyDecoder):
        probe_needs = {}
    assert cache_causal_alignment_cell(Bare()).value == "not_probed"


def test_a_planted_first_key_step_reads_upper_left():
    toy = ToyDecoder(first_key_only=True)
    cell = cache_causal_alignment_cell(toy)
    assert cell.value == "upper_left", cell.evidence


def test_a_harness_limit_found_on_running_is_not_the_systems():
    """run raising NotExpressibleError: a harness limit (HARNESS_LIMIT) is `unasked`, so
    the cell is not_probed with the reason; any other text is the system's refusal."""
    limited = ToyDecoder(fails_with=harness_limit("the cache went by the module"))
    got = ask(limited, decode_probe_case(limited))
    assert got.unasked == "the cache went by the module" and not got.raised
    cell = cache_causal_alignment_cell(limited)
    assert cell.value == "not_probed" and "the cache went by the module" in cell.evidence
    refusing = ToyDecoder(fails_with="the system's own words")
    assert cache_causal_alignment_cell(refusing).value == "refused"


@needs_hf
@pytest.mark.parametrize("target", ["gpt2:HFGpt2", "t5:HFT5", "gptj:HFGptj", "qwen3:HFQwen3",
                                    "mistral:HFMistral"])
def test_each_family_is_asked_its_own_decode(target):
    """GPT-2 (its cache through cache_decode), T5 (an EncoderDecoderCache, bias-free scale
    1.0: probe_needs), GPT-J (always rotating: its rotation in the case), Qwen3 (QK-norm),
    Mistral (the model's mask builder): the step sees the cache and itself."""
    from conformance.runners import load

    runner = load(f"conformance.runners.hf.{target}")
    cell, layout = cache_causal_alignment_cell(runner), cache_layout_cell(runner)
    assert cell.value == "lower_right", cell.evidence
    assert layout.value == ("BNSH, two tensors per layer (cache.layers[i].keys, .values), "
                            "growing ((2, 2, 3, 4) -> (2, 2, 4, 4))"), layout.evidence


@needs_hf
def test_a_planted_step_that_sees_key_zero_only_reads_upper_left():
    """The planted defect in the system: GPT-2's step called with a mask that admits key 0
    alone (an upper-left step); the ledger's cell follows it."""
    import torch

    from conformance.runners.hf.gpt2 import HFGpt2

    class FirstKey(HFGpt2):
        def forward(self, module, x, mask, **kw):
            cache = kw.get("cache")
            if x.shape[1] == 1 and cache is not None and cache.get_seq_length():
                s = cache.get_seq_length() + 1
                mask = torch.full((x.shape[0], 1, 1, s), torch.finfo(x.dtype).min)
                mask[..., 0] = 0.0
            return super().forward(module, x, mask, **kw)

    cell = cache_causal_alignment_cell(FirstKey())
    assert cell.value == "upper_left", cell.evidence


@needs_hf
def test_the_decode_output_is_the_causal_forward():
    """The prefill rows and the step of GPT-2's own decode against the oracle."""
    from conformance.runners.hf.gpt2 import HFGpt2

    runner = HFGpt2()
    case = decode_probe_case(runner)
    got = ask(runner, case)
    assert np.max(np.abs(got.output - attention(case).output)) < 1e-5
    assert got.extras["cache_shapes"] == [(2, 2, 3, 4), (2, 2, 4, 4)]


# -- positions and heads: the generic probes in the forms a system takes, the partial-rotary
# setting passed raw (conventions/probes/needs.py, partial.py) ------------------------------

class ToyRotary(Runner):
    """A self-attention system that always applies RMS QK-norm (probe_needs) and rotates
    with the oracle; `mode` is what its partial-rotary setting does: "partial" rotates 4
    of 8, "ignored" rotates all, "moved" moves the output off both, "raises" refuses."""

    name = "toy.rotary"
    probe_needs = {"qk_norm": {"kind": "rms", "scope": "per_head"}}
    answers = frozenset({"partial_rotary"})
    mode = "ignored"

    def translate(self, case):
        if not case.inputs.self_attention:
            return NotExpressible("this toy system is self-attention only")
        if case.attention.qk_norm is None:
            return NotExpressible("this toy system applies QK-norm on every call")
        return Translation("toy(x)", {})

    def run(self, case, translation, data):
        return Observation(attention(case, data).output)

    def answer(self, case, data, raw):
        if self.mode == "raises":
            raise ValueError("partial_rotary_factor must be 1.0")
        a = case.attention
        if self.mode == "partial":
            case = replace(case, attention=replace(a, rope=replace(a.rope, rotary_dim=4)))
        out = attention(case, data).output
        return (out + 0.1 if self.mode == "moved" else out), f"toy(x, partial={raw.value})"


def test_a_probe_case_is_asked_with_what_the_system_always_applies():
    """The written kv case (cross-attention, no QK-norm) is inexpressible; the forms with
    probe_needs (self-attention, QK-norm) are asked; without probe_needs: not_probed."""
    from conformance.conventions.probes.heads import kv_head_mapping_cell
    from conformance.conventions.probes.needs import needed_forms

    toy = ToyRotary()
    cell = kv_head_mapping_cell(toy)
    assert cell.value == "grouped", cell.evidence
    assert "with-needs-self-attention" in cell.evidence
    forms = needed_forms(toy, "kv", attention={"num_heads": 6, "num_kv_heads": 3,
                                               "query_features": 12})
    assert forms[0].attention.qk_norm is None and forms[-1].attention.qk_norm is not None

    class Bare(ToyRotary):
        probe_needs = {}
    assert kv_head_mapping_cell(Bare()).value == "not_probed"


def test_needs_keep_the_probes_own_fields():
    """A field the probe sets keeps the probe's value (rope merged key by key); needs
    that contradict the probe's sizes give no extra form."""
    from conformance.conventions.probes.needs import needed_forms, with_needs

    class Toy(Runner):
        probe_needs = {"rope": {"style": "interleaved", "base": 500.0}, "query_features": 16}
    assert with_needs(Toy(), {"rope": {"style": "half_split"}, "query_features": 12}) == {
        "rope": {"style": "half_split", "base": 500.0}, "query_features": 12}

    class Odd(Runner):
        probe_needs = {"num_heads": 5}
    assert len(needed_forms(Odd(), "x", attention={"query_features": 12})) == len(
        needed_forms(Runner(), "x", attention={"query_features": 12}))


def test_mask_needs_ride_on_the_needs_forms_but_not_on_raw_ones():
    """probe_mask_needs (GPT-2's causal mask) reach the forms with the needs of a probe
    asked through translate/run; a raw argument is the whole mask of its call, so the raw
    probes' forms carry none; the probe's own mask fields win."""
    from conformance.conventions.probes.needs import needed_forms

    class Causal(Runner):
        probe_mask_needs = {"causal": "upper_left"}
    asked = needed_forms(Causal(), "x", inputs={"self_attention": True, "query_len": 4,
                                                "key_len": 4})
    assert asked[0].mask.causal == "none" and asked[-1].mask.causal == "upper_left"
    assert all(c.mask.causal == "none" for c in needed_forms(
        Causal(), "x", raw=True, inputs={"self_attention": True, "query_len": 4,
                                         "key_len": 4}))
    own = needed_forms(Causal(), "x", mask={"causal": "lower_right"})
    assert {c.mask.causal for c in own} == {"lower_right"}


@pytest.mark.parametrize("mode, word, words", [
    ("ignored", "ignored", "accepted: output 0.0e+00 from the run without it"),
    ("partial", "supported", "toy(x, partial=0.5)"),
    ("moved", "not_probed", "neither reading matches"),
    ("raises", "refused", "must be 1.0"),
])
def test_the_partial_rotary_setting_is_read_from_the_output(mode, word, words):
    from conformance.conventions.probes.partial import rope_partial_setting_cell

    toy = ToyRotary()
    toy.mode = mode
    cell = rope_partial_setting_cell(toy)
    assert cell.value == word and words in cell.evidence, cell.evidence


def test_the_partial_rotary_setting_is_asked_only_where_answered():
    from conformance.conventions.probes import ledger_cells

    class Silent(ToyRotary):
        answers = frozenset()
    assert "rope_partial" not in {c.axis for c in ledger_cells(Silent())}
    cells = {c.axis: c for c in ledger_cells(ToyRotary())}
    assert cells["rope_partial"].value == "ignored", cells["rope_partial"].evidence


class ToySinks(Runner):
    """A self-attention-only system with a sink logit per head; `drops` plants one that
    accepts the sinks and leaves them out."""

    name = "toy.sinks"
    drops = False

    def translate(self, case):
        if not case.inputs.self_attention:
            return NotExpressible("this toy system is self-attention only")
        return Translation("toy(x, sinks)", {})

    def run(self, case, translation, data):
        if self.drops:
            data = replace(data, weights=replace(data.weights, sinks=None))
        return Observation(attention(case, data).output)


@pytest.mark.parametrize("drops, word", [(False, "applied"), (True, "ignored")])
def test_sinks_are_asked_as_self_attention_and_a_dropped_sink_reads_ignored(drops, word):
    from conformance.conventions.probes.scores import sinks_cell

    toy = ToySinks()
    toy.drops = drops
    cell = sinks_cell(toy)
    assert cell.value == word and "probe-sinks-self-attention" in cell.evidence, cell.evidence


class ToyWindow(Runner):
    """A system whose window is a configuration read by its own mask builder: a causal
    builder reading w as w keys, a bidirectional one reading it as 2w + 1; `planted` makes
    every setting's builder read w keys, or ("dropped") apply no window at all."""

    name = "toy.window"
    answers = frozenset({"window_setting"})
    planted = ""

    def window_settings(self, w):
        return {"causal builder": True, "bidirectional builder": False}

    def answer(self, case, data, raw):
        from conformance.conventions.probes import cache_probes as cp

        if raw.argument != "window_setting" or not case.inputs.self_attention:
            raise NotImplementedError("toy: self-attention window settings only")
        causal = self.window_settings(raw.value["window"])[raw.value["setting"]]
        word = ("no window" if self.planted == "dropped" else
                "w_keys" if causal or self.planted == "same" else "2w_plus_1_keys")
        return cp.window_candidates(case, raw.value["window"])[word], f"toy({raw.value})"


@pytest.mark.parametrize("planted, word", [("", "depends"), ("same", "w_keys"),
                                           ("dropped", "ignored")])
def test_a_window_is_read_setting_by_setting(planted, word):
    from conformance.conventions.probes.window_settings import window_settings_cell

    toy = ToyWindow()
    toy.planted = planted
    cell = window_settings_cell(toy)
    assert cell.value == word, cell.evidence
    if not planted:
        assert "w_keys: toy({'window': 3, 'setting': 'causal builder'})" in cell.evidence
        assert "2w_plus_1_keys: toy({'window': 3, 'setting': 'bidirectional" in cell.evidence


def test_a_window_setting_the_system_refuses_reads_refused():
    from conformance.conventions.probes.window_settings import window_settings_cell

    class Refusing(ToyWindow):
        def answer(self, case, data, raw):
            raise ValueError("sliding_window must be even")
    cell = window_settings_cell(Refusing())
    assert cell.value == "refused" and "must be even" in cell.evidence, cell.evidence


class ToySoftcap(Runner):
    """A self-attention-only system with a score softcap; `order` plants where the cap sits
    against an additive float mask passed raw (or "dropped": the cap accepted, not applied)."""

    name = "toy.softcap"
    answers = frozenset({"attn_mask"})
    order = "before_mask"

    def translate(self, case):
        if not case.inputs.self_attention:
            return NotExpressible("this toy system is self-attention only")
        return Translation("toy(x, softcap)", {})

    def run(self, case, translation, data):
        if self.order == "dropped":
            case = replace(case, attention=replace(case.attention, softcap=None))
        return Observation(attention(case, data).output)

    def answer(self, case, data, raw):
        from conformance.conventions.probes import cache_probes as cp

        if not case.inputs.self_attention:
            raise NotImplementedError("toy: self-attention only")
        word = "no softcap" if self.order == "dropped" else self.order
        return cp.softcap_order_candidates(case, case.attention.softcap, raw.value)[word], \
            "toy(x, mask)"


@pytest.mark.parametrize("order, applied, ordered", [
    ("before_mask", "applied", "before_mask"), ("after_mask", "applied", "after_mask"),
    ("dropped", "ignored", "ignored")])
def test_softcap_and_its_order_are_asked_as_self_attention(order, applied, ordered):
    from conformance.conventions.probes.capped import softcap_cell
    from conformance.conventions.probes.softcap import softcap_order_cell

    toy = ToySoftcap()
    toy.order = order
    cell = softcap_cell(toy)
    assert cell.value == applied and "probe-softcap-self-attention" in cell.evidence, \
        cell.evidence
    cell = softcap_order_cell(toy)
    assert cell.value == ordered and "probe-op-softcap-self-attention" in cell.evidence, \
        cell.evidence


@needs_hf
def test_gemma2_hands_its_window_and_softcap_to_the_ledger():
    from conformance.conventions.probes import ledger_cells
    from conformance.runners.hf.gemma2 import HFGemma2

    class Uncapped(HFGemma2):  # the planted defect: the cap never reaches the config
        def config_kwargs(self, plan):
            return {**super().config_kwargs(plan), "attn_logit_softcapping": None}
    cells = {c.axis: c for c in ledger_cells(HFGemma2())}
    assert cells["window_width"].value == "depends", cells["window_width"].evidence
    assert cells["softcap"].value == "applied" and cells["softcap_order"].value == "before_mask"
    planted = {c.axis: c for c in ledger_cells(Uncapped())}
    assert planted["softcap"].value == "ignored", planted["softcap"].evidence
    assert planted["softcap_order"].value == "ignored", planted["softcap_order"].evidence


# ---- masks and dropout passed raw (hf.common leaves the judging: flags.py, training.py,
# mask_number.py ask HFRunner.answer in the forms a module takes, with its probe_needs)


class ToyNeeds(Runner):
    """A bias-free self-attention-only system answering a raw mask and the dropout rate:
    `reads` how it takes a mask ("number": a boolean added to its scores as 0/1, float
    the same: modelled as one function of the mask's values; "blocks": True = blocked;
    "planted": a boolean read otherwise than its float twin), `drops_in_eval` the
    planted dropout defect."""

    name = "toy.needs"
    probe_needs = {"bias": False}
    answers = frozenset({"attn_mask", "dropout_training"})
    reads = "number"
    drops_in_eval = False

    def translate(self, case):
        if case.attention.bias or not case.inputs.self_attention:
            return NotExpressible("this toy is bias-free self-attention only")
        return Translation("toy(x)", {})

    def answer(self, case, data, raw):
        if isinstance(self.translate(case), NotExpressible):
            raise NotImplementedError("toy: bias-free self-attention only")
        plain = output_with(case, None, data)
        if raw.argument == "dropout_training":
            dropped = raw.value["training"] or self.drops_in_eval
            return (plain * 0.5 if dropped else plain), "toy(x, dropout)"
        m = np.asarray(raw.value)
        if self.reads == "blocks" and m.dtype == bool:
            return output_with(case, ~m, data), "toy(x, mask)"
        if self.reads == "planted" and m.dtype == bool:
            m = ~m
        return plain + 0.01 * m.astype(np.float64).sum(-1, keepdims=True), "toy(x, mask)"


@pytest.mark.parametrize("reads, word", [("number", "added_as_number"),
                                         ("blocks", "true_blocks"),
                                         ("planted", "not_probed")])
def test_a_raw_mask_is_asked_with_the_needs_and_a_number_read_against_its_float_twin(
        reads, word):
    """The toy passes no mask on the plain probe cases (biased): the needs forms are asked;
    a boolean that is no mask reads added_as_number only where its float 0/1 twin gives
    the same output (the planted toy reads the boolean otherwise: not_probed)."""
    from conformance.conventions.probes.flags import attn_mask_polarity_cell

    cell = attn_mask_polarity_cell(ToyNeeds(reads=reads))
    assert cell.value == word, cell.evidence
    assert "probe-raw-attn-mask-with-needs-self-attention" in cell.evidence

    class Bare(ToyNeeds):
        probe_needs = {}
    assert attn_mask_polarity_cell(Bare(reads=reads)).value == "not_probed"


@pytest.mark.parametrize("drops_in_eval, word", [(False, "training_flag"), (True, "always")])
def test_the_dropout_rate_is_asked_with_the_needs(drops_in_eval, word):
    from conformance.conventions.probes.training import dropout_cell

    cell = dropout_cell(ToyNeeds(drops_in_eval=drops_in_eval))
    assert cell.value == word and "probe-dropout-with-needs" in cell.evidence, cell.evidence

    class Bare(ToyNeeds):
        probe_needs = {}
    assert dropout_cell(Bare()).value == "not_probed"


@needs_hf
def test_hf_masks_and_dropout_are_the_ledgers():
    """GPT-2's raw mask is the whole mask (its causal-only rows do not limit it: raw_limits);
    Qwen3 is asked with its QK-norm and its boolean read against its own float 0/1 run;
    MPT (ALiBi) reads True = blocked.  Planted: a GPT-2 whose raw calls keep the rows'
    causal-only limit is asked nothing (not_probed); a Qwen3 that turns a boolean into a
    real mask (True = attend) reads true_attends."""
    import torch

    from conformance.conventions.probes.flags import attn_mask_polarity_cell, float_mask_cell
    from conformance.conventions.probes.training import dropout_cell
    from conformance.runners.hf.gpt2 import HFGpt2
    from conformance.runners.hf.mpt import HFMpt
    from conformance.runners.hf.qwen3 import HFQwen3

    eager = {"harness_choices": {}}  # the eager reading alone (test_harness_choices: both)
    assert attn_mask_polarity_cell(HFGpt2(**eager)).value == "added_as_number"
    assert float_mask_cell(HFGpt2()).value == "added"
    assert dropout_cell(HFGpt2()).value == "training_flag"
    cell = attn_mask_polarity_cell(HFQwen3(**eager))
    assert cell.value == "added_as_number" and "with-needs" in cell.evidence, cell.evidence
    assert attn_mask_polarity_cell(HFMpt()).value == "true_blocks"

    class Limited(HFGpt2):
        def raw_limits(self, case):
            return self.limits(case)
    assert attn_mask_polarity_cell(Limited()).value == "not_probed"

    class Masking(HFQwen3):
        def forward(self, module, x, mask, **kw):
            if mask is not None and mask.dtype == torch.bool:
                mask = torch.where(mask, 0.0, torch.finfo(torch.float32).min)
            return super().forward(module, x, mask, **kw)
    assert attn_mask_polarity_cell(Masking()).value == "true_attends"


@needs_hf
def test_hf_api_facts_carry_no_oracle():
    """input_layout and returned_weights are the module's own facts; unbatched_input is the
    ledger's reading of its 2-D call: BERT's sdpa path takes a 2-D input and misreads it
    (the oracle's item 0 is the reference), eager refuses it; the feature axes come from
    the signatures the runner names."""
    from conformance.conventions.probes import ledger_cells
    from conformance.conventions.probes.native_inputs import unbatched_cell
    from conformance.runners.hf.bert import HFBert

    from conformance.conventions.probes.api_facts import own_cells

    sdpa = {c.axis: c for c in own_cells(HFBert(attn_implementation="sdpa"))}
    unbatched = unbatched_cell(HFBert(attn_implementation="sdpa"))
    assert unbatched.value == "accepted" and "misread" in unbatched.evidence
    assert sdpa["returned_weights"].value == "none"
    eager = {c.axis: c for c in ledger_cells(HFBert())}
    assert eager["unbatched_input"].value == "refused"
    assert eager["input_layout"].value == "batch_first"
    assert eager["softcap"].value == "not_applicable"
    assert "BertSelfAttention and BertConfig" in eager["softcap"].evidence


# ---- the causal switch and a fully masked row of a self-attention-only system (the ledger's
# flags.py / causal_self.py and rows.py)


class ToySelfOnly(Runner):
    """A self-attention-only system: `switch` what its causal switch does ("applies": the
    causal mask, "ignored": nothing, "planted": every key but the last blocked), `row`
    what a fully masked query row holds ("uniform" or the planted "zeros"), `causal_only`
    its translate refuses a case without a causal mask (GPT-2's rows)."""

    name = "toy.self"
    answers = frozenset({"is_causal"})
    switch, row, causal_only = "applies", "uniform", False

    def translate(self, case):
        if not case.inputs.self_attention:
            return NotExpressible("one hidden_states tensor")
        if self.causal_only and case.mask.causal == "none":
            return NotExpressible("causal only")
        return Translation("toy(x)", {})

    def run(self, case, translation, data):
        exp = attention(case, data)
        out = np.where(data.inputs.fully_masked[..., None],
                       exp.output_if_uniform if self.row == "uniform" else exp.output_if_zeros,
                       exp.output)
        return Observation(out)

    def answer(self, case, data, raw):
        if not case.inputs.self_attention:
            raise NotImplementedError("self-attention only")
        n = case.inputs.query_len
        mask = {"applies": np.tril(np.ones((n, n), bool)), "ignored": None,
                "planted": np.eye(n, dtype=bool) | ~np.eye(n, k=-1, dtype=bool)}[self.switch]
        return output_with(case, mask, data), "toy(x, is_causal=True)"


@pytest.mark.parametrize("switch, word", [("applies", "not_probed"), ("ignored", "ignored"),
                                          ("planted", "not_probed")])
def test_a_self_attention_switch_is_asked_at_t_equal_s(switch, word):
    from conformance.conventions.probes.flags import causal_flag_cell

    cell = causal_flag_cell(ToySelfOnly(switch=switch))
    assert cell.value == word and "raw-causal-self-attention" in cell.evidence, cell.evidence
    assert ("cannot show" in cell.evidence) == (switch == "applies")


@pytest.mark.parametrize("row, causal_only", [("uniform", False), ("zeros", False),
                                              ("uniform", True), ("zeros", True)])
def test_a_fully_masked_row_is_asked_as_self_attention_or_inside_a_causal_mask(row, causal_only):
    from conformance.conventions.probes.rows import fully_masked_row_cell

    cell = fully_masked_row_cell(ToySelfOnly(row=row, causal_only=causal_only))
    assert cell.value == row, cell.evidence
    assert ("fully-masked-row-causal" in cell.evidence) == causal_only


@needs_hf
def test_hf_causal_switch_and_masked_row_are_the_ledgers():
    """Eager ignores is_causal (the mask it is given is all it applies), sdpa applies it
    (not_probed at T = S); GPT-2's fully masked row is asked inside its causal mask."""
    from conformance.conventions.probes.flags import causal_flag_cell
    from conformance.conventions.probes.rows import fully_masked_row_cell
    from conformance.runners.hf.bert import HFBert
    from conformance.runners.hf.gpt2 import HFGpt2

    assert causal_flag_cell(HFBert()).value == "ignored"
    assert causal_flag_cell(HFBert(attn_implementation="sdpa")).value == "not_probed"
    assert fully_masked_row_cell(HFBert(attn_implementation="sdpa")).value == "zeros"
    cell = fully_masked_row_cell(HFGpt2(harness_choices={}))  # eager alone (sdpa: zeros)
    assert cell.value == "uniform" and "causal" in cell.evidence, cell.evidence


# ---- float64_compute asked by the ledger (scores.float64_compute_cell, ledger_axes), and the
# API facts observations.py reads with no oracle


@needs_hf
def test_the_eager_float64_mask_is_made_in_float64():
    """The eager (B, 1, T, S) mask holds finfo(dtype).min made in the dtype: float64's
    -1.8e308 (float32 arithmetic overflowed on it), and the same numbers as float32
    arithmetic cast to the dtype in the other dtypes."""
    import torch

    from conformance.runners.hf.common import hf_mask

    allowed = np.random.default_rng(0).random((2, 3, 4)) > 0.4
    mask = hf_mask(torch, allowed, torch.float64, "eager")
    assert mask.dtype == torch.float64 and mask.min().item() == torch.finfo(torch.float64).min
    with pytest.raises(RuntimeError, match="overflow"):  # the old float32 arithmetic
        torch.where(torch.from_numpy(allowed[:, None]), 0.0, torch.finfo(torch.float64).min)
    for dt in (torch.float32, torch.float16, torch.bfloat16):
        old = torch.where(torch.from_numpy(allowed[:, None]), 0.0, torch.finfo(dt).min).to(dt)
        assert torch.equal(hf_mask(torch, allowed, dt, "eager"), old)


@needs_hf
@pytest.mark.parametrize("planted", [False, True])
def test_float64_compute_is_asked_as_a_causal_float64_case(planted):
    """BERT's eager module in float64 is float64 (its causal float64 mask included), Llama's
    float32 softmax is below_float64 (asked with its rotation: probe_needs); a BERT whose
    output passes through float32 (planted) is below_float64."""
    from conformance.conventions.probes.scores import float64_compute_cell
    from conformance.runners.hf.bert import HFBert
    from conformance.runners.hf.llama import HFLlama

    class Rounding(HFBert):
        def forward(self, module, x, mask, **kw):
            out, w = super().forward(module, x, mask, **kw)
            return out.float().to(out.dtype), w

    cell = float64_compute_cell(Rounding() if planted else HFBert())
    assert cell.value == ("below_float64" if planted else "float64"), cell.evidence
    assert "causal" in cell.evidence
    if not planted:
        llama = float64_compute_cell(HFLlama())
        assert llama.value == "below_float64" and "LlamaAttention" in llama.evidence


@needs_hf
@pytest.mark.parametrize("planted, word", [("", "post_dropout"), ("renormalised", "pre_dropout"),
                                           ("none", "not_applicable")])
def test_weights_dropout_is_read_from_the_returned_row_sums(planted, word):
    """Dropout on the returned weights shows in their row sums: a module renormalising them
    (planted) reads pre_dropout, one returning no weights not_applicable (the module
    answers the native call, the ledger's native_inputs probe reads it)."""
    from conformance.conventions.probes.native_inputs import weights_dropout_cell
    from conformance.runners.hf.gpt2 import HFGpt2

    class Planted(HFGpt2):
        def forward(self, module, x, mask, **kw):
            out, w = super().forward(module, x, mask, **kw)
            if planted == "renormalised":
                return out, w / w.sum(-1, keepdim=True)
            return out, None if planted else w

    cell = weights_dropout_cell(Planted())
    assert cell.value == word, cell.evidence


@needs_hf
@pytest.mark.parametrize("planted, word", [("", "refused"), ("cast", "cast_to_layer"),
                                           ("promote", "promoted")])
def test_mixed_dtype_is_the_output_dtype_or_the_systems_error(planted, word):
    """float64 hidden_states into the float32 module: torch's own error (refused), a forward
    casting the input to the layer (planted: cast_to_layer) or the layer to the input
    (planted: promoted); implicit_mask and key padding are facts of the signature, with no
    oracle."""
    from conformance.conventions.probes.native_inputs import mixed_dtype_cell
    from conformance.runners.hf import observations
    from conformance.runners.hf.marian import HFMarian

    class Planted(HFMarian):
        def forward(self, module, x, mask, **kw):
            if planted == "cast":
                x = x.float()
            elif planted == "promote":
                module = module.to(x.dtype)
            return super().forward(module, x, mask, **kw)

    mixed, (implicit,) = mixed_dtype_cell(Planted()), observations.tensor_facts(Planted())
    assert mixed.value == word, mixed.evidence
    assert implicit.value == "none" and "oracle" not in implicit.evidence
    (padding,) = observations.signature_facts(Planted())
    assert padding.value == "not_applicable" and "MarianAttention" in padding.evidence


@needs_hf
def test_t5_alibi_is_not_applicable_from_its_signature():
    """T5's position_bias is its learned relative bias, no ALiBi: the cell cites the
    signature (observations.signature_facts) and is the ledger's cell (alibi_slopes is not
    asked of T5)."""
    from conformance.conventions.probes import ledger_cells
    from conformance.runners.hf.t5 import HFT5

    cells = {c.axis: c for c in ledger_cells(HFT5())}
    assert cells["alibi_slopes"].value == "not_applicable"
    assert "position_bias" in cells["alibi_slopes"].evidence
    assert cells["float64_compute"].value == "float64"
    assert "causal" in cells["float64_compute"].evidence
