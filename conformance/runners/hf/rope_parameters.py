"""A case's attention.rope.scaling in transformers' own words: the config's
`rope_parameters` and the `max_position_embeddings` each rope type reads.

transformers 5.24 computes every scaled rotary table in modeling_rope_utils.py
(ROPE_UTILS): `_compute_<type>_parameters(config)` returns the inverse frequencies and
an `attention_factor` that `<Model>RotaryEmbedding.forward` multiplies into cos and sin
(modeling_llama.py: `cos = emb.cos() * self.attention_scaling`).  What each type reads:

- linear: `factor` (inv_freq / factor).
- dynamic: `factor`, and the config's `max_position_embeddings` as the pretraining
  length (`_compute_dynamic_ntk_parameters` and `dynamic_rope_update`'s
  `original_max_seq_len`): it has no `original_max_position_embeddings` key, so the case's
  original_max_positions goes to max_position_embeddings.
- yarn: `factor`, `original_max_position_embeddings`, `beta_fast`, `beta_slow`, `truncate`,
  and `mscale` / `mscale_all_dim` / `attention_factor` where the case gives them.
- longrope: `factor`, `original_max_position_embeddings`, `short_factor`, `long_factor`
  (lists), `attention_factor` where given; the long factors are chosen when
  max(position_ids) + 1 > original_max_position_embeddings (`longrope_frequency_update`).
- llama3: `factor`, `original_max_position_embeddings`, `low_freq_factor`,
  `high_freq_factor`.

Linear leaves max_position_embeddings at the config's default.  For the types with an
original length the config's max_position_embeddings is factor x
original (the stretched context a published config holds; yarn's and llama3's validators
warn when it disagrees).  Nothing here computes a frequency: the model's rotary module does.
"""
from __future__ import annotations

from conformance.runners._rope_config import OPTIONAL, HFRope, hf_rope

__all__ = ["OPTIONAL", "HFRope", "hf_rope", "cos_sin_only", "scaled_call",
           "RopeParametersScaled"]

ROPE_UTILS = ("https://github.com/huggingface/transformers/blob/v5.24.0/src/transformers/"
              "modeling_rope_utils.py")


def cos_sin_only(case, module: str, source: str, scaling: str = "head_dim**-0.5") -> str | None:
    """Why a module whose rotary embedding carries the attention factor on cos and sin, and
    whose softmax scale has no rope term, cannot put it on the softmax scale; None when the
    case does not ask for that."""
    s = case.attention.rope.scaling if case.attention.rope is not None else None
    if s is None or s.magnitude != "softmax_scale":
        return None
    return (f"rope.scaling.magnitude=softmax_scale: {module}.scaling = {scaling} has no "
            f"rope term and its rotary embedding multiplies cos and sin by the "
            f"attention_factor ({source}: cos = emb.cos() * self.attention_scaling); no "
            "setting moves it onto the softmax scale")


def scaled_call(call: str, cfg: dict, case, config: str) -> tuple[str, dict]:
    """The config call and plan of `case` with its scaling as rope_parameters (replacing the
    bare `{'rope_theta': ...}` the call holds) and max_position_embeddings after
    `config` ("<Model>Config("), as a user writes them; unchanged without a scaling."""
    hf = hf_rope(case)
    if hf is None:
        return call, cfg
    theta = cfg.get("rope_theta", float(case.attention.rope.base))
    call = call.replace(f"rope_parameters={{'rope_theta': {theta:g}}}",
                        f"rope_parameters={hf.text(theta)}", 1)
    if hf.max_position_embeddings is not None:
        call = call.replace(config, f"{config}max_position_embeddings="
                            f"{hf.max_position_embeddings}, ", 1)
    return call, {**cfg, "rope_scaling": hf.parameters,
                  "max_position_embeddings": hf.max_position_embeddings}


class RopeParametersScaled:
    """A config-built HF attention whose `<Model>RotaryEmbedding` takes the case's scaling
    from rope_parameters (ROPE_INIT_FUNCTIONS[rope_type], forward under
    @dynamic_rope_update, cos and sin times attention_scaling: the same code in every
    modeling file that copies Llama's) and whose softmax scale has no rope term.  Put before
    the runner's base class; `cos_sin_line` cites the file's `cos = emb.cos() *
    self.attention_scaling`, `scaling_text` its fixed scale."""

    cos_sin_line = ""
    scaling_text = "head_dim**-0.5"

    def config_call(self, case):
        call, cfg = super().config_call(case)
        return scaled_call(call, cfg, case, f"{self.model}Config(")

    def model_limits(self, case):
        return super().model_limits(case) or self.scaling_limits(case)

    def scaling_limits(self, case) -> str | None:
        """What of the case's scaling the module cannot compute (a class defining its own
        model_limits calls this)."""
        return cos_sin_only(case, f"{self.model}Attention", self.cos_sin_line,
                            self.scaling_text)

    def scaling_notes(self, case, module) -> list[str]:
        """What the model's rotary module computed of the case's scaling (none without)."""
        if case.attention.rope is None or case.attention.rope.scaling is None:
            return []
        from conformance.runners.hf.common import import_torch

        rot = self.rotary(import_torch(), module.config)
        return [f"{type(rot).__name__}: rope_type {rot.rope_type}, attention_scaling "
                f"{rot.attention_scaling:.6g} on cos and sin"]
