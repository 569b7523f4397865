"""HuggingFace SmolLM3: `SmolLM3Attention` at the case's layer, with the NoPE layers of its
schedule.

SmolLM3Config's `no_rope_layers` is one flag per layer, 1 where the layer uses RoPE and 0
where it does not (configuration_smollm3.py#L100-L104: `int((layer_idx + 1) %
no_rope_layer_interval != 0)`, so every fourth layer has none by default), and
SmolLM3Attention reads `self.use_rope = config.no_rope_layers[layer_idx]` and rotates q and
k only then (modeling_smollm3.py#L192, #L215-L217).  The runner passes the case's
attention.layer_schedule as those flags (0 at each of its nope_layers), builds the module
at the asked layer and hands it position_embeddings from SmolLM3RotaryEmbedding at the
case's positions, as SmolLM3Model does for every layer; a case without a schedule is layer
0 of a one-layer model.  Sliding layers (its use_sliding_window, on NoPE layers only) are
not asked: a schedule with a sliding type is not expressible here.  SmolLM3Config has no
head_dim field (head_dim = hidden_size // num_attention_heads), the scale is
head_dim**-0.5 and the pairs half-split (`rotate_half`).  torch and transformers are
imported inside functions only.
"""
from __future__ import annotations

from conformance.contract.runner import harness_limit
from conformance.runners.hf.common import SOURCE, SizeFacts
from conformance.runners.hf.declared import self_attention_refusals
from conformance.runners.hf.decoding import DecodingHFRunner
from conformance.runners.hf.rotary import rope_theta

SMOLLM3_SOURCE = SOURCE + "smollm3/modeling_smollm3.py"
SMOLLM3_CONFIG = SOURCE + "smollm3/configuration_smollm3.py"


def rope_flags(case) -> list[int]:
    """no_rope_layers as SmolLM3Config reads it: 1 = the layer uses RoPE, 0 = NoPE."""
    s = case.attention.layer_schedule
    if s is None:
        return [1]
    return [0 if i in s.nope_layers else 1 for i in range(s.num_layers)]


class HFSmolLM3(DecodingHFRunner):
    name = "hf.smollm3"
    typed_system = "hf.llama"  # SmolLM3Config reads LlamaConfig's words (head_dim: getattr, #L173)
    system = "transformers.models.smollm3.modeling_smollm3.SmolLM3Attention"
    path = "layer <layer_idx> of SmolLM3Config(no_rope_layers), rotary from SmolLM3RotaryEmbedding"
    backend = "eager"
    description = ("`SmolLM3Attention` at a layer of its schedule (`no_rope_layers`: 1 = RoPE, "
                   "0 = NoPE), grouped-query, half-split rotary")
    features = DecodingHFRunner.features | {"layer_schedule"}
    rope_source = f"{SMOLLM3_SOURCE}#L95"
    partial_line = f"{SMOLLM3_SOURCE}#L78"  # compute_default_rope_parameters: dim = head_dim
    module, model = "smollm3", "SmolLM3"
    refusals = self_attention_refusals(
        "SmolLM3Attention", gqa=True, scaling="scaling = head_dim**-0.5", width_fixed=(
            "SmolLM3Config has no head_dim field: head_dim = hidden_size // num_attention_heads"))
    config_fields = {"hidden_size": "query_features", "num_attention_heads": "num_heads",
                     "num_key_value_heads": "num_kv_heads", "attention_bias": "bias"}
    config_keys = ("hidden_size", "num_attention_heads", "num_key_value_heads",
                   "attention_bias", "attn_implementation")
    call_template = "SmolLM3Attention(SmolLM3Config({args}), layer_idx=0)"

    def model_limits(self, case):
        s = case.attention.layer_schedule
        if s is None:
            return super().model_limits(case)
        if "sliding" in s.layer_types:
            return harness_limit("a sliding type: SmolLM3Config makes only NoPE layers sliding "
                                 f"(use_sliding_window, {SMOLLM3_CONFIG}#L105-L113); the "
                                 "runner asks its full layers")
        if s.settings("full").rope_scaling is not None:
            return harness_limit("a scaled rope in a schedule: the runner passes the schedule's "
                                 "base as rope_theta only")
        return super().model_limits(case)

    def config_call(self, case):
        """The config call with the schedule's base, no_rope_layers and the layer index."""
        s = case.attention.layer_schedule
        call, cfg = super().config_call(case)
        if s is None:
            return call, {**cfg, "layer_idx": 0, "no_rope_layers": [1]}
        theta = s.settings("full").rope_base
        call = call.replace("Config(", f"Config(num_hidden_layers={s.num_layers}, "
                            f"no_rope_layers={rope_flags(case)}, ", 1).replace(
            "layer_idx=0", f"layer_idx={s.layer}")
        call = call.replace(f"rope_parameters={{'rope_theta': {rope_theta(case):g}}}",
                            f"rope_parameters={{'rope_theta': {theta:g}}}", 1)
        return call, {**cfg, "rope_theta": float(theta), "layer_idx": s.layer,
                      "no_rope_layers": rope_flags(case)}

    def config_kwargs(self, plan):
        return {"num_hidden_layers": len(plan["no_rope_layers"]),
                "no_rope_layers": list(plan["no_rope_layers"])}

    def build(self, torch, plan):
        """ConfigRotaryHFRunner's config, the module at the plan's layer."""
        module = super().build(torch, plan)
        _, attention = self._classes()
        return attention(module.config, layer_idx=plan["layer_idx"])

    def rope_notes(self, case):
        s = case.attention.layer_schedule
        if s is None:
            return super().rope_notes(case)
        p0 = case.inputs.position_offset
        return [f"position_embeddings from SmolLM3RotaryEmbedding (rope_theta "
                f"{s.settings('full').rope_base:g}) at position_ids {p0}.."
                f"{p0 + case.inputs.query_len - 1}, handed to the layer as SmolLM3Model does"]

    def notes(self, case, module):
        flags = module.config.no_rope_layers
        return self.rope_notes(case) + self.decode_notes(case, module) + [
            f"layer {module.layer_idx}: no_rope_layers[{module.layer_idx}] = "
            f"{flags[module.layer_idx]} (use_rope {bool(module.use_rope)}; the flags "
            f"{flags}, {SMOLLM3_SOURCE}#L192)"]

    sizes = SizeFacts("derived_from_width", f"{SMOLLM3_SOURCE}#L179", "q_proj.weight",
                      "out x in (nn.Linear)",
                      "q_proj, k_proj, v_proj, o_proj are nn.Linear: (out, in)",
                      "(H + H_kv) d E x 2 (+ (H + 2 H_kv) d + E biases)",
                      "probe E=8, H=2, d=4, bias: {n}")

    def size_evidence(self, case, module, shape):
        return (f"SmolLM3Config(hidden_size=8, num_attention_heads=2): head_dim "
                f"{module.head_dim}, q_proj.weight {shape}; no head-size field")
