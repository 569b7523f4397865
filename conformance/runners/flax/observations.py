"""What the Flax layers report of their API for the ledger, with no oracle and no reading
of an output against one: the arguments their calls lack (key padding, linen's causal
flag), what they return, a jax.Array's lack of an implicit mask, and the readings of
the API the ledger confirms by asking (sizes.confirmed: the size arguments from a kernel's
shape, the batch-first layout).  The ledger asks the rest (conventions/probes/, the
runners' `probe_takes` and `answers`; a float64 input, a 2-D input and the weights sown
under dropout: common.FlaxRunner.native_call).  jax and flax are imported inside the
functions.
"""
from __future__ import annotations

from conformance.contract.axes import NA
from conformance.contract.runner import Convention


def layer_cells(runner) -> list[Convention]:
    """The API facts of a Flax layer (common.FlaxRunner subclasses)."""
    f, doc = runner.sizes, runner.doc
    cells = [
        Convention("size_arguments", "total_over_heads", f.size, "total_over_heads", doc),
        Convention("input_layout", "batch_first", f"{runner.api}: inputs (B, T, E), batch "
                   "first (its docstring: `inputs_q: input queries of shape [batch_sizes..., "
                   "length, features]`)"),
        Convention("parameter_formula", f.formula, f.counted),
        Convention("weight_layout", f.layout,
                   "canonical Wq (H, E, d) loaded as transpose(1, 0, 2)"),
        Convention("returned_weights", "none", f"{runner.api} returns the output only "
                   "(weights only through sow_weights / intermediates)"),
        Convention("key_padding_polarity", NA, f"{runner.api}.__call__ takes one `mask` "
                   "(True = attend) and no key-padding argument; padding is folded into it "
                   "with flax's make_attention_mask(query_padding, key_padding)",
                   documented_source=doc),
        Convention("implicit_mask", "none", f"{runner.api}: a jax.Array carries no mask "
                   "(nothing like Keras's _keras_mask); the layer reads only its mask "
                   "argument"),
    ]
    if "is_causal" not in runner.answers:
        cells.append(Convention("causal_flag", NA, f"{runner.api}.__call__ has no causal "
                                "flag (mask, deterministic, dropout_rng, sow_weights); "
                                "causality is a mask built with flax.linen.make_causal_mask",
                                documented_source=doc))
    return cells
