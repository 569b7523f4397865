"""The ledger's judgements the Keras runners hand their axes to (conventions/probes/:
order.py argument_order by position, key_padding.py a key-padding argument passed raw,
implicit.py implicit_mask, rows.py fully_masked_row, scores.py float64_compute with what
the system always applies (Runner.probe_needs), windows.py window_width `ignored`,
features.py rope_partial from the signatures): a toy system (the float64 oracle as its
arithmetic) answers right, and each planted wrong answer changes the cell.  Then the Keras
runners themselves, in a Keras worker: they answer, and the ledger names the Keras facts
(query_value_key, value_mask True = attends, Embedding(mask_zero=True) propagated,
CachedMultiHeadAttention's sliding_window ignored, rope_partial not_applicable)."""
from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from conformance.conventions.axes import IGNORED, NA, NOT_PROBED
from conformance.conventions.probes.probing import output_with
from conformance.contract.runner import NotExpressible, Observation, Runner, Translation
from conformance.conventions.probes import (
    ASKED_PROBES, RAW_PROBES, implicit, key_padding, order, rows, scores, windows)
from conformance.conventions.probes.features import signature_cells
from conformance.oracle.reference import attention
from tests.helpers import require


class Toy(Runner):
    """The oracle as a system with Keras's call shapes; `plant` names one defect."""

    name, framework, system = "toy.keraslike", "toy", "toy"
    features = frozenset({"fill", "rope"})
    answers = frozenset({"positional", "key_padding", "marked_padding", "window"})

    def __init__(self, plant: str = "", **attrs):
        super().__init__()
        self.plant, self.asked = plant, []
        for k, v in attrs.items():
            setattr(self, k, v)

    def translate(self, case):
        self.asked.append(case)
        if self.plant == "needs_rope" and case.attention.rope is None:
            return NotExpressible("toy: rope cases only")
        return Translation(f"toy({case.id})", None)

    def run(self, case, translation, data):
        out = attention(case, data).output.copy()
        exp = attention(case, data)
        if exp.fully_masked.any():
            rows_ = {"uniform": exp.output_if_uniform, "zeros": exp.output_if_zeros,
                     "nan": np.full_like(out, np.nan), "other": exp.output_if_zeros + 0.3}
            out[exp.fully_masked] = rows_.get(self.plant, rows_["uniform"])[exp.fully_masked]
        if self.plant == "float32" and case.inputs.dtype == "float64":
            out = out.astype(np.float32).astype(np.float64)
        return Observation(output=out)

    def answer(self, case, data, raw):
        p, name = self.plant, raw.argument
        if name == "positional":  # (q, k, v) given positionally: the second slot read as
            x = data.inputs       # the value (Keras) or, planted, as the key
            if p != "qkv":
                data = replace(data, inputs=replace(x, key=x.value, value=x.key))
            return output_with(case, None, data), "toy(q, a, b)"
        if name == "key_padding":
            pad = np.asarray(raw.value, bool)[:, None, :]
            allowed = {"": pad, "blocks": ~pad, "ignores": None}[p]
            return output_with(case, allowed), "toy(value_mask=pad)"
        if name == "marked_padding":
            valid = np.asarray(raw.value, bool)
            both = valid[:, :, None] & valid[:, None, :]
            return output_with(case, None if p == "drops" else both, data), "toy(embedded)"
        if name == "window":  # accepted, and never applied (CachedMultiHeadAttention's)
            return output_with(case, None), f"toy(sliding_window={raw.value})"
        raise NotImplementedError(name)


def test_the_keras_probes_are_the_ledgers():
    assert RAW_PROBES["argument_order"] == ("positional", order.positional_order_cell)
    assert RAW_PROBES["key_padding_polarity"] == (("key_padding", "key_lengths"),
                                                  key_padding.key_padding_polarity_cell)
    assert RAW_PROBES["implicit_mask"] == ("marked_padding", implicit.implicit_mask_cell)
    assert ASKED_PROBES["fully_masked_row"] is rows.fully_masked_row_cell


def test_positional_order_names_which_slot_is_the_value():
    cell = order.positional_order_cell(Toy())
    assert cell.value == "query_value_key" and "toy(q, a, b)" in cell.evidence
    assert order.positional_order_cell(Toy("qkv")).value == "query_key_value"  # planted


def test_a_raw_key_padding_reads_its_polarity_or_ignored():
    cell = key_padding.key_padding_cell(Toy())
    assert cell.value == "true_attends" and "toy(value_mask=pad)" in cell.evidence
    assert key_padding.key_padding_cell(Toy("blocks")).value == "true_blocks"  # planted
    assert key_padding.key_padding_cell(Toy("ignores")).value == IGNORED  # planted


def test_implicit_mask_propagated_or_none():
    cell = implicit.implicit_mask_cell(Toy())
    assert cell.value == "propagated" and "3 of 8 positions" in cell.evidence
    assert implicit.implicit_mask_cell(Toy("drops")).value == "none"  # planted


def test_fully_masked_row_names_what_the_row_holds():
    cell = rows.fully_masked_row_cell(Toy())
    assert cell.value == "uniform" and "masked_rows [1]" in cell.evidence
    for plant, word in (("zeros", "zeros"), ("nan", "nan"), ("other", "finite_other")):
        assert rows.fully_masked_row_cell(Toy(plant)).value == word, plant


def test_probes_of_the_whole_system_carry_what_it_always_applies():
    """A system that takes rope cases only (keras.rope's rows) is asked float64_compute and
    fully_masked_row with its rotation (probe_needs); without it they are not probed."""
    needs = {"qk_head_dim": 8, "v_head_dim": 8, "rope": {"style": "half_split"}}
    toy = Toy("needs_rope", probe_needs=needs)
    cell = scores.float64_compute_cell(toy)
    assert cell.value == "float64" and toy.asked[-1].attention.rope is not None
    assert rows.fully_masked_row_cell(toy).value == "uniform"
    assert scores.float64_compute_cell(Toy("needs_rope")).value == NOT_PROBED
    rounded = Toy("float32", probe_needs=needs)  # planted: float32 arithmetic
    assert scores.float64_compute_cell(rounded).value == "below_float64"


def test_a_window_accepted_and_never_applied_is_ignored():
    cell = windows.window_width_cell(Toy())
    assert cell.value == IGNORED
    assert "sliding_window=3" in cell.evidence and "no window" in cell.evidence


def test_rope_partial_is_read_from_the_signatures_not_from_the_harness_slicing():
    """A rotary layer without any partial-rotation argument is not_applicable with its
    signature as evidence; a planted one that takes rotary_dim is not (a probe is needed)."""
    class Rotary:  # RotaryEmbedding's signature (keras_hub 0.32)
        def __init__(self, max_wavelength=10000, scaling_factor=1.0, sequence_axis=1,
                     feature_axis=-1, denominator_dim=None, **kwargs): ...

        def call(self, inputs, start_index=0, positions=None): ...

    class Attention:
        def __init__(self, num_heads, key_dim, sliding_window=None, **kwargs): ...

        def call(self, query, value, key=None, attention_mask=None): ...

    class Partial(Rotary):  # planted: a partial-rotation argument
        def __init__(self, rotary_dim=None, **kwargs): ...

    def cells(*classes):
        toy = Toy()
        toy.signatures = lambda: ("Rotary + Attention", tuple(
            f for c in classes for f in (c.__init__, c.call)))
        return {c.axis: c for c in signature_cells(toy, set())}

    cell = cells(Rotary, Attention)["rope_partial"]
    assert cell.value == NA and "Rotary + Attention: no argument among" in cell.evidence
    assert cells(Partial, Attention)["rope_partial"].value == NOT_PROBED


# -- the Keras runners, in their worker (Keras on torch: the cheapest to start) ------------
def ledger_in_worker(target: str, **params) -> dict:
    from conformance.conventions.probes import LEDGER_CELLS
    from conformance.run import workers
    from conformance.runners import load

    runner = load(target, {"backend": "torch", **params})
    if runner.available():
        pytest.skip(runner.available())
    return {c.axis: c for c in workers.conventions_in_worker(runner, LEDGER_CELLS)}


def test_keras_layers_answer_and_the_ledger_names_their_conventions():
    require("keras", "torch")
    cells = ledger_in_worker("conformance.runners.keras.mha:KerasMHA", scores=True)
    words = {axis: c.value for axis, c in cells.items()}
    assert words["argument_order"] == "query_value_key"
    assert words["key_padding_polarity"] == "true_attends"
    assert "value_mask" in cells["key_padding_polarity"].evidence
    assert words["implicit_mask"] == "propagated"
    assert words["weights_dropout"] == "pre_dropout"
    assert words["mask_fill"] == "-1e9"  # the scores path writes -1e9 (its Softmax mask)
    assert words["window_width"] == "2w_minus_1_keys"


def test_keras_hub_cells_the_issue_names():
    """CachedMultiHeadAttention takes sliding_window and never applies it: `ignored`, the
    argument and the unchanged distance quoted; RotaryEmbedding has no partial rotation
    (the rows' slicing is the runner's): not_applicable; the rotation's float64 measured
    with it."""
    require("keras", "torch", "keras_hub")
    cached = ledger_in_worker("conformance.runners.keras.cached:KerasCached")
    window = cached["window_width"]
    assert window.value == IGNORED and "sliding_window=3" in window.evidence
    unwindowed = float(window.evidence.split("no window ")[-1].split()[0].rstrip(";"))
    assert unwindowed < 1e-5 and "accepted" in window.evidence
    assert cached["cache_causal_alignment"].value == "lower_right"
    rope = ledger_in_worker("conformance.runners.keras.rope:KerasRope")
    assert rope["rope_partial"].value == NA
    assert rope["rope_style"].value == "half_split"
    assert "RotaryEmbedding" in rope["float64_compute"].evidence


# -- the exported Keras layer (onnx.keras-export, litert.keras): answers through its graphs --
class FakeGraphs:
    """keras_export_probes.Graphs with the oracle as its runtime: each session is the graph
    configuration it was asked for; `plant` names one defect of the exported graph."""

    what, runtime, artifact = "fake graph", "fake runtime", "fake model"

    def __init__(self, plant: str = ""):
        self.plant, self.sessions = plant, []

    def session(self, case, mask=None, causal=False, dropout=0.0, value_mask=False,
                options=(), call_options=()):
        self.sessions.append({"mask": mask, "causal": causal, "dropout": dropout,
                              "value_mask": value_mask, "options": dict(options),
                              "call": dict(call_options)})
        return self.sessions[-1]

    def run(self, session, case, data=None, **feeds):
        out = output_with(case, None, data)
        if self.plant == "drops" and session["dropout"]:  # planted: dropout in inference
            return out * 0.5
        return out


class ExportToy(Runner):
    name, framework, system = "toy.keras-export", "toy", "toy"
    answers = frozenset({"attn_mask", "is_causal", "key_padding", "window",
                         "dropout_training"})

    def __init__(self, graphs):
        super().__init__()
        self.g = graphs

    def answer(self, case, data, raw):
        from conformance.runners._export.keras_export_answers import answer

        return answer(self.g, case, data, raw)


def test_the_exported_graph_answers_each_raw_argument_with_its_own_graph():
    from conformance.conventions.probes.probing import probe_case
    from conformance.contract.runner import RawCall
    from conformance.oracle.canonical import case_data
    from conformance.runners._export.keras_export_answers import answer

    g, case = FakeGraphs(), probe_case("export-answers")
    data = case_data(case)
    answer(g, case, data, RawCall("attn_mask", np.ones((2, 3, 5), bool)))
    answer(g, case, data, RawCall("attn_mask", np.zeros((2, 3, 5))))
    answer(g, case, data, RawCall("window", 3))
    answer(g, case, data, RawCall("key_padding", np.ones((2, 5), bool)))
    assert [s["mask"] for s in g.sessions[:2]] == ["bool", "float32"]
    assert g.sessions[2]["options"] == {"sliding_window": 3}
    assert g.sessions[3]["value_mask"] is True
    # a program has no training switch: the layer's call in the exported model says it
    obs, _ = answer(g, case, data, RawCall("dropout_training", {"rate": 0.5, "training": True}))
    assert g.sessions[4]["call"] == {"training": True}
    assert obs.extras == {"training_set_at": "export"}


def test_an_inference_graph_reads_dropout_never_unless_it_drops():
    from conformance.conventions.probes import training

    cell = training.dropout_cell(ExportToy(FakeGraphs()))
    assert cell.value == "never" and "no training input" in cell.evidence
    assert training.dropout_cell(ExportToy(FakeGraphs("drops"))).value == "always"  # planted
