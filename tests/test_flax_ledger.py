"""The ledger's judgements the Flax and JAX runners hand their axes to (conventions/
probes/: training.py dropout, windows.py window_width, qk_norm.py qk_norm_scope, padding.py
key_padding_polarity, scores.py softmax_scale with a harness scale): a toy system (the
float64 oracle as its arithmetic) answers right, and each planted wrong answer changes the
cell.  Then the runners themselves: flax.linen / flax.nnx / jax.dpa answer the raw calls
and probe cases those judgements ask, and a defect planted in the system (nnx's decode
steps given is_causal=True, a window pair read (right, left), key lengths dropped) moves
the ledger's cell."""
from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from conformance.contract.api_facts import ApiFact
from conformance.conventions.probes.probing import output_with
from conformance.contract.runner import NotExpressible, Observation, Runner, Translation
from conformance.conventions.axes import Convention
from conformance.conventions.probes import (
    RAW_PROBES, ASKED_PROBES, ledger_cells, padding, qk_norm, scores, training, windows)
from conformance.oracle.positional import window_allowed
from conformance.oracle.reference import attention
from tests.helpers import require


class Toy(Runner):
    """The oracle as a system; `plant` names one defect."""

    name, framework, system = "toy.flaxlike", "toy", "toy"
    features = frozenset({"fill", "qk_norm"})
    answers = frozenset({"dropout_training", "window"})

    def __init__(self, plant: str = "", **attrs):
        super().__init__()
        self.plant = plant
        for k, v in attrs.items():
            setattr(self, k, v)

    def translate(self, case):
        qk = case.attention.qk_norm
        if self.plant == "layer_per_head_only" and qk is not None and (
                qk.kind, qk.scope) != ("layer", "per_head"):
            return NotExpressible("only a per-head LayerNorm")
        return Translation(f"toy({case.id})", None)

    def run(self, case, translation, data):
        a, p = case.attention, self.plant
        if p == "ignores_scale":
            case = replace(case, attention=replace(a, scale=None))
        if a.qk_norm is not None and p in ("all_heads", "per_head"):
            case = replace(case, attention=replace(a, qk_norm=replace(a.qk_norm, scope=p)))
        if p == "drops_padding":
            case = replace(case, mask=replace(case.mask, key_padding=None))
            data = None
        out = attention(case, data).output
        return Observation(output=out + (0.5 if p == "garbage" else 0.0))

    def answer(self, case, data, raw):
        p = self.plant
        if raw.argument == "dropout_training":
            rng = np.random.default_rng(0)
            out = attention(case, data).output
            moved = {"training_flag": raw.value["training"], "always": True,
                     "never": False}[p or "training_flag"]
            return out * (rng.random(out.shape) < 0.5) * 2 if moved else out, "toy(dropout)"
        if raw.argument == "window":
            if p == "refuses":
                raise ValueError("toy: no window")
            n = case.inputs.query_len
            pos = np.arange(n)
            causal = np.tril(np.ones((n, n), bool)) if case.mask.causal != "none" else True
            if p == "ignores_window":
                return output_with(case, causal if causal is not True else None), "toy(w)"
            left, right = (raw.value, raw.value) if isinstance(raw.value, int) else raw.value
            if p == "swapped_pair" and not isinstance(raw.value, int):
                left, right = right, left
            return output_with(case, window_allowed(pos, pos, left, right) & causal), "toy(w)"
        raise NotImplementedError(raw.argument)


def test_the_new_judgements_are_registered():
    assert RAW_PROBES["dropout"][0] == "dropout_training"
    assert RAW_PROBES["window_width"][0] == "window"
    assert ASKED_PROBES["qk_norm_scope"] is qk_norm.qk_norm_scope_cell
    assert ASKED_PROBES["key_padding_polarity"] is padding.key_padding_polarity_cell


@pytest.mark.parametrize("plant, word", [("", "training_flag"), ("always", "always"),
                                         ("never", "ignored")])
def test_dropout_reads_when_the_output_moves(plant, word):
    assert training.dropout_cell(Toy(plant)).value == word


def test_dropout_of_a_runner_that_cannot_pass_it_is_not_probed():
    cell = training.dropout_cell(Toy(answers=frozenset()))
    assert cell.value == "not_probed" and "passes no raw dropout_training" in cell.evidence


@pytest.mark.parametrize("plant, word", [("", "left_right"), ("swapped_pair", "2w_plus_1_keys"),
                                         ("ignores_window", "ignored"),
                                         ("refuses", "refused")])
def test_window_width_reads_the_number_and_the_pair(plant, word):
    cell = windows.window_width_cell(Toy(plant))
    assert cell.value == word, cell.evidence


@pytest.mark.parametrize("plant, word", [("layer_per_head_only", "per_head"),
                                         ("per_head", "per_head"), ("all_heads", "all_heads"),
                                         ("", "choosable"), ("garbage", "not_probed")])
def test_qk_norm_scope_reads_every_answer(plant, word):
    """The toy follows the case's scope (choosable); planted: one scope whatever is asked,
    only a per-head LayerNorm taken (the others refused by translate), a wrong output."""
    cell = qk_norm.qk_norm_scope_cell(Toy(plant))
    assert cell.value == word, cell.evidence


OWN_LENGTHS = Convention("key_padding_polarity", "lengths", "toy takes valid lengths")


@pytest.mark.parametrize("plant, own, word", [("", OWN_LENGTHS, "lengths"),
                                              ("drops_padding", OWN_LENGTHS, "ignored"),
                                              ("garbage", OWN_LENGTHS, "not_probed"),
                                              ("", None, "not_probed")])
def test_key_padding_reading_is_confirmed_by_asking(plant, own, word):
    cell = padding.key_padding_polarity_cell(Toy(plant), own)
    assert cell.value == word, cell.evidence


@pytest.mark.parametrize("attrs, plant, word", [
    ({"sets_scale": True}, "", "configurable"),
    ({"sets_scale": True}, "ignores_scale", "ignored"),
    ({"sets_scale": True, "harness_scale": True}, "", "inv_sqrt_head_dim"),
    ({"sets_scale": False}, "", "inv_sqrt_head_dim")])
def test_a_harness_scale_is_no_setting_of_the_system(attrs, plant, word):
    """A runner whose scale is the suite's wrapper (Flax's attention_fn) reads the default
    scale, never `configurable`; the same runner without the mark reads configurable."""
    assert scores.softmax_scale_cell(Toy(plant, **attrs)).value == word


def test_ledger_cells_ask_the_new_raw_and_asked_probes():
    toy = Toy(probe_takes=frozenset({"key_padding"}))  # qk_norm: among its features
    toy.conventions = lambda: [ApiFact("padding_argument", "lengths", "toy takes lengths")]
    cells = {c.axis: c for c in ledger_cells(toy)}
    assert cells["dropout"].value == "training_flag"
    assert cells["window_width"].value == "left_right"
    assert cells["qk_norm_scope"].value == "choosable"
    assert cells["key_padding_polarity"].value == "lengths"
    assert "probe-key-padding" in cells["key_padding_polarity"].evidence


# ---- the runners themselves


def _flax():
    require("flax")
    from conformance.runners.flax.linen import FlaxLinen
    from conformance.runners.flax.nnx import FlaxNnx

    return FlaxLinen, FlaxNnx


@pytest.mark.parametrize("which", ["linen", "nnx"])
def test_flax_layers_answer_the_ledger(which):
    """Both layers: dropout under the training switch, a per-head LayerNorm QK-norm (the
    other kinds and scopes refused by probe_translate), a decode through their own cache
    reported with its key tensor's shapes."""
    from conformance.conventions.probes import cache

    linen, nnx = _flax()
    runner = (linen if which == "linen" else nnx)()
    assert training.dropout_cell(runner).value == "training_flag"
    cell = qk_norm.qk_norm_scope_cell(runner)
    assert cell.value == "per_head" and "rms per_head: not answered" in cell.evidence
    align = cache.cache_causal_alignment_cell(runner)
    assert align.value == "lower_right", align.evidence
    assert cache.cache_layout_cell(runner).value.startswith(
        "BSNH, two tensors (cached_key, cached_value) and a cache_index, preallocated")
    assert scores.softmax_scale_cell(runner).value == "inv_sqrt_head_dim"


def test_nnx_decode_planted_with_is_causal_reads_upper_left(monkeypatch):
    """nnx's decode as its users call it: lower_right, the is_causal=True step quoted as
    the flag's upper-left reading (google/flax#5591); a planted layer whose every call
    takes is_causal=True is named upper_left."""
    _, nnx = _flax()
    from flax import nnx as fnnx

    from conformance.conventions.probes import cache
    from conformance.runners.flax import common

    align = cache.cache_causal_alignment_cell(nnx())
    assert align.value == "lower_right", align.evidence
    assert "it attends key 0 only: that is the flag's upper-left reading" in align.evidence
    monkeypatch.setattr(common, "_JITTED", {})  # trace the patched call afresh
    call = fnnx.MultiHeadAttention.__call__
    monkeypatch.setattr(fnnx.MultiHeadAttention, "__call__",
                        lambda self, *a, **kw: call(self, *a, **{**kw, "is_causal": True}))
    assert cache.cache_causal_alignment_cell(nnx()).value == "upper_left"


def test_flax_dropout_planted_as_always_on_is_caught(monkeypatch):
    """A planted layer whose dropout ignores deterministic=True reads `always`."""
    _, nnx = _flax()
    from conformance.runners.flax import common

    runner = nnx()
    apply = runner.apply
    monkeypatch.setattr(common, "_JITTED", {})
    monkeypatch.setattr(runner, "apply", lambda *a, deterministic=True, **kw: apply(
        *a, deterministic=False, **kw))
    assert training.dropout_cell(runner).value == "always"


def test_jax_dpa_window_planted_as_right_left_is_caught(monkeypatch):
    require("jax")
    import jax

    from conformance.runners.flax.dpa import JaxDPA

    assert windows.window_width_cell(JaxDPA()).value == "left_right"
    dpa = jax.nn.dot_product_attention

    def swapped(*a, local_window_size=None, **kw):  # planted: (right, left)
        if isinstance(local_window_size, tuple):
            local_window_size = local_window_size[::-1]
        return dpa(*a, local_window_size=local_window_size, **kw)

    monkeypatch.setattr(jax.nn, "dot_product_attention", swapped)
    assert windows.window_width_cell(JaxDPA()).value == "2w_plus_1_keys"


def test_jax_dpa_key_lengths_planted_as_dropped_read_ignored(monkeypatch):
    require("jax")
    from conformance.runners.flax import dpa as dpa_module
    from conformance.conventions.probes.api_facts import own_cells

    own = next(c for c in own_cells(dpa_module.JaxDPA()) if c.axis == "key_padding_polarity")
    assert padding.key_padding_polarity_cell(dpa_module.JaxDPA(), own).value == "lengths"
    monkeypatch.setattr(dpa_module, "dpa_plan", lambda case, real=dpa_module.dpa_plan: replace(
        real(case), kv_lengths=False))
    cell = padding.key_padding_polarity_cell(dpa_module.JaxDPA(), own)
    assert cell.value == "ignored", cell.evidence
