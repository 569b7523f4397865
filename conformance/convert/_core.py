"""Shared pieces of the converters: the error, array intake, checks, head reshapes.

Two families of layout cover every format:
- "linear": four (out, in) matrices, head h owning the contiguous row block
  h*d:(h+1)*d of q/k/v and column block of o, biases flat (out,) (PyTorch,
  BERT, T5, Llama, Marian, MATLAB with (out, 1) bias columns);
- "einsum": per-head kernels (E_in, H, d) and (H, d_v, E_o), biases (H, d)
  (Keras EinsumDense, Flax DenseGeneral).
Every reshape here is a transpose or a reshape, never arithmetic, so round
trips are bit-identical and the dtype is kept.
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from conformance.oracle.canonical import CanonicalWeights


class ConversionError(ValueError):
    """A state or weight set that does not fit a layout; the message names the
    tensor (or key), what was expected and what was found."""


def as_numpy(x: Any) -> np.ndarray:
    """A torch tensor, Keras variable, JAX/TensorFlow array or NumPy array as a
    fresh NumPy array of the same dtype (torch bfloat16, which NumPy lacks,
    becomes float32: exact)."""
    if hasattr(x, "detach"):  # torch: no grad, on the CPU, never sharing memory
        x = x.detach().cpu()
        if str(x.dtype) == "torch.bfloat16":
            x = x.float()
        return x.numpy().copy()
    return np.array(x)  # Keras variables and JAX/TF arrays implement __array__


@dataclass(frozen=True)
class Dims:
    heads: int
    kv_heads: int
    d_k: int
    d_v: int
    e_q: int
    e_k: int
    e_v: int
    e_o: int


def expect(name: str, arr: np.ndarray, shape: tuple[int, ...]) -> None:
    if tuple(arr.shape) != tuple(shape):
        raise ConversionError(f"{name}: expected shape {tuple(shape)}, found {tuple(arr.shape)}")


def expect_ndim(name: str, arr: np.ndarray, ndim: int, layout: str) -> None:
    if arr.ndim != ndim:
        raise ConversionError(f"{name}: expected a {ndim}-D array {layout}, "
                              f"found shape {tuple(arr.shape)}")


def dims_of(w: CanonicalWeights) -> Dims:
    """The sizes of a canonical weight set, every array checked against them."""
    for n in ("wq", "wk", "wv", "wo"):
        expect_ndim(n, np.asarray(getattr(w, n)), 3, "(heads, in, d) or (heads, d_v, out)")
    (h, e_q, d_k), (hkv, e_k, _), (_, e_v, d_v) = w.wq.shape, w.wk.shape, w.wv.shape
    d = Dims(h, hkv, d_k, d_v, e_q, e_k, e_v, w.wo.shape[2])
    if hkv < 1 or h % hkv:
        raise ConversionError(f"wk: {hkv} key/value heads do not divide {h} query heads "
                              f"(wq {tuple(w.wq.shape)}, wk {tuple(w.wk.shape)})")
    shapes = {"wk": (hkv, e_k, d_k), "wv": (hkv, e_v, d_v), "wo": (h, d_v, d.e_o),
              "bq": (h, d_k), "bk": (hkv, d_k), "bv": (hkv, d_v), "bo": (d.e_o,)}
    for n, shape in shapes.items():
        if getattr(w, n) is not None:
            expect(n, np.asarray(getattr(w, n)), shape)
    return d


def take(state: Mapping[str, Any], required: Sequence[str], optional: Sequence[str] = (),
         ignored: Sequence[str] = (), what: str = "state") -> dict[str, np.ndarray]:
    """The arrays of `state` by key, as NumPy; a missing required key or an
    unknown key is a ConversionError that lists the keys the layout has."""
    listing = ", ".join([repr(k) for k in required] + [f"{k!r} (optional)" for k in optional])
    for k in required:
        if k not in state:
            raise ConversionError(f"{what}: missing key {k!r}; expected keys: {listing}")
    for k in state:
        if k not in required and k not in optional and k not in ignored:
            raise ConversionError(f"{what}: unexpected key {k!r}; expected keys: {listing}")
    return {k: as_numpy(state[k]) for k in (*required, *optional) if k in state}


def kv_heads_or(num_heads: int, num_kv_heads: int | None, what: str,
                grouped: bool = False) -> int:
    """num_kv_heads defaulted to num_heads; formats without grouped-query
    attention accept only that."""
    kv = num_heads if num_kv_heads is None else num_kv_heads
    if num_heads < 1 or kv < 1 or num_heads % kv:
        raise ConversionError(f"{what}: num_kv_heads={kv} must divide num_heads={num_heads}")
    if kv != num_heads and not grouped:
        raise ConversionError(f"{what} has one key/value head per query head: "
                              f"num_kv_heads={kv} != num_heads={num_heads}")
    return kv


def all_or_no_biases(w: CanonicalWeights, names: Sequence[str], what: str) -> bool:
    """True when the biases `names` are all present, False when all absent."""
    present = [n for n in names if getattr(w, n) is not None]
    if present and len(present) != len(names):
        raise ConversionError(f"{what} holds the biases {', '.join(names)} all or none; "
                              f"the weights have only {', '.join(present)}")
    return bool(present)


# -- the linear family: (out, in) matrices ------------------------------------------

def heads_to_rows(w: np.ndarray) -> np.ndarray:
    """(H, E_in, d) -> (H*d, E_in): head h owns rows h*d:(h+1)*d."""
    return np.ascontiguousarray(w.transpose(0, 2, 1).reshape(-1, w.shape[1]))


def out_to_rows(wo: np.ndarray) -> np.ndarray:
    """(H, d_v, E_o) -> (E_o, H*d_v)."""
    return np.ascontiguousarray(wo.reshape(-1, wo.shape[2]).T)


@dataclass(frozen=True)
class LinearNames:
    """Keys of a linear layout: weights and biases of q, k, v, o (None: no bias)."""
    weights: tuple[str, str, str, str]
    biases: tuple[str | None, str | None, str | None, str | None] = (None, None, None, None)
    column_bias: bool = False  # MATLAB: biases are (n, 1)


def to_linear(w: CanonicalWeights, names: LinearNames, what: str) -> dict[str, np.ndarray]:
    dims_of(w)
    mats = (heads_to_rows(w.wq), heads_to_rows(w.wk), heads_to_rows(w.wv), out_to_rows(w.wo))
    out = dict(zip(names.weights, mats))
    for key, canon in zip(names.biases, ("bq", "bk", "bv", "bo")):
        b = getattr(w, canon)
        if b is None:
            continue
        if key is None:
            raise ConversionError(f"{what} has no {canon} bias; the weights hold one")
        out[key] = np.ascontiguousarray(b.reshape(-1, 1) if names.column_bias else b.ravel())
    return out


def from_linear(state: Mapping[str, Any], names: LinearNames, num_heads: int,
                num_kv_heads: int, what: str, ignored: Sequence[str] = ()) -> CanonicalWeights:
    """(out, in) matrices -> canonical, sizes read from q, v and o and every
    tensor checked against them."""
    optional = [b for b in names.biases if b is not None]
    arrs = take(state, names.weights, optional, ignored, what)
    q, k, v, o = (arrs[n] for n in names.weights)
    for n, a in zip(names.weights, (q, k, v, o)):
        expect_ndim(n, a, 2, "(out, in)")
    h, hkv = num_heads, num_kv_heads
    for n, a, heads in ((names.weights[0], q, h), (names.weights[2], v, hkv)):
        if a.shape[0] % heads:
            raise ConversionError(f"{n}: expected shape ({heads} heads * head size, in), "
                                  f"found {tuple(a.shape)}: {a.shape[0]} rows do not split "
                                  f"into {heads} heads")
    d_k, d_v = q.shape[0] // h, v.shape[0] // hkv
    col = (1,) if names.column_bias else ()
    shapes = (((hkv * d_k, k.shape[1]), (o.shape[0], h * d_v)),
              ((h * d_k, *col), (hkv * d_k, *col), (hkv * d_v, *col), (o.shape[0], *col)))
    expect(names.weights[1], k, shapes[0][0])
    expect(names.weights[3], o, shapes[0][1])
    for n, shape in zip(names.biases, shapes[1]):
        if n in arrs:
            expect(n, arrs[n], shape)

    def split(m, heads):  # (H*d, E_in) -> (H, E_in, d)
        return np.ascontiguousarray(m.reshape(heads, -1, m.shape[1]).transpose(0, 2, 1))

    def bias(n, heads):
        return None if n not in arrs else arrs[n].reshape((heads, -1) if heads else (-1,))

    wo = np.ascontiguousarray(o.T.reshape(h, d_v, o.shape[0]))
    bq, bk, bv, bo = (bias(n, hh) for n, hh in zip(names.biases, (h, hkv, hkv, 0)))
    return CanonicalWeights(split(q, h), split(k, hkv), split(v, hkv), wo, bq, bk, bv, bo)


# -- the einsum family: per-head kernels ---------------------------------------------

def to_einsum(w: CanonicalWeights, prefixes: tuple[str, str, str, str],
              what: str, grouped: bool = False) -> dict[str, np.ndarray]:
    """Canonical -> {'<p>/kernel', '<p>/bias'}: q/k/v kernels (E_in, H, d) (k, v with the
    key/value heads: `grouped` accepts fewer than the query heads)."""
    d = dims_of(w)
    kv_heads_or(d.heads, d.kv_heads, what, grouped)
    out: dict[str, np.ndarray] = {}
    for p, wk, bk in zip(prefixes, ("wq", "wk", "wv", "wo"), ("bq", "bk", "bv", "bo")):
        kernel = getattr(w, wk)
        out[f"{p}/kernel"] = np.ascontiguousarray(kernel if wk == "wo"
                                                  else kernel.transpose(1, 0, 2))
        if getattr(w, bk) is not None:
            out[f"{p}/bias"] = np.ascontiguousarray(getattr(w, bk))
    return out


def from_einsum(state: Mapping[str, Any], prefixes: tuple[str, str, str, str],
                num_heads: int | None, what: str) -> CanonicalWeights:
    kernels = [f"{p}/kernel" for p in prefixes]
    biases = [f"{p}/bias" for p in prefixes]
    arrs = take(state, kernels, biases, what=what)
    for n in kernels:
        expect_ndim(n, arrs[n], 3, "(heads, d_v, out)" if n == kernels[3] else "(in, heads, d)")
    q, k, v, o = (arrs[n] for n in kernels)
    h, d_k = q.shape[1], q.shape[2]
    if num_heads is not None and h != num_heads:
        raise ConversionError(f"{kernels[0]}: expected shape ({q.shape[0]}, {num_heads}, "
                              f"{q.shape[2]}) for num_heads={num_heads}, found {q.shape}")
    d_v, e_o = v.shape[2], o.shape[2]
    expect(kernels[1], k, (k.shape[0], h, d_k))
    expect(kernels[2], v, (v.shape[0], h, d_v))
    expect(kernels[3], o, (h, d_v, e_o))
    for n, shape in zip(biases, ((h, d_k), (h, d_k), (h, d_v), (e_o,))):
        if n in arrs:
            expect(n, arrs[n], shape)

    def heads_first(m):
        return np.ascontiguousarray(m.transpose(1, 0, 2))

    return CanonicalWeights(heads_first(q), heads_first(k), heads_first(v), o,
                            *(arrs.get(n) for n in biases))
