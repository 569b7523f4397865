"""What the Flax layers report of their API for the ledger, with no oracle and no reading
of an output against one: the arguments their calls lack (key padding, linen's causal
flag), what they return, a jax.Array's lack of an implicit mask, what a 2-D input and
float64 inputs into a float32 layer give (the output's shape and dtype, or the error
text), the row sums of the attention weights they sow under dropout, and the readings of
the API the ledger confirms by asking (sizes.confirmed: the size arguments from a kernel's
shape, the batch-first layout).  The ledger asks the rest (conventions/probes/, the
runners' `probe_takes` and `answers`).  jax and flax are imported inside the functions.
"""
from __future__ import annotations

import numpy as np

from conformance.case.loader import parse_case
from conformance.contract.axes import NA
from conformance.contract.runner import Convention
from conformance.oracle.canonical import case_data

RATE = 0.5  # the dropout rate of the sown-weights run


def api_case():
    """2 heads of 4 over 8 features, self-attention over 3 positions (batch 2)."""
    return parse_case({"id": "flax-api", "attention": {"num_heads": 2, "query_features": 8},
                       "inputs": {"batch": 2, "query_len": 3, "key_len": 3, "seed": 7,
                                  "self_attention": True}}, "<api>")


def error_text(exc: BaseException) -> str:
    return " ".join(f"{type(exc).__name__}: {exc}".split())[:300]


def _unbatched(runner, case, data, plan) -> Convention:
    x = np.asarray(data.inputs.query, np.float32)[0]
    what = f"{runner.api} on a 2-D ({x.shape[0]}, {x.shape[1]}) input"
    try:
        out = runner.apply(case, plan, data, x=x)[0]
    except Exception as exc:  # the system's refusal is the observation
        return Convention("unbatched_input", "refused", f"{what}: {error_text(exc)}")
    return Convention("unbatched_input", "accepted", f"{what}: output {tuple(out.shape)}")


def _mixed(runner, case, data, plan) -> Convention:
    import jax

    x64 = jax.config.jax_enable_x64
    what = f"{runner.api}: float64 NumPy inputs into a float32 layer"
    try:
        out = runner.apply(case, plan, data, x=np.asarray(data.inputs.query, np.float64))[0]
    except Exception as exc:  # the system's refusal is the observation
        return Convention("mixed_dtype", "refused", f"{what}: {error_text(exc)}")
    how = ("the layer's promote_dtype casts the float64 inputs to its dtype=float32" if x64
           else "JAX stores the float64 NumPy inputs as float32 before the layer sees them; "
           "with x64 on the layer's promote_dtype casts them to its dtype (the .x64 runner)")
    return Convention("mixed_dtype", "promoted" if str(out.dtype) == "float64" else
                      "cast_to_layer", f"{what}: output {out.dtype} (jax_enable_x64={x64}: "
                      f"{how})")


def _weights_dropout(runner, case, data, plan) -> Convention:
    what = (f"{runner.api}, dropout_rate={RATE}, deterministic=False, dropout key 0, "
            "sow_weights=True")
    w = runner.sown_weights(case, plan, data, RATE)
    if w is None:
        return Convention("weights_dropout", NA, f"{what}: no attention_weights sown")
    sums = np.asarray(w, np.float64).sum(-1)
    dev = float(np.abs(sums - 1).max())
    return Convention("weights_dropout", "post_dropout" if dev > 1e-6 else "pre_dropout",
                      f"{what}: the sown attention_weights' row sums span {sums.min():.3f}.."
                      f"{sums.max():.3f} (max |sum - 1| {dev:.1e})")


def layer_cells(runner) -> list[Convention]:
    """The API facts of a Flax layer (common.FlaxRunner subclasses)."""
    case = api_case()
    data, plan = case_data(case), runner.probe_translate(case).plan  # decode off
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
        _unbatched(runner, case, data, plan), _weights_dropout(runner, case, data, plan),
        _mixed(runner, case, data, plan)]
    if "is_causal" not in runner.answers:
        cells.append(Convention("causal_flag", NA, f"{runner.api}.__call__ has no causal "
                                "flag (mask, deterministic, dropout_rng, sow_weights); "
                                "causality is a mask built with flax.linen.make_causal_mask",
                                documented_source=doc))
    return cells
