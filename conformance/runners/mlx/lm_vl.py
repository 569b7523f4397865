"""mlx-lm's Qwen2-VL and Qwen3-VL text attentions: layer 0's `self_attn` of
`mlx_lm.models.qwen2_vl.Model` / `qwen3_vl.Model` built from a text_config, as mlx-lm loads
a Qwen-VL checkpoint (its vision tower dropped: `sanitize` pops "visual", qwen2_vl.py#L45).

What the sources say, mlx-lm 0.32.2:
- qwen2_vl.Model wraps qwen2.Model and takes (inputs, cache, input_embeddings): no position
  ids (qwen2_vl.py#L33-L42); qwen3_vl.Model wraps qwen3.Model alike (qwen3_vl.py#L33-L42).
- the attention rotates q and k with `self.rope(x, offset=cache.offset)` (qwen2.py#L73-L79,
  qwen3.py#L89-L94): positions are the cache offset + t, one axis.
- the rope is `initialize_rope(head_dim, rope_theta, ..., scaling_config=rope_scaling)`;
  Qwen2-VL's config says {"type": "mrope", "mrope_section": [...]}, whose branch checks
  three sections and returns `nn.RoPE(dims, traditional, base)` (rope_utils.py#L366-L371);
  Qwen3-VL's says {"rope_type": "default", "mrope_section": [...], "mrope_interleaved":
  true} (taken from rope_parameters, qwen3.py#L33-L38): nn.RoPE as well.
So a case's per-axis positions have no argument: the matrix's translate says so (not
expressible), and the ledger's probe cases run as a user runs the model on the config's
sections and the tokens (probe_translate): the attention at positions 0..T-1, which the
ledger reads.  Qwen2's q, k and v projections always carry biases and o_proj never
(qwen2.py#L45-L48): a case without biases loads zeros there; Qwen3's carry none and apply
RMSNorm q_norm / k_norm per head (qwen3.py#L55-L61).  mlx and mlx_lm are imported inside
functions only.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from conformance.contract.runner import NotExpressible, Observation, Translation, harness_limit
from conformance.runners.mlx.common import MlxRunner, held_dtype, import_mlx, to_f64, to_mx

MLX_LM = "https://github.com/ml-explore/mlx-lm/blob/v0.32.2/mlx_lm/models/"
ONE_AXIS_WHY = (f"mlx-lm's Model takes no position ids ({MLX_LM}qwen2_vl.py#L33-L42) and its "
                f"attention rotates at cache.offset + t ({MLX_LM}qwen2.py#L73-L79); an "
                f"mrope rope_scaling is nn.RoPE ({MLX_LM}rope_utils.py#L366-L371)")


@dataclass(frozen=True)
class LmVlPlan:
    """The text_config mlx-lm is given and whether the case's positions reach it."""

    text_config: dict
    positions_passed: bool  # False: per-axis positions with no argument (a probe case)


def _linear(w: np.ndarray) -> np.ndarray:
    """(H, E, d) -> (H*d, E): nn.Linear's (out, in)."""
    return np.ascontiguousarray(w.transpose(0, 2, 1).reshape(-1, w.shape[1]))


class MlxLmVl(MlxRunner):
    """A Qwen-VL text attention of mlx-lm (subclasses: the model module and its config)."""

    requires = ("mlx", "mlx_lm")
    features = MlxRunner.features | {"rope", "multi_axis_rope"}
    probe_needs = {"rope": {"style": "half_split"}, "bias": False}  # always rotates
    probe_head_size = 6  # even: the probes' written head size 3 cannot carry the rotation
    model_module = ""  # mlx_lm.models.<module>
    qkv_bias = False  # q, k, v always biased (Qwen2), zeros on a bias-free case
    qk_norm = False  # RMSNorm q_norm / k_norm per head (Qwen3)

    def limits(self, case) -> str | None:
        a, i, r = case.attention, case.inputs, case.attention.rope
        if r is None:
            return harness_limit("no attention.rope: the model's attention always rotates")
        if r.style != "half_split" or r.rotary_dim != a.qk_head_dim or r.scaling is not None:
            return ("a rope other than half-split over the whole head, unscaled: the config's "
                    "nn.RoPE(head_dim, traditional=False)")
        if r.multi_axis is not None and r.multi_axis.kind != "mrope":
            return (f"rope.multi_axis.kind={r.multi_axis.kind}: mlx-lm's Qwen-VL models are "
                    f"their text models only (sanitize drops the vision tower, {MLX_LM}"
                    "qwen2_vl.py#L45-L46); a 2-D patch grid is the vision tower's")
        if not i.self_attention or i.position_offset:
            return ("cross-attention or a position offset: the attention takes one tensor "
                    "and rotates from cache.offset (a fresh cache starts at 0)")
        if a.bias and (self.qkv_bias or self.qk_norm):
            return "bias=True: o_proj has no bias" if self.qkv_bias else (
                "bias=True: Qwen3's projections have no bias")
        if a.scale is not None and abs(a.scale - a.qk_head_dim ** -0.5) > 1e-12:
            return "a scale other than head_dim**-0.5 (self.scale)"
        return self.shape_limits(case)

    def shape_limits(self, case) -> str | None:
        return None

    def text_config(self, case) -> dict:
        raise NotImplementedError

    def translate(self, case):
        why = self.limits(case)
        if why:
            return NotExpressible(why)
        if case.attention.rope.multi_axis is not None:
            return NotExpressible(f"rope.multi_axis: {ONE_AXIS_WHY}")
        if self.qkv_bias:
            return NotExpressible(harness_limit(
                "mlx_lm.qwen2_vl is asked the ledger's M-RoPE probes only: its q, k and v "
                "projections always hold biases (zeros here), so a matrix case's parameter "
                "pin would be another's; its 1-D attention is qwen2.Attention"))
        return Translation(self.call_text(case), LmVlPlan(self.text_config(case), True))

    def probe_translate(self, case):
        """A probe case at per-axis positions runs as a user runs the model: the config's
        sections, the tokens, no position ids (there is no argument for them)."""
        why = self.limits(case)
        if why:
            return NotExpressible(why)
        return Translation(self.call_text(case) + "; the per-axis positions not passed: "
                           + ONE_AXIS_WHY, LmVlPlan(self.text_config(case),
                                                    case.attention.rope.multi_axis is None))

    def call_text(self, case) -> str:
        return (f"mlx_lm.models.{self.model_module}.Model(ModelArgs(text_config="
                f"{self.text_config(case)})).language_model.model.layers[0].self_attn(x, mask)")

    def state(self, case, weights) -> dict[str, np.ndarray]:
        w = weights
        out = {"q_proj.weight": _linear(w.wq), "k_proj.weight": _linear(w.wk),
               "v_proj.weight": _linear(w.wv),
               "o_proj.weight": np.ascontiguousarray(w.wo.reshape(-1, w.wo.shape[-1]).T)}
        if self.qkv_bias:
            out.update({f"{n}_proj.bias": np.zeros(out[f"{n}_proj.weight"].shape[0])
                        for n in "qkv"})
        if self.qk_norm:
            out.update({"q_norm.weight": np.asarray(w.q_norm).ravel(),
                        "k_norm.weight": np.asarray(w.k_norm).ravel()})
        return out

    def run(self, case, translation, data):
        import importlib

        mx, _ = import_mlx()
        mod = importlib.import_module(f"mlx_lm.models.{self.model_module}")
        model = mod.Model(mod.ModelArgs.from_dict({"model_type": self.model_module,
                                                  "text_config": dict(
                                                      translation.plan.text_config)}))
        att = model.language_model.model.layers[0].self_attn
        dtype = case.inputs.dtype
        att.load_weights([(n, to_mx(mx, a, dtype)) for n, a in self.state(
            case, data.weights).items()], strict=True)
        allowed = data.inputs.allowed
        mask = None if allowed is None else mx.array(allowed[:, None])
        out = att(to_mx(mx, data.inputs.query, dtype), mask=mask, cache=None)
        mx.eval(out)
        notes = [f"{type(att.rope).__name__} from initialize_rope: positions 0.."
                 f"{case.inputs.query_len - 1} (cache.offset + t)"]
        if not translation.plan.positions_passed:
            notes.append("the case's per-axis positions have no argument in mlx-lm's model")
        return Observation(output=to_f64(mx, out),
                           parameters=sum(int(np.prod(v.shape)) for v in self.state(
                               case, data.weights).values()),
                           notes=notes, extras={"output_dtype": held_dtype(out),
                                                "rope": type(att.rope).__name__})


def _sections(case) -> list[int]:
    r = case.attention.rope
    if r.multi_axis is not None:
        return list(r.multi_axis.sections)
    return [r.rotary_dim // 2, 0, 0]


class MlxLmQwen2VL(MlxLmVl):
    name = "mlx_lm.qwen2_vl"
    typed_system = "hf.qwen2_vl"  # qwen2.ModelArgs reads Qwen2VLTextConfig's words
    system = "mlx_lm.models.qwen2_vl.Model (qwen2.Attention)"
    path = "layer 0's self_attn of mlx-lm's Qwen2-VL text model"
    description = ("mlx-lm's Qwen2-VL text attention (qwen2.Attention, `initialize_rope` of "
                   "an mrope config); no position ids")
    model_module = "qwen2_vl"
    qkv_bias = True

    def shape_limits(self, case):
        a = case.attention
        if a.qk_head_dim * a.num_heads != a.query_features or a.v_head_dim != a.qk_head_dim:
            return "head_dim = hidden_size // num_attention_heads (qwen2.py#L42)"
        return None

    def text_config(self, case) -> dict:
        a, r = case.attention, case.attention.rope
        return {"model_type": "qwen2_vl", "hidden_size": a.query_features,
                "num_hidden_layers": 1, "intermediate_size": 8,
                "num_attention_heads": a.num_heads, "num_key_value_heads": a.num_kv_heads,
                "rms_norm_eps": 1e-6, "vocab_size": 8, "rope_theta": float(r.base),
                "rope_scaling": {"type": "mrope", "mrope_section": _sections(case)}}


class MlxLmQwen3VL(MlxLmVl):
    name = "mlx_lm.qwen3_vl"
    typed_system = "hf.mistral"  # qwen3.ModelArgs: MistralConfig's words (no attention_bias)
    system = "mlx_lm.models.qwen3_vl.Model (qwen3.Attention)"
    path = "layer 0's self_attn of mlx-lm's Qwen3-VL text model"
    description = ("mlx-lm's Qwen3-VL text attention (qwen3.Attention, RMS QK-norm per head, "
                   "`initialize_rope` of an interleaved mrope config); no position ids")
    features = MlxLmVl.features | {"qk_norm"}
    probe_needs = {**MlxLmVl.probe_needs, "qk_norm": {"kind": "rms", "scope": "per_head"}}
    model_module = "qwen3_vl"
    qk_norm = True

    def shape_limits(self, case):
        n = case.attention.qk_norm
        if n is None or n.kind != "rms" or n.scope != "per_head":
            return "QK-norm: q_norm and k_norm are nn.RMSNorm(head_dim), always applied"
        if case.attention.v_head_dim != case.attention.qk_head_dim:
            return "one head_dim for queries, keys and values"
        return None

    def text_config(self, case) -> dict:
        a, r = case.attention, case.attention.rope
        eps = a.qk_norm.eps if a.qk_norm is not None else 1e-6
        return {"model_type": "qwen3_vl", "hidden_size": a.query_features,
                "num_hidden_layers": 1, "intermediate_size": 8,
                "num_attention_heads": a.num_heads, "num_key_value_heads": a.num_kv_heads,
                "head_dim": a.qk_head_dim, "rms_norm_eps": eps, "vocab_size": 8,
                "max_position_embeddings": 128, "tie_word_embeddings": True,
                "rope_parameters": {"rope_type": "default", "rope_theta": float(r.base),
                                    "mrope_section": _sections(case),
                                    "mrope_interleaved": True}}
