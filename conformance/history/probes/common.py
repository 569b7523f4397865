"""NumPy helpers shared by the probe scripts: inputs, a reference and the classifiers.

Standalone (runs in an env with only NumPy and the library probed).  Every classifier
returns a word of conformance/contract/axes.py's vocabulary for that axis.
"""
from __future__ import annotations

import numpy as np
from outcomes import ABSENT, Absent  # noqa: F401 - re-exported for the probe modules


def inputs(batch=1, t=3, s=4, width=8, seed=0):
    """Query (B, T, W) and key/value (B, S, W) in float32, fixed by the seed."""
    rng = np.random.default_rng(seed)
    q = rng.standard_normal((batch, t, width)).astype(np.float32)
    kv = rng.standard_normal((batch, s, width)).astype(np.float32)
    return q, kv


def attention(q, k, v, attend=None, bias=None):
    """float64 softmax attention over the last two axes of (..., T, d); attend: True = use."""
    q, k, v = (np.asarray(x, np.float64) for x in (q, k, v))
    scores = q @ np.swapaxes(k, -1, -2) / np.sqrt(q.shape[-1])
    if bias is not None:
        scores = scores + bias
    if attend is not None:
        scores = np.where(attend, scores, -np.inf)
    top = np.max(scores, axis=-1, keepdims=True)
    top = np.where(np.isfinite(top), top, 0.0)
    e = np.exp(scores - top)
    total = e.sum(axis=-1, keepdims=True)
    with np.errstate(invalid="ignore", divide="ignore"):
        return (e / total) @ v


def close(a, b, tol=1e-4):
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    return a.shape == b.shape and bool(np.all(np.isfinite(a))) and \
        bool(np.allclose(a, b, atol=tol, rtol=tol))


def match(out, candidates, other="finite_other"):
    """The name of the first candidate array `out` equals (nan first), else `other`."""
    out = np.asarray(out, np.float64)
    if np.isnan(out).any():
        return "nan"
    for name, ref in candidates.items():
        if ref is not None and close(out, ref):
            return name
    return other


def row_kind(row, uniform, unmasked, bias_row=None):
    """What a fully masked query row holds: nan, zeros, uniform, output_bias, unmasked."""
    zeros = np.zeros_like(np.asarray(row, np.float64))
    return match(row, {"zeros": zeros, "output_bias": bias_row, "uniform": uniform,
                       "unmasked": unmasked})


def float_kind(out, added, as_bool):
    """A 0 / -1e9 float mask: added to the scores, or read as a boolean (0 blocks)."""
    return match(out, {"added": added, "cast_to_bool": as_bool})


def polarity_kind(all_true, all_false, unmasked):
    """True attends when an all-True mask changes nothing; True blocks when all-False doesn't."""
    if all_true is not None and close(all_true, unmasked):
        return "true_attends"
    if all_false is not None and close(all_false, unmasked):
        return "true_blocks"
    return "finite_other"


def causal_masks(t, s):
    """(upper_left, lower_right) boolean attend masks (T, S) for a causal switch."""
    upper = np.tril(np.ones((t, s), bool))
    lower = np.tril(np.ones((t, s), bool), k=s - t)
    return upper, lower


def causal_kind(out, upper_out, lower_out, unmasked):
    return match(out, {"upper_left": upper_out, "lower_right": lower_out,
                       "ignored": unmasked})


def float_mask(t, s):
    """A (T, S) float mask 0 / -1e9 whose every row attends somewhere read either way."""
    m = np.zeros((t, s), np.float32)
    m[:, 0] = -1e9
    m[0, 2] = -1e9
    return m


def row_references(out, qh, kh):
    """(uniform, unmasked) references for query row 0 of a (B, H, T, d) output computed
    from projected heads qh, kh (value = key): the mean of the values, and the row with
    no mask."""
    uniform = np.broadcast_to(kh.mean(axis=2, keepdims=True), out[:, :, :1].shape)
    return uniform[:, :, 0], attention(qh, kh, kh)[:, :, 0]


def fully_masked_probe(call, t, s):
    """The fully_masked_row probe of a call(mask) -> (out, qh, kh) on projected tensors:
    a (T, S) attend mask whose row 0 is all False."""
    def probe():
        mask = np.ones((t, s), bool)
        mask[0] = False
        out, qh, kh = call(mask)
        return row_kind(out[:, :, 0], *row_references(out, qh, kh)), \
            "row 0, every key masked (attend mask all False)"
    return probe


def float_mask_probe(call, t, s, evidence):
    """The float_mask probe of a call(mask) -> (out, qh, kh): a 0 / -1e9 (T, S) mask; an
    error while running is the `refused` finding, a missing API stays `api_absent`."""
    def probe():
        m = float_mask(t, s)
        try:
            out, qh, kh = call(m)
        except Absent:
            raise
        except Exception as e:
            return "refused", f"{type(e).__name__}: {str(e)[:200]}"
        return float_kind(out, attention(qh, kh, kh, m == 0), attention(qh, kh, kh, m != 0)), \
            evidence
    return probe
