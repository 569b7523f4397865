"""The array libraries a --kind sdpa target may take: NumPy arrays in, the library's arrays
out to the target, its result back to float64 NumPy.  Each library is imported on first use.
"""
from __future__ import annotations

import numpy as np

REQUIRES = {"numpy": (), "torch": ("torch",), "jax": ("jax",), "mlx": ("mlx",)}


class Arrays:
    """Conversions for one library."""

    def __init__(self, library: str):
        self.library = library

    def dtype_limit(self, dtype: str) -> str:
        """Why `dtype` cannot be given in this library ('' when it can)."""
        if self.library == "numpy" and dtype == "bfloat16":
            return "NumPy has no bfloat16 dtype (the target takes NumPy arrays)"
        return ""

    def put(self, x: np.ndarray, dtype: str | None):
        """NumPy -> the library's array in `dtype` (None: as it is, e.g. a boolean mask)."""
        x = np.ascontiguousarray(x)
        lib = self.library
        if lib == "numpy":
            return x if dtype is None else x.astype(dtype)
        if lib == "torch":
            import torch

            t = torch.from_numpy(x.copy())
            return t if dtype is None else t.to(getattr(torch, dtype))
        if lib == "jax":
            import jax.numpy as jnp

            return jnp.asarray(x) if dtype is None else jnp.asarray(x, getattr(jnp, dtype))
        import mlx.core as mx

        if dtype is None:
            return mx.array(x)
        return mx.array(x.astype(np.float32)).astype(getattr(mx, dtype))

    def get(self, y) -> np.ndarray:
        """The library's array -> float64 NumPy (bfloat16 and float16 through float32)."""
        lib = self.library
        if lib == "torch" and hasattr(y, "detach"):
            return y.detach().cpu().double().numpy()
        if lib == "mlx" and not isinstance(y, np.ndarray):
            import mlx.core as mx

            if y.dtype in (mx.bfloat16, mx.float16):
                y = y.astype(mx.float32)
            return np.array(y).astype(np.float64)
        arr = np.asarray(y)
        if arr.dtype.kind not in "fiub":  # jax bfloat16 reads as a void-like dtype
            arr = np.asarray(y, dtype=np.float32)
        return arr.astype(np.float64)

    def held(self, y) -> str:
        """The dtype the target returned, as a word."""
        return str(getattr(y, "dtype", type(y).__name__)).rsplit(".", 1)[-1]
