"""GGUF's Q/K permutation (convert/gguf_rope.py, llama.cpp's LlamaModel.permute): the HF
state round-trips bit for bit; llama.cpp's reshape is convert/rope.py's half-split ->
interleaved map written another way; and on the canonical grouped-query case
(cases/gqa_8q_2kv_rope.yaml, float64) half-split attention with the HF weights equals
interleaved attention with the GGUF weights, while the planted wrong permutations (K with
the query head count, llama.cpp#2376; the inverse direction; none) do not."""
from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from conformance.case.loader import load_file
from conformance.convert._core import ConversionError
from conformance.convert.gguf_rope import (
    GGUF_NAMES, from_gguf, llama_cpp_permute, llama_cpp_unpermute, to_gguf)
from conformance.convert.hf import from_llama, to_llama
from conformance.convert.rope import half_split_to_interleaved
from conformance.oracle.canonical import case_data
from conformance.oracle.reference import attention
from conformance.paths import CASES_DIR

AGREE, DIFFER = 1e-12, 1e-3  # float64 reorderings; a wrong permutation moves O(0.1)


def _canonical():
    """The shipped grouped-query rope case (8 query heads, 2 kv heads of 16, base 5e5) with
    biases (so b_q and b_k move too), and its canonical data."""
    case = next(c for c in load_file(CASES_DIR / "gqa_8q_2kv_rope.yaml")
                if c.id == "gqa-8q-2kv-rope")
    case = replace(case, attention=replace(case.attention, bias=True))
    return case, case_data(case)


def _gguf_as_interleaved(case, data, move_k=None, move=None):
    """The canonical data with W_q, W_k (and biases) as GGUF holds them, read back through
    the Llama names unpermuted: what a runtime rotating adjacent pairs computes with."""
    a = case.attention
    tensors = to_gguf(to_llama(data.weights), a.num_heads, a.num_kv_heads)
    hf_name = {g: p for p, g in GGUF_NAMES.items()}  # blk.0.<gguf>.<kind>, renamed only
    state = {f"{hf_name[k.split('.')[2]]}.{k.split('.')[3]}": v for k, v in tensors.items()}
    plain = to_llama(data.weights)
    for name in ("k_proj.weight", "k_proj.bias") if move_k else ():
        state[name] = move_k(plain[name])
    for name in ("q_proj.weight", "q_proj.bias", "k_proj.weight", "k_proj.bias") if move else ():
        state[name] = move(plain[name], name)
    return replace(data, weights=from_llama(state, a.num_heads, a.num_kv_heads))


def test_the_hf_state_round_trips_bit_for_bit_and_renames_as_gguf():
    case, data = _canonical()
    a, state = case.attention, to_llama(data.weights)
    tensors = to_gguf(state, a.num_heads, a.num_kv_heads, block=3)
    assert sorted(tensors) == sorted(f"blk.3.attn_{p}.{k}" for p in ("q", "k", "v", "output")
                                     for k in ("weight", "bias"))
    assert not np.array_equal(tensors["blk.3.attn_q.weight"], state["q_proj.weight"])
    assert np.array_equal(tensors["blk.3.attn_v.weight"], state["v_proj.weight"])
    back = from_gguf(tensors, a.num_heads, a.num_kv_heads, block=3)
    assert sorted(back) == sorted(state)
    assert all(np.array_equal(back[k], state[k]) for k in state)


def test_llama_cpp_reshape_is_the_half_split_to_interleaved_row_map():
    rows = np.random.default_rng(0).standard_normal((2 * 16, 5))
    assert np.array_equal(llama_cpp_permute(rows, 8, 2), half_split_to_interleaved(rows, 2))
    assert np.array_equal(llama_cpp_permute(rows, 2), half_split_to_interleaved(rows, 2))
    assert np.array_equal(llama_cpp_unpermute(llama_cpp_permute(rows, 8, 2), 8, 2), rows)
    # within a head of 16, GGUF row 2i + a is HF row 8a + i
    head = np.arange(16)
    assert list(llama_cpp_permute(head, 1)[:4]) == [0, 8, 1, 9]
    with pytest.raises(ConversionError, match="even"):
        llama_cpp_permute(np.zeros((6, 2)), 2)


def test_half_split_with_hf_weights_is_interleaved_with_gguf_weights_and_planted_ports_fail():
    case, data = _canonical()
    a = case.attention
    interleaved = replace(case, attention=replace(a, rope=replace(a.rope, style="interleaved")))
    want = attention(case, data).output
    got = attention(interleaved, _gguf_as_interleaved(case, data)).output
    assert np.abs(got - want).max() < AGREE

    planted = {  # K reshaped with the query head count: the converter bug of llama.cpp#2376
        "k_with_query_heads": _gguf_as_interleaved(case, data, move_k=lambda w: llama_cpp_permute(
            w, a.num_heads, a.num_heads)),
        "inverse_direction": _gguf_as_interleaved(case, data, move=lambda w, n: (
            llama_cpp_unpermute(w, a.num_heads, a.num_kv_heads if n.startswith("k") else None))),
        "not_permuted": _gguf_as_interleaved(case, data, move=lambda w, n: w),
    }
    for name, wrong in planted.items():
        off = np.abs(attention(interleaved, wrong).output - want).max()
        assert off > DIFFER, (name, off)
