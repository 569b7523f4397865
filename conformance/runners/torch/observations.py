"""What the torch runners report of their API for the ledger, with no oracle and no reading
of an output against one: SDPA's signature (no size argument, no key-padding argument),
its return (one tensor, no weights) and a tensor's lack of an implicit mask; the readings
of the API the ledger confirms by asking (sizes.confirmed: the size arguments and the
layout). The ledger asks the rest (conventions/probes/, the runners' `probe_takes`; a
float64 query, an unbatched call and the weights under dropout through `answer`,
common.sdpa_native_call). torch arrives as an argument.
"""
from __future__ import annotations

import inspect

import numpy as np

from conformance.contract.api_facts import NA
from conformance.contract.api_facts import ApiFact

SDPA = "F.scaled_dot_product_attention"


def _signature(fn) -> str:
    try:
        return ", ".join(inspect.signature(fn).parameters)
    except (TypeError, ValueError):  # a builtin without a signature
        return "query, key, value, attn_mask, dropout_p, is_causal, scale, enable_gqa"


def _tensors(torch):
    """Seeded (B=2, H=2, L=3, d=4) q and (B, H, S=5, d) k, as float32."""
    rng = np.random.default_rng(0)
    q, k = (torch.from_numpy(rng.standard_normal(s).astype(np.float32))
            for s in ((2, 2, 3, 4), (2, 2, 5, 4)))
    return q, k


def sdpa_cells(torch) -> list[ApiFact]:
    """F.scaled_dot_product_attention's API: its signature and return, a 2-D call and a
    float64 q into float32 k, v."""
    sdpa = torch.nn.functional.scaled_dot_product_attention
    sig = _signature(sdpa)
    q, k = _tensors(torch)
    with torch.no_grad():
        one = sdpa(q, k, k)
    return [
        ApiFact("head_size_from", "given_tensors", f"{SDPA}: the signature ({sig}) takes "
                "projected tensors; no size argument, any head size"),
        ApiFact("tensor_layout", "batch_heads_first", f"{SDPA}: query (N, ..., Hq, L, E) "
                "by its documentation; the runner passes (B, H, T, d)"),
        ApiFact("padding_argument", NA, f"no key-padding argument: the signature is "
                f"({sig}); padding goes into attn_mask"),
        ApiFact("weights_returned", "none", f"{SDPA} returns one tensor "
                f"{tuple(one.shape)} for q {tuple(q.shape)}, no weights"),
        ApiFact("mask_on_tensor", "none", "a torch.Tensor carries no mask; SDPA reads only "
                "attn_mask and is_causal"),
    ]
