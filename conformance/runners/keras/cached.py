"""KV-cache decoding through `keras_hub.layers.CachedMultiHeadAttention` on each Keras
backend (#20).

One class parametrised by `backend` (`KerasCached(backend="torch")` is
`keras.cached.torch`), in the backend's Keras worker.  The decode is keras_hub's own
pattern (its TransformerDecoder and CausalLM generate loops): a cache tensor of zeros
[B, 2, S, num_heads, key_dim] for the whole sequence, the prefill written at
cache_update_index 0, then one position per call at its index, each call given
`compute_causal_mask(B, S, T, cache_index)` (hub.py).  The outputs, concatenated, are
judged against the full causal forward.  One cache tensor stacks keys and values, so
key_dim must equal value_dim; CachedMultiHeadAttention is a MultiHeadAttention (no grouped
heads, no rotary embedding of its own).  A missing keras_hub is a skip naming the install
line.  Keras and keras_hub are imported inside the functions only.
"""
from __future__ import annotations

import numpy as np

from conformance.contract.runner import NotExpressible, Observation, Translation, harness_limit
from conformance.runners.keras.answers import ANSWERS
from conformance.runners.keras.common import (
    FLASH_NOTE, JIT_NOTE, built_layer, digest)
from conformance.runners._export.keras_mha import mha_translation
from conformance.runners.keras.hub import CACHED_SRC, KerasHubRunner, decode

LAYOUT = ("one tensor (B, 2, S, H, d), keys and values stacked on axis 1, preallocated "
          "for the whole sequence, written by ops.slice_update at cache_update_index")
# the cache tensors its run reports (extras cache_shapes): the key half [:, 0] of each cache
# the layer returns, as its call reads it (key_cache = cache[:, 0, ...], CACHED_SRC)
CACHE_TENSORS = ("one tensor (B, 2, S, H, d): keys and values stacked on axis 1 (shapes of "
                 "its key half [:, 0])")


class KerasCached(KerasHubRunner):
    """keras_hub.layers.CachedMultiHeadAttention on `backend`: a prefill, then steps."""
    decodes_only = True  # translate refuses a case without a decode section

    system = "keras_hub.layers.CachedMultiHeadAttention"
    typed_system = "keras"  # a MultiHeadAttention subclass: num_heads / key_dim
    description = ("`keras_hub.layers.CachedMultiHeadAttention` decoding through its cache "
                   "(prefill, then one position per call at `cache_update_index`, keras_hub's "
                   "`compute_causal_mask`)")
    path = "cache"
    layer_cls, layer_name, kind = "MultiHeadAttention", "cached", "cached"
    # no "window": the constructor takes sliding_window and the call ignores it (the
    # ledger's window probe reads `ignored`)
    features = frozenset({"fill", "decode"})

    def translate(self, case):
        a = case.attention
        if case.decode is None:
            return NotExpressible(harness_limit("this runner decodes: the case has no decode "
                                                "section (the plain layer is the "
                                                "keras.<backend> row)"))
        if case.has_non_causal_mask:
            return NotExpressible(harness_limit(
                "a decode is causal self-attention with no other mask"))
        if a.qk_head_dim != a.v_head_dim:
            return NotExpressible(
                f"qk_head_dim={a.qk_head_dim} != v_head_dim={a.v_head_dim}: the cache is one "
                "tensor [B, 2, S, num_heads, key_dims] stacking keys and values "
                f"({CACHED_SRC})")
        base = mha_translation(case)
        if isinstance(base, NotExpressible):
            return base
        d, n = case.decode, case.inputs.query_len
        call = base.call.replace("keras.layers.MultiHeadAttention",
                                 "keras_hub.layers.CachedMultiHeadAttention")
        return Translation(
            f"{call}; cache = zeros((B, 2, {n}, {a.num_heads}, {a.qk_head_dim})); prefill: "
            f"out, cache = layer(x[:, :{d.prefill}], x[:, :{d.prefill}], attention_mask="
            f"compute_causal_mask(B, {n}, {d.prefill}, 0), cache=cache, cache_update_index=0)"
            f"; {d.steps} steps t: the same on x[:, t:t+1] with compute_causal_mask(B, {n}, 1, "
            "t), cache_update_index=t", base.plan)

    def run(self, case, translation, data):
        """The decode through the cache; a single call (a ledger probe case without a decode,
        probe_translate's) as the layer without a cache."""
        if case.decode is None:
            from conformance.runners.keras.calls import Probe

            return Observation(output=Probe(self).fwd(case, data))
        import keras
        import keras_hub

        keras.config.disable_flash_attention()
        dtype = case.inputs.dtype
        layer, (x, _, _), notes = built_layer(keras, self.layer_name,
                                              keras_hub.layers.CachedMultiHeadAttention, case,
                                              translation, data)
        outs, shapes, held = decode(keras, layer, x, case.decode.prefill,
                                    case.inputs.query_len)
        output = np.concatenate(outs, axis=1)
        notes = [FLASH_NOTE, *notes, f"prefill {case.decode.prefill}, then "
                 f"{len(outs) - 1} steps through the cache: {LAYOUT}; the cache returned "
                 + " -> ".join(str(s) for s in shapes[:2])]
        if keras.backend.backend() == "jax":
            notes.append(JIT_NOTE)
        if held != dtype:
            notes.append(f"output computed in {held}, not the requested {dtype}")
        return Observation(
            output=output, parameters=int(layer.count_params()),
            weight_shapes={w.path: tuple(int(d) for d in w.shape) for w in layer.weights},
            notes=notes, extras={"backend": self.backend, "cache_note": LAYOUT,
                                 "output_dtype": held, "mask_polarity": "True = attend",
                                 "cache_shapes": [[s[0], *s[2:]] for s in shapes],
                                 "cache_tensors": CACHE_TENSORS, "cache_preallocated": True},
            output_digest=digest(output, dtype))

    # the ledger asks these (conventions/probes/): a single call through the layer without
    # a cache (probe_translate, run; the decode through its cache for the cache's
    # alignment and float64), the raw arguments through `answer` on the layer without a
    # cache; its call has no causal switch and no key-padding argument (hub_observations.py)
    # its decode is its feature; its run reports the caches the layer returns (cache_layout)
    probe_takes = frozenset({"float64", "cache_tensors"})
    answers = ANSWERS - {"is_causal", "key_padding"} | {"step_mask"}

    def answer(self, case, data, raw):
        """step_mask: keras_hub's decode (`decode` in hub.py), each step's attention_mask
        the case's row over every cache slot (False past the step, as compute_causal_mask
        gives); the rest on the layer without a cache (answers.py)."""
        if raw.argument != "step_mask":
            return super().answer(case, data, raw)
        return _step_masked(self, case, data, raw.value), (
            "layer(x_t, x_t, attention_mask=<bool (B, 1, S) row t, True = attend>, cache=cache, "
            "cache_update_index=t) at each step")

    @property
    def answer_layer(self):
        import keras_hub

        return keras_hub.layers.CachedMultiHeadAttention

    def probe_translate(self, case):
        """A decode case as the rows translate it; a single call as the layer without a cache
        (CachedMultiHeadAttention.call with cache=None is MultiHeadAttention's attention)."""
        return self.translate(case) if case.decode is not None else mha_translation(case)

    def signatures(self):
        import keras_hub

        cls = keras_hub.layers.CachedMultiHeadAttention
        return "keras_hub.layers.CachedMultiHeadAttention", (cls.__init__, cls.call)

    def conventions(self):
        """The API facts of CachedMultiHeadAttention (hub_observations.py): the layer's and
        its call's missing arguments."""
        from conformance.runners.keras.hub_observations import cached_facts

        return cached_facts(self)


def _step_masked(runner, case, data, nan=None) -> np.ndarray:
    """The cached decode, the prefill with keras_hub's causal mask, each step t given row t
    of the case's mask over the cache slots; `nan` ({'nan': 'key' or 'value', 'item',
    'slot'}): NaN written into the cache tensor (key: [:, 0], value: [:, 1]) after the
    prefill."""
    import keras
    import keras_hub

    from conformance.runners.keras.hub import cached_call, causal_mask

    keras.config.disable_flash_attention()
    layer, (x, _, _), _ = built_layer(keras, runner.layer_name,
                                      keras_hub.layers.CachedMultiHeadAttention, case,
                                      mha_translation(case), data)
    b, n, p = case.inputs.batch, case.inputs.query_len, case.decode.prefill
    call = cached_call(layer, keras.backend.backend() == "jax")
    cache = keras.ops.zeros((b, 2, n, layer.num_heads, layer.key_dim), dtype=layer.compute_dtype)
    out, cache = call(x[:, :p], cache, causal_mask(b, n, p, 0), 0)
    outs = [np.asarray(keras.ops.convert_to_numpy(out), np.float64)]
    if nan:
        held = np.array(keras.ops.convert_to_numpy(cache))
        held[nan["item"], 0 if nan["nan"] == "key" else 1, nan["slot"]] = np.nan
        cache = keras.ops.convert_to_tensor(held)
    for t in range(p, n):
        mask = keras.ops.convert_to_tensor(np.ascontiguousarray(data.inputs.allowed[:, t:t + 1]))
        out, cache = call(x[:, t:t + 1], cache, mask, t)
        outs.append(np.asarray(keras.ops.convert_to_numpy(out), np.float64))
    return np.concatenate(outs, axis=1)
