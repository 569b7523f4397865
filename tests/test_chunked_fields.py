"""mask.chunk and attention.temperature as the loader reads them (case/chunked.py): Llama 4's
defaults, the errors that name the field and the fix, the features and cache keys, and the
oracle's closed forms (oracle/chunked.py) at Llama 4's published floor_scale."""
from __future__ import annotations

import math

import numpy as np
import pytest

from conformance.case.loader import CaseError, parse_case
from conformance.oracle.chunked import chunk_allowed, temperature


def make(mask=None, attention=None, inputs=None):
    raw = {"id": "llama4", "attention": {"num_heads": 2, "query_features": 8, **(attention or {})},
           "inputs": {"batch": 1, "query_len": 4, "self_attention": True, **(inputs or {})},
           "mask": {"causal": "upper_left", **(mask or {})}}
    return parse_case(raw, "<test>")


def refused(**sections) -> str:
    with pytest.raises(CaseError) as err:
        make(**sections)
    return str(err.value)


def test_fields_read_with_llama4_defaults_and_name_their_feature():
    t = make(attention={"temperature": {}}).attention.temperature
    assert (t.floor_scale, t.attn_scale) == (8192, 0.1)  # Llama4TextConfig
    c = make(mask={"chunk": 3})
    assert c.mask.chunk == 3 and "chunk" in c.features and "temperature" not in c.features
    assert "temperature" in make(attention={"temperature": {"floor_scale": 4}}).features


def test_the_cache_key_holds_each_field():
    plain, chunk = make(), make(mask={"chunk": 3})
    assert len({plain.fingerprint(), chunk.fingerprint(), make(mask={"chunk": 2}).fingerprint(),
                make(attention={"temperature": {}}).fingerprint()}) == 4


@pytest.mark.parametrize("sections, field, words", [
    ({"mask": {"chunk": 0}}, "mask.chunk", "must lie in 1"),
    ({"mask": {"chunk": 2, "causal": "none"}}, "mask.chunk", "mask.causal: upper_left"),
    ({"mask": {"chunk": 2, "window": {"left": 1}}}, "mask.chunk", "not both"),
    ({"mask": {"chunk": 2}, "inputs": {"self_attention": False, "key_len": 4}}, "mask.chunk",
     "self_attention: true"),
    ({"attention": {"temperature": {"floor_scale": 0}}}, "attention.temperature.floor_scale",
     "must lie in 1"),
    ({"attention": {"temperature": {"attn_scale": -1}}}, "attention.temperature.attn_scale",
     "finite number"),
    ({"attention": {"temperature": {"scale": 1}}}, "attention.temperature.scale", "unknown"),
    ({"attention": {"temperature": 8192}}, "attention.temperature", "floor_scale: 8192"),
])
def test_errors_name_the_field_and_the_fix(sections, field, words):
    text = refused(**sections)
    assert f"field '{field}'" in text and words in text, text


def test_temperature_is_one_below_floor_scale_minus_one():
    """Llama 4 Scout's floor_scale 8192, attn_scale 0.1: 1 up to position 8190, 1 + 0.1 ln 2
    from 8191 (floor((p + 1) / 8192) = 1), 1 + 0.1 ln 3 from 16383."""
    got = temperature(np.array([0, 8190, 8191, 16382, 16383]), 8192, 0.1)
    want = [1.0, 1.0, 1 + 0.1 * math.log(2), 1 + 0.1 * math.log(2), 1 + 0.1 * math.log(3)]
    assert got.tolist() == pytest.approx(want, abs=1e-15)
    # the port that drops the + 1 is still at 1 at 8191 (planted: it must differ there)
    assert np.log1p(np.floor(8191 / 8192)) * 0.1 + 1 != got[2]


def test_chunk_blocks_are_absolute_positions():
    pos = np.arange(8190, 8196)
    allowed = chunk_allowed(pos, pos, 8192)
    assert allowed[:2, :2].all() and allowed[2:, 2:].all()
    assert not allowed[2:, :2].any() and not allowed[:2, 2:].any()
    # counted from the first query instead, all six would share one block
    assert chunk_allowed(pos - 8190, pos - 8190, 8192).all()
