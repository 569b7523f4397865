"""A --kind hf target: a transformers `model_type` (e.g. qwen2), its attention class
`<Model>Attention(<Model>Config(...), layer_idx=0)` built from a tiny config of that type
as the suite builds Llama's (runners/hf/llama.py): the config's head_dim,
num_key_value_heads and attention_bias from the case, the rotary embedding from
`<Model>RotaryEmbedding` or neutralised (cos = 1, sin = 0), windows and decodes through the
model's mask builder and DynamicCache.  It fits the Llama-shaped decoder attentions (the
position_embeddings forward); a model_type of another shape is refused with transformers'
own error.  Configs are built from objects, never from the hub.
"""
from __future__ import annotations

from conformance.runners.hf.common import SOURCE, SizeFacts
from conformance.runners.hf.decoding import DecodingHFRunner, refusals
from conformance.runners.target import TargetError, TargetSpec


def config_for(model_type: str) -> tuple[str, str]:
    """(the modeling module's name, the class prefix) of a model_type, or a TargetError."""
    import importlib

    try:
        from transformers.models.auto.configuration_auto import CONFIG_MAPPING_NAMES
    except ImportError as exc:
        raise TargetError(f"--kind hf: transformers is not installed ({exc})") from None
    name = CONFIG_MAPPING_NAMES.get(model_type)
    if name is None:
        close = sorted(k for k in CONFIG_MAPPING_NAMES if k[:3] == model_type[:3])[:8]
        raise TargetError(f"TARGET {model_type!r}: not a transformers model_type"
                          + (f" (close: {', '.join(close)})" if close else ""))
    prefix, module = name.removesuffix("Config"), model_type.replace("-", "_")
    try:
        mod = importlib.import_module(f"transformers.models.{module}.modeling_{module}")
    except Exception as exc:
        raise TargetError(f"TARGET {model_type!r}: transformers.models.{module}.modeling_"
                          f"{module} does not import: {type(exc).__name__}: {exc}") from None
    if not hasattr(mod, f"{prefix}Attention"):
        raise TargetError(f"TARGET {model_type!r}: modeling_{module} has no {prefix}Attention")
    return module, prefix


class TargetHF(DecodingHFRunner):
    framework = "target"
    backend = "eager"
    path = "the model_type's attention class, built as the suite builds Llama's"
    description = "your attention: a transformers model_type's attention class (probe --kind hf)"
    spec: dict = {}
    pinned = False
    # the HF probes' cases without projection biases: a model_type whose projections have
    # a fixed bias (Qwen2's q/k/v) loads zeros there, one without (o_proj) takes the case
    probe_attention = {"bias": False}

    @staticmethod
    def check(spec) -> None:
        config_for(spec.target)

    def __init__(self, **params):
        super().__init__(**params)
        self.target_spec = TargetSpec(**self.spec)
        model_type = self.target_spec.target
        try:
            self.module, self.model = config_for(model_type)
        except TargetError as exc:
            self.module, self.model, self._refused = model_type, model_type, str(exc)
        else:
            self._refused = ""
        m = self.model
        source = f"{SOURCE}{self.module}/modeling_{self.module}.py"
        self.system = f"transformers.models.{self.module}.modeling_{self.module}.{m}Attention"
        self.typed_system = ""
        self.refusals = refusals(m, "head_dim**-0.5")
        self.call_template = f"{m}Attention({m}Config({{args}}), layer_idx=0)"
        self.rope_source = self.partial_line = source
        self.sizes = SizeFacts("per_head", source, "q_proj.weight", "out x in (nn.Linear)",
                               "q_proj, k_proj, v_proj, o_proj are nn.Linear: (out, in)",
                               "(H + H_kv) d E x 2 (+ biases)", "probe E=8, H=2, d=4: {n}")

    def available(self):
        return super().available() or self._refused or None

    def notes(self, case, module):
        return self.rope_notes(case) + self.decode_notes(case, module)

    def module_for(self, torch, case, plan, weights):
        """The module with the canonical weights: a bias the module has and the case not is
        loaded as zeros (the same arithmetic as none); a bias the case has and the module
        lacks is the module's refusal, quoted (Qwen2: o_proj has no bias)."""
        from conformance.contract.runner import NotExpressibleError

        dt = getattr(torch, case.inputs.dtype)
        try:
            module = self.build(torch, plan).to(dt)
        except Exception as exc:  # config validators raise their own error types
            why = exc.__cause__ or exc
            raise NotExpressibleError("transformers rejected the config: " + " ".join(
                f"{type(why).__name__}: {why}".split())) from exc
        have = module.state_dict()
        state = self.state(case, weights)
        extra = sorted(set(state) - set(have))
        if extra:
            raise NotExpressibleError(f"{self.model}Attention has no {', '.join(extra)} "
                                      f"(bias={case.attention.bias})")
        loaded = {n: torch.tensor(a, dtype=dt) for n, a in state.items()}
        loaded.update({n: torch.zeros_like(t) for n, t in have.items()
                       if n not in loaded and n.endswith(".bias")})
        module.load_state_dict(loaded, strict=True)
        module.conformance_case = case
        return module.eval()
