"""HuggingFace Qwen3-Next: `Qwen3NextAttention`, the gated full-attention layer.

Qwen3NextAttention (transformers/models/qwen3_next/modeling_qwen3_next.py #L229-L304)
is built from Qwen3NextConfig at the case's widths, layer_idx 0 (the attention module
alone: the model's linear-attention layers, MoE and norms are other modules).  What it
does on every call, which the cases carry:
- q_proj has 2 * H * head_dim rows; its output is viewed (B, T, H, 2 head_dim) and
  chunked in two on the last axis (#L270-L273): per head the query, then the gate;
- q_norm and k_norm are Qwen3NextRMSNorm(head_dim) (#L253-L256): RMS over each head,
  times (1 + weight) with the weight initialised to zeros (#L126-L139), so the runner
  stores the canonical scale minus one (convert/gate.py, norm="offset");
- the rotary (Qwen3NextRotaryEmbedding) turns the first int(head_dim *
  partial_rotary_factor) dims of each head, half-split (`rotate_half`), the config's
  default factor 0.25: the runner sets rope_parameters' partial_rotary_factor to the
  case's rotary_dim / head_dim; a case without rope gets the identity rotation;
- attn_output (B, T, H * head_dim) times torch.sigmoid(gate), element by element, then
  o_proj (#L300-L303); scaling = head_dim ** -0.5.
The canonical W_q and W_g go into q_proj per head ([q_h | g_h], convert/gate.py).  The
ledger's gate_packing probe asks the module with the two packed each other way through
`answer` (RawCall packed_gate): the runner only loads and calls.
"""
from __future__ import annotations

from conformance.contract.runner import NotExpressible, RawCall, to_numpy
from conformance.runners.hf.common import SOURCE, SizeFacts, import_torch
from conformance.runners.hf.declared import self_attention_refusals
from conformance.runners.hf.rotary import ROTATE_HALF, QKNormRotaryHFRunner, qk_norm_limits, \
    rope_limits

QWEN3_NEXT_SOURCE = SOURCE + "qwen3_next/modeling_qwen3_next.py"
GATE_LINE = f"{QWEN3_NEXT_SOURCE}#L270-L303"


class HFQwen3Next(QKNormRotaryHFRunner):
    name = "hf.qwen3_next"
    system = "transformers.models.qwen3_next.modeling_qwen3_next.Qwen3NextAttention"
    path = "gated output; rotary from Qwen3NextRotaryEmbedding, or neutralised"
    backend = "eager"
    typed_system = "hf.qwen3_next"  # Qwen3NextConfig: Llama's words, gated
    harness_choices = {"attn_implementation": ("eager", "sdpa")}
    description = ("`Qwen3NextAttention` (sigmoid output gate packed per head in q_proj, RMS "
                   "QK-norm per head, partial half-split rotary, grouped-query)")
    features = QKNormRotaryHFRunner.features | {"qk_norm", "output_gate"}
    probe_takes = QKNormRotaryHFRunner.probe_takes | {"rotary_dim"}
    answers = QKNormRotaryHFRunner.answers | {"packed_gate"}
    rope_source = f"{QWEN3_NEXT_SOURCE}#L146"
    partial_line = f"{QWEN3_NEXT_SOURCE}#L109"  # compute_default_rope_parameters: dim
    probe_attention = {"qk_norm": {"kind": "rms", "scope": "per_head"},
                       "output_gate": {"activation": "sigmoid"}}
    refusals = self_attention_refusals("Qwen3NextAttention", gqa=True,
                                       scaling="scaling = head_dim**-0.5")
    call_template = "Qwen3NextAttention(Qwen3NextConfig({args}), layer_idx=0)"
    module, model = "qwen3_next", "Qwen3Next"

    def model_limits(self, case):
        if case.attention.output_gate is None:
            return ("no attention.output_gate: Qwen3NextAttention multiplies its output by "
                    "torch.sigmoid(gate) on every call (q_proj holds 2 * H * head_dim rows, "
                    f"{GATE_LINE}); the case asks for no gate")
        return qk_norm_limits(case, "per_head", "Qwen3NextAttention", (
            "Qwen3NextAttention builds q_norm = Qwen3NextRMSNorm(self.head_dim): each head "
            "apart")) or rope_limits(
            case, style="half_split", why_style=f"Qwen3NextAttention: {ROTATE_HALF}",
            partial=True) or self._partial_limits(case)

    @staticmethod
    def _partial_limits(case):
        r, d = case.attention.rope, case.attention.qk_head_dim
        if r is not None and int(d * (r.rotary_dim / d)) != r.rotary_dim:
            return (f"rope.rotary_dim={r.rotary_dim}: Qwen3NextRotaryEmbedding rotates "
                    f"int(head_dim * partial_rotary_factor) dims, which no factor makes "
                    f"{r.rotary_dim} at head_dim {d}")
        return None

    def config_call(self, case):
        """The config call with the case's rotary width as partial_rotary_factor."""
        call, cfg = super().config_call(case)
        r = case.attention.rope
        if r is None:
            return call, cfg
        factor = r.rotary_dim / case.attention.qk_head_dim
        call = call.replace("rope_parameters={", "rope_parameters={'partial_rotary_factor': "
                            f"{factor:g}, ", 1)
        return call, {**cfg, "partial_rotary_factor": factor}

    def state(self, case, weights):
        return self.packed_state(weights, "per_head")

    @staticmethod
    def packed_state(weights, packing: str):
        from conformance.convert.gate import to_qwen3_next

        return to_qwen3_next(weights, packing, norm="offset")

    def answer(self, case, data, raw: RawCall):
        """RawCall packed_gate: the module of the case's config call with the canonical
        W_q and W_g packed into q_proj as `raw.value` (per_head, halves, or separate: a
        gate_proj of its own), loaded with load_state_dict(strict=True), no other mask
        than the case's; the module's own error (a key it lacks) propagates."""
        if raw.argument != "packed_gate":
            return super().answer(case, data, raw)
        t = self.translate(case)
        if isinstance(t, NotExpressible):
            raise NotImplementedError(f"{self.name} cannot build the case: {t.reason}")
        torch = import_torch()
        dt = getattr(torch, case.inputs.dtype)
        module = self.module_for(torch, case, t.plan, data.weights)
        module.load_state_dict({n: torch.tensor(a, dtype=dt) for n, a in self.packed_state(
            data.weights, raw.value).items()}, strict=True)
        with torch.no_grad():
            out, _ = self.call(torch, case, data, module, torch.tensor(data.inputs.query,
                                                                       dtype=dt))
        return to_numpy(out), (f"{t.call}.load_state_dict(<q_proj packed {raw.value}>, "
                               "strict=True)")

    def notes(self, case, module):
        return self.rope_notes(case) + [
            "q_norm, k_norm: Qwen3NextRMSNorm over each head's head_dim values, times "
            f"(1 + weight), eps {module.q_norm.eps:g}",
            "output gate: q_proj rows [q_h | gate_h] per head, attn_output * sigmoid(gate) "
            "before o_proj"]

    sizes = SizeFacts("per_head", f"{QWEN3_NEXT_SOURCE}#L241", "q_proj.weight",
                      "out x in (nn.Linear), 2 H d rows: [query | gate] per head",
                      "q_proj, k_proj, v_proj, o_proj are nn.Linear: (out, in); q_proj holds "
                      "each head's query rows then its gate rows",
                      "(3 H + 2 H_kv) d E + 2 d (+ (2 H + 2 H_kv) d + E biases)",
                      "probe E=8, H=2, d=4, bias: {n}")
