"""mlx-lm's KV-cache pattern (mlx_lm/models/cache.py, `KVCache`) and a decode through it,
shared by the mlx.sdpa.cache runner and its cache probes.  See sdpa_cache.py for the
pattern; mlx is passed in (imported by the callers inside their functions).
"""
from __future__ import annotations

from dataclasses import dataclass

from conformance.runners.mlx.common import CorePlan, fused, positional, project

MLX_LM = "https://github.com/ml-explore/mlx-lm/blob/main/mlx_lm/models/cache.py"
STEP = 4  # positions per preallocated block (mlx-lm's KVCache.step is 256)
LAYOUT = (f"two arrays, keys and values (B, H_kv, S, d) (BNSH), preallocated in blocks of "
          f"{STEP} positions and grown by mx.concatenate on axis 2 (mlx-lm KVCache, step 256 "
          "there); the filled part is passed")


@dataclass(frozen=True)
class DecodePlan:
    core: CorePlan  # scale, rope, QK-norm, sinks (its mask is the decode's own)
    prefill: int
    step: int = STEP


class BlockCache:
    """mlx-lm's KVCache pattern: preallocated blocks, slice-assigned, the filled part out."""

    def __init__(self, mx, step: int):
        self.mx, self.step, self.offset = mx, step, 0
        self.keys = self.values = None
        self.shapes: list[tuple[int, ...]] = []  # the backing key array after each update

    def _grow(self, n: int, like_k, like_v):
        mx = self.mx
        blocks = -(-n // self.step) * self.step

        def block(like):
            b, h, _, d = like.shape
            return mx.zeros((b, h, blocks, d), like.dtype)

        if self.keys is None:
            self.keys, self.values = block(like_k), block(like_v)
            return
        used = slice(None, self.offset)
        self.keys = mx.concatenate([self.keys[:, :, used], block(like_k)], axis=2)
        self.values = mx.concatenate([self.values[:, :, used], block(like_v)], axis=2)

    def update_and_fetch(self, k, v):
        n = k.shape[2]
        if self.keys is None or self.offset + n > self.keys.shape[2]:
            self._grow(n, k, v)
        start, self.offset = self.offset, self.offset + n
        self.keys[:, :, start:self.offset] = k
        self.values[:, :, start:self.offset] = v
        self.shapes.append(tuple(self.keys.shape))
        return self.keys[:, :, :self.offset], self.values[:, :, :self.offset]


def decode(mx, plan: DecodePlan, weights: dict, x, position0: int = 0, step_mask=None):
    """Run (B, L, E) x through a fresh cache: the prefill (mask "causal"), then one position
    per call (mask `step_mask`: None as mlx-lm passes it; a probe passes "causal").
    -> (list of (B, T_call, E_o) outputs, the cache)."""
    cache = BlockCache(mx, plan.step)
    outs, t = [], 0
    for n in [plan.prefill] + [1] * (x.shape[1] - plan.prefill):
        xt = x[:, t:t + n]
        q = project(mx, xt, weights["wq"], weights.get("bq"))
        k = project(mx, xt, weights["wk"], weights.get("bk"))
        v = project(mx, xt, weights["wv"], weights.get("bv"))
        at = position0 + cache.offset
        q, k = positional(mx, plan.core, q, k, weights, (at, at))
        k, v = cache.update_and_fetch(k, v)
        heads = fused(mx, plan.core, q, k, v, weights, "causal" if n > 1 else step_mask)
        out = mx.einsum("bhtd,hde->bte", heads, weights["wo"])
        outs.append(out + weights["bo"] if "bo" in weights else out)
        t += n
    return outs, cache
