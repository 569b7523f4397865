"""HuggingFace AFMoE: `AfmoeAttention`, a gated attention whose gate has a projection of its
own.

AfmoeAttention (transformers/models/afmoe/modeling_afmoe.py #L299-L387) is built from
AfmoeConfig at the case's widths as layer 0 of a one-layer model whose layer_types is
["full_attention"].  What it does on every call, which the cases carry:
- gate_proj = nn.Linear(hidden_size, H * head_dim, bias=False) (#L337), beside q_proj of
  H * head_dim rows: the gate is not packed with the queries;
- q_norm and k_norm are AfmoeRMSNorm(head_dim) (#L335-L336), the weight multiplying
  (#L91-L105, "equivalent to T5LayerNorm"), so the runner loads the canonical scale;
- it rotates q and k only on a sliding layer (`if self.is_local_attention`, #L360): a
  full-attention layer takes no positions, so a case with rope is not expressible here;
- output (B, T, H * head_dim) times torch.sigmoid(gate_states), then o_proj (#L383-L385);
  scaling = head_dim ** -0.5; attention_bias biases q, k, v and o_proj but never gate_proj.
The canonical W_q and W_g go into q_proj and gate_proj (convert/gate.py, "separate").  The
ledger's gate_packing probe asks it with the two packed into q_proj (per head, halves)
through `answer` (RawCall packed_gate): the runner only loads and calls.
"""
from __future__ import annotations

from conformance.contract.runner import NotExpressible, RawCall, to_numpy
from conformance.runners.hf.common import SOURCE, SizeFacts, import_torch
from conformance.runners.hf.declared import self_attention_refusals
from conformance.runners.hf.rotary import QKNormRotaryHFRunner, qk_norm_limits

AFMOE_SOURCE = SOURCE + "afmoe/modeling_afmoe.py"


class HFAfmoe(QKNormRotaryHFRunner):
    name = "hf.afmoe"
    system = "transformers.models.afmoe.modeling_afmoe.AfmoeAttention"
    path = "gated output from its own gate_proj; a full-attention layer (no rotation)"
    backend = "eager"
    typed_system = "hf.afmoe"  # AfmoeConfig: Llama's words, gated
    harness_choices = {"attn_implementation": ("eager", "sdpa")}
    description = ("`AfmoeAttention` (sigmoid output gate from its own `gate_proj`, RMS "
                   "QK-norm per head, grouped-query; a full-attention layer: no rotation)")
    features = QKNormRotaryHFRunner.features - {"rope"} | {"qk_norm", "output_gate"}
    answers = QKNormRotaryHFRunner.answers - {"partial_rotary"} | {"packed_gate"}
    probe_takes = QKNormRotaryHFRunner.probe_takes - {"rotary_dim"}
    probe_attention = {"qk_norm": {"kind": "rms", "scope": "per_head"},
                       "output_gate": {"activation": "sigmoid"}, "bias": False}
    refusals = self_attention_refusals("AfmoeAttention", gqa=True,
                                       scaling="scaling = head_dim**-0.5")
    call_template = "AfmoeAttention(AfmoeConfig({args}), layer_idx=0)"
    module, model = "afmoe", "Afmoe"

    def model_limits(self, case):
        a = case.attention
        if a.output_gate is None:
            return ("no attention.output_gate: AfmoeAttention computes output * torch."
                    "sigmoid(gate_states), gate_states = self.gate_proj(hidden_states), on "
                    f"every call ({AFMOE_SOURCE}#L354, #L384); the case asks for no gate")
        if a.bias:
            return ("bias=True: AfmoeAttention's gate_proj is nn.Linear(..., bias=False) "
                    f"({AFMOE_SOURCE}#L337) while attention_bias biases q, k, v and o_proj: "
                    "the gate's bias has no place")
        return qk_norm_limits(case, "per_head", "AfmoeAttention", (
            "AfmoeAttention builds q_norm = AfmoeRMSNorm(self.head_dim): each head apart"))

    def bias_limits(self, case):
        return None  # model_limits says why a biased case has no place

    def config_kwargs(self, plan):
        """One full-attention layer: AfmoeAttention reads config.layer_types[layer_idx]
        (#L332), and only a sliding layer rotates."""
        return {**super().config_kwargs(plan), "num_hidden_layers": 1,
                "layer_types": ["full_attention"]}

    def config_call(self, case):
        call, cfg = super().config_call(case)
        return call.replace("AfmoeConfig(", "AfmoeConfig(num_hidden_layers=1, layer_types="
                            "['full_attention'], ", 1), cfg

    def state(self, case, weights):
        return self.packed_state(weights, "separate")

    @staticmethod
    def packed_state(weights, packing: str):
        from conformance.convert.gate import to_qwen3_next

        return to_qwen3_next(weights, packing, norm="scale")

    def answer(self, case, data, raw: RawCall):
        """RawCall packed_gate: the module of the case's config call with the canonical
        W_q and W_g as `raw.value` packs them (into q_proj per head or in halves, or q_proj
        and gate_proj apart), load_state_dict(strict=True); its own error propagates."""
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
        return to_numpy(out), (f"{t.call}.load_state_dict(<W_q, W_g packed {raw.value}>, "
                               "strict=True)")

    def rope_notes(self, case):
        return ["a full-attention layer: AfmoeAttention rotates only on sliding layers "
                "(position_embeddings are handed over and not read)"]

    def notes(self, case, module):
        return self.rope_notes(case) + [
            "q_norm, k_norm: AfmoeRMSNorm over each head's head_dim values (the weight "
            f"multiplies), eps {module.q_norm.variance_epsilon:g}",
            "output gate: gate_proj (no bias) apart from q_proj, output * sigmoid(gate) "
            "before o_proj"]

    sizes = SizeFacts("per_head", f"{AFMOE_SOURCE}#L318", "q_proj.weight",
                      "out x in (nn.Linear); the gate in gate_proj (H d, E)",
                      "q_proj, k_proj, v_proj, o_proj, gate_proj are nn.Linear: (out, in)",
                      "(3 H + 2 H_kv) d E + 2 d (+ (H + 2 H_kv) d + E biases)",
                      "probe E=8, H=2, d=4, no bias: {n}")
