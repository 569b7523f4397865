"""HF decoder attention driven as its model drives it (#20): the mask from transformers'
own mask builder, decoding through its own cache.

- Windows: the case's mask.window becomes the config's `sliding_window` and
  `transformers.masking_utils.create_sliding_window_causal_mask` (the function
  MistralModel, Gemma2Model and GptOssModel call) builds the mask from it.  Measured on
  transformers 5.24 (masking_utils.py#L90-L98 `sliding_window_overlay`: kv_idx > q_idx -
  sliding_window): a causal window of w keys is `sliding_window=w` (the query and w - 1
  before it).  A config with `is_causal=False` (the builder's "power feature", #L1170)
  takes the bidirectional overlay abs(q_idx - kv_idx) <= sliding_window
  (masking_utils.py#L139-L148): the same number then gives 2w + 1 keys.  The eager
  attention function ignores the `sliding_window` the module passes it; the mask carries
  the window.
- Decoding (`decode: {prefill, steps}`): a `DynamicCache(config=config)` passed as `cache=`
  (transformers 5.24 has no cache_position: the model takes positions from
  cache.get_seq_length()), one prefill call and one call per step, each with the mask the
  builder gives for that call and the cache, the rotation at the positions after the
  cached ones.  The outputs concatenated are judged against the full causal forward.

torch and transformers are imported inside functions only.
"""
from __future__ import annotations


from conformance.runners.hf.cache_decode import CACHE_TENSORS, key_shape
from conformance.runners.hf.common import SOURCE
from conformance.runners.hf.declared import Refusals
from conformance.runners.hf.declared import self_attention_refusals
from conformance.runners.hf.rotary import (
    ROTATE_HALF, ConfigRotaryHFRunner, position_ids, rope_limits, rope_theta)

CACHE = SOURCE.replace("models/", "cache_utils.py")
MASKING = ("https://github.com/huggingface/transformers/blob/v5.24.0/src/transformers/"
           "masking_utils.py")


def refusals(model: str, scale: str = "", **kw) -> Refusals:
    """A self-attention-only decoder module with grouped heads; `scale`: where its fixed
    scaling is set (none: the scale is a config field)."""
    return self_attention_refusals(f"{model}Attention", gqa=True,
                                   scaling=f"scaling = {scale}" if scale else "", **kw)


def window_plan(case) -> dict:
    """The config's window keywords for the case's mask.window (window_limits passed)."""
    w = case.mask.window
    if w is None:
        return {"sliding_window": None}
    if case.mask.causal != "none":
        return {"sliding_window": w.left + 1}
    return {"sliding_window": w.left, "is_causal": False}


def window_limits(case) -> str | None:
    """What the mask builder's windows cannot express: a window beside another mask, a
    causal window without a left side, an asymmetric window without a causal mask."""
    w = case.mask.window
    if w is None:
        return None
    if case.has_non_causal_mask:
        return ("mask.window with another mask: the model's mask builder makes the window "
                "from config.sliding_window and takes only a 2-D padding mask beside it; a "
                "4-D mask is returned as given, window not applied")
    if case.mask.causal != "none":
        return None if w.left is not None else (
            "a causal window with no left side: sliding_window counts keys back from the "
            "query (kv_idx > q_idx - sliding_window, masking_utils.sliding_window_overlay)")
    if w.left is not None and w.left == w.right:
        return None
    return (f"window left={w.left}, right={w.right} without a causal mask: the bidirectional "
            "builder (config.is_causal=False) takes one number, abs(q_idx - kv_idx) <= "
            "sliding_window, so only a symmetric window")


class MaskBuilt:
    """The model's mask builder for layer 0 of a config-built decoder attention: the model
    picks create_sliding_window_causal_mask for a sliding layer (config.layer_types[0] ==
    "sliding_attention" where the model reads layer_types: Gemma2, GPT-OSS, Qwen3; else
    config.sliding_window set: MistralModel, modeling_mistral.py#L355) and
    create_causal_mask otherwise."""

    layer_types = False  # the model reads config.layer_types to pick a layer's mask

    def window_runs(self, w: int) -> dict[str, tuple[dict, bool]]:
        """Each window setting the ledger asks (window_settings.py): its config keywords ->
        (the settings added to the plan, whether its builder is the causal one): the
        causal builder (the models' default) and a config with is_causal=False (the
        bidirectional builder); a runner may add its own (`window_conditions`: Qwen3's
        layer below max_window_layers)."""
        runs = {f"sliding_window={w}": ({"sliding_window": w}, True),
                f"sliding_window={w}, is_causal=False": (
                    {"sliding_window": w, "is_causal": False}, False)}
        return {**runs, **{c: (s, k) for c, s, k in
                           getattr(self, "window_conditions", lambda w: [])(w)}}

    def window_settings(self, w: int) -> dict[str, bool]:
        return {label: causal for label, (_, causal) in self.window_runs(w).items()}

    def answer(self, case, data, raw):
        """RawCall window_setting: the module built from the config call of the case with
        the setting's keywords, the mask from the model's own builder for layer 0.
        Self-attention only.  The other raw arguments: HFRunner.answer."""
        if raw.argument != "window_setting":
            return super().answer(case, data, raw)
        if raw.argument not in self.answers or not case.inputs.self_attention:
            raise NotImplementedError(f"{self.name} passes no raw {raw.argument} on "
                                      f"{case.id} (self-attention modules only)")
        from conformance.contract.runner import to_numpy
        from conformance.runners.hf.common import import_torch

        torch = import_torch()
        call, plan = self.config_call(case)
        plan = {**plan, "attn_implementation": self.attn_implementation, "dropout": 0.0}
        x = torch.tensor(data.inputs.query, dtype=torch.float32)
        label = raw.value["setting"]
        settings, _ = self.window_runs(raw.value["window"])[label]
        module = self.module_for(torch, case, {**plan, **settings}, data.weights)
        builder = self.mask_builder(module.config).__name__
        with torch.no_grad():
            out = self.forward(module, x, self.built_mask(torch, case, module, x))[0]
        return to_numpy(out), f"{self.window_call(label)}, {builder}"

    def window_call(self, window: str) -> str:
        """The config call of the window probe, `window` its window keywords."""
        return f"{self.model}Config({window})"

    def mask_builder(self, config):
        """The builder the model calls for layer 0."""
        from transformers.masking_utils import (
            create_causal_mask, create_sliding_window_causal_mask)

        types = getattr(config, "layer_types", None) if self.layer_types else None
        sliding = (types[0] == "sliding_attention" if types else
                   getattr(config, "sliding_window", None) is not None)
        return create_sliding_window_causal_mask if sliding else create_causal_mask

    def built_mask(self, torch, case, module, x, cache=None):
        """The mask the model's builder gives for input `x` after what `cache` holds."""
        start = 0 if cache is None else cache.get_seq_length()
        return self.mask_builder(module.config)(
            config=module.config, inputs_embeds=x, attention_mask=None, cache=cache,
            position_ids=position_ids(torch, case, x.shape[0], x.shape[1], start))


class DecodingHFRunner(MaskBuilt, ConfigRotaryHFRunner):
    """A config-built decoder attention whose windowed and decoded cases go through the
    model's mask builder and DynamicCache.  `layer_types`: the config selects the window
    per layer (Gemma2, GPT-OSS: "sliding_attention" / "full_attention"), else the config's
    sliding_window alone (Mistral)."""

    features = ConfigRotaryHFRunner.features | {"decode"}
    rotation = ROTATE_HALF  # how the module pairs rotated dimensions

    def limits(self, case):
        if case.decode is not None and case.has_non_causal_mask:
            return ("a decode with a mask beside the causal one: the runner decodes as "
                    "generate does, each call's mask from the model's builder alone")
        return super().limits(case)

    def model_limits(self, case):
        return window_limits(case) or rope_limits(
            case, style="half_split", why_style=f"{self.model}Attention: {self.rotation}",
            partial=False, why_partial=f"{self.model}RotaryEmbedding's default rope rotates "
            "the whole head_dim")

    def config_call(self, case):
        """The config call with the case's rope base and window."""
        call, cfg = super().config_call(case)
        if case.attention.rope is not None:
            theta = rope_theta(case)
            call = call.replace(")", f", rope_parameters={{'rope_theta': {theta:g}}})", 1)
            cfg = {**cfg, "rope_theta": theta}
        win = window_plan(case) if "window" in self.features else {}
        if win.get("sliding_window") is not None:
            args = ", ".join(f"{k}={v}" for k, v in win.items())
            call = call.replace("Config(", f"Config({args}, ", 1)
        return call, {**cfg, **win}

    def config_kwargs(self, plan):
        kw = {k: plan[k] for k in ("sliding_window", "is_causal") if k in plan}
        if self.layer_types:
            sliding = plan.get("sliding_window") is not None
            kw.update(num_hidden_layers=1, sliding_window=plan.get("sliding_window"),
                      layer_types=["sliding_attention" if sliding else "full_attention"])
        return kw

    def call(self, torch, case, data, module, x):
        if case.decode is None and case.mask.window is None:
            return super().call(torch, case, data, module, x)
        if case.decode is None:
            return self.forward(module, x, self.built_mask(torch, case, module, x))
        from transformers import DynamicCache

        cache = DynamicCache(config=module.config)
        p, outs, shapes = case.decode.prefill, [], []
        for a, b in [(0, p)] + [(t, t + 1) for t in range(p, case.inputs.query_len)]:
            xs = x[:, a:b]
            mask = self.built_mask(torch, case, module, xs, cache)
            outs.append(self.forward(module, xs, mask, cache=cache)[0])
            shapes.append(key_shape(cache))
        module.conformance_cache = cache
        module.conformance_extras = {  # what the ledger's cache_layout reads
            "cache_shapes": shapes, "cache_tensors": CACHE_TENSORS,
            "cache_note": "DynamicCache(config=config) passed as cache=, each call's mask "
                            "from the model's builder (torch.cat on the sequence axis)"}
        return torch.cat(outs, 1), None

    def decode_notes(self, case, module) -> list[str]:
        notes = []
        w = case.mask.window
        if w is not None:
            cfg = module.config
            both = "" if getattr(cfg, "is_causal", True) else ", is_causal=False"
            notes.append(f"window from the config: sliding_window={cfg.sliding_window}{both}"
                         f", mask built by {self.mask_builder(cfg).__name__} ({MASKING})")
        cache = getattr(module, "conformance_cache", None)
        if cache is not None:
            layer = cache.layers[0]
            notes.append(f"prefill {case.decode.prefill}, then {case.decode.steps} steps through "
                         f"DynamicCache(config=config) passed as cache=: layer 0 "
                         f"{type(layer).__name__}, keys {tuple(layer.keys.shape)} after the "
                         f"last step ({CACHE})")
        return notes
