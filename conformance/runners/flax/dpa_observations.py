"""What runner jax.dpa reports of `jax.nn.dot_product_attention`'s API for the ledger,
with no oracle and no reading of an output against one: the readings of its API the
ledger confirms by asking (sizes.confirmed, padding.py: projected tensors, BTNH, key
padding as int32 lengths), what it returns (with return_residual), the arguments it
lacks (dropout), and what a float64 q with float32 k, v gives
with JAX's x64 switch off and on (the output's dtype or the function's own error).  The
ledger asks the rest (conventions/probes/, JaxDPA's `probe_takes` and `answers`).  jax
is imported inside the functions only.
"""
from __future__ import annotations

import numpy as np

from conformance.contract.axes import DEPENDS, NA
from conformance.contract.runner import Convention

SOURCE = "https://github.com/jax-ml/jax/blob/jax-v0.10.2/jax/_src/nn/functions.py"
DOC = "https://docs.jax.dev/en/latest/_autosummary/jax.nn.dot_product_attention.html"
DOCUMENTED = {"documented_source": DOC}
FN = "jax.nn.dot_product_attention"


def error_text(exc: BaseException) -> str:
    return " ".join(f"{type(exc).__name__}: {exc}".split())[:300]


def _arrays():
    """Seeded q, k, v (B 2, T 3 / S 5, N 2, H 4), float32."""
    rng = np.random.default_rng(0)
    return tuple(rng.standard_normal(s).astype(np.float32)
                 for s in ((2, 3, 2, 4), (2, 5, 2, 4), (2, 5, 2, 4)))


def _mixed(q64, k, v, what: str) -> Convention:
    import jax
    import jax.numpy as jnp

    try:
        out = jax.nn.dot_product_attention(q64, k, v)
    except Exception as exc:  # the function's own dtype check
        return Convention("mixed_dtype", "refused", f"{what}: {error_text(exc)}")
    return Convention("mixed_dtype", "promoted" if out.dtype == jnp.float64 else
                      "cast_to_layer", f"{what}: output {out.dtype}" + (
                          "" if jax.config.jax_enable_x64 else " (the float64 NumPy q is "
                          "stored as float32 before the call)"))


def mixed_dtype_cell() -> Convention:
    """float64 NumPy q with float32 k, v in the runner's setting (jax_enable_x64 off, JAX's
    default, where float64 NumPy becomes float32 before the call) and inside
    jax.enable_x64(True), where the function sees the float64 array: depends where the
    two differ, each condition quoted."""
    import jax

    q, k, v = _arrays()
    seen = {}
    for on in sorted({jax.config.jax_enable_x64, True}):
        with jax.enable_x64(on):
            seen[on] = _mixed(q.astype(np.float64), k, v, f"jax_enable_x64={on}")
    words = {c.value for c in seen.values()}
    figures = " | ".join(f"{c.value}: {c.evidence}" for c in seen.values())
    return Convention("mixed_dtype", words.pop() if len(words) == 1 else DEPENDS,
                      f"{FN}: float64 NumPy q with float32 k, v: {figures}", **DOCUMENTED)


def dpa_cells() -> list[Convention]:
    import jax

    q, k, v = _arrays()
    out, lse = jax.nn.dot_product_attention(q, k, v, return_residual=True)
    return [
        Convention("size_arguments", "given_tensors", f"{FN} takes projected tensors, q "
                   "(B, T, N, H), k and v (B, S, K, H), no size argument; value must have "
                   "the key's head size", documented="given_tensors", **DOCUMENTED),
        Convention("input_layout", "batch_first", f"{FN}: query (B, T, N, H) by its docstring "
                   "('shape (BTNH|TNH)'); the runner passes (B, T, N, H)",
                   documented="batch_first", **DOCUMENTED),
        Convention("key_padding_polarity", "lengths", f"{FN}(..., key_value_seq_lengths=) "
                   "takes int32 (B,) valid lengths, not a mask", documented="lengths",
                   **DOCUMENTED),
        Convention("returned_weights", "none", f"{FN} returns the output {tuple(out.shape)}; "
                   f"return_residual=True adds the logsumexp {tuple(lse.shape)} (B, T, N), "
                   "never the weights", **DOCUMENTED),
        Convention("weights_dropout", NA, "returns no attention weights"),
        Convention("dropout", NA, "no dropout argument: the signature is (query, key, value, "
                   "bias, mask, *, scale, is_causal, query_seq_lengths, "
                   "key_value_seq_lengths, local_window_size, implementation, "
                   "return_residual)", **DOCUMENTED),
        Convention("implicit_mask", "none", "a jax.Array carries no mask; the function reads "
                   "only its mask, bias, lengths, is_causal and window"),
        mixed_dtype_cell(),
    ]
