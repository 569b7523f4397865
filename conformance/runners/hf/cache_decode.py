"""A decode case through transformers' own cache, for the HF attention modules whose matrix
rows take no decode (#20): the module driven as a decoder layer drives it, a cache passed
under the runner's cache keyword (`cache_argument`: `cache`, GPT-NeoX's `layer_past`), a
prefill with the causal mask transformers' mask builder would give (hf_mask of the causal
pattern), then one call per step with no mask (what the builder gives a single query that
may see every cached key: the sdpa path then calls SDPA with is_causal=False for q_len 1,
transformers/integrations/sdpa_attention.py `is_causal = q_length > 1 and attention_mask
is None and is_causal`).  That is the users' decode (model(ids, past_key_values=cache)
builds the same).  The outputs are concatenated and the cache's layer-0 key shape after
the prefill and after each step reported in the Observation's extras (`cache_shapes`): the
ledger's cache probes (conventions/probes/cache.py) judge them; nothing here compares.

A module that leaves the cache it was handed empty (the runner's forward passes it under
a keyword the module does not take, e.g. BloomAttention's layer_past) is a harness limit,
raised as such.  torch and transformers are imported inside functions.
"""
from __future__ import annotations

import inspect

import numpy as np

from conformance.contract.runner import NotExpressibleError, harness_limit
from conformance.runners.hf.common import hf_mask

CACHE_DOCS = "https://huggingface.co/docs/transformers/main/en/kv_cache"
CACHE_TENSORS = "two tensors per layer (cache.layers[i].keys, .values)"


def new_cache(runner):
    """A fresh cache: T5 (a decoder self-attention) in an EncoderDecoderCache, the others
    a DynamicCache."""
    from transformers import DynamicCache, EncoderDecoderCache

    if runner.name == "hf.t5":
        return EncoderDecoderCache(DynamicCache(), DynamicCache())
    return DynamicCache()


def key_shape(cache) -> tuple[int, ...] | None:
    """The self-attention cache's layer-0 key shape, None where nothing was written."""
    self_cache = getattr(cache, "self_attention_cache", cache)
    layers = getattr(self_cache, "layers", [])
    keys = getattr(layers[0], "keys", None) if layers else None
    return None if keys is None else tuple(keys.shape)


def cache_parameters(module) -> list[str]:
    """The module's (or its first attention submodule's) forward parameters that name a
    cache, for the reason of a cache the runner could not hand over."""
    for m in module.modules():
        try:
            names = list(inspect.signature(m.forward).parameters)
        except (TypeError, ValueError):
            continue
        found = [n for n in names if "past" in n or "cache" in n]
        if found:
            return found
    return []


def layer_zero(module) -> None:
    """A module built without layer_idx gets 0 (the cache indexes layers by it)."""
    for m in module.modules():
        if hasattr(m, "layer_idx") and m.layer_idx is None:
            m.layer_idx = 0


def decode(runner, torch, case, module, x):
    """-> (the outputs of the prefill and every step, None): `case.decode` through a fresh
    cache; sets module.conformance_extras (the cache's key shapes)."""
    layer_zero(module)
    cache, p = new_cache(runner), case.decode.prefill
    keyword = getattr(runner, "cache_argument", "cache")
    causal = np.broadcast_to(np.tril(np.ones((p, p), bool)), (x.shape[0], p, p))
    mask = hf_mask(torch, causal, x.dtype, runner.attn_implementation)
    outs = [runner.forward(module, x[:, :p].contiguous(), mask, cache=cache)[0]]
    shapes = [key_shape(cache)]
    if shapes[0] is None:  # the keyword went by the module (into **kwargs)
        raise NotExpressibleError(harness_limit(
            f"the prefill left the {type(cache).__name__} empty (the runner's forward hands "
            f"it over as {keyword}=; {type(module).__name__}.forward takes "
            f"{', '.join(cache_parameters(module)) or 'no cache keyword'})"))
    for t in range(p, case.inputs.query_len):
        outs.append(runner.forward(module, x[:, t:t + 1].contiguous(), None, cache=cache)[0])
        shapes.append(key_shape(cache))
    module.conformance_extras = {
        "cache_shapes": shapes, "cache_tensors": CACHE_TENSORS,
        "cache_note": f"{type(cache).__name__} passed as {keyword}=, prefill with the "
                        "causal mask, then each step with attention_mask=None (torch.cat on "
                        "the sequence axis)"}
    return torch.cat(outs, 1), None


class CacheDecoding:
    """An HF runner whose run takes the ledger's decode probe cases through transformers'
    cache (the matrix's decode rows stay the runners' whose features name decode); the
    ledger asks it the cache's probes (probe_takes)."""

    # and a fully masked row (rows.py, through translate/run in the self-attention form)
    probe_takes = frozenset({"decode", "cache_tensors", "masked_rows"})

    @property
    def probe_needs(self) -> dict:
        """What the module applies on every call, for the ledger's probe cases: its fixed
        attention settings (probe_attention: T5's bias-free scale 1.0, QK-norm) and, where
        it always rotates, its rotation."""
        needs = dict(self.probe_attention)
        if getattr(self, "needs_rope", False):
            needs.setdefault("rope", {"style": getattr(self, "native_style", "half_split")})
        return needs

    def call(self, torch, case, data, module, x):
        if case.decode is None:
            return super().call(torch, case, data, module, x)
        return decode(self, torch, case, module, x)
