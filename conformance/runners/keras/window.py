"""Keras 3.15's `sliding_window` (MultiHeadAttention, GroupQueryAttention) (#20): the
window_width probe.  The case's mask.window is translated into it by
runners/_export/keras_mha.py `sliding_window` (onnx.keras-export translates the same way).

Keras's own words (`_compute_sliding_window_mask`): "a symmetric band where each query
position attends to keys within `self._sliding_window - 1` positions on either side",
`ops.less(ops.abs(row_index - col_index), self._sliding_window)`, ANDed with
use_causal_mask when it is on.  So window {left: L, right: R} is sliding_window=L + 1
when L == R and no causal mask, or when causal (upper left, T == S) and R == 0; any
other window is not one number.  Keras is imported inside the probe only.
"""
from __future__ import annotations

from conformance.contract import cache_probes as cp
from conformance.contract.runner import Convention
from conformance.oracle.canonical import case_data
from conformance.runners._export.keras_mha import SOURCE


def window_width(p, w: int = 3) -> Convention:
    """p: keras probes.Probe.  sliding_window=w over 8 positions, without and with
    use_causal_mask=True, against the readings of w (contract/cache_probes.py)."""
    plain, causal = cp.window_case(causal=False), cp.window_case(causal=True)

    def run(case, **kw):
        data = case_data(case)
        return lambda: p.call(p.layer(case, data, sliding_window=w), data, **kw)[0]

    return cp.window_width(w, {
        f"sliding_window={w}, no causal mask": (plain, run(plain)),
        f"sliding_window={w}, use_causal_mask=True": (causal, run(causal,
                                                                  use_causal_mask=True))},
        f"{p.what}, self-attention over 8 positions", documented="2w_minus_1_keys",
        documented_source=SOURCE)
