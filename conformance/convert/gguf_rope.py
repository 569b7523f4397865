"""GGUF's Q/K rows: llama.cpp's converter reorders HF's half-split rotary rows into the
interleaved pairing its LLAMA rope type rotates, and back.

llama.cpp's `convert_hf_to_gguf.py` (ggml-org/llama.cpp, `LlamaModel.permute`, called from
`LlamaModel.modify_tensors` on `q_proj.weight` / `q_proj.bias` with (n_head, n_head) and on
`k_proj.weight` / `k_proj.bias` with (n_head, n_kv_head)) writes:

    if n_head_kv is not None and n_head != n_head_kv:
        n_head = n_head_kv
    return (weights.reshape(n_head, 2, weights.shape[0] // n_head // 2, *weights.shape[1:])
            .swapaxes(1, 2).reshape(weights.shape))

so within a head, GGUF row 2i + a is HF row a * d/2 + i: the pairs (i, i + d/2) that HF's
`rotate_half` turns become the adjacent pairs (2i, 2i + 1) that ggml's rope mode 0 turns
(the inverse of HF's own Meta -> HF `permute`, convert/rope.py: this is its
half_split_to_interleaved at full width, written here as llama.cpp writes it).  The key rows
are reshaped with the kv head count: the earlier converter that used the query count
(ggml-org/llama.cpp#2376) mixed rows across kv heads.  The whole head moves: the LLAMA type
rotates every dim (a partial-rotary model is converted with the NEOX type instead, unpermuted).

`to_gguf` takes an HF Llama attention state dict (convert/hf.py to_llama: q_proj, k_proj,
v_proj, o_proj, (out, in)) and gives GGUF's tensor names for block `block` (`blk.N.attn_q`,
`attn_k`, `attn_v`, `attn_output`, each `.weight` and `.bias`), numpy's (out, in) shape
(ggml lists the dims reversed); `from_gguf` undoes it.  Pure NumPy.
"""
from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from conformance.convert._core import ConversionError, as_numpy

# HF Llama's projection -> GGUF's tensor (llama.cpp gguf-py/gguf/tensor_mapping.py)
GGUF_NAMES = {"q_proj": "attn_q", "k_proj": "attn_k", "v_proj": "attn_v",
              "o_proj": "attn_output"}
PERMUTED = ("q_proj", "k_proj")  # the rows llama.cpp's converter reorders


def _heads(w: np.ndarray, n_head: int, n_head_kv: int | None) -> tuple[int, int]:
    """(the head count llama.cpp reshapes with, the head size): n_head_kv where it is given
    and differs (LlamaModel.permute's first two lines)."""
    if n_head_kv is not None and n_head != n_head_kv:
        n_head = n_head_kv
    if w.shape[0] % n_head or (w.shape[0] // n_head) % 2:
        raise ConversionError(f"{w.shape[0]} rows do not split into {n_head} heads of an even "
                              "size (llama.cpp reshapes each head into 2 halves)")
    return n_head, w.shape[0] // n_head


def llama_cpp_permute(w: np.ndarray, n_head: int, n_head_kv: int | None = None) -> np.ndarray:
    """HF (half-split) rows -> GGUF (interleaved) rows, as llama.cpp's LlamaModel.permute."""
    w = np.asarray(w)
    heads, d = _heads(w, n_head, n_head_kv)
    return w.reshape(heads, 2, d // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def llama_cpp_unpermute(w: np.ndarray, n_head: int,
                        n_head_kv: int | None = None) -> np.ndarray:
    """GGUF (interleaved) rows -> HF (half-split) rows: the inverse reshape."""
    w = np.asarray(w)
    heads, d = _heads(w, n_head, n_head_kv)
    return w.reshape(heads, d // 2, 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def _convert(state: Mapping[str, Any], num_heads: int, num_kv_heads: int | None,
             move, names: Mapping[str, str], permuted: tuple[str, ...]) -> dict[str, np.ndarray]:
    """Every `<proj>.<weight|bias>` of `state` renamed by `names`, the `permuted` ones'
    rows moved by `move` (the key's with the kv head count)."""
    out = {}
    for key, value in state.items():
        proj, _, kind = key.rpartition(".")
        if proj not in names or kind not in ("weight", "bias"):
            raise ConversionError(f"{key}: not an attention projection ({sorted(names)})")
        arr = as_numpy(value)
        if proj in permuted:
            kv = num_kv_heads if proj == permuted[1] else num_heads
            arr = move(arr, num_heads, kv)
        out[f"{names[proj]}.{kind}"] = arr
    return out


def to_gguf(state: Mapping[str, Any], num_heads: int, num_kv_heads: int | None = None,
            block: int = 0) -> dict[str, np.ndarray]:
    """HF Llama attention state dict -> GGUF tensors of block `block`, Q and K rows
    interleaved (llama.cpp's LlamaModel.modify_tensors)."""
    names = {p: f"blk.{block}.{g}" for p, g in GGUF_NAMES.items()}
    return _convert(state, num_heads, num_kv_heads or num_heads, llama_cpp_permute, names,
                    PERMUTED)


def from_gguf(tensors: Mapping[str, Any], num_heads: int, num_kv_heads: int | None = None,
              block: int = 0) -> dict[str, np.ndarray]:
    """GGUF tensors of block `block` -> the HF Llama attention state dict, Q and K rows back
    to half-split."""
    names = {f"blk.{block}.{g}": p for p, g in GGUF_NAMES.items()}
    permuted = tuple(f"blk.{block}.{GGUF_NAMES[p]}" for p in PERMUTED)
    return _convert(tensors, num_heads, num_kv_heads or num_heads, llama_cpp_unpermute, names,
                    permuted)
