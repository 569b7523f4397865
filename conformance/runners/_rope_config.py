"""A case's attention.rope.scaling as a config.json's `rope_scaling` (transformers'
`rope_parameters` words) and the `max_position_embeddings` each type reads: what a user of
transformers (hf/rope_parameters.py says which key each type reads) and of mlx-lm
(mlx/lm_rope.py: its initialize_rope reads the same dict) writes.  Shared by runners of
two frameworks, so it imports none.
"""
from __future__ import annotations

from dataclasses import dataclass

# the optional keys of each type, copied where the case gives them (RopeScaling's names)
OPTIONAL = {"yarn": ("mscale", "mscale_all_dim", "attention_factor"),
            "longrope": ("attention_factor",)}


@dataclass(frozen=True)
class HFRope:
    """What a scaled rope adds to the config: its rope_parameters beyond rope_theta, and the
    config's max_position_embeddings."""

    parameters: dict  # rope_type, factor and the type's own keys
    max_position_embeddings: int | None  # None: the type reads no length (linear)

    def text(self, theta: float) -> str:
        """The rope_parameters a user types, with the base."""
        items = {"rope_type": self.parameters["rope_type"], "rope_theta": theta,
                 **{k: v for k, v in self.parameters.items() if k != "rope_type"}}
        return "{" + ", ".join(f"'{k}': {v!r}" for k, v in items.items()) + "}"


def hf_rope(case) -> HFRope | None:
    """The case's scaling as rope_parameters, or None when it has none."""
    rope = case.attention.rope
    s = None if rope is None else rope.scaling
    if s is None:
        return None
    params: dict = {"rope_type": s.kind, "factor": float(s.factor)}
    if s.kind == "linear":
        return HFRope(params, None)
    if s.kind == "dynamic":
        return HFRope(params, int(s.original_max_positions))
    params["original_max_position_embeddings"] = int(s.original_max_positions)
    if s.kind == "yarn":
        params.update(beta_fast=float(s.beta_fast), beta_slow=float(s.beta_slow),
                      truncate=bool(s.truncate))
    elif s.kind == "longrope":
        params.update(short_factor=list(s.short_factor), long_factor=list(s.long_factor))
    elif s.kind == "llama3":
        params.update(low_freq_factor=float(s.low_freq_factor),
                      high_freq_factor=float(s.high_freq_factor))
    for key in OPTIONAL.get(s.kind, ()):
        if getattr(s, key) is not None:
            params[key] = float(getattr(s, key))
    return HFRope(params, int(round(s.original_max_positions * s.factor)))
