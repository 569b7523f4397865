"""The Keras layer calls the ledger's probes ask for (Runner.answer) and the API facts
(observations.py) are read from: a small layer of a runner's class and path on this
worker's backend, loaded with the canonical weights, called the way the runner's rows call
it (eagerly on TensorFlow and torch, `jax.jit` over `stateless_call` on JAX), with native
arguments passed as given.  Nothing here reads an output against the oracle: the ledger's
probes (conformance/conventions/probes/) judge.  Keras is imported inside the methods only.
"""
from __future__ import annotations

from dataclasses import replace

import numpy as np

from conformance.oracle.canonical import case_data
from conformance.runners._export.keras_mha import load_weights, storage_dtype, tensor, to_f64


def numpy_zeros(keras):
    """An initializer that runs no backend op: the weights are overwritten at once,
    and Keras's own zeros cost a JAX compilation per kernel shape.  A subclass of
    keras.initializers.Initializer, because MultiHeadAttention clones its
    initializers for each sublayer through get_config/from_config."""
    class NumpyZeros(keras.initializers.Initializer):
        def __call__(self, shape, dtype=None):
            return tensor(keras, np.zeros(shape), dtype or "float32")

    return NumpyZeros()


def no_flash_attention(keras) -> None:
    """keras.config.disable_flash_attention(): the layer's flash_attention=False alone
    means auto.  A release without the switch (the drift command's older Keras eras) has
    no flash-attention path to turn off, so there it is a no-op."""
    disable = getattr(keras.config, "disable_flash_attention", None)
    if disable is not None:
        disable()


def flash_off(keras) -> dict:
    """The layer's `flash_attention=False` keyword, or none in a release whose layers take
    no such argument (no flash-attention path: the older eras of the drift command)."""
    return {"flash_attention": False} if hasattr(keras.config, "disable_flash_attention") \
        else {}


def jax_compilation_cache() -> str | None:
    """JAX compiles every eager op per new shape (about 40 ms each, 30+ per case);
    a persistent compilation cache makes every run after the first reuse them, its
    entries signed and verified before JAX loads them (runners/jax_cache.py).  Keyed by
    JAX's own cache key (HLO, versions, flags), so it cannot change a result."""
    from conformance.runners.jax_cache import signed_compilation_cache

    return signed_compilation_cache()


class Probe:
    """One runner's layer class and path on this worker's backend."""

    def __init__(self, runner):
        import keras

        no_flash_attention(keras)
        self.keras, self.runner = keras, runner
        self.backend = keras.backend.backend()
        if self.backend == "jax":  # compiled probes are reused from the second session on
            jax_compilation_cache()
        self.scores = bool(getattr(runner, "scores", False))
        # a keras.layers name, or a class (a keras_hub layer); `answer_layer` where the layer
        # the runner answers with is not its counted class (keras.cached's)
        cls = getattr(runner, "answer_layer", None) or runner.layer_cls
        self.cls = getattr(keras.layers, cls) if isinstance(cls, str) else cls
        where = "keras.layers" if isinstance(cls, str) else self.cls.__module__.split(".")[0]
        self.what = (f"{where}.{self.cls.__name__} ({self.backend}, "
                     f"return_attention_scores={self.scores})")

    def plan(self, case) -> dict:
        """The layer's constructor arguments for `case`: the runner's probe_translate where
        it has one (a single call of a decode runner, the layer under a rotation)."""
        return (getattr(self.runner, "probe_translate", None) or self.runner.translate)(
            case).plan

    def layer(self, case, data=None, dtype=None, rank: int = 3, **options):
        """A layer built for `case` (or its 2-D inputs) holding the canonical weights."""
        k, data = self.keras, data or case_data(case)
        dtype = dtype or case.inputs.dtype
        layer = self.cls(
            **self.plan(case), **options, **flash_off(k), dtype=dtype,
            kernel_initializer=numpy_zeros(k), bias_initializer=numpy_zeros(k))
        x = data.inputs
        layer.build(*(a.shape[3 - rank:] for a in (x.query, x.value, x.key)))
        load_weights(k, layer, data.weights, dtype)
        return layer

    def invoke(self, obj, args, training=None, **kw):
        """obj(*args, **kw) as the rows call it; NumPy arrays in, backend values out."""
        k = self.keras
        args = [tensor(k, a) for a in args]
        arrays = {n: tensor(k, v) for n, v in kw.items() if isinstance(v, np.ndarray)}
        static = {n: v for n, v in kw.items() if n not in arrays}
        if training is not None:
            static["training"] = training
        if self.backend != "jax":
            return obj(*args, **static, **arrays)
        import jax

        def forward(trainable, non_trainable, args, arrays):
            return obj.stateless_call(trainable, non_trainable, *args, **static, **arrays)[0]

        return jax.jit(forward)([v.value for v in obj.trainable_variables],
                                [v.value for v in obj.non_trainable_variables], args, arrays)

    def call(self, layer, data, scores=None, rank: int = 3, **kw):
        """layer(query, value, key, **kw) positionally -> (output, weights, output dtype)."""
        scores = self.scores if scores is None else scores
        x, dtype = data.inputs, layer.dtype_policy.compute_dtype
        args = [a[0] if rank == 2 else a for a in (x.query, x.value, x.key)]
        if "dtype" not in kw:
            args = [np.asarray(a, dtype) for a in args]
        kw.pop("dtype", None)
        res = self.invoke(layer, args, return_attention_scores=scores, **kw)
        out, w = res if scores else (res, None)
        k = self.keras
        return to_f64(k, out), (None if w is None else to_f64(k, w)), storage_dtype(k, out)

    def fwd(self, case, data=None, **kw) -> np.ndarray:
        data = data or case_data(case)
        return self.call(self.layer(case, data), data, **kw)[0]


def swapped(data):
    """The same arrays with key and value exchanged (the other argument order)."""
    return replace(data, inputs=replace(data.inputs, key=data.inputs.value,
                                        value=data.inputs.key))
