"""HuggingFace DeepSeek-V3: `DeepseekV3Attention`, multi-head latent attention (MLA) in its
materialised form, with the rotary embedding of `DeepseekV3RotaryEmbedding`.

DeepseekV3Config(q_lora_rank, kv_lora_rank, qk_rope_head_dim, qk_nope_head_dim,
v_head_dim, rope_interleave) sizes the module (modeling_deepseek_v3.py#L352-L405):
q_a_proj -> q_a_layernorm -> q_b_proj (or one q_proj with q_lora_rank None),
kv_a_proj_with_mqa -> [latent | k_pe], kv_a_layernorm, kv_b_proj -> per head [k_nope | v];
the rotated slice is the last qk_rope_head_dim dims (#L443 torch.split), k_pe one head
expanded to every head (#L418); RMSNorm eps 1e-6 (#L380, #L392: the class default, not
rms_norm_eps).  The canonical MLA weights go in through convert/mla.py.  The scale is
`yarn_apply_mscale(rope_parameters, qk_head_dim ** -0.5)` (#L268-L274, #L405): a rope type
other than default with mscale_all_dim multiplies it by yarn_get_mscale(factor,
mscale_all_dim) ** 2; cos and sin carry the rotary module's attention_scaling
(#L98-L99).  So a case's YaRN magnitude on the softmax scale is the config's mscale =
mscale_all_dim; on cos and sin it is a config without mscale_all_dim.  rope_interleave
(the config's default True) rotates interleaved pairs; False rotate_half's pairs.  The
module is only MLA: a case without attention.mla is not this system's.  Decodes go
through DynamicCache (decoding.py), which caches the latent and k_pe (#L459-L460).
"""
from __future__ import annotations

from conformance.runners.hf.common import SOURCE, SizeFacts, cross_reason, default_scale
from conformance.runners.hf.decoding import DecodingHFRunner, refusals
from conformance.runners.hf.rope_parameters import hf_rope
from conformance.runners.hf.rotary import rope_theta

DEEPSEEK_SOURCE = SOURCE + "deepseek_v3/modeling_deepseek_v3.py"
MLA_KEYS = ("q_lora_rank", "kv_lora_rank", "qk_rope_head_dim", "qk_nope_head_dim",
            "rope_interleave")


def scaling_limits(case) -> str | None:
    """What DeepseekV3Attention cannot put where the case's rope scaling asks."""
    s = case.attention.rope.scaling
    if s is None or s.kind not in ("yarn", "longrope"):
        return None
    where = f"{DEEPSEEK_SOURCE}#L268-L274"
    if s.kind == "longrope" and s.magnitude == "softmax_scale":
        return ("rope.scaling longrope with magnitude softmax_scale: DeepseekV3Attention's "
                f"softmax scale takes only yarn_get_mscale(factor, mscale_all_dim) ({where})")
    if s.kind == "yarn" and s.magnitude == "softmax_scale" and s.attention_factor is not None:
        return ("rope.scaling.attention_factor with magnitude softmax_scale: the rotary "
                "module puts attention_factor on cos and sin; the softmax scale takes "
                f"yarn_get_mscale(factor, mscale_all_dim) squared only ({where})")
    if s.kind == "yarn" and s.magnitude != "softmax_scale" and s.mscale_all_dim:
        return (f"rope.scaling.mscale_all_dim={s.mscale_all_dim:g} with the magnitude on cos "
                "and sin: yarn_apply_mscale multiplies the softmax scale by yarn_get_mscale("
                f"factor, mscale_all_dim) ** 2 whenever mscale_all_dim is set ({where})")
    return None


def deepseek_rope(case) -> tuple[dict, int | None]:
    """(rope_parameters beyond rope_type default, max_position_embeddings) of the case's
    scaling: a softmax-scale YaRN magnitude as mscale = mscale_all_dim (cos and sin then
    carry their ratio, 1)."""
    hf = hf_rope(case)
    if hf is None:
        return {}, None
    params = dict(hf.parameters)
    s = case.attention.rope.scaling
    if s.kind == "yarn" and s.magnitude == "softmax_scale":
        m = float(s.mscale_all_dim or s.mscale or 1.0)
        params.update(mscale=m, mscale_all_dim=m)
    return params, hf.max_position_embeddings


class HFDeepseekV3(DecodingHFRunner):
    name = "hf.deepseek_v3"
    system = "transformers.models.deepseek_v3.modeling_deepseek_v3.DeepseekV3Attention"
    path = "MLA materialised (kv_b_proj), rotary from DeepseekV3RotaryEmbedding"
    backend = "eager"
    typed_system = "hf.deepseek_v3"  # DeepseekV3Config's MLA words
    description = ("`DeepseekV3Attention` (multi-head latent attention: low-rank q and kv, "
                   "the last qk_rope_head_dim dims rotated, one shared rope key; YaRN's "
                   "mscale^2 on the softmax scale; decoding through `DynamicCache`)")
    # the runner builds "eager"; a model built from its config gets "sdpa", which reads a
    # causal switch eager ignores: the ledger measures both (conventions/probes/choices.py)
    harness_choices = {"attn_implementation": ("eager", "sdpa")}
    features = DecodingHFRunner.features | {"rope_scaling", "mla"}
    needs_rope = True
    native_style = "interleaved"  # rope_interleave defaults to True
    # no partial_rotary raw call (its rotary width is qk_rope_head_dim, a config field) and
    # no attention function on plain q, k, v projections (MLA has none)
    answers = DecodingHFRunner.answers - {"partial_rotary", "attention_function"}
    probe_takes = DecodingHFRunner.probe_takes - {"rotary_dim", "grouped"}
    # the ledger's probe cases as MLA: the rotary width the probe asks (default the head),
    # the unrotated rest, a latent of 4, no bias
    probe_attention = {"bias": False, "rope": {"style": "interleaved"},
                       "mla": {"kv_lora_rank": 4}}
    module, model = "deepseek_v3", "DeepseekV3"
    rope_source = f"{DEEPSEEK_SOURCE}#L310"
    mla_lines = f"{DEEPSEEK_SOURCE}#L370-L397"  # its projections
    refusals = refusals("DeepseekV3", "yarn_apply_mscale(rope_parameters, qk_head_dim**-0.5)")
    config_keys = ("hidden_size", "num_attention_heads", "num_key_value_heads", "v_head_dim",
                   *MLA_KEYS, "attn_implementation")
    call_template = "DeepseekV3Attention(DeepseekV3Config({args}), layer_idx=0)"

    def limits(self, case):
        a = case.attention
        if a.mla is None:
            return (f"no attention.mla: {self.model}Attention is multi-head latent attention on "
                    "every call (q_a_proj, kv_a_proj_with_mqa, kv_b_proj; no plain q, k, v "
                    f"projections); the case asks for plain attention ({self.mla_lines})")
        if case.decode is not None and case.has_non_causal_mask:
            return ("a decode with a mask beside the causal one: the runner decodes as "
                    "generate does, each call's mask from the model's builder alone")
        return (cross_reason(case, self.refusals.cross_how) or self.style_limits(case)
                or scaling_limits(case)
                or (None if default_scale(case) else self.refusals.scale_why))

    def style_limits(self, case) -> str | None:
        """DeepseekV3Config.rope_interleave picks either pairing."""
        return None

    def config_call(self, case):
        a, m = case.attention, case.attention.mla
        cfg = {"hidden_size": a.query_features, "num_attention_heads": a.num_heads,
               "num_key_value_heads": a.num_kv_heads, "v_head_dim": a.v_head_dim,
               **{k: getattr(m, k) for k in MLA_KEYS[:-1]}}
        if "rope_interleave" in self.config_keys:  # the pairing from the case's rope (a
            # probe's variant changes rope.style alone)
            cfg["rope_interleave"] = a.rope.style == "interleaved"
        theta = rope_theta(case)
        params, length = deepseek_rope(case)
        rope = {"rope_type": params.get("rope_type", "default"), "rope_theta": theta,
                **{k: v for k, v in params.items() if k != "rope_type"}}
        extra = "" if length is None else f", max_position_embeddings={length}"
        args = ", ".join(f"{k}={v}" for k, v in cfg.items())
        call = self.call_template.format(args=f"{args}, rope_parameters={rope!r}{extra}")
        return call, {**cfg, "rope_theta": theta, "rope_scaling": params or None,
                      "max_position_embeddings": length}

    def state(self, case, weights):
        from conformance.convert.mla import to_deepseek_v3

        return to_deepseek_v3(weights, "materialised")

    def notes(self, case, module):
        from conformance.runners.hf.common import import_torch

        rot = self.rotary(import_torch(), module.config)
        pairing = getattr(module.config, "rope_interleave", "no setting (interleaved)")
        return self.rope_notes(case) + self.decode_notes(case, module) + [
            f"softmax scale {module.scaling:.6g} = qk_head_dim**-0.5 x "
            f"{module.scaling * module.qk_head_dim ** 0.5:.6g} (yarn_apply_mscale); "
            f"{self.model}RotaryEmbedding attention_scaling {rot.attention_scaling:.6g} on "
            f"cos and sin; rope_interleave={pairing}; the rotated slice is the last "
            f"{module.qk_rope_head_dim} of {module.qk_head_dim} dims"]

    def size_evidence(self, case, module, shape):
        return (f"{self.model}Config(hidden_size=8, num_attention_heads=2, qk_nope_head_dim="
                f"{module.qk_nope_head_dim}, qk_rope_head_dim={module.qk_rope_head_dim}, "
                f"v_head_dim={module.v_head_dim}): q_proj.weight {shape}; per-head widths")

    sizes = SizeFacts("per_head", f"{DEEPSEEK_SOURCE}#L360-L366", "q_proj.weight",
                      "out x in (nn.Linear)", "q_proj (or q_a_proj, q_b_proj), "
                      "kv_a_proj_with_mqa, kv_b_proj, o_proj are nn.Linear: (out, in)",
                      "H d_qk E + E (r_kv + d_r) + r_kv + r_kv H (d_n + d_v) + H d_v E "
                      "(with q_lora_rank r_q: E r_q + r_q + r_q H d_qk for the query)",
                      "probe E=8, H=2, d_qk=4 (4 rotated), r_kv=4: {n}")
