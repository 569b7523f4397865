"""What the HF runners declare as data rather than write as code: how a module is
built from its config, and what a self-attention-only module refuses.

Most runners build `<Attention>(<Config>(...), layer_idx=0)` exactly alike (the
config's keywords from the plan, the plan's dropout in the config's attention
dropout, the residual dropout off, the plan's attn_implementation); they differ
only in the names, so a `ConfigBuild` holds the names, `HFRunner.build` builds
from it and `HFRunner.size_evidence` quotes its config call.  Likewise the
decoder modules' refusals share their wording (self-attention only, head_dim
derived from the width, a fixed scaling) and differ in names and expressions:
`self_attention_refusals` words them once.  transformers is imported inside
functions only.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Iterable, Mapping, NamedTuple


class Refusals(NamedTuple):
    """What an HF attention module cannot express beyond shape_limits, as reasons."""

    cross_how: str  # how the module takes keys and values (cross_reason)
    width_fixed: str | None = None  # set: no head-size setting, how d follows (width_limits)
    gqa: bool = False  # num_key_value_heads < num_heads possible
    fixed_bias: tuple[bool, str] | None = None  # the projections' bias when no field sets it,
    # and why (after "bias=<the case's>: ")
    scale_why: str = ""  # the reason a scale other than the default is refused


@dataclass(frozen=True)
class ConfigBuild:
    """`<attention>(<config>(...), layer_idx=0)` from transformers.models.<module>.
    modeling_<module>, as the model builds its layers.  The config takes the plan's
    config keywords, the plan's dropout in `dropout` (the config's attention-dropout
    field), 0.0 in `residual_dropout` (the dropout on the module's output: held off, so
    that the dropout probes in train() see the attention dropout alone) and `optional`
    keywords from the plan, their default where the plan has none."""

    module: str  # transformers.models.<module>.modeling_<module>
    config: str  # the config class (transformers exports it)
    attention: str  # the attention class of modeling_<module>
    dropout: str | None  # the config's attention-dropout field; None: the runner sets it
    residual_dropout: str | None = None  # the config's residual-dropout field, held at 0.0
    optional: Mapping[str, Any] = field(default_factory=dict)  # plan key -> default

    def build(self, plan: Mapping[str, Any], keys: Iterable[str], **extra):
        """The module for `plan`: `keys` are the plan's config keywords (the runner's
        config_fields), `extra` further config keywords the runner computes."""
        import importlib

        import transformers

        kw = {k: plan[k] for k in keys}
        kw.update({k: plan.get(k, default) for k, default in self.optional.items()})
        if self.dropout:
            kw[self.dropout] = plan["dropout"]
        if self.residual_dropout:
            kw[self.residual_dropout] = 0.0
        config = getattr(transformers, self.config)(
            **kw, **extra, attn_implementation=plan["attn_implementation"])
        mod = importlib.import_module(f"transformers.models.{self.module}.modeling_{self.module}")
        return getattr(mod, self.attention)(config, layer_idx=0)


def self_attention_refusals(attention: str, *, head_dim: str = "", scaling: str = "",
                            **kw) -> Refusals:
    """The Refusals of `attention`, a module that takes hidden_states only (its decoder
    model's self-attention).  `head_dim`: the expression it derives head_dim from when no
    field sets it (`<attention> sets head_dim = <head_dim>`); `scaling`: `<attribute> =
    <expression>` where it fixes its scale; `kw`: Refusals' other fields (gqa,
    fixed_bias, or a width_fixed worded otherwise)."""
    if head_dim:
        kw["width_fixed"] = f"{attention} sets head_dim = {head_dim}"
    if scaling:
        kw["scale_why"] = (f"a scale other than 1/sqrt(head_dim): {attention}.{scaling}, not a "
                           "config field")
    return Refusals(f"{attention} is self-attention only (hidden_states)", **kw)


# transformers' mask builders write torch.finfo(dtype).min into masked scores (min_dtype,
# masking_utils.py): the ledger's fill probe cannot tell it from -0.7 * finfo.max by outputs
MASK_FILL = ("finfo_min", "https://github.com/huggingface/transformers/blob/v5.24.0/src/"
             "transformers/masking_utils.py#L615")
# under attn_implementation="sdpa" the builder hands a boolean mask to torch's SDPA, whose
# reference code fills with -inf
SDPA_FILL = ("-inf", "https://docs.pytorch.org/docs/stable/generated/"
             "torch.nn.functional.scaled_dot_product_attention.html")


def mask_fill(attn_implementation: str) -> tuple[str, str]:
    """The fill an HF attention module's path writes (Runner.documented_fill)."""
    return MASK_FILL if attn_implementation == "eager" else SDPA_FILL
