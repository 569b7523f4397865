"""cache_causal_alignment and cache_layout of the HF attention modules (#20): the
module driven through transformers' own cache, as a decoder layer drives it: a
`DynamicCache` passed as `cache`, a prefill of P = 3 positions with the causal mask
transformers' mask builder would give (hf_mask of the causal pattern), then one step
with no mask (what the builder gives a single query that may see every cached key:
the sdpa path then calls SDPA with is_causal=False for q_len 1: transformers/integrations/
sdpa_attention.py `is_causal = q_length > 1 and attention_mask is None and is_causal`).
That is the users' decode (model(ids, past_key_values=cache) builds the same).  The step's
output names the alignment; the cache's key tensor after the prefill and after the step
names the layout.  A module that raises is `refused` with its message; one that leaves the
cache it was handed empty (the runner's forward passes it under a keyword the module does
not take, e.g. BloomAttention's layer_past) is `not_probed`: a harness limit.  torch /
transformers are imported inside the functions.
"""
from __future__ import annotations

import numpy as np

from conformance.contract import cache_probes as cp
from conformance.contract.axes import NOT_PROBED
from conformance.contract.runner import Convention, to_numpy

CACHE_DOC = {"documented_source": "https://huggingface.co/docs/transformers/main/en/"
             "kv_cache"}


def _cache(runner, module):
    """A fresh cache for the module: T5 (a decoder self-attention) in an
    EncoderDecoderCache, the others a DynamicCache."""
    from transformers import DynamicCache, EncoderDecoderCache

    if runner.name == "hf.t5":
        return EncoderDecoderCache(DynamicCache(), DynamicCache())
    return DynamicCache()


def _keys(cache) -> tuple[int, ...] | None:
    """The self-attention cache's layer-0 key shape, None where nothing was written."""
    self_cache = getattr(cache, "self_attention_cache", cache)
    layers = getattr(self_cache, "layers", [])
    keys = getattr(layers[0], "keys", None) if layers else None
    return None if keys is None else tuple(keys.shape)


def _cache_parameters(module) -> list[str]:
    """The module's (or its first attention submodule's) forward parameters that name a
    cache, for the evidence of a cache the runner could not hand over."""
    import inspect

    for m in module.modules():
        try:
            names = list(inspect.signature(m.forward).parameters)
        except (TypeError, ValueError):
            continue
        found = [n for n in names if "past" in n or "cache" in n]
        if found:
            return found
    return []


def cache_cells(runner) -> list[Convention]:
    """Both cells for an HF runner (its probe module, its forward call)."""
    import torch

    from conformance.runners.hf.common import hf_mask

    scale = {} if runner.probe_scale is None else {"scale": runner.probe_scale}
    case = cp.decode_case(**{**runner.probe_attention, **scale})
    module, x = runner.probe_module(case)
    _layer_zero(module)
    n = case.inputs.query_len
    causal = np.broadcast_to(np.tril(np.ones((n - 1, n - 1), bool)), (x.shape[0], n - 1, n - 1))
    cache = _cache(runner, module)
    what = (f"{runner.name}: {type(cache).__name__} passed as "
            f"{getattr(runner, 'cache_argument', 'cache')}=, prefill with the causal mask, then "
            "one step with attention_mask=None")
    axes = ("cache_causal_alignment", "cache_layout")
    try:
        with torch.no_grad():
            mask = hf_mask(torch, causal, torch.float32, runner.attn_implementation)
            pre = runner.forward(module, x[:, :-1].contiguous(), mask, cache=cache)[0]
            shapes = [_keys(cache)]
            if shapes[0] is None:  # the keyword went by the module (into **kwargs)
                taken = _cache_parameters(module)
                return [Convention(a, NOT_PROBED, f"harness limit: {what}: the prefill "
                                   f"left the {type(cache).__name__} empty (the runner's "
                                   f"forward hands it over as "
                                   f"{getattr(runner, 'cache_argument', 'cache')}=; "
                                   f"{type(module).__name__}.forward takes "
                                   f"{', '.join(taken) or 'no cache keyword'})")
                        for a in axes]
            step = runner.forward(module, x[:, -1:].contiguous(), None, cache=cache)[0]
            shapes.append(_keys(cache))
    except Exception as exc:  # the system's own error is the observation
        from conformance.contract.probing import refusal

        return [refusal(a, exc, what) for a in axes]
    align = cp.cache_alignment(case, to_numpy(step), what, to_numpy(pre),
                               documented="lower_right", **CACHE_DOC)
    words = "two tensors per layer (cache.layers[i].keys, .values)"
    return [align, Convention("cache_layout", cp.layout_words(case, shapes, words),
                              f"{what}: the self-attention cache's layer-0 keys {shapes[0]} "
                              f"after the prefill, {shapes[1]} after the step (torch.cat on "
                              "the sequence axis)", **CACHE_DOC)]


def _layer_zero(module) -> None:
    """A module built without layer_idx gets 0 (the cache indexes layers by it)."""
    for m in module.modules():
        if hasattr(m, "layer_idx") and m.layer_idx is None:
            m.layer_idx = 0
