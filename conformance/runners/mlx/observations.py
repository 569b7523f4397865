"""What the MLX runners report of their API for the ledger, with no oracle and no reading
of an output: the arguments the calls lack (key padding, dropout, weights), an mx.array's
lack of an implicit mask, and the readings of the API the ledger confirms by asking
(sizes.confirmed: the size arguments from a weight's shape, the layout from the
docstring).  The ledger asks the rest (conventions/probes/: a float64 input and a 2-D
input through the runners' `answer`, common.MlxAnswers.native_inputs).
mlx is imported inside the functions only.
"""
from __future__ import annotations


from conformance.contract.runner import Convention
from conformance.runners.mlx.common import (
    MHA, SDPA_DOC, import_mlx)

SDPA = "mx.fast.scaled_dot_product_attention"


def api_cells(what: str) -> list[Convention]:
    """Arguments the call lacks, read from its signature and its return."""
    return [
        Convention("key_padding_polarity", "not_applicable", f"{what} takes one mask (mask=), "
                   "no key-padding argument; padding goes into it"),
        Convention("dropout", "not_applicable", f"{what}: no dropout argument in its "
                   "signature"),
        Convention("weights_dropout", "not_applicable", f"{what} returns no attention "
                   "weights"),
        Convention("implicit_mask", "none", f"{what}: an mx.array carries no mask (nothing "
                   "like Keras's _keras_mask); only mask= masks"),
    ]


def sdpa_cells() -> list[Convention]:
    """The fused op: no size argument, (B, N, T, D) by its docstring."""
    return [
        Convention("size_arguments", "given_tensors", f"{SDPA} takes projected q, k, v "
                   "(B, N, T, D); no size argument", "given_tensors", SDPA_DOC),
        Convention("input_layout", "batch_heads_first", f"{SDPA}: q (B, N_q, T_q, D) by its "
                   "docstring; the runner passes (B, H, T, d)", "batch_heads_first",
                   SDPA_DOC),
        *api_cells(SDPA),
    ]


def mha_cells(case, data) -> list[Convention]:
    """The layer: `dims` read from a weight's shape, batch-first inputs (`case`: 2 heads of
    3 over 8 features)."""
    mx, nn = import_mlx()
    shape = tuple(nn.MultiHeadAttention(6, 2, query_input_dims=8).query_proj.weight.shape)
    return [
        Convention("size_arguments", "total_over_heads", f"{MHA}(dims=6, num_heads=2, "
                   f"query_input_dims=8): query_proj.weight {shape}, head dim 6 / 2 = 3"),
        Convention("input_layout", "batch_first", f"{MHA}: queries (B, T, E), keys and "
                   "values (B, S, E), batch first"),
        *api_cells(MHA),
    ]
