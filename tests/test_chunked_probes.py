"""chunk_mask and attention_temperature (conventions/probes/chunked.py), read against toy
systems written here: each computes multi-head attention in its own few lines of NumPy
(not the oracle) with one reading planted, its output rounded to float32, so each planted
port must change the word: a chunk read as a sliding window of the same size, chunks
counted from the first query, the chunk ignored; the temperature applied from position 0
(floor(p / F): off by one), counted from the first query, ignored; and a system that
raises on the setting."""
from __future__ import annotations

import numpy as np
import pytest

from conformance.contract.runner import Observation, Runner, Translation
from conformance.conventions.probes import chunked
from conformance.conventions.probes.table import way_for
from conformance.oracle.canonical import case_data


def own_attention(case, data, q_scale: np.ndarray, allowed: np.ndarray) -> np.ndarray:
    """Self-attention written out: queries times `q_scale` (T,), `allowed` (T, T)."""
    w, x, a = data.weights, data.inputs.query, case.attention
    q, k, v = (np.einsum("bte,hed->bhtd", x, m) + (0 if b is None else b[None, :, None, :])
               for m, b in ((w.wq, w.bq), (w.wk, w.bk), (w.wv, w.bv)))
    group = a.num_heads // a.num_kv_heads
    k, v = np.repeat(k, group, axis=1), np.repeat(v, group, axis=1)
    q = q * q_scale[None, None, :, None]
    s = np.where(allowed, q @ k.swapaxes(-1, -2) / np.sqrt(a.qk_head_dim), -np.inf)
    p = np.exp(s - s.max(-1, keepdims=True))
    heads = (p / p.sum(-1, keepdims=True)) @ v
    return np.einsum("bhtd,hde->bte", heads, w.wo) + (0 if w.bo is None else w.bo)


def blocks(ids: np.ndarray, size: int) -> np.ndarray:
    return (ids[:, None] // size) == (ids[None, :] // size)


def chunk_as_written(pos, t, c):
    return blocks(pos, c)


def chunk_as_window(pos, t, c):
    return (t[None, :] > t[:, None] - c) & np.ones((len(t), len(t)), bool)


def chunk_relative(pos, t, c):
    return blocks(t, c)


def chunk_ignored(pos, t, c):
    return np.ones((len(t), len(t)), bool)


def llama4(pos, f, a):  # modeling_llama4.py: log1p(floor((p + 1) / F)) * a + 1
    return np.log1p(np.floor((pos + 1.0) / f)) * a + 1


def off_by_one(pos, f, a):  # the port that drops the + 1
    return np.log1p(np.floor(pos / f)) * a + 1


def relative(pos, f, a):  # the sequence index, not the positions
    return llama4(np.arange(len(pos)), f, a)


def untempered(pos, f, a):
    return np.ones(len(pos))


class Toy(Runner):
    """A system with Llama 4's chunk and temperature settings, each read by a plant."""

    name, framework, system = "toy.llama4", "toy", "toy"
    features = frozenset({"chunk", "temperature", "position_offset"})

    def __init__(self, chunk=chunk_as_written, temperature=llama4, raises=False):
        super().__init__()
        self.chunk, self.temperature, self.raises = chunk, temperature, raises

    def translate(self, case):
        return Translation("toy(attention_chunk_size=..., floor_scale=...)")

    def run(self, case, translation, data):
        if self.raises:
            raise ValueError("toy: chunked attention is not supported")
        i, t = case.inputs, np.arange(case.inputs.query_len)
        pos = i.position_offset + t
        allowed = t[None, :] <= t[:, None]
        if case.mask.chunk is not None:
            allowed = allowed & self.chunk(pos, t, case.mask.chunk)
        scale = np.ones(len(t))
        if case.attention.temperature is not None:
            tt = case.attention.temperature
            scale = self.temperature(pos, tt.floor_scale, tt.attn_scale)
        out = own_attention(case, data, scale, allowed)
        return Observation(out.astype(np.float32).astype(np.float64))


@pytest.mark.parametrize("plant, word", [
    (chunk_as_written, "block"), (chunk_as_window, "window"),
    (chunk_relative, "block_relative"), (chunk_ignored, "ignored")])
def test_each_chunk_reading_is_named(plant, word):
    cell = chunked.chunk_mask_cell(Toy(chunk=plant))
    assert cell.value == word, cell.evidence


def test_a_chunk_read_as_a_window_is_not_block():
    """The planted defect the axis exists for: C keys back instead of C-aligned blocks."""
    written = chunked.chunk_mask_cell(Toy())
    window = chunked.chunk_mask_cell(Toy(chunk=chunk_as_window))
    assert (written.value, window.value) == ("block", "window")


@pytest.mark.parametrize("plant, word", [
    (llama4, "log_floor"), (off_by_one, "off_by_one"), (relative, "log_floor_relative"),
    (untempered, "ignored")])
def test_each_temperature_reading_is_named(plant, word):
    cell = chunked.attention_temperature_cell(Toy(temperature=plant))
    assert cell.value == word, cell.evidence


def test_the_probe_positions_part_the_temperature_readings():
    """Positions 2..9 at floor_scale 4: Llama 4's multipliers step at p = 3 and 7, the
    off-by-one port's at 4 and 8, the relative one's at index 3 and 7 (p = 5, 9)."""
    pos = chunked.OFFSET + np.arange(chunked.LENGTH)
    f, a = chunked.FLOOR_SCALE, chunked.ATTN_SCALE
    ours = llama4(pos, f, a)
    assert ours[0] == 1.0 and ours[1] == pytest.approx(1 + 0.5 * np.log(2))
    for other in (off_by_one, relative, untempered):
        assert np.abs(other(pos, f, a) - ours).max() > 0.2


def test_other_where_no_reading_fits_and_refused_in_its_words():
    def squared(pos, f, a):
        return llama4(pos, f, a) ** 3
    assert chunked.attention_temperature_cell(Toy(temperature=squared)).value == "other"
    cell = chunked.chunk_mask_cell(Toy(raises=True))
    assert cell.value == "refused" and "chunked attention is not supported" in cell.evidence


def test_only_a_runner_taking_the_feature_is_asked():
    class Plain(Toy):
        features = frozenset({"position_offset"})
    assert way_for(Toy(), "chunk_mask") is not None
    assert way_for(Toy(), "attention_temperature") is not None
    assert way_for(Plain(), "chunk_mask") is None


def test_the_oracle_blocks_are_absolute_and_not_a_window():
    """The oracle's chunk mask at positions 2..9 (what `block` is read against): query 4
    starts a block and sees itself only, where a window of 4 would give it 1..4."""
    from conformance.conventions.probes.probing import probe_case

    case = probe_case("chunk-oracle", **chunked._sections(),
                      mask={"causal": "upper_left", "chunk": 4})
    allowed = case_data(case).inputs.allowed[0]
    assert allowed[2].tolist() == [False, False, True] + [False] * 5  # position 4
    assert allowed[1].tolist() == [True, True] + [False] * 6  # position 3
    assert allowed[7].tolist() == [False] * 6 + [True, True]  # position 9


def test_the_headline_and_the_porting_note_name_both_axes():
    """The headline groups the systems by reading; `diff` between a block system and a
    block_relative one, and a log_floor and an off_by_one one, says what parts them."""
    from conformance.report.findings import ledger_findings
    from conformance.report.porting import differences

    ledger = {"axes": [{"id": "chunk_mask", "title": "Chunked attention"},
                       {"id": "attention_temperature", "title": "Attention temperature"}],
              "systems": [{"id": "a"}, {"id": "b"}],
              "cells": [{"system": "a", "axis": "chunk_mask", "value": "block"},
                        {"system": "b", "axis": "chunk_mask", "value": "block_relative"},
                        {"system": "a", "axis": "attention_temperature", "value": "log_floor"},
                        {"system": "b", "axis": "attention_temperature",
                         "value": "off_by_one"}]}
    found = {f.key: f.text for f in ledger_findings(ledger)}
    assert "block_relative" in found["chunk_mask"] and "off_by_one" in found[
        "attention_temperature"]
    diffs, same = differences(ledger, "a", "b")
    advice = {d.axis: d.advice for d in diffs}
    assert "1.0693 from 8191" in advice["attention_temperature"]  # 1 + 0.1 ln 2
    assert "window of C keys" in advice["chunk_mask"] and same == 0
