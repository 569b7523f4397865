"""What the Flax layers read of their API (contract/api_facts.py), with no oracle and no
reading of an output against one: the arguments their calls lack (key padding, linen's
causal flag), what they return, a jax.Array's lack of an implicit mask, their own count and
names of parameters, and the readings the ledger confirms by asking (the size arguments
from a kernel's shape, the batch-first layout).  The ledger asks the rest
(conventions/probes/, the runners' `probe_takes` and `answers`; a float64 input, a 2-D
input and the weights sown under dropout: common.FlaxRunner.native_call).  What the
documentation states is data (the `documented:` sections of expectations/flax.*.yaml).
jax and flax are imported inside the functions.
"""
from __future__ import annotations

from conformance.contract.api_facts import ApiFact
from conformance.contract.api_facts import NA


def layer_cells(runner) -> list[ApiFact]:
    """The API facts of a Flax layer (common.FlaxRunner subclasses)."""
    f = runner.sizes
    cells = [
        ApiFact("head_size_from", "total_over_heads", f.size),
        ApiFact("tensor_layout", "batch_first", f"{runner.api}: inputs (B, T, E), batch "
                "first (its docstring: `inputs_q: input queries of shape [batch_sizes..., "
                "length, features]`)"),
        ApiFact("parameter_count", f.formula, f.counted),
        ApiFact("weight_names", f.layout, "canonical Wq (H, E, d) loaded as transpose(1, 0, 2)"),
        ApiFact("weights_returned", "none", f"{runner.api} returns the output only "
                "(weights only through sow_weights / intermediates)"),
        ApiFact("padding_argument", NA, f"{runner.api}.__call__ takes one `mask` (True = "
                "attend) and no key-padding argument; padding is folded into it with flax's "
                "make_attention_mask(query_padding, key_padding)"),
        ApiFact("mask_on_tensor", "none", f"{runner.api}: a jax.Array carries no mask "
                "(nothing like Keras's _keras_mask); the layer reads only its mask argument"),
    ]
    if "is_causal" not in runner.answers:
        cells.append(ApiFact("causal_argument", NA, f"{runner.api}.__call__ has no causal "
                             "flag (mask, deterministic, dropout_rng, sow_weights); causality "
                             "is a mask built with flax.linen.make_causal_mask"))
    return cells
