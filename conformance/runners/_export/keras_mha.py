"""keras.layers.MultiHeadAttention as keras.tensorflow runs it and onnx.keras-export
converts it: the worker of a backend, the translation (sliding window included), the
canonical weights' checked load, dtypes and the call errors in Keras's words.

Used by runners/keras/ (the layer runners and their probes) and runners/onnx/
(keras_export*.py, which export the very layer the keras.tensorflow rows run).  Keras
(and JAX) are imported inside the functions only; module-level code is NumPy and the
contract.
"""
from __future__ import annotations

import re

import numpy as np

from conformance.case.loader import parse_case
from conformance.contract.runner import (
    NotExpressible, NotExpressibleError, Translation, WorkerSpec)
from conformance.convert.frameworks import to_keras
from conformance.oracle.canonical import round_to_dtype


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
    return layer_translation(case, "MultiHeadAttention", {
        "num_heads": a.num_heads, "key_dim": a.qk_head_dim, "value_dim": a.v_head_dim,
        "output_shape": a.output_features})


def layer_translation(case, layer: str, kwargs: dict) -> Translation | NotExpressible:
    """The Keras layer call of `case`: its size arguments, use_bias=False for a bias-free
    case and the sliding window, or the causal mask's or the window's refusal."""
    reason = causal_limit(case)
    if reason:
        return NotExpressible(reason)
    if not case.attention.bias:
        kwargs["use_bias"] = False
    window = sliding_window(case)
    if isinstance(window, NotExpressible):
        return window
    kwargs.update(window)
    return Translation(format_call(layer, kwargs, case.inputs.dtype), kwargs)


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


# ---- the sliding window (#20): its translation; the ledger probes it (probes/windows.py)

SOURCE = ("https://github.com/keras-team/keras/blob/v3.15.0/keras/src/layers/attention/"
          "multi_head_attention.py")


BAND = "|i - j| < sliding_window (Keras _compute_sliding_window_mask, a symmetric band)"


def sliding_window(case) -> dict | NotExpressible:
    """{} (no window), {"sliding_window": w}, or why the case's window is not one w."""
    win = case.mask.window
    if win is None:
        return {}
    causal = case.mask.causal != "none"
    if win.left is not None and (win.left == win.right and not causal
                                 or causal and win.right == 0):
        return {"sliding_window": win.left + 1}
    return NotExpressible(f"mask.window left={win.left}, right={win.right}"
                          f"{' with a causal mask' if causal else ''}: sliding_window is one "
                          f"number, {BAND}; only left == right (no causal mask) or right 0 "
                          "with use_causal_mask=True is expressible")


# ---- probe helpers shared by the layer's probes and onnx.keras-export's

ANSI = re.compile(r"\x1b\[[0-9;]*m|\[1m|\[0m")


def base_case(dtype: str = "float32", self_attention: bool = False):
    """Head width 3 on 8 features (neither 8 / 2 nor 8): a per-head size shows as itself."""
    inputs = {"batch": 2, "query_len": 3, "key_len": 5, "seed": 7, "dtype": dtype}
    if self_attention:
        inputs.update(self_attention=True, query_len=4, key_len=4)
    return parse_case({"id": f"probe-keras-{dtype}{'-self' if self_attention else ''}",
                       "attention": {"num_heads": 2, "query_features": 8, "qk_head_dim": 3,
                                     "v_head_dim": 3}, "inputs": inputs}, "<probe>")
