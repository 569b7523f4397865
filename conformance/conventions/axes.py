"""The axes of the conventions ledger: what "the same words and numbers" can mean, and the
cell a probe gives (Convention).

Each axis has an id, a title, and the vocabulary of short words a cell may
hold (`None` = a short free text, e.g. a formula or a layout).  The words are
the public interface of `reports/conventions.json` and of the committed
expectations (`expectations/<runner>.yaml`, `conventions:`); the README lists them.  Data
only: the ledger's probes, the expectations and the report import it; runners never do
(they report ApiFacts, contract/api_facts.py, which holds the universal words).
"""
from __future__ import annotations

from dataclasses import dataclass

from conformance.contract.api_facts import (  # noqa: F401 - the words every axis takes
    DEPENDS, IGNORED, NA, NOT_PROBED, REFUSED, UNIVERSAL)


@dataclass(frozen=True)
class Convention:
    """One cell of the conventions ledger, observed by running the system (or,
    for a documented model, read from the cited documentation)."""

    axis: str  # an id of axes.AXES
    value: str  # a word of that axis's vocabulary (axes.py)
    evidence: str  # what ran and what it showed, with a figure where there is one
    documented: str | None = None  # the value the system's documentation states
    documented_source: str = ""  # the link to that documentation


@dataclass(frozen=True)
class Axis:
    id: str
    title: str
    vocabulary: tuple[str, ...] | None  # None: short free text (a formula, a layout)
    meaning: str  # what the words mean, for the README and the report

    @property
    def words(self) -> tuple[str, ...] | None:
        """Every word a cell of this axis may hold: its own, then the universal ones."""
        if self.vocabulary is None:
            return None
        return self.vocabulary + tuple(w for w in UNIVERSAL if w not in self.vocabulary)

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
         ("true_blocks", "true_attends", "added_as_number", NA),
         "for the attention-mask argument (added_as_number: accepted, but added to the "
         "scores as 0/1, so it masks nothing)"),
    Axis("key_padding_polarity", "Boolean key-padding mask: what True means",
         ("true_blocks", "true_attends", "lengths", NA),
         "for a separate key-padding argument (lengths: valid lengths, not a mask)"),
    Axis("float_mask", "Additive float mask (0 / -1e9)",
         ("added", "cast_to_bool", "uniform_where_zero", REFUSED, NA),
         "added: added to the scores; cast_to_bool: read as a boolean, so 0 blocks and -1e9 "
         "attends (inverted); uniform_where_zero: added as (1 - m) * -1e9, which drowns "
         "every score in float32, so the weights are uniform over the keys where it is 0 "
         "(Keras before 3.7)"),
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
         ("float64", "float32_rounded", "split_float32", NA),
         "whether the scale is rounded through float32 (split_float32: its square root rounded "
         "to float32 and applied to Q and to K, as onnxruntime's CPU Attention kernel does)"),
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
    # positions and heads: rotary embeddings, grouped heads, QK-norm, ALiBi
    Axis("rope_style", "Rotary embedding pairing",
         ("half_split", "interleaved", "choosable", NA),
         "half_split: dimensions (i, i + r/2) rotate together (GPT-NeoX, HF Llama); "
         "interleaved: (2i, 2i + 1) (RoFormer, Meta Llama, GPT-J); choosable: an argument "
         "picks either (the evidence names it)"),
    Axis("rope_partial", "Partial rotary (rotary_dim < head dim)", ("supported", REFUSED, NA),
         "whether only the first rotary_dim dimensions of a head can rotate"),
    Axis("kv_head_mapping", "Grouped-query head mapping",
         ("grouped", "tiled", REFUSED, NA),
         "grouped: query head h reads kv head h // (H / H_kv) (repeat_interleave, HF "
         "repeat_kv); tiled: h % H_kv (tile); observed with distinct per-kv-head weights"),
    Axis("qk_norm_scope", "QK-norm scope", ("per_head", "all_heads", "choosable", NA),
         "per_head: each head's d_k values normalised apart (Qwen3, Gemma3); all_heads: the "
         "whole projection at once (OLMo2)"),
    Axis("alibi_slopes", "ALiBi slopes", ("paper", "other", NA),
         "paper: the ALiBi paper's slopes, with its rule for a head count that is not a power "
         "of two; other: other slopes (the evidence shows them)"),
    Axis("rope_scaling_frequencies", "RoPE scaling: whose frequencies", None,
         "the readings of each scaling type the system takes, at positions where its variants "
         "part: linear (every frequency / factor); dynamic_per_length (NTK base grown from "
         "the largest position + 1, transformers), dynamic_static (the base grown once, base "
         "x factor^(d/(d-2))), dynamic_uniform (every frequency / factor^(d/(d-2)), "
         "keras-hub); yarn (ramp edges rounded to whole dims), yarn_untruncated; llama3 (its "
         "three bands); longrope (short factors within the original context, long past it), "
         "longrope_short, longrope_long (one set at every length); <asked>:<word> where a "
         "type reads another word (ignored: unscaled RoPE; other: no variant)"),
    Axis("rope_scaling_magnitude", "RoPE scaling: where the attention factor lands",
         ("cos_sin", "softmax_scale", "both", "none", "choosable"),
         "where YaRN's 0.1 ln(factor) + 1 (or LongRoPE's factor) goes: cos_sin (cos and sin "
         "times it, so each rotated dim of q and k: transformers' Llama); softmax_scale (the "
         "softmax scale times its square, cos and sin at 1: transformers' DeepSeek V3); "
         "both (applied twice); none (the frequencies scaled, no factor); choosable (a "
         "setting picks cos_sin or softmax_scale)"),
    # M-RoPE and 2-D RoPE
    Axis("mrope_layout", "M-RoPE: which rotated pair takes t, h or w",
         ("contiguous", "interleaved", "one_axis", "other", "choosable"),
         "at image-like positions (t, h, w differ): contiguous (the pairs in mrope_section's "
         "runs, t then h then w: Qwen2-VL); interleaved (h on pairs i % 3 == 1, w on i % 3 == "
         "2 below 3 x their sections, t elsewhere: Qwen3-VL); one_axis (1-D RoPE at the "
         "token's sequence position: the positions collapsed, as a model taking no position "
         "ids computes); other (no reading within 1e-3: sections swapped, say); choosable "
         "(each asked layout reads itself)"),
    Axis("vision_rope_layout", "2-D vision RoPE: how row and column frequencies lie in the head",
         ("shared", "alternating", "one_axis", "other", "choosable"),
         "over a grid of patches, the first half of the pairs on the row and the second on "
         "the column: shared (both halves on the ladder of a rope head_dim / 2 wide: "
         "Qwen2-VL's vision tower); alternating (the row on the even, the column on the odd "
         "frequencies of the head_dim ladder: Pixtral); one_axis (1-D RoPE at the patch "
         "index); other (no reading within 1e-3); choosable (each asked layout reads itself)"),
    # per-layer schedules
    Axis("per_layer_rope", "Layer schedules: each layer's own rope and window",
         ("per_layer", "one_base", "shifted", "other"),
         "a layer of a model whose layer types differ (Gemma 3: five sliding layers at base "
         "1e4 to one full layer at 1e6 with linear x8): per_layer (the asked layer's own type: "
         "its base, scaling and window); one_base (the other type's rope with the layer's own "
         "window: one rope for every layer); shifted (the layer computed as its neighbour's "
         "type, rope and window: the pattern off by one); other (none of these)"),
    Axis("nope_placement", "NoPE layers: which layers of a schedule rotate",
         ("per_layer", "rotated_everywhere", "unrotated_everywhere", "inverted", "other"),
         "a NoPE layer (SmolLM3's every fourth, Llama 4's) and a roped layer of one schedule: "
         "per_layer (the NoPE layer unrotated, the other rotated); rotated_everywhere (the "
         "NoPE layers ignored); unrotated_everywhere; inverted (the NoPE layer rotated and "
         "the other not: transformers' no_rope_layers flags, 1 = RoPE, read as the list of "
         "layers without it); other (neither reading)"),
    # chunked attention and temperature
    Axis("chunk_mask", "Chunked attention: which keys a chunk lets a query see",
         ("block", "block_relative", "window", "other"),
         "block: causal within blocks of C absolute positions, p // C == s // C (Llama 4: a "
         "block's first query sees one key); block_relative: the same blocks counted from the "
         "first query the call is given, not from the positions it is handed (a system that "
         "counts chunks by its sequence index while it rotates by position ids); window: a "
         "sliding window of C keys (a chunk read as a window); other: no reading within 1e-3"),
    Axis("attention_temperature", "Attention temperature: which positions temper the query",
         ("log_floor", "off_by_one", "log_floor_relative", "other"),
         "log_floor: q times log1p(floor((p + 1) / floor_scale)) * attn_scale + 1 at absolute "
         "position p (Llama 4: exactly 1 below p = floor_scale - 1); off_by_one: floor(p / "
         "floor_scale), one position late; log_floor_relative: Llama 4's formula at the "
         "call's sequence index, not the positions it is handed; other: no reading within "
         "1e-3"),
    # multi-head latent attention
    Axis("mla_rope_slice", "Multi-head latent attention: which dims rotate",
         ("last", "first", "other"),
         "last: each head's query and key are [nope | rope] and the rope slice is the last "
         "qk_rope_head_dim dims, the key's one shared head broadcast (DeepSeek-V2/V3); first: "
         "the first qk_rope_head_dim dims rotate (a port's slip); other: neither"),
    # T5's relative bias
    Axis("relative_bias_buckets", "T5 relative bias: which bucket rule",
         ("t5", "sign_flipped", "unidirectional", "bidirectional", "other"),
         "which bucket each (query, key) pair's learned logit comes from, at T5's 32 buckets "
         "and max distance 128 over distances -135..135: t5 (the paper's rule on key - query: "
         "exact buckets below 8, logarithmic bins to 128, one bucket past it; keys after the "
         "query in the upper half for the encoder, in bucket 0 for the decoder); "
         "sign_flipped (query - key: the halves crossed); unidirectional (the encoder's "
         "buckets computed as the decoder's); bidirectional (the decoder's as the "
         "encoder's); other (no rule within 1e-3)"),
    # gated head outputs
    Axis("gate_packing", "Output gate: how the query projection holds it",
         ("per_head", "halves", "separate", "after_output", "other"),
         "which packing of the canonical W_q and gate W_g, loaded through the system's own "
         "weight names, gives the oracle's gated output (each head's output times sigmoid(x "
         "W_g[h] + b_g[h]) before the output projection): per_head (q_proj rows [q_h | g_h] "
         "head by head: Qwen3-Next in transformers and mlx-lm, Qwen3.5 in keras_hub); halves "
         "(every query head, then "
         "every gate head); separate (a gate projection of its own: transformers' AFMoE); "
         "after_output (a packing "
         "matches only with the gate applied after the output projection); other (no "
         "packing within 1e-3)"),
    # caches, windows, softcap order, sinks, mask fills
    Axis("cache_causal_alignment", "Causal alignment of a cached decode step",
         ("lower_right", "upper_left", "full", NA),
         "what a one-position step with a KV cache attends: lower_right = every cached key and "
         "itself (a correct decode); upper_left = the causal diagonal not shifted (key 0 "
         "only); full = no causal mask"),
    Axis("cache_layout", "KV-cache layout", None,
         "past key/value shape and order (BNSH or BSNH), one tensor or two, preallocated or "
         "growing"),
    Axis("window_width", "Sliding-window argument", ("w_keys", "w_plus_1_keys", "2w_plus_1_keys",
                                                     "2w_minus_1_keys", "left_right", NA),
         "what the system's own window number w means, in keys a query sees: w, w + 1 (w "
         "before and itself), 2w + 1 (w on each side), 2w - 1 (w - 1 on each side: |i - j| "
         "< w, Keras sliding_window), or separate left/right numbers"),
    Axis("softcap_order", "Softcap order against mask and bias",
         ("before_mask", "after_mask", NA),
         "whether the softcap applies to the scores before the mask and bias are added, or "
         "after"),
    Axis("sinks", "Attention sinks (a per-head logit in the softmax denominator)",
         ("applied", "ignored", NA), "whether the system's sink logits join the softmax"),
    Axis("mask_fill", "Fill of masked logits",
         ("-inf", "finfo_min", "-0.7*finfo_max", "huge_finite", "-1e9", "float16_min", "-1e4",
          "other", NA),
         "the number the system writes into (or adds to) masked scores before the softmax, "
         "named by the number observed, the same number the same name for every system "
         "(-1e4 includes onnxruntime's -10000; -0.7*finfo_max is -0.7 x a float type's max "
         "as the source computes it: JAX's -2.3819763e38, Keras's -0.7 * 3.38953e38 = "
         "-2.3726710e38; float16_min is -65504, a huge fill saturated by a float16 "
         "conversion; finfo_min and -0.7*finfo_max give alike outputs: the number the system "
         "shows, its program holds or its source writes names them, else huge_finite; a "
         "tie no input parts is not_probed, each tied word named; other: the evidence shows "
         "the counts)"),
    Axis("masked_key_nonfinite", "NaN or Inf in a masked-out key",
         ("propagates", "contained", NA),
         "whether a non-finite value at a key position no query may attend reaches the output"),
    Axis("masked_value_nonfinite", "NaN or Inf in a masked-out value",
         ("propagates", "contained", NA),
         "whether a non-finite value at a value position no query may attend reaches the "
         "output (0 * NaN = NaN in P @ V, even where the masked weight is an exact 0)"),
    Axis("batch_invariance", "Batch invariance",
         ("within_rounding", "differs", NA),
         "item i of a batch against the same item run alone: differs beyond a floor of 32 "
         "eps x the output's size (the evidence gives the largest difference); "
         "within_rounding within it, where CPUs that pick kernels summing in other orders "
         "give bitwise equal items on one machine and last-bit differences on another"),
)
# The argument names that would give a system each feature (softcap, rotary embeddings,
# grouped heads, QK-norm, ALiBi, caches, windows, sinks): a system
# whose signatures take none of them gets `not_applicable` read from the signatures
# (probing.feature_cells); one that takes any of them needs a probe.
FEATURE_ARGUMENTS: dict[str, tuple[str, ...]] = {
    "softcap": ("softcap", "soft_cap", "logit_softcapping", "attn_logit_softcapping",
                "logit_cap"),
    "rope_style": ("rope", "rotary", "rotary_emb", "rotary_dim", "rotary_pct",
                   "rotary_embedding_dim", "position_embeddings", "rope_theta", "do_rotary",
                   "cos_cache", "sin_cache", "rope_parameters"),
    "rope_partial": ("rotary_dim", "rotary_pct", "partial_rotary_factor",
                     "rotary_embedding_dim"),
    "kv_head_mapping": ("num_kv_heads", "num_key_value_heads", "kv_num_heads", "enable_gqa",
                        "num_key_value_groups", "num_query_heads"),
    "qk_norm_scope": ("qk_norm", "q_norm", "k_norm", "use_qk_norm", "normalize_qk",
                      "query_norm", "key_norm", "qk_layernorm"),
    "alibi_slopes": ("alibi", "alibi_slopes", "alibi_bias_max", "position_bias"),
    "cache_causal_alignment": ("past_key_value", "past_key_values", "past_key", "layer_past",
                               "cache", "kv_cache", "cache_position", "use_cache", "decode"),
    "cache_layout": ("past_key_value", "past_key_values", "past_key", "layer_past", "cache",
                     "kv_cache", "cache_position", "use_cache", "decode"),
    "window_width": ("window", "sliding_window", "window_size", "local_window_size",
                     "attention_window"),
    "softcap_order": ("softcap", "soft_cap", "logit_softcapping", "attn_logit_softcapping",
                      "logit_cap"),
    "sinks": ("sinks", "sink", "attention_sinks", "s_aux", "head_sink"),
    "rope_scaling_frequencies": ("rope_scaling", "rope_parameters", "rope_type", "scaling_factor",
                                 "freqs"),
    "rope_scaling_magnitude": ("rope_scaling", "rope_parameters", "rope_type", "attention_factor",
                               "mscale", "mscale_all_dim"),
    "mrope_layout": ("mrope_section", "mrope_interleaved", "rope_deltas", "image_grid_thw",
                     "video_grid_thw"),
    "vision_rope_layout": ("image_grid_thw", "grid_thw", "patch_embeds_list",
                           "max_patches_per_side", "image_sizes"),
    "gate_packing": ("output_gate", "attn_output_gate", "gated_attention",
                     "use_gated_attention", "headwise_attn_output_gate"),
    "relative_bias_buckets": ("relative_attention_bias", "has_relative_attention_bias",
                              "use_relative_attention_bias", "relative_attention_num_buckets",
                              "relative_attention_max_distance", "num_buckets"),
    "per_layer_rope": ("layer_types", "sliding_window_pattern", "rope_local_base_freq",
                       "no_rope_layers", "use_sliding_window_attention"),
    "nope_placement": ("no_rope_layers", "no_rope_layer_interval", "use_rope", "nope_layers",
                       "rope_layers"),
    "chunk_mask": ("attention_chunk_size", "chunk_size", "chunked_attention", "chunk"),
    "attention_temperature": ("attn_temperature_tuning", "floor_scale", "attn_scale"),
    "mla_rope_slice": ("kv_lora_rank", "q_lora_rank", "qk_rope_head_dim", "qk_nope_head_dim",
                       "latent_dim", "kv_latent_dim"),
}
AXIS_IDS = tuple(a.id for a in AXES)
BY_ID = {a.id: a for a in AXES}
