"""Keras 3 `keras.layers.MultiHeadAttention` under each Keras backend.

One class, parametrised by `backend` and `scores` (registry lines, not
subclasses): `KerasMHA(backend="jax", scores=True)` is `keras.jax.scores`.
Why worker subprocesses: a Keras backend is fixed when Keras is first
imported, so each backend runs in its own long-lived worker (keys
"keras-tensorflow", "keras-jax", "keras-torch"; _export/keras_mha.py worker_spec),
shared by every Keras runner of that backend (MHA, its `.scores` path,
GroupedQueryAttention in gqa.py, the ONNX export in onnx/keras_export.py).
What they share lives in common.py and _export/keras_mha.py.  Keras is imported inside `run` only.

Conventions this runner makes explicit:
- sizes are per head: `key_dim` = d_k, `value_dim` = d_v, `output_shape` =
  E_o, and input widths come from the inputs, so per-head widths unrelated to
  the input width (which nn.MultiheadAttention refuses) are expressible;
- the call order is (query, value, key): `key` is optional and defaults to
  `value`;
- `attention_mask` is True = attend, (B, T, S); `use_causal_mask=True` is
  aligned to the upper left (query i sees keys 0..i), so a lower-right
  diagonal with T != S is not expressible through it;
- the output depends on the path: `return_attention_scores=False` goes
  through the backend's fused `ops.dot_product_attention`, `True` through
  einsum + masked Softmax; both are separate rows (`keras.<backend>` and
  `keras.<backend>.scores`) because they differ on fully masked rows;
- kernels are EinsumDense (E_in, H, d), biases (H, d), output (H, d_v, E_o):
  the canonical layout up to a transpose;
- on the JAX backend the layer runs compiled (`jax.jit` over `stateless_call`,
  as `model.predict` runs it): eager JAX compiles each op for each new shape,
  and the compiled path is where users meet JAX's limits (float16 on CPU);
- the layer's `flash_attention=False` alone does not disable flash attention
  (`flash_attention or is_flash_attention_enabled()` turns False into None,
  i.e. auto), so the worker calls `keras.config.disable_flash_attention()`.
"""
from __future__ import annotations

from conformance.runners.keras.common import KerasLayerRunner
from conformance.runners._export.keras_mha import mha_translation


class KerasMHA(KerasLayerRunner):
    """keras.layers.MultiHeadAttention on one backend (`backend`), on one path:
    the default call (fused ops.dot_product_attention) or, with `scores=True`,
    return_attention_scores=True (einsum + masked Softmax)."""

    system = "keras.layers.MultiHeadAttention"
    typed_system = "keras"
    layer_cls, layer_name = "MultiHeadAttention", "mha"

    def __init__(self, **params):
        super().__init__(**params)
        self.path = "scores" if self.scores else "fused"
        self.description = (
            "the same with `return_attention_scores=True` (another code path)" if self.scores
            else "`keras.layers.MultiHeadAttention` on each Keras backend, default call (on JAX "
            "compiled with `jax.jit`, as `model.predict` runs it)")

    def default_name(self) -> str:
        return f"keras.{self.backend}" + (".scores" if self.scores else "")

    def translate(self, case):
        return mha_translation(case)
