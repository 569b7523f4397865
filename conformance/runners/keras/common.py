"""What the Keras layer runners share (keras.*, keras.gqa.*): building and calling one
attention layer, the JAX compiled path and the output digest for cross-backend
comparison.  The worker, the translation words and the checked weight load are shared
with onnx.keras-export too: runners/_export/keras_mha.py.

Keras (and JAX) are imported inside the functions only; module-level code is
NumPy and the contract.
"""
from __future__ import annotations

import numpy as np

from conformance.contract.runner import NotExpressibleError, Observation, Runner
from conformance.runners._export.keras_mha import (
    classify_call_error, explicit_mask, load_weights, storage_dtype, tensor, to_f64,
    worker_spec)
from conformance.runners.keras.answers import ANSWERS
from conformance.runners.keras.calls import (
    flash_off, jax_compilation_cache, no_flash_attention, numpy_zeros)

BACKENDS = {"tensorflow": "tensorflow", "jax": "jax", "torch": "torch"}  # backend -> module
DIGEST_LIMIT = 512  # outputs up to this size are kept whole for the cross-backend table
DIGEST_SAMPLE = 256  # larger outputs: this many evenly spaced elements
FLASH_NOTE = ("flash attention disabled: keras.config.disable_flash_attention() (the layer's "
              "flash_attention=False alone means auto: `flash_attention or "
              "is_flash_attention_enabled()`)")
DOCS = "https://keras.io/api/layers/attention_layers/multi_head_attention/"
CAUSAL_NOTE = "use_causal_mask=True: upper_left alignment (query i sees keys 0..i)"


def call_text(case, scores: bool) -> str:
    """The layer call as a user would write it (argument order query, value, key)."""
    args = ["x, x"] if case.inputs.self_attention else ["query, value, key"]
    if case.has_non_causal_mask:
        args.append("attention_mask=mask")
    if case.mask.causal != "none":
        args.append("use_causal_mask=True")
    if scores:
        args.append("return_attention_scores=True")
    return "layer(" + ", ".join(args) + ")"


def digest(out: np.ndarray, dtype: str) -> dict:
    """A compact, deterministic record of the output for the cross-backend table:
    the values themselves (float32-rounded unless the case is float64), every
    element up to DIGEST_LIMIT, else DIGEST_SAMPLE evenly spaced ones."""
    flat = np.asarray(out, dtype=np.float64).ravel()
    sampled = flat.size > DIGEST_LIMIT
    if sampled:
        flat = flat[np.linspace(0, flat.size - 1, DIGEST_SAMPLE).round().astype(int)]
    digits = 17 if dtype == "float64" else 9  # 9 significant digits round-trip a float32
    if dtype != "float64":
        flat = flat.astype(np.float32).astype(np.float64)
    return {"size": int(np.asarray(out).size), "sampled": sampled,
            "values": [float(f"{v:.{digits}g}") if np.isfinite(v) else None for v in flat]}


JIT_NOTE = ("called under jax.jit (layer.stateless_call), as model.predict and fit run it: "
            "JAX's eager mode compiles every op separately for every new shape")


def call_jitted(layer, args, key: dict, kw: dict, scores: bool):
    """The JAX backend's compiled path: one XLA program per call, as in
    model.predict.  (Eager calls compile each op on its own, seconds per case.)"""
    import jax

    causal = kw.get("use_causal_mask", False)

    def forward(trainable, non_trainable, query, value, key_, mask):
        extra = {"use_causal_mask": True} if causal else {}
        if key_ is not None:
            extra["key"] = key_
        if mask is not None:
            extra["attention_mask"] = mask
        out, _ = layer.stateless_call(trainable, non_trainable, query, value,
                                      return_attention_scores=scores, **extra)
        return out

    return jax.jit(forward)([v.value for v in layer.trainable_variables],
                            [v.value for v in layer.non_trainable_variables],
                            *args, key.get("key"), kw.get("attention_mask"))


_BUILT: dict[tuple, tuple] = {}  # the last layer built, loaded and checked


def built_layer(keras, layer_name: str, layer_cls: str, case, translation, data):
    """The layer built for the case's inputs, its canonical weights loaded and
    read back, with the input tensors and the load notes.

    The `.scores` row calls the very layer its fused-path row just called (one
    build and one load per case and layer class, not two): the worker gets the
    rows of a case one after the other, so one remembered layer is enough.  Keyed by the
    weights object too (held in the entry, so its id stays unique): other weights for the
    same case (tests/test_rope_permutation.py) get a fresh layer, never a stale one.
    """
    dtype, i = case.inputs.dtype, case.inputs
    key = (layer_cls, case.fingerprint(), repr(sorted(translation.plan.items())),
           id(data.weights))
    if key in _BUILT:
        return _BUILT[key][:3]
    _BUILT.clear()
    try:
        # NumPy zeros initialisers: the weights are overwritten; Keras's own initialisers
        # cost a JAX compilation per kernel shape.  layer_cls: a keras.layers name or a class
        layer = (getattr(keras.layers, layer_cls) if isinstance(layer_cls, str) else layer_cls)(
            **translation.plan, **flash_off(keras), dtype=dtype, name=layer_name,
            kernel_initializer=numpy_zeros(keras), bias_initializer=numpy_zeros(keras))
        q = tensor(keras, data.inputs.query, dtype)
        k = q if i.self_attention else tensor(keras, data.inputs.key, dtype)
        v = q if i.self_attention else tensor(keras, data.inputs.value, dtype)
        layer.build(tuple(q.shape), tuple(v.shape), tuple(k.shape))
    except (ValueError, TypeError) as exc:
        raise NotExpressibleError(f"keras rejected the configuration: {exc}") from exc
    _BUILT[key] = (layer, (q, k, v), load_weights(keras, layer, data.weights, dtype),
                   data.weights)
    return _BUILT[key][:3]


def run_layer(runner, layer_cls: str, case, translation, data) -> Observation:
    """Build, load, call and observe one Keras attention layer (worker side)."""
    import keras

    backend, dtype, scores = runner.backend, case.inputs.dtype, runner.scores
    if keras.backend.backend() != backend:
        raise RuntimeError(f"worker runs Keras backend {keras.backend.backend()!r}, "
                           f"runner needs {backend!r}")
    no_flash_attention(keras)
    if backend == "jax":
        jax_compilation_cache()
    layer, (q, k, v), load_notes = built_layer(keras, runner.layer_name, layer_cls, case,
                                               translation, data)
    notes = [FLASH_NOTE] + load_notes
    i = case.inputs
    kw = {}
    mask = explicit_mask(data.inputs)
    if mask is not None:
        kw["attention_mask"] = tensor(keras, mask)
    if case.mask.causal != "none":
        kw["use_causal_mask"] = True
        notes.append(CAUSAL_NOTE)
    try:
        args = (q, q) if i.self_attention else (q, v)
        key = {} if i.self_attention else {"key": k}
        if backend == "jax":
            result = call_jitted(layer, args, key, kw, scores)
            notes.append(JIT_NOTE)
        else:  # called eagerly, as a user calls a layer
            result = layer(*args, **key, **kw, return_attention_scores=scores)
    except Exception as exc:
        raise classify_call_error(exc, case, backend, scores) from exc
    out, weights = result if scores else (result, None)
    output = to_f64(keras, out)
    held = storage_dtype(keras, out)
    if held != dtype:
        notes.append(f"output computed in {held}, not the requested {dtype}")
    notes.append("return_attention_scores=True: einsum + masked Softmax path" if scores else
                 "return_attention_scores=False: fused ops.dot_product_attention path")
    return Observation(
        output=output,
        attention_weights=None if weights is None else to_f64(keras, weights),
        weights_returned="per_head" if scores else "none",
        parameters=int(layer.count_params()),
        weight_shapes={w.path: tuple(int(d) for d in w.shape) for w in layer.weights},
        notes=notes,
        extras={"backend": backend, "call": call_text(case, scores), "output_dtype": held,
                "mask_polarity": "True = attend", "flash_attention": False,
                "causal_alignment": "upper_left" if case.mask.causal != "none" else None},
        output_digest=digest(output, dtype))


class KerasLayerRunner(Runner):
    """One Keras attention layer class on one backend (keras_mha, keras_gqa): the
    parameters decide the name, the modules needed and the worker."""

    framework = "keras"
    backend = "tensorflow"
    seconds = 0.3
    scores = False  # True: return_attention_scores=True (einsum + Softmax path)
    layer_cls = ""  # the keras.layers class, e.g. "MultiHeadAttention"
    layer_name = ""  # the layer's name (its variable paths start with it)
    features = Runner.features | {"window"}  # sliding_window (_export/keras_mha.py)
    # the number the backends' dot_product_attention writes into masked logits
    # (_get_large_negative: 'val = 65500 if dtype == "float16" else 3.38953e38', val * -0.7):
    # the ledger's fill probe cannot tell it from finfo.min by the outputs (masks.py)
    documented_fill = ("-0.7*finfo_max", "https://github.com/keras-team/keras/blob/v3.15.1/"
                       "keras/src/backend/tensorflow/nn.py#L1677")

    def __init__(self, **params):
        super().__init__(**params)
        if "name" not in params:
            self.name = self.default_name()
        self.requires = ("keras", BACKENDS[self.backend])
        self.worker = worker_spec(self.backend)

    def default_name(self) -> str:
        raise NotImplementedError

    def run(self, case, translation, data):
        return run_layer(self, self.layer_cls, case, translation, data)

    def count(self, case):
        """The layer built with no variable initialised (runners/counting.py)."""
        import keras

        from conformance.runners.counting import keras_count

        return keras_count(keras, self.layer_cls, case, self.translate(case).plan)

    # the ledger asks through translate/run and through `answer` (RAW_PROBES);
    # observations.py reports the API facts
    answers = ANSWERS

    def answer(self, case, data, raw):
        """The layer called with one native argument as given (answers.py)."""
        from conformance.runners.keras.answers import answer

        return answer(self, case, data, raw)

    def signatures(self):
        import keras

        cls = getattr(keras.layers, self.layer_cls)
        return f"keras.layers.{self.layer_cls}", (cls.__init__, cls.call)

    def conventions(self):
        """The API facts of this layer and path on this worker's backend (observations.py):
        the ledger asks every other axis."""
        from conformance.runners.keras.observations import layer_facts

        return layer_facts(self)
