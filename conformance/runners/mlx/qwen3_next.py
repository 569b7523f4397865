"""mlx-lm's Qwen3-Next: `mlx_lm.models.qwen3_next.Qwen3NextAttention`, the gated
full-attention layer as MLX users run it.

mlx-lm 0.32.2 (QWEN3_NEXT below) builds the module from its ModelArgs: q_proj of
2 * H * head_dim rows whose output is reshaped (B, L, H, -1) and split in two on the last
axis (#L122-L126: per head the query, then the gate); q_norm and k_norm are nn.RMSNorm
(head_dim) (#L103-L104, the weight multiplies: mlx-lm's sanitize adds 1.0 to a transformers
checkpoint's zero-centred norms, #L503-L515, so the runner loads the canonical scale
itself, convert/gate.py norm="scale"); the rotation is initialize_rope(int(head_dim *
partial_rotary_factor), rope_theta, traditional=False) (#L106-L112: half-split over the
first dims) at the cache offset, 0 without a cache (#L137-L144); the fused op with scale
head_dim ** -0.5 and the mask it is given; then `self.o_proj(output * mx.sigmoid(gate))`
(#L151).  The runner builds it at the case's widths with the canonical W_q and W_g packed
per head into q_proj (load_weights strict), the case's mask as mx.fast's mask=.  What it
cannot say: cross-attention (one input x), positions past 0 (no offset without a cache),
interleaved pairs, a case without the gate, QK-norm or rotation (the module always applies
them).  The ledger's gate_packing probe asks it with the two packed each other way
(RawCall packed_gate); the runner only loads and calls.  mlx and mlx_lm are imported inside
functions only.
"""
from __future__ import annotations

from conformance.contract.api_facts import ApiFact
from conformance.contract.runner import NotExpressible, Observation, Translation
from conformance.runners.mlx.common import (
    MlxAnswers, MlxRunner, core_plan, held_dtype, import_mlx, mask_array, mx_dtype, to_f64,
    to_mx)

QWEN3_NEXT = ("https://github.com/ml-explore/mlx-lm/blob/v0.32.2/mlx_lm/models/"
              "qwen3_next.py")
MODULE = "Qwen3NextAttention"


def _limits(case) -> str | None:
    a, i = case.attention, case.inputs
    if a.output_gate is None:
        return (f"no attention.output_gate: {MODULE} returns self.o_proj(output * "
                f"mx.sigmoid(gate)) on every call ({QWEN3_NEXT}#L151); the case asks for none")
    if a.qk_norm is None or (a.qk_norm.kind, a.qk_norm.scope) != ("rms", "per_head"):
        return (f"attention.qk_norm must be rms per_head: {MODULE} applies nn.RMSNorm"
                f"(head_dim) to each head's q and k on every call ({QWEN3_NEXT}#L103-L104)")
    if a.rope is None:
        return (f"no attention.rope: {MODULE} rotates q and k with initialize_rope(...) on "
                f"every call ({QWEN3_NEXT}#L106-L112, #L137-L144); the case asks for none")
    if a.rope.style != "half_split":
        return (f"rope.style={a.rope.style}: {MODULE} builds initialize_rope(..., "
                f"traditional=False) ({QWEN3_NEXT}#L106-L112): half-split pairs only")
    d = a.qk_head_dim
    if int(d * (a.rope.rotary_dim / d)) != a.rope.rotary_dim:
        return (f"rope.rotary_dim={a.rope.rotary_dim}: the module rotates int(head_dim * "
                "partial_rotary_factor) dims, which no factor makes it")
    if not i.self_attention:
        return f"{MODULE}.__call__(x, mask, cache) takes one input: self-attention only"
    if a.v_head_dim != d or a.output_features != a.query_features:
        return (f"{MODULE} has one head_dim for q, k and v and o_proj maps back to "
                "hidden_size")
    if a.scale is not None and abs(a.scale - d ** -0.5) > 1e-15:
        return f"a scale other than 1/sqrt(head_dim): {MODULE}.scale = head_dim**-0.5"
    return None


def model_args(case):
    """ModelArgs at the case's widths (the linear-attention and MoE fields at their least:
    the attention module reads none of them)."""
    from mlx_lm.models.qwen3_next import ModelArgs

    a = case.attention
    tiny = dict(num_hidden_layers=1, intermediate_size=4, linear_num_value_heads=1,
                linear_num_key_heads=1, linear_key_head_dim=4, linear_value_head_dim=4,
                linear_conv_kernel_dim=2, num_experts=1, num_experts_per_tok=1,
                decoder_sparse_step=1, shared_expert_intermediate_size=4,
                mlp_only_layers=[], moe_intermediate_size=4, vocab_size=4,
                max_position_embeddings=4096)
    return ModelArgs(model_type="qwen3_next", hidden_size=a.query_features,
                     num_attention_heads=a.num_heads, num_key_value_heads=a.num_kv_heads,
                     head_dim=a.qk_head_dim, attention_bias=a.bias,
                     rms_norm_eps=a.qk_norm.eps, rope_theta=a.rope.base,
                     partial_rotary_factor=a.rope.rotary_dim / a.qk_head_dim, **tiny)


class MlxLmQwen3Next(MlxAnswers, MlxRunner):
    name = "mlx_lm.qwen3_next"
    system = "mlx_lm.models.qwen3_next.Qwen3NextAttention"
    description = ("mlx-lm's `Qwen3NextAttention` (sigmoid output gate packed per head in "
                   "q_proj, nn.RMSNorm QK-norm, partial half-split rotary)")
    requires = ("mlx", "mlx_lm")
    typed_system = "hf.qwen3_next"  # ModelArgs reads config.json: Qwen3NextConfig's words
    features = MlxRunner.features | {"rope", "qk_norm", "output_gate"}
    probe_needs = {"qk_norm": {"kind": "rms", "scope": "per_head"},
                   "rope": {"style": "half_split"},
                   "output_gate": {"activation": "sigmoid"}}
    # the mask raw (MlxAnswers: mask= as mx.fast takes it) and the gate's packing
    answers = frozenset({"attn_mask", "is_causal", "packed_gate"})
    probe_head_size = 6  # even: the rotation it always applies pairs dimensions
    probe_takes = frozenset({"grouped", "rotary_dim"})  # num_key_value_heads; its rope dims

    def translate(self, case):
        reason = _limits(case)
        if reason:
            return NotExpressible(reason)
        a = case.attention
        plan = core_plan(case)
        return Translation(
            f"{MODULE}(ModelArgs(hidden_size={a.query_features}, num_attention_heads="
            f"{a.num_heads}, num_key_value_heads={a.num_kv_heads}, head_dim={a.qk_head_dim}, "
            f"attention_bias={a.bias}, rope_theta={a.rope.base:g}, partial_rotary_factor="
            f"{a.rope.rotary_dim / a.qk_head_dim:g}, ...))(x, mask={plan.mask})", plan)

    def module(self, case, weights, packing: str):
        """The module with the canonical weights packed as `packing`, strictly loaded."""
        mx, _ = import_mlx()
        from mlx_lm.models.qwen3_next import Qwen3NextAttention

        from conformance.convert.gate import to_qwen3_next

        m = Qwen3NextAttention(model_args(case))
        m.set_dtype(mx_dtype(mx, case.inputs.dtype))
        state = to_qwen3_next(weights, packing, norm="scale")
        m.load_weights([(n, to_mx(mx, v, case.inputs.dtype)) for n, v in state.items()],
                       strict=True)
        return m

    def forward(self, case, translation, data, packing: str):
        mx, _ = import_mlx()
        m = self.module(case, data.weights, packing)
        mask = mask_array(mx, translation.plan, case, data.inputs.allowed, case.inputs.dtype)
        out = m(to_mx(mx, data.inputs.query, case.inputs.dtype), mask=mask)
        mx.eval(out)
        return m, out

    def run(self, case, translation, data):
        from mlx.utils import tree_flatten

        mx, _ = import_mlx()
        m, out = self.forward(case, translation, data, "per_head")
        params = dict(tree_flatten(m.parameters()))
        return Observation(
            output=to_f64(mx, out), parameters=sum(v.size for v in params.values()),
            weight_shapes={n: tuple(v.shape) for n, v in params.items()},
            notes=["q_proj rows [q_h | gate_h] per head; output * mx.sigmoid(gate) before "
                   "o_proj", "q_norm, k_norm: nn.RMSNorm (the weight multiplies, no offset)",
                   f"rotary half-split over {case.attention.rope.rotary_dim} dims from "
                   "position 0 (no cache)"],
            extras={"output_dtype": held_dtype(out), "mask_passed": str(translation.plan.mask)})

    def answer(self, case, data, raw):
        """RawCall packed_gate: the module with the canonical W_q and W_g packed into q_proj
        as `raw.value` (per_head, halves, or a separate gate_proj), load_weights(strict=
        True); the module's own error (a parameter it lacks) propagates."""
        if raw.argument != "packed_gate":
            return super().answer(case, data, raw)
        t = self.translate(case)
        if isinstance(t, NotExpressible):
            raise NotImplementedError(f"{self.name} cannot build the case: {t.reason}")
        mx, _ = import_mlx()
        _, out = self.forward(case, t, data, raw.value)
        return to_f64(mx, out), f"{t.call} after load_weights(<q_proj packed {raw.value}>, " \
            "strict=True)"

    def answer_with(self, mx, case, data, mask):
        """The module on the case's canonical weights (per head) with `mask` raw as its
        mask= (what it hands mx.fast.scaled_dot_product_attention)."""
        t = self.translate(case)
        if isinstance(t, NotExpressible):
            raise NotImplementedError(f"{self.name} cannot build the case: {t.reason}")
        m = self.module(case, data.weights, "per_head")
        out = m(to_mx(mx, data.inputs.query, case.inputs.dtype), mask=mask)
        return out, f"{t.call.rsplit('(x, mask=', 1)[0]}(x, {{mask}})"

    def conventions(self):
        """What the module's API shows on 2 heads of 4 over 8 features (a weight's shape, its
        call's parameters and return); the ledger asks the rest."""
        from mlx.utils import tree_flatten
        from mlx_lm.models.qwen3_next import Qwen3NextAttention

        from conformance.case.loader import parse_case
        from conformance.runners.mlx.observations import api_cells

        case = parse_case({"id": "mlx-lm-qwen3-next-api", "attention": {
            "num_heads": 2, "query_features": 8, "qk_head_dim": 4, "bias": False,
            **self.probe_needs}, "inputs": {"batch": 1, "query_len": 3, "self_attention": True}},
            "<api>")
        m = Qwen3NextAttention(model_args(case))
        held = dict(tree_flatten(m.parameters()))
        q, count = tuple(held["q_proj.weight"].shape), sum(v.size for v in held.values())
        return [
            ApiFact("head_size_from", "per_head", f"{MODULE}(ModelArgs(hidden_size=8, "
                    f"num_attention_heads=2, head_dim=4)): q_proj.weight {q} = (2 heads x 2 x "
                    f"4, 8): head_dim is per head ({QWEN3_NEXT}#L82-L86)"),
            ApiFact("tensor_layout", "batch_first", f"{MODULE}.__call__(x, mask, cache): x "
                    "(B, L, D), `B, L, D = x.shape`"),
            ApiFact("inputs_order", "single_input", f"{MODULE}.__call__(x, mask=None, "
                    "cache=None): one input; keys and values come from it"),
            ApiFact("weights_returned", "none", f"{MODULE}.__call__ returns self.o_proj(...): "
                    "the output alone"),
            ApiFact("weight_names", f"q_proj.weight {q} out x in (nn.Linear), 2 H d rows: "
                    "[query | gate] per head", "mlx.nn.Linear holds (out, in) weights; "
                    "q_proj's output is reshaped (B, L, H, 2 d) and split per head"),
            ApiFact("parameter_count", "(3 H + 2 H_kv) d E + 2 d (+ (2 H + 2 H_kv) d + E "
                    "biases)", f"probe E=8, H=2, d=4, no bias: {count}"),
            *api_cells(MODULE)]

    def signatures(self):
        from mlx_lm.models.qwen3_next import ModelArgs, Qwen3NextAttention

        return (f"{MODULE} and ModelArgs", (Qwen3NextAttention.__init__,
                                             Qwen3NextAttention.__call__, ModelArgs.__init__))
