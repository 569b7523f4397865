"""Keras Hub (keras_hub 0.32) around Keras attention (#19, #20): what the keras.rope and
keras.cached runners share.

- `keras_hub.layers.RotaryEmbedding(max_wavelength=base)` rotates the projected query and
  key.  Keras attention leaves one hook between its projections and the scores,
  `_compute_attention(query, key, value, ...)` ((B, T, H, d) tensors; Keras's own
  GroupedQueryAttention.call names subclasses that override it), so the rotary layer is a
  subclass of `keras.layers.MultiHeadAttention` (or `GroupQueryAttention` for grouped
  heads) that rotates there, at `start_index` = the case's first query / key position.
  RotaryEmbedding rotates the whole feature axis in half-split pairs
  (`_apply_rotary_pos_emb`: `x1, x2 = ops.split(tensor, 2, axis=-1)`); a partial rotary
  rotates the first `rotary_dim` features and passes the rest, as keras_hub's
  GPTNeoXAttention slices them.
- `keras_hub.layers.CachedMultiHeadAttention` decodes with one cache tensor
  [B, 2, S, num_heads, key_dim] (keys and values stacked on axis 1, preallocated for S
  positions), updated at `cache_update_index` with `ops.slice_update`; its call has no
  causal switch: the caller passes `attention_mask`, which keras_hub's decoders build
  with `compute_causal_mask(batch, S, T, cache_index)`.

keras_hub is installed apart, `pip install --no-deps 'keras-hub==0.32.*'` (INSTALL): its
dependency tensorflow-text pins the full `tensorflow` wheel, which would be installed beside
`tensorflow-cpu`; the layers used here import without it.  Keras and keras_hub are imported
inside the functions only.
"""
from __future__ import annotations

import importlib.util

import numpy as np

from conformance.contract.runner import NotExpressible, harness_limit
from conformance.runners.keras.common import KerasLayerRunner

INSTALL = "pip install --no-deps 'keras-hub==0.32.*'"
WHY_NO_DEPS = ("--no-deps: keras-hub's dependency tensorflow-text would pull the full "
               "tensorflow wheel beside tensorflow-cpu")
SRC = "https://github.com/keras-team/keras-hub/blob/v0.32.0/keras_hub/src/"
ROPE_SRC = SRC + "layers/modeling/rotary_embedding.py"
CACHED_SRC = SRC + "layers/modeling/cached_multi_head_attention.py"
MASK_SRC = SRC + "layers/modeling/transformer_layer_utils.py"
ROPE_KEYS = ("rotary_dim", "max_wavelength", "starts", "rope_kwargs")  # the plan's rotary entries


def missing_hub() -> str | None:
    """Why keras_hub cannot run here (a skip reason with the install line), or None."""
    if importlib.util.find_spec("keras_hub") is None:
        return f"keras_hub not installed ({INSTALL}; {WHY_NO_DEPS})"
    return None


class KerasHubRunner(KerasLayerRunner):
    """A Keras layer runner that also needs keras_hub: named keras.<kind>.<backend>, and a
    skip naming the install line where keras_hub is missing."""

    kind = ""  # "rope" or "cached"

    def __init__(self, **params):
        super().__init__(**params)
        self.requires = self.requires + ("keras_hub",)

    def default_name(self) -> str:
        return f"keras.{self.kind}.{self.backend}"

    def available(self) -> str | None:
        return missing_hub() or super().available()


def rope_refusal(case) -> NotExpressible | None:
    """Why the case cannot run through RotaryEmbedding, or None."""
    rope = case.attention.rope
    if rope is None:
        return NotExpressible(harness_limit(
            "this runner puts keras_hub.layers.RotaryEmbedding in front of Keras attention: "
            "the case has no rope (the plain layer is the keras.<backend> row)"))
    if rope.style != "half_split":
        return NotExpressible(
            "interleaved pairs (2i, 2i + 1): keras_hub.layers.RotaryEmbedding rotates "
            "half-split pairs only (_apply_rotary_pos_emb: x1, x2 = ops.split(tensor, 2, "
            f"axis=-1)) and has no pairing argument ({ROPE_SRC}); a Meta checkpoint runs "
            "with its W_q / W_k rows permuted (conformance.convert.rope)")
    return None


def rope_call(case) -> str:
    a, i = case.attention, case.inputs
    part = (f" on the first {a.rope.rotary_dim} of {a.qk_head_dim} features of each head"
            if a.rope.rotary_dim < a.qk_head_dim else "")
    return (f"keras_hub.layers.RotaryEmbedding(max_wavelength={a.rope.base:g}) applied to the "
            f"projected query (start_index={i.position_offset}) and key (start_index="
            f"{i.key_position_offset}){part}, in _compute_attention")


_CLASSES: dict[str, type] = {}


def rotary_class(keras, base: str):
    """The subclass of keras.layers.<base> that rotates q and k in _compute_attention."""
    if base in _CLASSES:
        return _CLASSES[base]
    import keras_hub

    class Rotary(getattr(keras.layers, base)):
        def __init__(self, *, rotary_dim: int, max_wavelength: float, starts,
                     rope_kwargs=(), **kwargs):
            super().__init__(**kwargs)
            self.rotary_dim, self.starts = rotary_dim, tuple(starts)
            self.rope = keras_hub.layers.RotaryEmbedding(max_wavelength=max_wavelength,
                                                         dtype=kwargs.get("dtype"),
                                                         **dict(rope_kwargs))

        def rotate(self, x, start: int):
            r = self.rotary_dim
            if r == x.shape[-1]:
                return self.rope(x, start_index=start)
            return keras.ops.concatenate([self.rope(x[..., :r], start_index=start),
                                          x[..., r:]], axis=-1)

        def _compute_attention(self, query, key, value, *args, **kwargs):
            return super()._compute_attention(self.rotate(query, self.starts[0]),
                                              self.rotate(key, self.starts[1]), value,
                                              *args, **kwargs)

    Rotary.__name__ = f"Rotary{base}"
    _CLASSES[base] = Rotary
    return Rotary


def causal_mask(batch: int, slots: int, queries: int, index: int):
    """keras_hub's own compute_causal_mask: (batch, queries, slots), query t at position
    index + t sees slots 0 .. index + t."""
    from keras_hub.src.layers.modeling.transformer_layer_utils import compute_causal_mask

    return compute_causal_mask(batch, slots, queries, cache_index=index)


def cached_call(layer, jit: bool):
    """f(x_chunk, cache, mask, index) -> (output, cache): the layer's cached call, under
    jax.jit over stateless_call on the JAX backend (as model.predict runs it), else eager."""
    if not jit:
        return lambda x, cache, mask, index: layer(x, x, attention_mask=mask, cache=cache,
                                                   cache_update_index=index)
    import jax

    def forward(trainable, non_trainable, x, cache, mask, index):
        (out, new), _ = layer.stateless_call(trainable, non_trainable, x, x,
                                             attention_mask=mask, cache=cache,
                                             cache_update_index=index)
        return out, new

    compiled = jax.jit(forward)
    weights = ([v.value for v in layer.trainable_variables],
               [v.value for v in layer.non_trainable_variables])
    return lambda x, cache, mask, index: compiled(*weights, x, cache, mask, index)


def decode(keras, layer, x, prefill: int, slots: int, masked: bool = True):
    """Prefill `prefill` positions of (B, L, E) x, then one per call, through a cache of
    `slots` positions (zeros).  -> (outputs as float64 NumPy, the shape of each cache the
    layer returned, the dtype the outputs were computed in)."""
    b, n = int(x.shape[0]), int(x.shape[1])
    heads, dim = layer.num_heads, layer.key_dim
    cache = keras.ops.zeros((b, 2, slots, heads, dim), dtype=layer.compute_dtype)
    call = cached_call(layer, keras.backend.backend() == "jax")
    outs, shapes, held = [], [], ""
    for start, size in [(0, prefill)] + [(t, 1) for t in range(prefill, n)]:
        mask = causal_mask(b, slots, size, start) if masked else None
        out, cache = call(x[:, start:start + size], cache, mask, start)
        native = keras.ops.convert_to_numpy(out)
        held = str(native.dtype)
        outs.append(np.asarray(native, np.float64))
        shapes.append(tuple(int(s) for s in cache.shape))
    return outs, shapes, held
