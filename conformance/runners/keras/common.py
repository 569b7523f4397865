"""What the Keras runners share (keras_mha, keras_gqa, onnx_keras): the worker
each backend runs in, the translation words, the canonical weights in Keras's
layout and their checked load, building and calling one attention layer, and
the output digest for cross-backend comparison.

Keras (and JAX) are imported inside the functions only; module-level code is
NumPy and the contract.
"""
from __future__ import annotations

import numpy as np

from conformance.contract.runner import (
    NotExpressible, NotExpressibleError, Observation, Runner, Translation, WorkerSpec)
from conformance.paths import cache_root
from conformance.convert.frameworks import to_keras
from conformance.oracle.canonical import round_to_dtype
from conformance.runners.keras.window import sliding_window

BACKENDS = {"tensorflow": "tensorflow", "jax": "jax", "torch": "torch"}  # backend -> module
DIGEST_LIMIT = 512  # outputs up to this size are kept whole for the cross-backend table
DIGEST_SAMPLE = 256  # larger outputs: this many evenly spaced elements
FLASH_NOTE = ("flash attention disabled: keras.config.disable_flash_attention() (the layer's "
              "flash_attention=False alone means auto: `flash_attention or "
              "is_flash_attention_enabled()`)")
CAUSAL_NOTE = "use_causal_mask=True: upper_left alignment (query i sees keys 0..i)"


# One thread per worker: the layers are tiny, three workers and the pytest
# process share the machine, and thread pools fighting over cores cost more
# than they give (measured: see benchmarks/keras_overhead.py).
SINGLE_THREAD = {"OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "TF_NUM_INTRAOP_THREADS": "1",
                 "TF_NUM_INTEROP_THREADS": "1",
                 "XLA_FLAGS": "--xla_cpu_multi_thread_eigen=false intra_op_parallelism_threads=1"}


# Keras imports these whenever they are installed (orbax checkpointing imports
# jax, the data adapters pandas), on every backend; attention uses neither, and
# they cost a worker ~1.2 s of imports.  Hidden from the workers that have no
# other use for them (WorkerSpec.hide).
UNUSED_BY_BACKEND = {"tensorflow": ("jax", "pandas"), "torch": ("jax", "pandas"),
                     "jax": ("pandas",)}


def worker_spec(backend: str) -> WorkerSpec:
    """The worker every Keras runner of `backend` shares (one key, one environment)."""
    return WorkerSpec(key=f"keras-{backend}",
                      env={"KERAS_BACKEND": backend, "TF_CPP_MIN_LOG_LEVEL": "3",
                           **SINGLE_THREAD},
                      hide=UNUSED_BY_BACKEND[backend])


def causal_limit(case) -> str | None:
    """use_causal_mask is upper-left aligned: lower_right is expressible only when T == S."""
    i = case.inputs
    if case.mask.causal == "lower_right" and i.query_len != i.key_len:
        return (f"causal lower_right with query_len {i.query_len} != key_len {i.key_len}: "
                "use_causal_mask=True is aligned to the upper left (Keras "
                "_compute_causal_mask: row_index >= col_index, query i sees keys 0..i); a "
                "lower-right diagonal needs a hand-built attention_mask")
    return None


def format_call(layer: str, kwargs: dict, dtype: str) -> str:
    """What a user types, e.g. keras.layers.MultiHeadAttention(num_heads=4, key_dim=8)."""
    items = dict(kwargs)
    if dtype != "float32":
        items["dtype"] = dtype
    return f"keras.layers.{layer}(" + ", ".join(f"{k}={v!r}" for k, v in items.items()) + ")"


def mha_translation(case) -> Translation | NotExpressible:
    a = case.attention
    if case.grouped:
        return NotExpressible(
            f"grouped-query attention (num_kv_heads={a.num_kv_heads} < num_heads="
            f"{a.num_heads}): MultiHeadAttention has one key/value head per query head "
            "(see keras.layers.GroupedQueryAttention, runners keras.gqa.*)")
    reason = causal_limit(case)
    if reason:
        return NotExpressible(reason)
    return layer_translation(case, "MultiHeadAttention", {
        "num_heads": a.num_heads, "key_dim": a.qk_head_dim, "value_dim": a.v_head_dim,
        "output_shape": a.output_features})


def layer_translation(case, layer: str, kwargs: dict) -> Translation | NotExpressible:
    """The Keras layer call of `case`: its size arguments, use_bias=False for a bias-free
    case and the sliding window (keras/window.py), or the window's refusal."""
    if not case.attention.bias:
        kwargs["use_bias"] = False
    window = sliding_window(case)
    if isinstance(window, NotExpressible):
        return window
    kwargs.update(window)
    return Translation(format_call(layer, kwargs, case.inputs.dtype), kwargs)


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


def explicit_mask(inputs) -> np.ndarray | None:
    """The attention_mask (B, T, S), True = attend; the causal part is left to
    use_causal_mask (Keras ANDs the two)."""
    return inputs.non_causal


def storage_dtype(keras, x) -> str:
    """The dtype the backend really holds (a Variable may declare another)."""
    return str(keras.ops.convert_to_numpy(x).dtype)


def to_f64(keras, x) -> np.ndarray:
    return np.asarray(keras.ops.convert_to_numpy(x)).astype(np.float64)


def tensor(keras, arr: np.ndarray, dtype: str | None = None):
    """NumPy -> backend tensor in `dtype` (default: the array's own), without
    running a backend op where the backend allows it: under JAX every eager op
    compiles once per new shape, jnp.asarray included, so arrays go in by
    jax.device_put.  bfloat16 goes through ml_dtypes on JAX, through float32
    and a cast elsewhere (exact: the canonical values are already rounded to
    the case dtype)."""
    if keras.backend.backend() == "jax":
        import jax
        import ml_dtypes

        kind = ml_dtypes.bfloat16 if dtype == "bfloat16" else dtype
        return jax.device_put(np.asarray(arr, dtype=kind))
    if dtype == "bfloat16":
        return keras.ops.cast(keras.ops.convert_to_tensor(np.asarray(arr, np.float32)), dtype)
    return keras.ops.convert_to_tensor(np.asarray(arr, dtype=dtype))


def numpy_zeros(keras):
    """An initializer that runs no backend op: the weights are overwritten at once,
    and Keras's own zeros cost a JAX compilation per kernel shape.  A subclass of
    keras.initializers.Initializer, because MultiHeadAttention clones its
    initializers for each sublayer through get_config/from_config."""
    class NumpyZeros(keras.initializers.Initializer):
        def __call__(self, shape, dtype=None):
            return tensor(keras, np.zeros(shape), dtype or "float32")

    return NumpyZeros()


def load_weights(keras, layer, weights, dtype: str) -> list[str]:
    """Assign the canonical weights through the public API and read them back.

    A readback that differs from the canonical values (rounded to the dtype the
    backend really stores) is a runner failure, raised as an error.  Returns
    notes about variables stored in another dtype than declared.
    """
    want = to_keras(weights, grouped=True)  # the layout's one definition (convert/)
    notes, seen = [], set()
    for var in layer.weights:
        suffix = "/".join(var.path.split("/")[-2:])
        if suffix not in want:
            raise RuntimeError(f"variable {var.path} {tuple(var.shape)} has no canonical "
                               f"counterpart (known: {sorted(want)})")
        arr = want[suffix]
        if tuple(var.shape) != arr.shape:
            raise RuntimeError(f"variable {var.path} has shape {tuple(var.shape)}, canonical "
                               f"{suffix} is {arr.shape}")
        var.assign(tensor(keras, arr, dtype))
        native = keras.ops.convert_to_numpy(var.value)
        held, back = str(native.dtype), np.asarray(native).astype(np.float64)
        # arr is already rounded to the case dtype: round again only if held elsewhere
        if held not in ("float64", "float32", "float16", "bfloat16") or not np.array_equal(
                back, arr if held == dtype else round_to_dtype(arr, held)):
            raise RuntimeError(f"readback of {var.path} differs from the canonical "
                               f"{suffix} (stored as {held}); max abs diff "
                               f"{np.max(np.abs(back - arr)):.3g}")
        if held != dtype:
            notes.append(f"{var.path} declares dtype {var.dtype} but the backend stores {held}")
        seen.add(suffix)
    missing = sorted(set(want) - seen)
    if missing:
        raise RuntimeError(f"the layer holds no variable for canonical {missing}")
    return notes[:1] + ([f"... and {len(notes) - 1} more variables"] if len(notes) > 1 else [])


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


def jax_compilation_cache() -> str:
    """JAX compiles every eager op per new shape (about 40 ms each, 30+ per case);
    a persistent compilation cache under the git-ignored .cache/ makes every run
    after the first reuse them.  Keyed by JAX's own cache key (HLO, versions, flags),
    so it cannot change a result."""
    import jax

    root = cache_root() / f"jax-{jax.__version__}"
    jax.config.update("jax_compilation_cache_dir", str(root))
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.0)
    jax.config.update("jax_persistent_cache_min_entry_size_bytes", 0)
    return str(root)


def classify_call_error(exc: Exception, case, backend: str, scores: bool) -> Exception:
    """Limits that show only on calling, in the framework's own words."""
    a, dtype = case.attention, case.inputs.dtype
    text = f"{type(exc).__name__}: {exc}"
    if backend == "jax" and not scores and a.qk_head_dim != a.v_head_dim:
        first = " ".join(text.split())[:300]
        return NotExpressibleError(
            f"keras (jax) fused path cannot run value_dim={a.v_head_dim} != key_dim="
            f"{a.qk_head_dim}: jax.nn.dot_product_attention requires equal head dims "
            "('value shape should be ...'), and Keras's fallback then fails (a Keras bug; "
            f"return_attention_scores=True works): {first}")
    markers = ("OpKernel", "not implemented for", "Unsupported dtype", "not supported",
               "DT_HALF", "DT_BFLOAT16", "DT_DOUBLE")
    if dtype != "float32" and any(m in text for m in markers):
        return NotExpressibleError(f"keras ({backend}) cannot compute in {dtype}: "
                                   f"{text.splitlines()[0][:400]}")
    return exc


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
            **translation.plan, flash_attention=False, dtype=dtype, name=layer_name,
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
    keras.config.disable_flash_attention()
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
    features = Runner.features | {"window"}  # sliding_window (window.py)

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
        """The layer built with no variable initialised (runners/_counts.py)."""
        import keras

        from conformance.runners.counting import keras_count

        return keras_count(keras, self.layer_cls, case, self.translate(case).plan)

    def conventions(self):
        """Probes of this layer and path on this worker's backend (_keras_probes.py)."""
        import keras

        from conformance.contract.probing import feature_cells

        cls = getattr(keras.layers, self.layer_cls)
        probed = self.probe_cells()
        return probed + feature_cells(f"keras.layers.{self.layer_cls}", cls.__init__, cls.call,
                                      skip=tuple(c.axis for c in probed))
