"""relative_bias_buckets (conventions/probes/relative_bias.py), read against toy T5 layers
written here: each is its own NumPy port of a T5 attention (projections, unscaled scores,
a bucket function written from transformers' float formula, softmax, output projection;
no oracle code), its output rounded to float32, with one port error planted: the sign of
the relative position flipped, the encoder's buckets computed as the decoder's (and the
reverse), the bias dropped, the wrong max_distance, the feature refused.  Each must
change the word; the faithful port reads t5."""
from __future__ import annotations

import math

import numpy as np
import pytest

from conformance.contract.runner import NotExpressible, Observation, Runner, Translation
from conformance.conventions.probes import relative_bias as probe
from conformance.conventions.probes.table import way_for


def port_buckets(rel: np.ndarray, bidirectional: bool, num_buckets: int,
                 max_distance: int) -> np.ndarray:
    """T5's bucket rule as transformers writes it (float32 log, floor by cast)."""
    out = np.zeros(rel.shape, np.int64)
    if bidirectional:
        num_buckets //= 2
        out += (rel > 0) * num_buckets
        rel = np.abs(rel)
    else:
        rel = -np.minimum(rel, 0)
    exact = num_buckets // 2
    safe = np.maximum(rel, exact).astype(np.float32)  # the exact buckets take the rest
    large = exact + (np.log(safe / exact) / math.log(max_distance / exact)
                     * (num_buckets - exact)).astype(np.int64)
    return out + np.where(rel < exact, rel, np.minimum(large, num_buckets - 1))


class ToyT5(Runner):
    """A T5 attention port: `flip` the relative position's sign, `direction(bidirectional)`
    the buckets it computes, `distance(max_distance)` the max distance it uses, `drop` the
    bias altogether; `refuse` the feature."""

    name, framework, system = "toy.t5", "toy", "toy"
    features = frozenset({"fill", "relative_bias"})
    sets_scale = True

    def __init__(self, flip=False, direction=lambda b: b, distance=lambda d: d, drop=False,
                 refuse=False):
        super().__init__()
        self.flip, self.direction, self.distance = flip, direction, distance
        self.drop, self.refuse = drop, refuse

    def translate(self, case):
        if self.refuse:
            return NotExpressible("the toy has no relative bias")
        return Translation("toy_t5(...)")

    def bias(self, case, table):
        rb, i = case.attention.relative_bias, case.inputs
        q = i.position_offset + np.arange(i.query_len)
        k = i.key_position_offset + np.arange(i.key_len)
        rel = k[None, :] - q[:, None]
        ids = port_buckets(-rel if self.flip else rel, self.direction(rb.bidirectional),
                           rb.num_buckets, self.distance(rb.max_distance))
        return np.moveaxis(table[ids], -1, 0)[None]

    def run(self, case, translation, data):
        w, x = data.weights, data.inputs
        q = np.einsum("ble,hed->bhld", x.query, w.wq)
        k = np.einsum("ble,hed->bhld", x.key, w.wk)
        v = np.einsum("ble,hed->bhld", x.value, w.wv)
        scores = np.einsum("bhtd,bhsd->bhts", q, k) * case.attention.scale
        if not self.drop:
            scores = scores + self.bias(case, w.relative_bias)
        e = np.exp(scores - scores.max(-1, keepdims=True))
        out = np.einsum("bhtd,hde->bte", (e / e.sum(-1, keepdims=True)) @ v, w.wo)
        return Observation(out.astype(np.float32).astype(np.float64))


@pytest.mark.parametrize("toy, word", [
    (ToyT5(), "t5"),
    (ToyT5(flip=True), "sign_flipped"),
    (ToyT5(direction=lambda b: False), "unidirectional"),  # bidirectional read as decoder's
    (ToyT5(direction=lambda b: True), "bidirectional"),
    (ToyT5(direction=lambda b: not b), "other"),  # both asks crossed: two words
    (ToyT5(distance=lambda d: d // 2), "other"),  # max_distance 64 for 128
    (ToyT5(drop=True), "ignored"),
], ids=["faithful", "sign-flipped", "bidirectional-as-unidirectional",
        "unidirectional-as-bidirectional", "crossed", "max-distance-halved", "dropped"])
def test_each_planted_port_reads_its_word(toy, word):
    cell = probe.relative_bias_buckets_cell(toy)
    assert cell.value == word, cell.evidence
    assert "encoder buckets" in cell.evidence and "decoder buckets" in cell.evidence


def test_the_faithful_port_is_within_float32_and_the_flip_far_off():
    """The figures behind the words: the faithful port within float32 rounding of the
    oracle's t5 rule, and the sign flip's output far from it."""
    readings, _, _ = probe.read_asks(ToyT5())
    assert readings["encoder"].distance["t5"] < 1e-5
    assert readings["encoder"].distance["sign_flipped"] > 1e-2
    flipped, _, _ = probe.read_asks(ToyT5(flip=True))
    assert flipped["encoder"].distance["t5"] > 1e-2


def test_a_refused_feature_is_not_read():
    cell = probe.relative_bias_buckets_cell(ToyT5(refuse=True))
    assert cell.value == "not_probed" and "the toy has no relative bias" in cell.evidence


def test_the_asks_reach_every_kind_of_bucket():
    """The probe's distances cover both signs, the exact buckets, the log bins and the
    last bucket past max_distance (where a port's clamping or edges would show)."""
    rel = np.arange(probe.LENGTH)[None, :] - np.arange(probe.LENGTH)[:, None]
    ids = port_buckets(rel, True, **probe.T5_TABLE)
    assert set(np.unique(ids)) == set(range(32)) - {16}  # 16 would be a key after it at 0
    assert rel.max() >= probe.T5_TABLE["max_distance"] and rel.min() <= -128


def test_the_table_asks_runners_declaring_the_feature():
    assert way_for(ToyT5(), "relative_bias_buckets") is not None

    class Plain(Runner):
        name, framework, system = "toy.plain", "toy", "toy"

    assert way_for(Plain(), "relative_bias_buckets") is None


def test_the_headline_and_the_porting_note_name_the_buckets():
    """The headline groups the systems by bucket rule; `diff` between a t5 system and a
    sign-flipped one gives the buckets of the keys one after and one before the query."""
    from conformance.report.findings import ledger_findings
    from conformance.report.porting import differences

    axis = "relative_bias_buckets"
    ledger = {"axes": [{"id": axis, "title": "T5 relative bias"}],
              "systems": [{"id": "hf.t5"}, {"id": "port.t5"}],
              "cells": [{"system": "hf.t5", "axis": axis, "value": "t5"},
                        {"system": "port.t5", "axis": axis, "value": "sign_flipped"}]}
    found = ledger_findings(ledger)
    assert [f.key for f in found] == [axis]
    assert "t5" in found[0].text and "sign_flipped" in found[0].text
    (diff,), same = differences(ledger, "hf.t5", "port.t5")
    assert "one after the query is bucket 17, one before it bucket 1" in diff.advice
    assert "20 before it 10 (encoder) or 17 (decoder)" in diff.advice and same == 0
