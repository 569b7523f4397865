"""What runner jax.dpa reads of `jax.nn.dot_product_attention`'s API (contract/api_facts.py),
with no oracle and no reading of an output against one: what its arguments take (projected
tensors, BTNH, key padding as int32 lengths), what it returns (with return_residual) and
the arguments it lacks (dropout, and so weights under dropout).  The ledger confirms the
readings it can ask and measures the rest (conventions/probes/: a float64 query through
JaxDPA.answer's "input_dtype", at JAX's default x64 switch).  What the documentation states
is data (the `documented:` section of expectations/jax.dpa.yaml).  jax is imported inside
the functions only.
"""
from __future__ import annotations

import numpy as np

from conformance.contract.api_facts import ApiFact
from conformance.contract.api_facts import NA

FN = "jax.nn.dot_product_attention"


def _arrays():
    """Seeded q, k, v (B 2, T 3 / S 5, N 2, H 4), float32."""
    rng = np.random.default_rng(0)
    return tuple(rng.standard_normal(s).astype(np.float32)
                 for s in ((2, 3, 2, 4), (2, 5, 2, 4), (2, 5, 2, 4)))


def _signature(fn) -> str:
    import inspect

    return ", ".join(inspect.signature(fn).parameters)


def dpa_cells() -> list[ApiFact]:
    """The function's signature (jax/_src/nn/functions.py, dot_product_attention) and its
    return with return_residual=True."""
    import jax

    q, k, v = _arrays()
    out, lse = jax.nn.dot_product_attention(q, k, v, return_residual=True)
    sig = _signature(jax.nn.dot_product_attention)
    return [
        ApiFact("head_size_from", "given_tensors", f"{FN} takes projected tensors, q "
                "(B, T, N, H), k and v (B, S, K, H), no size argument; value must have the "
                "key's head size"),
        ApiFact("tensor_layout", "batch_first", f"{FN}: query (B, T, N, H) by its docstring "
                "('shape (BTNH|TNH)'); the runner passes (B, T, N, H)"),
        ApiFact("padding_argument", "lengths", f"{FN}(..., key_value_seq_lengths=) takes "
                "int32 (B,) valid lengths, not a mask"),
        ApiFact("weights_returned", "none", f"{FN} returns the output {tuple(out.shape)}; "
                f"return_residual=True adds the logsumexp {tuple(lse.shape)} (B, T, N), "
                "never the weights"),
        ApiFact("weights_under_dropout", NA, f"{FN} has no dropout argument ({sig}) and "
                "returns no attention weights"),
        ApiFact("dropout_argument", NA, f"no dropout argument: the signature is ({sig})"),
        ApiFact("mask_on_tensor", "none", "a jax.Array carries no mask; the function reads "
                "only its mask, bias, lengths, is_causal and window"),
    ]
