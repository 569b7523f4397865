"""What the MLX runners read of their API (contract/api_facts.py), with no oracle and no
reading of an output: the arguments the calls lack (key padding, dropout, weights), an
mx.array's lack of an implicit mask, and the readings the ledger confirms by asking (the
size arguments from a weight's shape, the layout from the docstring).  The ledger asks the
rest (conventions/probes/: a float64 input and a 2-D input through the runners' `answer`,
common.MlxAnswers.native_inputs; a fully masked decode step through mlx.sdpa.cache's
step_mask).  What the documentation states is data (the `documented:` sections of
expectations/mlx.*.yaml).  mlx is imported inside the functions only.
"""
from __future__ import annotations

from conformance.contract.api_facts import ApiFact
from conformance.contract.api_facts import NA
from conformance.runners.mlx.common import MHA, import_mlx

SDPA = "mx.fast.scaled_dot_product_attention"


def api_cells(what: str) -> list[ApiFact]:
    """Arguments the call lacks, read from its signature and its return."""
    return [
        ApiFact("padding_argument", NA, f"{what} takes one mask (mask=), no key-padding "
                "argument; padding goes into it"),
        ApiFact("dropout_argument", NA, f"{what}: no dropout argument in its signature"),
        ApiFact("weights_under_dropout", NA, f"{what} has no dropout argument and returns "
                "no attention weights"),
        ApiFact("mask_on_tensor", "none", f"{what}: an mx.array carries no mask (nothing "
                "like Keras's _keras_mask); only mask= masks"),
    ]


def sdpa_cells() -> list[ApiFact]:
    """The fused op: no size argument, (B, N, T, D) by its docstring."""
    return [
        ApiFact("head_size_from", "given_tensors", f"{SDPA} takes projected q, k, v "
                "(B, N, T, D); no size argument"),
        ApiFact("tensor_layout", "batch_heads_first", f"{SDPA}: q (B, N_q, T_q, D) by its "
                "docstring; the runner passes (B, H, T, d)"),
        *api_cells(SDPA),
    ]


def mha_cells(case, data) -> list[ApiFact]:
    """The layer: `dims` read from a weight's shape, batch-first inputs (`case`: 2 heads of
    3 over 8 features)."""
    mx, nn = import_mlx()
    shape = tuple(nn.MultiHeadAttention(6, 2, query_input_dims=8).query_proj.weight.shape)
    return [
        ApiFact("head_size_from", "total_over_heads", f"{MHA}(dims=6, num_heads=2, "
                f"query_input_dims=8): query_proj.weight {shape}, head dim 6 / 2 = 3"),
        ApiFact("tensor_layout", "batch_first", f"{MHA}: queries (B, T, E), keys and values "
                "(B, S, E), batch first"),
        *api_cells(MHA),
    ]
