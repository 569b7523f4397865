"""What the HF runners of rotary, QK-norm and ALiBi decoders share: rotary embeddings computed by
the model's own rotary module at the case's positions, the limits of each
system's RoPE, QK-norm and ALiBi, and one base class.

A decoder model (LlamaModel, GPTJModel, GPTNeoXModel, Qwen3Model, Olmo2Model)
computes `position_embeddings` once per forward with its rotary-embedding module
(LlamaRotaryEmbedding(config)(x, position_ids)) and hands them to every
attention module; the runners do exactly that, with position_ids =
inputs.position_offset + t.  A case without attention.rope runs a module that
always rotates with the identity rotation (cos = 1, sin = 0), and the row says
so.  torch is imported inside functions only.
"""
from __future__ import annotations

from conformance.contract.runner import harness_limit
from conformance.runners.hf.common import SOURCE
from conformance.runners.hf.probed import ProbedHFRunner

MAX_TABLE = 1 << 16  # a precomputed sin/cos table longer than this is refused (GPT-J)


def rope_theta(case) -> float:
    r = case.attention.rope
    return 10000.0 if r is None else float(r.base)


def rope_limits(case, *, style: str, why_style: str, partial: bool, why_partial: str = "",
                base_fixed: bool = False) -> str | None:
    """The case's rope against a system with one pairing `style`, partial rotary or not,
    and a settable base or not; `why_*` quote the system."""
    r = case.attention.rope
    if r is None:
        return None
    if r.style != style:
        return f"rope.style={r.style}: {why_style}"
    if r.rotary_dim != case.attention.qk_head_dim and not partial:
        return (f"rope.rotary_dim={r.rotary_dim} < head size {case.attention.qk_head_dim}: "
                f"{why_partial}")
    if base_fixed and r.base != 10000.0:
        return (f"rope.base={r.base:g}: {why_partial or 'the base is fixed at 10000'}")
    return None


def qk_norm_limits(case, scope: str, module: str, why_scope: str) -> str | None:
    """A module with RMSNorm q_norm / k_norm of one scope, always applied."""
    n = case.attention.qk_norm
    if n is None:
        return (f"no attention.qk_norm: {module} applies its RMSNorm q_norm and k_norm on every "
                "call (no switch); the case asks for none")
    if n.kind != "rms":
        return f"qk_norm.kind={n.kind}: {module}'s q_norm and k_norm are RMSNorm (no bias)"
    if n.scope != scope:
        return f"qk_norm.scope={n.scope}: {why_scope}"
    return None


def position_ids(torch, case, batch: int, length: int | None = None, start: int = 0):
    """(B, T) absolute positions, as the model builds them: the offset, plus the positions
    the cache has seen (`start`, cache.get_seq_length()), plus t for `length` inputs."""
    p0 = case.inputs.position_offset + start
    n = case.inputs.query_len if length is None else length
    return torch.arange(p0, p0 + n).unsqueeze(0).expand(batch, -1)


class RotaryHFRunner(ProbedHFRunner):
    """An HF decoder attention module that takes `position_embeddings` from its model's
    rotary module.  Subclasses give `rotary(torch, config)` (the model's module),
    `native_style`, and may set `pair_order` ("cos_sin" or GPT-J's "sin_cos")."""

    features = ProbedHFRunner.features | {"rope", "position_offset"}
    native_style = "half_split"
    pair_order = "cos_sin"
    needs_rope = False  # True: a case without rope is not this system's
    rope_source = ""  # the source line of its rotation (rotate_half / rotate_every_two)
    cache_argument = "cache"  # the forward's cache keyword (GPT-NeoX: layer_past)
    # the ledger asks the rotation (conventions/probes/positions.py) through translate/run
    probe_takes = ProbedHFRunner.probe_takes | {"rotary_dim"}

    def rope_model_limits(self, case) -> str | None:
        if self.needs_rope and case.attention.rope is None:
            return harness_limit(  # the attention takes position_embeddings
                    f"no attention.rope: {self.system.rsplit('.', 1)[-1]} rotates q and k on "
                    "every call (its model always passes position_embeddings); the case asks "
                    "for none (hf.llama runs attention with the rotation neutralised)")
        return None

    def rotary(self, torch, config):
        raise NotImplementedError

    def embeddings(self, module, x, case, start: int = 0):
        """(cos, sin) or (sin, cos) in the module's order, from the model's rotary module at
        the positions of x's rows after `start` cached ones, or the identity rotation when
        the case has no rope."""
        import torch

        rot = self.rotary(torch, module.config)
        with torch.no_grad():
            pair = rot(x, position_ids(torch, case, x.shape[0] if x.dim() == 3 else 1,
                                       x.shape[-2], start))
        if case.attention.rope is None:
            # at most as wide as the head: at an odd head_dim the model's table has d + 1
            # columns (cat(freqs, freqs) of ceil(d/2) frequencies), and at d = 1 q * cos
            # broadcasts q to 2 columns, doubling every score
            first, second = (p[..., :case.attention.qk_head_dim] for p in pair)
            cos_sin = (torch.ones_like(first), torch.zeros_like(second))
            return cos_sin if self.pair_order == "cos_sin" else cos_sin[::-1]
        return tuple(p.to(x.dtype) for p in pair)

    def module_for(self, torch, case, plan, weights):
        """The module, holding the case it runs (forward needs its positions and rope)."""
        module = super().module_for(torch, case, plan, weights)
        module.conformance_case = case
        return module

    def forward(self, module, x, mask, **kw):
        """The module's call, its rotation at the positions after what `cache` (in `kw`)
        has seen, as the model computes position_ids from cache.get_seq_length()."""
        cache = kw.get("cache")
        start = 0 if cache is None else cache.get_seq_length()
        if cache is not None and self.cache_argument != "cache":
            kw = {**{k: v for k, v in kw.items() if k != "cache"}, self.cache_argument: cache}
        pe = self.embeddings(module, x, module.conformance_case, start)
        return module(x, position_embeddings=pe, attention_mask=mask, **kw)[:2]

    def rope_notes(self, case) -> list[str]:
        r = case.attention.rope
        if r is None:
            return ["rotary embedding neutralised: position_embeddings = the identity rotation "
                    "(cos=1, sin=0); the model would rotate q and k by position"]
        p0 = case.inputs.position_offset
        scaled = "" if r.scaling is None else f", {r.scaling.kind} scaling x{r.scaling.factor:g}"
        return [f"rotary {r.style}, rotary_dim {r.rotary_dim}, base {r.base:g}{scaled}: "
                f"position_embeddings from the model's own rotary module at position_ids "
                f"{p0}..{p0 + case.inputs.query_len - 1}"]


ROTATE_HALF = ("rotate_half(x) = cat(-x[..., d/2:], x[..., :d/2]) pairs dimension i with "
               "i + d/2 (half-split); no argument selects the interleaved pairs")
ROTATE_EVERY_TWO = ("rotate_every_two(x) stacks (-x[..., 1::2], x[..., ::2]): pairs (2i, 2i+1) "
                    "(interleaved); no argument selects half-split pairs")
__all__ = ["SOURCE", "MAX_TABLE", "ROTATE_HALF", "ROTATE_EVERY_TWO", "RotaryHFRunner",
           "ConfigRotaryHFRunner", "QKNormRotaryHFRunner",
           "position_ids", "qk_norm_limits", "rope_limits", "rope_theta"]


class ConfigRotaryHFRunner(RotaryHFRunner):
    """A decoder attention built from `<model>Config` and `<model>Attention` of
    transformers.models.<module>.modeling_<module>, its rotation from
    `<model>RotaryEmbedding` (Llama, Mistral, Gemma2, GPT-OSS, Qwen3, OLMo2): the config
    takes `config_keys` of the plan and what `config_kwargs` adds."""

    module = ""  # transformers.models.<module>.modeling_<module>
    model = ""  # the class prefix: <model>Config, <model>Attention, <model>RotaryEmbedding
    # the Llama-style config and modules (Mistral leaves attention_bias out, OLMo2 head_dim)
    config_fields = {"hidden_size": "query_features", "num_attention_heads": "num_heads",
                     "num_key_value_heads": "num_kv_heads", "head_dim": "qk_head_dim",
                     "attention_bias": "bias"}
    config_keys = ("hidden_size", "num_attention_heads", "num_key_value_heads", "head_dim",
                   "attention_bias", "attn_implementation")
    linear_names = ("q_proj", "k_proj", "v_proj", "o_proj")
    # the config's partial-rotary setting, which the ledger's rope_partial probe passes raw
    # (RawCall partial_rotary, conventions/probes/partial.py; the matrix refuses a partial
    # rotary: the default rope takes dim = head_dim, `partial_line`); grouped heads asked
    probe_takes = RotaryHFRunner.probe_takes | {"grouped"}
    answers = RotaryHFRunner.answers | {"partial_rotary"}
    partial_setting = "rope_parameters['partial_rotary_factor']"
    partial_line = ""  # the source line of <model>RotaryEmbedding's dim

    def answer(self, case, data, raw):
        """RawCall partial_rotary: the module built with rope_parameters'
        partial_rotary_factor = raw.value on the case as it translates, its own call."""
        if raw.argument != "partial_rotary":
            return super().answer(case, data, raw)
        from conformance.contract.runner import NotExpressible, to_numpy
        from conformance.runners.hf.common import import_torch

        t = self.translate(case)
        if isinstance(t, NotExpressible):
            raise NotImplementedError(f"{self.name} cannot build the case: {t.reason}")
        torch = import_torch()
        module = self.module_for(torch, case, {**t.plan, "partial_rotary_factor": raw.value},
                                 data.weights)
        with torch.no_grad():
            out, _ = self.call(torch, case, data, module, torch.tensor(
                data.inputs.query, dtype=getattr(torch, case.inputs.dtype)))
        line = f" (its dim: {self.partial_line})" if self.partial_line else ""
        return to_numpy(out), f"{t.call}, {self.partial_setting}={raw.value:g}{line}"

    def size_evidence(self, case, module, shape):
        return (f"{self.model}Config(hidden_size=8, num_attention_heads=2, head_dim="
                f"{module.head_dim}): q_proj.weight {shape}; head_dim any value")

    def _classes(self):
        import importlib

        mod = importlib.import_module(f"transformers.models.{self.module}.modeling_"
                                      f"{self.module}")
        return mod, getattr(mod, f"{self.model}Attention")

    def config_kwargs(self, plan: dict) -> dict:
        """The config's keywords beyond `config_keys` and the rope (QK-norm eps, window)."""
        return {}

    def build(self, torch, plan):
        import transformers

        _, attention = self._classes()
        # a scaled rope (rope_parameters.py) replaces the default type with its own keys,
        # copied: the config's standardisation writes into the dict it is given
        rope = {"rope_type": "default", "rope_theta": plan.get("rope_theta", 10000.0),
                **dict(plan.get("rope_scaling") or {})}
        if plan.get("partial_rotary_factor") is not None:  # the rope_partial probe only
            rope["partial_rotary_factor"] = plan["partial_rotary_factor"]
        length = ({"max_position_embeddings": plan["max_position_embeddings"]}
                  if plan.get("max_position_embeddings") else {})
        config = getattr(transformers, f"{self.model}Config")(
            **{k: plan[k] for k in self.config_keys}, attention_dropout=plan["dropout"],
            rope_parameters=rope, **length, **self.config_kwargs(plan))
        return attention(config, layer_idx=0)

    def rotary(self, torch, config):
        mod, _ = self._classes()
        return getattr(mod, f"{self.model}RotaryEmbedding")(config)


class QKNormRotaryHFRunner(ConfigRotaryHFRunner):
    """Qwen3 and OLMo2: the same decoder attention (RMS QK-norm, half-split rotary, grouped
    heads); they differ in the norm's scope and in whether the config has a head_dim field
    (OLMo2's `config_fields` and `config_keys`)."""

    def config_call(self, case):
        call, cfg = super().config_call(case)
        n = case.attention.qk_norm
        cfg = {**cfg, "rms_norm_eps": 1e-6 if n is None else n.eps,
               "rope_theta": rope_theta(case)}
        return call.replace(")", f", rms_norm_eps={cfg['rms_norm_eps']:g}, rope_parameters="
                            f"{{'rope_theta': {cfg['rope_theta']:g}}})", 1), cfg

    def config_kwargs(self, plan):
        return {"rms_norm_eps": plan.get("rms_norm_eps", 1e-6)}

    def state(self, case, weights):
        from conformance.convert.hf import to_qk_norm

        return to_qk_norm(weights)
