"""T5's bucketed relative position bias, in integers and float64.

The bucket of a relative position (Raffel et al. 2020, section 2.1; Mesh TensorFlow's
_relative_position_bucket, as transformers/models/t5/modeling_t5.py
T5Attention._relative_position_bucket#L218 ports it): with n buckets per direction (half
of num_buckets when bidirectional) and max_exact = n // 2,
- bidirectional: a key after the query (relative position > 0) adds n to its bucket, and
  the distance is |relative position|; unidirectional: distance = max(-relative, 0), so
  every key after the query lands in bucket 0;
- a distance d < max_exact is its own bucket; otherwise the bucket is
  max_exact + floor(ln(d / max_exact) / ln(max_distance / max_exact) * (n - max_exact)),
  at most n - 1 (every distance from max_distance on shares the last bucket).
The floor is computed exactly, in integers: floor(...) >= k exactly when
d^(n - max_exact) * max_exact^k >= max_distance^k * max_exact^(n - max_exact), so the
oracle's edges are the rule's own and no float rounding moves a distance over one (a
system computing the logarithm in float32 is measured against them, not mirrored).

The relative position is key - query (T5's memory_position - context_position,
compute_bias#L265) at the case's absolute positions (inputs.position_offset,
key_position_offset), or query - key where the case says so; the bias is the table's row
of each pair's bucket, per head, added to the scaled scores (reference.py).
"""
from __future__ import annotations

import numpy as np


def _log_steps(distance: int, max_exact: int, max_distance: int, steps: int) -> int:
    """floor(ln(distance / max_exact) / ln(max_distance / max_exact) * steps), capped at
    steps - 1, for distance >= max_exact: the number of k in 1..steps-1 with
    distance^steps * max_exact^k >= max_distance^k * max_exact^steps (exact integers)."""
    lhs = distance ** steps
    count = 0
    for k in range(1, steps):
        if lhs * max_exact ** k >= max_distance ** k * max_exact ** steps:
            count = k
        else:
            break
    return count


def bucket(relative: int, num_buckets: int, max_distance: int, bidirectional: bool) -> int:
    """The bucket of one relative position (key - query), T5's rule (the module's
    docstring), in integers."""
    n, offset = num_buckets, 0
    if bidirectional:
        n //= 2
        offset = n if relative > 0 else 0
        distance = abs(relative)
    else:
        distance = max(-relative, 0)
    max_exact = n // 2
    if distance < max_exact:
        return offset + distance
    return offset + max_exact + _log_steps(distance, max_exact, max_distance, n - max_exact)


def buckets(relative: np.ndarray, num_buckets: int, max_distance: int,
            bidirectional: bool) -> np.ndarray:
    """`bucket` of every element of an integer array (each distinct value computed once)."""
    rel = np.asarray(relative, dtype=np.int64)
    values, inverse = np.unique(rel, return_inverse=True)
    out = np.array([bucket(int(v), num_buckets, max_distance, bidirectional) for v in values],
                   dtype=np.int64)
    return out[inverse].reshape(rel.shape)


def relative_positions(spec, qpos: np.ndarray, kpos: np.ndarray) -> np.ndarray:
    """(T, S) key - query (or query - key where `spec.relative_position` says so)."""
    rel = np.asarray(kpos, np.int64)[None, :] - np.asarray(qpos, np.int64)[:, None]
    return -rel if spec.relative_position == "query_minus_key" else rel


def bias(spec, table: np.ndarray, qpos: np.ndarray, kpos: np.ndarray) -> np.ndarray:
    """(H, T, S) float64: the table's row (num_buckets, H) of each pair's bucket, per head."""
    ids = buckets(relative_positions(spec, qpos, kpos), spec.num_buckets, spec.max_distance,
                  spec.bidirectional)
    return np.moveaxis(np.asarray(table, np.float64)[ids], -1, 0)


def added(case, data, scores: np.ndarray) -> np.ndarray:
    """(B, H, T, S) `scores` plus the case's relative bias (unchanged where it has none),
    the table from `data`'s canonical weights."""
    spec = case.attention.relative_bias
    if spec is None:
        return scores
    from conformance.oracle.canonical import positions

    return scores + bias(spec, data.weights.relative_bias, *positions(case))[None]
