"""The axes of the conventions ledger: what "the same words and numbers" can mean.

Each axis has an id, a title, and the vocabulary of short words a cell may
hold (`None` = a short free text, e.g. a formula or a layout).  The words are
the public interface of `reports/conventions.json` and of the committed
expectations (`expectations/<runner>.yaml`, `conventions:`); the README lists them.  Layer 1:
data only, so runners (which probe their system) and the report both import it.
"""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Axis:
    id: str
    title: str
    vocabulary: tuple[str, ...] | None  # None: short free text (a formula, a layout)
    meaning: str  # what the words mean, for the README and the report


NA = "not_applicable"  # the system has no such argument or path (the evidence says which)
REFUSED = "refused"  # the system rejects it (the evidence quotes its message)

AXES: tuple[Axis, ...] = (
    Axis("size_arguments", "Meaning of the size arguments",
         ("per_head", "total_over_heads", "derived_from_width", "given_tensors"),
         "per_head: the head-size argument is per head (Keras key_dim); total_over_heads: it "
         "counts all heads (MATLAB NumKeyChannels, Flax qkv_features); derived_from_width: no "
         "head-size argument, d = width / heads (torch MHA); given_tensors: the caller passes "
         "projected tensors (SDPA)"),
    Axis("parameter_formula", "Parameter formula", None,
         "the system's own count as a formula in E (width), H (heads), d_k, d_v, E_o"),
    Axis("weight_layout", "Weight names, layout and orientation", None,
         "native names and shapes of the query projection, and its orientation"),
    Axis("argument_order", "Argument order of query, key, value",
         ("query_key_value", "query_value_key", "single_input", NA),
         "the positional order of the call's inputs"),
    Axis("input_layout", "Default input layout",
         ("batch_first", "sequence_first", "channels_first", "batch_heads_first"),
         "how the default call reads a 3-D input"),
    Axis("unbatched_input", "Unbatched (T, E) input", ("accepted", REFUSED, NA),
         "whether a 2-D input without a batch axis is accepted"),
    Axis("attn_mask_polarity", "Boolean attention mask: what True means",
         ("true_blocks", "true_attends", NA), "for the attention-mask argument"),
    Axis("key_padding_polarity", "Boolean key-padding mask: what True means",
         ("true_blocks", "true_attends", "lengths", NA),
         "for a separate key-padding argument (lengths: valid lengths, not a mask)"),
    Axis("float_mask", "Additive float mask (0 / -1e9)",
         ("added", "cast_to_bool", REFUSED, NA),
         "added: added to the scores; cast_to_bool: read as a boolean, so 0 blocks and -1e9 "
         "attends (inverted)"),
    Axis("fully_masked_row", "Fully masked query row",
         ("nan", "zeros", "uniform", "output_bias", "unmasked", "finite_other", "error", NA),
         "what the output holds where a query row may attend to no key (zeros: all weights "
         "0, so the output is the output bias)"),
    Axis("returned_weights", "Returned attention weights",
         ("per_head", "head_averaged", "none"), "what the call returns besides the output"),
    Axis("weights_dropout", "Returned weights and dropout",
         ("post_dropout", "pre_dropout", NA), "whether returned weights include dropout"),
    Axis("causal_flag", "Causal flag alignment when query_len != key_len",
         ("upper_left", "lower_right", "ignored", "hint_only", NA),
         "what the system's causal switch means for T != S"),
    Axis("softmax_scale", "Softmax scale",
         ("inv_sqrt_head_dim", "none", "configurable"),
         "the default scale of the scores, and whether it can be set"),
    Axis("scale_precision", "Scale precision in a float64 layer",
         ("float64", "float32_rounded", NA), "whether the scale is rounded through float32"),
    Axis("dropout", "When dropout applies", ("training_flag", "always", "never", NA),
         "the switch that turns attention dropout on"),
    Axis("float64_compute", "float64 really computed in float64",
         ("float64", "below_float64", REFUSED, NA),
         "a float64 case against the float64 oracle (not_applicable: a documented model whose "
         "documentation does not state it)"),
    Axis("mixed_dtype", "float64 input into a float32 layer",
         (REFUSED, "promoted", "cast_to_layer", NA), "what happens to the input dtype"),
    Axis("implicit_mask", "Implicit masks", ("propagated", "none"),
         "whether a mask attached to the input tensor (Keras mask_zero) is applied"),
    Axis("refusals", "What is refused", None,
         "configurations the system refuses, with its own message"),
    Axis("softcap", "Score soft-capping (softcap * tanh(scores / softcap))",
         ("applied", "ignored", NA),
         "applied: the system's softcap setting caps the scores before the softmax (ONNX "
         "Attention softcap); ignored: set, but the output is uncapped; not_applicable: the "
         "system has no such setting"),
)
AXIS_IDS = tuple(a.id for a in AXES)
BY_ID = {a.id: a for a in AXES}
