"""HuggingFace transformers attention state dicts (PyTorch modules).

Keys are those of the attention module's own state_dict():
- BERT `BertAttention`: `self.query.weight` (out, in), `self.query.bias`, key,
  value, and `output.dense.*` of BertSelfOutput (its `output.LayerNorm.*` is
  not attention: ignored on the way in, not produced on the way out);
- GPT-2 `GPT2Attention`: Conv1D weights stored (in, out): `c_attn.weight`
  (E, 3E) with columns q | k | v, `c_attn.bias` (3E,), `c_proj.weight` (E, E);
- T5 `T5Attention`: `q/k/v/o.weight` (out, in), no biases (and T5 does not
  scale scores by 1/sqrt(d_k): the converter moves weights, not conventions);
- Llama `LlamaAttention`: `q/k/v/o_proj.weight`, optional biases, grouped-query
  (k/v with num_kv_heads heads);
- Marian (BART-style) `MarianAttention`: `q/k/v/out_proj.weight` and `.bias`;
- GPT-J `GPTJAttention`: `q/k/v/out_proj.weight`, no biases;
- GPT-NeoX `GPTNeoXAttention` and BLOOM `BloomAttention`: one fused
  `query_key_value` (3E, E) whose rows are per head [q_h; k_h; v_h], `dense`;
- MPT `MptAttention`: `Wqkv.weight` (3E, E) = [W_q; W_k; W_v], `out_proj`, no biases;
- Qwen3 / OLMo2 attention: the Llama keys plus RMSNorm `q_norm.weight` and
  `k_norm.weight`, (head size,) per head (Qwen3) or (heads * head size,) (OLMo2).
No transformers import: the layouts are plain arrays.
"""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import Any

import numpy as np

from conformance.oracle.canonical import CanonicalWeights
from conformance.convert._core import (
    ConversionError, LinearNames, all_or_no_biases, dims_of, expect, expect_ndim, from_linear,
    kv_heads_or, take, to_linear)

BERT = LinearNames(("self.query.weight", "self.key.weight", "self.value.weight",
                    "output.dense.weight"),
                   ("self.query.bias", "self.key.bias", "self.value.bias", "output.dense.bias"))
BERT_IGNORED = ("output.LayerNorm.weight", "output.LayerNorm.bias")
T5 = LinearNames(("q.weight", "k.weight", "v.weight", "o.weight"))
LLAMA = LinearNames(tuple(f"{p}_proj.weight" for p in "qkvo"),  # type: ignore[arg-type]
                    tuple(f"{p}_proj.bias" for p in "qkvo"))  # type: ignore[arg-type]
MARIAN = LinearNames(("q_proj.weight", "k_proj.weight", "v_proj.weight", "out_proj.weight"),
                     ("q_proj.bias", "k_proj.bias", "v_proj.bias", "out_proj.bias"))
GPT2 = "GPT2Attention"
_GPT2_LINEAR = LinearNames(("q", "k", "v", "c_proj.weight"), ("bq", "bk", "bv", "c_proj.bias"))


def linear_pair(names: LinearNames, what: str, doc: str, grouped: bool = False,
                ignored: tuple[str, ...] = ()):
    """(to, from) for an attention module of four nn.Linear projections `names`: to(weights)
    -> its state dict (`doc`), from(state, num_heads, num_kv_heads=None) -> canonical
    (`ignored`: keys of the module that are not attention).  Grouped-query heads only
    with `grouped`."""
    def to(weights: CanonicalWeights) -> dict[str, np.ndarray]:
        d = dims_of(weights)
        kv_heads_or(d.heads, d.kv_heads, what, grouped)
        return to_linear(weights, names, what)

    def from_(state: Mapping[str, Any], num_heads: int,
              num_kv_heads: int | None = None) -> CanonicalWeights:
        kv = kv_heads_or(num_heads, num_kv_heads, what, grouped)
        return from_linear(state, names, num_heads, kv, what, ignored)

    to.__doc__, from_.__doc__ = f"Canonical -> {doc}.", f"{what} state dict -> canonical."
    return to, from_


to_bert, from_bert = linear_pair(BERT, "BertAttention", "BertAttention keys (self.query.*, ..., "
                                 "output.dense.*)", ignored=BERT_IGNORED)
to_t5, from_t5 = linear_pair(T5, "T5Attention", "T5Attention q/k/v/o.weight; a weight set with "
                             "biases is refused")
to_llama, from_llama = linear_pair(LLAMA, "LlamaAttention", "LlamaAttention q/k/v/o_proj "
                                   "(biases where the weights have them)", grouped=True)
to_marian, from_marian = linear_pair(MARIAN, "MarianAttention", "MarianAttention (BART-style) "
                                     "q/k/v/out_proj weights and biases")


def to_gpt2(weights: CanonicalWeights) -> dict[str, np.ndarray]:
    """Canonical -> GPT2Attention Conv1D weights, (in, out): c_attn (E, 3E) = q|k|v."""
    _square(weights, GPT2)  # below, with the GPT-NeoX converters that share it
    bias = all_or_no_biases(weights, ("bq", "bk", "bv"), GPT2)
    lin = to_linear(weights, _GPT2_LINEAR, GPT2)
    out = {"c_attn.weight": np.ascontiguousarray(np.concatenate([lin[n] for n in "qkv"]).T)}
    if bias:
        out["c_attn.bias"] = np.concatenate([lin[n] for n in ("bq", "bk", "bv")])
    out["c_proj.weight"] = np.ascontiguousarray(lin["c_proj.weight"].T)
    if "c_proj.bias" in lin:
        out["c_proj.bias"] = lin["c_proj.bias"]
    return out


def from_gpt2(state: Mapping[str, Any], num_heads: int,
              num_kv_heads: int | None = None) -> CanonicalWeights:
    """GPT2Attention state dict -> canonical."""
    kv_heads_or(num_heads, num_kv_heads, GPT2)
    arrs = take(state, ("c_attn.weight", "c_proj.weight"), ("c_attn.bias", "c_proj.bias"),
                what=GPT2)
    attn = arrs["c_attn.weight"]
    expect_ndim("c_attn.weight", attn, 2, "(in, 3 * out)")
    e = attn.shape[0]
    expect("c_attn.weight", attn, (e, 3 * e))
    expect("c_proj.weight", arrs["c_proj.weight"], (e, e))
    if e % num_heads:
        raise ConversionError(f"c_attn.weight: embed_dim {e} does not split into "
                              f"num_heads={num_heads} heads")
    lin = dict(zip("qkv", np.split(attn.T, 3)))
    lin["c_proj.weight"] = arrs["c_proj.weight"].T
    if "c_attn.bias" in arrs:
        expect("c_attn.bias", arrs["c_attn.bias"], (3 * e,))
        lin.update(zip(("bq", "bk", "bv"), np.split(arrs["c_attn.bias"], 3)))
    if "c_proj.bias" in arrs:
        lin["c_proj.bias"] = arrs["c_proj.bias"]
    return from_linear(lin, _GPT2_LINEAR, num_heads, num_heads, GPT2)


# -- decoders: GPT-J, GPT-NeoX / BLOOM (fused QKV), MPT, Qwen3 / OLMo2 (QK-norm) ---------
GPTJ = LinearNames(("q_proj.weight", "k_proj.weight", "v_proj.weight", "out_proj.weight"))
to_gptj, from_gptj = linear_pair(GPTJ, "GPTJAttention", "GPTJAttention q/k/v/out_proj.weight "
                                 "(no biases: a weight set with biases is refused)")
NEOX = "GPTNeoXAttention / BloomAttention"
_FUSED = LinearNames(("q", "k", "v", "dense.weight"), ("bq", "bk", "bv", "dense.bias"))


def _square(weights: CanonicalWeights, what: str):
    """The dims of a module with one width E = num_heads * head size for everything."""
    d = dims_of(weights)
    kv_heads_or(d.heads, d.kv_heads, what)
    if not (d.e_k == d.e_v == d.e_o == d.e_q == d.heads * d.d_k == d.heads * d.d_v):
        raise ConversionError(
            f"{what} has one width E = num_heads * head size for input, q, k, v and output; "
            f"the weights have widths q {d.e_q}, k {d.e_k}, v {d.e_v}, out {d.e_o}, "
            f"num_heads={d.heads}, d_k={d.d_k}, d_v={d.d_v}")
    return d


def to_gpt_neox(weights: CanonicalWeights) -> dict[str, np.ndarray]:
    """Canonical -> GPTNeoXAttention (and BloomAttention) keys: `query_key_value` (3E, E) is
    per head [q_h; k_h; v_h] (the module views its output as (B, T, H, 3 d) and chunks the
    last axis), `dense` (E, E)."""
    d = _square(weights, NEOX)
    bias = all_or_no_biases(weights, ("bq", "bk", "bv"), NEOX)
    lin = to_linear(weights, _FUSED, NEOX)

    def per_head(parts):  # three (H*d, ...) -> (H*3*d, ...), head h = [q_h; k_h; v_h]
        return np.ascontiguousarray(np.stack([p.reshape(d.heads, d.d_k, *p.shape[1:])
                                              for p in parts], 1).reshape(-1, *parts[0].shape[1:]))
    out = {"query_key_value.weight": per_head([lin[n] for n in "qkv"])}
    if bias:
        out["query_key_value.bias"] = per_head([lin[n] for n in ("bq", "bk", "bv")])
    out["dense.weight"] = lin["dense.weight"]
    if "dense.bias" in lin:
        out["dense.bias"] = lin["dense.bias"]
    return out


def from_gpt_neox(state: Mapping[str, Any], num_heads: int,
                  num_kv_heads: int | None = None) -> CanonicalWeights:
    """GPTNeoXAttention / BloomAttention state dict -> canonical."""
    kv_heads_or(num_heads, num_kv_heads, NEOX)
    arrs = take(state, ("query_key_value.weight", "dense.weight"),
                ("query_key_value.bias", "dense.bias"), what=NEOX)
    qkv = arrs["query_key_value.weight"]
    expect_ndim("query_key_value.weight", qkv, 2, "(3 * out, in)")
    e = qkv.shape[1]
    expect("query_key_value.weight", qkv, (3 * e, e))
    expect("dense.weight", arrs["dense.weight"], (e, e))
    if e % num_heads:
        raise ConversionError(f"query_key_value.weight: hidden size {e} does not split into "
                              f"num_heads={num_heads} heads")

    def split(m):  # (H*3*d, ...) -> q, k, v each (H*d, ...)
        parts = m.reshape(num_heads, 3, e // num_heads, *m.shape[1:])
        return [np.ascontiguousarray(parts[:, i].reshape(e, *m.shape[1:])) for i in range(3)]
    lin = dict(zip("qkv", split(qkv)))
    lin["dense.weight"] = arrs["dense.weight"]
    if "query_key_value.bias" in arrs:
        expect("query_key_value.bias", arrs["query_key_value.bias"], (3 * e,))
        lin.update(zip(("bq", "bk", "bv"), split(arrs["query_key_value.bias"])))
    if "dense.bias" in arrs:
        lin["dense.bias"] = arrs["dense.bias"]
    return from_linear(lin, _FUSED, num_heads, num_heads, NEOX)


MPT = "MptAttention"
_MPT = LinearNames(("q", "k", "v", "out_proj.weight"))


def to_mpt(weights: CanonicalWeights) -> dict[str, np.ndarray]:
    """Canonical -> MptAttention: `Wqkv.weight` (3E, E) = [W_q; W_k; W_v] (the module
    chunks its output in three), `out_proj.weight`; no biases (Wqkv and out_proj are built
    with bias=False)."""
    _square(weights, MPT)
    lin = to_linear(weights, _MPT, MPT)
    return {"Wqkv.weight": np.ascontiguousarray(np.concatenate([lin[n] for n in "qkv"])),
            "out_proj.weight": lin["out_proj.weight"]}


def from_mpt(state: Mapping[str, Any], num_heads: int,
             num_kv_heads: int | None = None) -> CanonicalWeights:
    """MptAttention state dict -> canonical."""
    kv_heads_or(num_heads, num_kv_heads, MPT)
    arrs = take(state, ("Wqkv.weight", "out_proj.weight"), what=MPT)
    qkv = arrs["Wqkv.weight"]
    expect_ndim("Wqkv.weight", qkv, 2, "(3 * out, in)")
    expect("Wqkv.weight", qkv, (3 * qkv.shape[1], qkv.shape[1]))
    lin = dict(zip("qkv", np.split(qkv, 3)))
    lin["out_proj.weight"] = arrs["out_proj.weight"]
    return from_linear(lin, _MPT, num_heads, num_heads, MPT)


QK_NORM = "Qwen3Attention / Olmo2Attention"


def to_qk_norm(weights: CanonicalWeights) -> dict[str, np.ndarray]:
    """Canonical -> Qwen3Attention (q_norm (d,) per head) or Olmo2Attention (q_norm
    (H*d,) over the projection): the Llama keys plus `q_norm.weight`, `k_norm.weight`."""
    if weights.q_norm is None or weights.k_norm is None:
        raise ConversionError(f"{QK_NORM}: the weights hold no q_norm / k_norm scale "
                              "(a case without attention.qk_norm)")
    if weights.q_norm_bias is not None:
        raise ConversionError(f"{QK_NORM}: RMSNorm has no bias; the weights hold a LayerNorm "
                              "bias (qk_norm.kind: layer)")
    return {**to_llama(weights), "q_norm.weight": np.ascontiguousarray(weights.q_norm.ravel()),
            "k_norm.weight": np.ascontiguousarray(weights.k_norm.ravel())}


def from_qk_norm(state: Mapping[str, Any], num_heads: int,
                 num_kv_heads: int | None = None) -> CanonicalWeights:
    """Qwen3 / Olmo2 attention state dict -> canonical; the scope is read from the
    norm's length (head size: per head; heads * head size: the whole projection)."""
    rest = {k: v for k, v in state.items() if k not in ("q_norm.weight", "k_norm.weight")}
    w = from_llama(rest, num_heads, num_kv_heads)
    arrs = take(state, ("q_norm.weight", "k_norm.weight"), ignored=tuple(rest), what=QK_NORM)
    d, kv = w.wq.shape[2], w.wk.shape[0]
    qn, kn = arrs["q_norm.weight"], arrs["k_norm.weight"]
    if qn.shape == (d,):
        expect("k_norm.weight", kn, (d,))
    else:
        expect("q_norm.weight", qn, (num_heads * d,))
        expect("k_norm.weight", kn, (kv * d,))
        qn, kn = qn.reshape(num_heads, d), kn.reshape(kv, d)
    return replace(w, q_norm=qn, k_norm=kn)
