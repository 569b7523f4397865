"""The output gate (attention.output_gate): the case field, the float64 oracle against a
per-token loop written here, the canonical weights drawn last, the parameter count, the
q_proj packing converter round-tripped, and the gate_packing probe read against toy
systems that each load q_proj their own way: per head (Qwen3-Next), split in halves (the
port the axis exists to catch), with a separate gate projection, the gate applied after the
output projection, the gate ignored, and every packing refused."""
from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from conformance.case.loader import parse_case
from conformance.case.model import CaseError, parameter_count
from conformance.contract.runner import Observation, Runner, Translation
from conformance.convert._core import ConversionError
from conformance.convert.gate import (
    GATE_PACKINGS, from_qwen3_next, pack, to_qwen3_next, unpack)
from conformance.conventions.probes import gate as gate_probe
from conformance.conventions.probes.table import way_for
from conformance.oracle.canonical import CaseData, case_data
from conformance.oracle.output_gate import sigmoid
from conformance.oracle.reference import attention

GATED = {"num_heads": 2, "query_features": 8, "bias": True,
         "output_gate": {"activation": "sigmoid"}}


def gated_case(**attention):
    return parse_case({"id": "gate", "attention": {**GATED, **attention},
                       "inputs": {"batch": 2, "query_len": 3, "key_len": 3, "seed": 5,
                                  "self_attention": True}}, "<test>")


@pytest.mark.parametrize("gate,field", [
    ("sigmoid", "attention.output_gate"),
    ({"activation": "tanh"}, "attention.output_gate.activation"),
    ({"place": "after"}, "attention.output_gate.place"),
])
def test_a_bad_gate_names_its_field(gate, field):
    with pytest.raises(CaseError) as err:
        gated_case(output_gate=gate)
    assert field in str(err.value)


def test_the_gate_defaults_to_sigmoid_and_is_a_case_feature():
    case = gated_case(output_gate={})
    assert case.attention.output_gate.activation == "sigmoid"
    assert "output_gate" in case.features
    assert case.fingerprint() != gated_case(output_gate=None).fingerprint()


def loop_oracle(case, data) -> np.ndarray:
    """Gated attention token by token and head by head, written apart from the oracle."""
    w, x = data.weights, data.inputs.query
    b, t, _ = x.shape
    out = np.zeros((b, t, case.attention.output_features))
    d = case.attention.qk_head_dim
    for i in range(b):
        for q in range(t):
            total = w.bo.copy()
            for h in range(case.attention.num_heads):
                qv = x[i, q] @ w.wq[h] + w.bq[h]
                keys = x[i] @ w.wk[h] + w.bk[h]
                vals = x[i] @ w.wv[h] + w.bv[h]
                s = keys @ qv / np.sqrt(d)
                p = np.exp(s - s.max())
                head = (p / p.sum()) @ vals
                gate = 1 / (1 + np.exp(-(x[i, q] @ w.wg[h] + w.bg[h])))
                total = total + (head * gate) @ w.wo[h]
            out[i, q] = total
    return out


def ungated(case, data):
    """The case and its data with no gate (the oracle gates where the weights hold W_g)."""
    return (replace(case, attention=replace(case.attention, output_gate=None)),
            CaseData(replace(data.weights, wg=None, bg=None), data.inputs))


def test_the_oracle_gates_each_element_before_the_output_projection():
    case = gated_case()
    data = case_data(case)
    got = attention(case, data).output
    np.testing.assert_allclose(got, loop_oracle(case, data), rtol=1e-12, atol=1e-12)
    ungated_out = attention(*ungated(case, data)).output
    assert np.abs(got - ungated_out).max() > 0.1  # the gate moves the output


def test_the_gate_weights_are_drawn_last_and_counted():
    case = gated_case()
    plain = replace(case, attention=replace(case.attention, output_gate=None))
    w, p = case_data(case).weights, case_data(plain).weights
    for name in ("wq", "wk", "wv", "wo", "bq", "bk", "bv", "bo"):
        assert np.array_equal(getattr(w, name), getattr(p, name)), name
    assert p.wg is None and w.wg.shape == (2, 8, 4) and w.bg.shape == (2, 4)
    assert parameter_count(case.attention) == w.count() == parameter_count(
        plain.attention) + 2 * (8 + 1) * 4


def test_sigmoid_does_not_overflow():
    assert sigmoid(np.array([-1000.0, 0.0, 1000.0])).tolist() == [0.0, 0.5, 1.0]


@pytest.mark.parametrize("packing", GATE_PACKINGS)
@pytest.mark.parametrize("norm", ("offset", "scale"))
def test_the_qwen3_next_state_round_trips_bit_for_bit(packing, norm):
    case = gated_case(num_kv_heads=1, qk_norm={"kind": "rms", "scope": "per_head"})
    w = case_data(case).weights
    state = to_qwen3_next(w, packing, norm)
    back = from_qwen3_next(state, 2, 1, packing, norm)
    for name in w.NAMES:
        a, b = getattr(w, name), getattr(back, name)
        assert (a is None and b is None) or a.tobytes() == b.tobytes(), name
    assert ("gate_proj.weight" in state) == (packing == "separate")


def test_halves_and_per_head_part_at_two_heads_and_tie_at_one():
    q, g = np.arange(8.0).reshape(2, 2, 2), 100 + np.arange(8.0).reshape(2, 2, 2)
    (per,), (halves,) = pack(q, g, "per_head"), pack(q, g, "halves")
    assert per[:, 0].tolist() == [0, 2, 100, 102, 4, 6, 104, 106]
    assert halves[:, 0].tolist() == [0, 2, 4, 6, 100, 102, 104, 106]
    read_wrong = unpack((per,), 2, 2, "halves")  # a per-head q_proj split in halves
    assert not np.array_equal(read_wrong[0], q)
    assert np.array_equal(pack(q[:1], g[:1], "per_head")[0], pack(q[:1], g[:1], "halves")[0])
    with pytest.raises(ConversionError, match="gate packing"):
        pack(q, g, "interleaved")


# -- the probe against toy systems --------------------------------------------------------

class ToyGate(Runner):
    """A gated attention whose q_proj holds [query | gate] read the toy's own way
    (`reads`: a packing of convert/gate.py), its gate applied before the output projection
    or after it, or ignored; a `gate_proj` key it has no place for raises its own error."""

    name, framework, system = "toy.gate", "toy", "toy"
    features = frozenset({"output_gate"})
    answers = frozenset({"packed_gate"})

    def __init__(self, reads="per_head", place="before", refuse_all=False, cannot=()):
        super().__init__()
        self.reads, self.place, self.refuse_all = reads, place, refuse_all
        self.cannot = cannot  # packings the runner cannot load at all (not the system's)

    def translate(self, case):
        return Translation("toy(gate)")

    def run(self, case, translation, data):
        return Observation(self.compute(case, data.weights, data))

    def compute(self, case, weights, data):
        data = CaseData(weights, data.inputs)
        if self.place == "before":
            return attention(case, data).output.astype(np.float32).astype(np.float64)
        plain = attention(*ungated(case, data)).output
        if self.place == "ignored":
            return plain
        x = data.inputs.query
        pre = np.einsum("bte,hed->bthd", x, weights.wg)
        pre = pre if weights.bg is None else pre + weights.bg[None, None]
        return plain * sigmoid(pre.reshape(*x.shape[:2], -1))

    def answer(self, case, data, raw):
        if raw.value in self.cannot:
            raise NotImplementedError(f"toy: no way to load {raw.value}")
        state = to_qwen3_next(data.weights, raw.value, norm="scale")
        has_gate_proj = self.reads == "separate"
        if self.refuse_all or ("gate_proj.weight" in state) != has_gate_proj:
            raise KeyError(f"toy: unexpected state keys {sorted(state)}")
        h, d = case.attention.num_heads, case.attention.qk_head_dim
        q, g = unpack(tuple(state[k] for k in ("q_proj.weight", "gate_proj.weight")
                            if k in state), h, d, self.reads)
        biases = tuple(state[k] for k in ("q_proj.bias", "gate_proj.bias") if k in state)
        bias = unpack(biases, h, d, self.reads) if biases else (None, None)
        read = replace(data.weights, wq=q.transpose(0, 2, 1), wg=g.transpose(0, 2, 1),
                       bq=bias[0], bg=bias[1])
        return self.compute(case, read, data), f"toy.load({raw.value})"


@pytest.mark.parametrize("toy,word", [
    (ToyGate(), "per_head"),
    (ToyGate(reads="halves"), "halves"),  # planted: the gate split in halves
    (ToyGate(reads="separate"), "separate"),
    (ToyGate(place="after"), "after_output"),  # planted: the gate after o_proj
    (ToyGate(place="ignored"), "ignored"),
    (ToyGate(refuse_all=True), "refused"),
    (ToyGate(cannot=("separate",)), "per_head"),  # a packing not asked is left out
    (ToyGate(cannot=GATE_PACKINGS), "not_probed"),
])
def test_each_planted_packing_changes_the_word(toy, word):
    cell = gate_probe.gate_packing_cell(toy)
    assert cell.axis == "gate_packing" and cell.value == word, cell.evidence


def test_a_halves_port_is_far_from_the_oracle_where_the_probe_reads_it():
    cell = gate_probe.gate_packing_cell(ToyGate(reads="halves"))
    assert "per_head: " in cell.evidence and "halves packing, gated" in cell.evidence


def test_two_packings_at_the_oracle_are_a_tie():
    assert gate_probe.word_of({"per_head": {"gated": 0.0, "after_output": 1, "ignored": 1},
                               "halves": {"gated": 0.0, "after_output": 1, "ignored": 1}}
                              )[0] == "not_probed"


def test_the_ledger_asks_a_runner_passing_packed_gate_and_no_other():
    assert way_for(ToyGate(), "gate_packing").probe is gate_probe.gate_packing_cell
    assert way_for(type("Plain", (Runner,), {"name": "plain"})(), "gate_packing") is None


def test_the_headline_groups_the_packings_and_diff_advises_the_repacking():
    """Two systems that hold the gate differently: the headline names both words, and
    `diff` between them points at convert/gate.py's unpack and pack."""
    from conformance.report.findings import ledger_findings
    from conformance.report.porting import differences

    ledger = {"axes": [{"id": "gate_packing", "title": "Output gate"}],
              "systems": [{"id": "hf.qwen3_next"}, {"id": "port.halves"}],
              "cells": [{"system": "hf.qwen3_next", "axis": "gate_packing",
                         "value": "per_head"},
                        {"system": "port.halves", "axis": "gate_packing", "value": "halves"}]}
    found = ledger_findings(ledger)
    assert [f.key for f in found] == ["gate_packing"]
    assert "per_head" in found[0].text and "halves" in found[0].text
    (diff,), same = differences(ledger, "hf.qwen3_next", "port.halves")
    assert "conformance.convert.gate" in diff.advice and "[q_h | g_h]" in diff.advice
    assert same == 0
