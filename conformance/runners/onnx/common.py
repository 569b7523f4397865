"""What the ONNX runners share (onnx_export, onnx_attention_op, onnx_keras): the
export cache, error quoting, dtypes, the onnxruntime session, the checker, and
combining the two exported graphs of a case into one observation.

numpy and the contract at import; onnx, onnxruntime and ml_dtypes are imported
inside the functions.
"""
from __future__ import annotations

import os

import numpy as np

from conformance.cache import BytesCache
from conformance.contract.runner import NotExpressibleError, to_numpy

CACHE = BytesCache("onnx", ".onnx", covers=("conformance/oracle/canonical.py",))  # weights
FORMAT = 1  # bump when what we export changes, to invalidate cached graphs


def short(exc: BaseException, limit: int = 600) -> str:
    """The first lines of an exception, as a one-line quote."""
    text = " ".join(str(exc).split())
    return f"{type(exc).__name__}: {text[:limit]}" + ("..." if len(text) > limit else "")


def numpy_dtype(name: str):
    if name == "bfloat16":
        import ml_dtypes

        return ml_dtypes.bfloat16
    return np.dtype(name)


def ort_session(model_bytes: bytes, what: str, exported: bool = True):
    """An onnxruntime CPU session.  A missing kernel (dtype) is not expressible;
    so is an exported graph ORT refuses to load (the exporter's doing), but a
    graph we built ourselves (exported=False) that fails to load is an error."""
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.intra_op_num_threads = 1  # tiny graphs: threads cost more than they give
    options.log_severity_level = 3
    try:
        return ort.InferenceSession(model_bytes, options, providers=["CPUExecutionProvider"])
    except Exception as exc:  # ORT raises its own pybind classes (NotImplemented, Fail)
        if "NOT_IMPLEMENTED" in str(exc) or type(exc).__name__ == "NotImplemented":
            raise NotExpressibleError(f"onnxruntime {ort.__version__} CPUExecutionProvider "
                                      f"cannot run the {what}: {short(exc)}") from exc
        if exported:  # the exporter wrote a graph the runtime refuses to load
            raise NotExpressibleError(f"onnxruntime {ort.__version__} refuses to load the "
                                      f"{what}: {short(exc)}") from exc
        raise


def check(model_bytes: bytes):
    import onnx

    model = onnx.load_from_string(model_bytes)
    onnx.checker.check_model(model)
    return model


def built_parameters(model, buffers: tuple[str, ...] = ()) -> int:
    """The parameter count of a graph this project built from the canonical
    weights: the elements of its float initializers (the integer ones are
    shapes and splits), by construction, whatever the accounting matches.
    Initializers whose names end with one of `buffers` are computed constants, not
    parameters (RoPE's cos/sin caches, graph_parts.ROPE_BUFFERS)."""
    from onnx import TensorProto

    floats = {TensorProto.FLOAT, TensorProto.FLOAT16, TensorProto.DOUBLE, TensorProto.BFLOAT16}
    return int(sum(int(np.prod(t.dims)) for t in model.graph.initializer
                   if t.data_type in floats and not (buffers and t.name.endswith(buffers))))


def combine_graphs(results: dict, graphs: dict, notes: list[str], framework: str,
                   plain: str, with_weights: str):
    """Output from the graph exported without weights, per-head weights from the
    one exported with them; notes say so, how far the two outputs differ, and
    where the exported weight total differs from the framework's count."""
    out = to_numpy(results[plain][0])
    delta = float(np.nanmax(np.abs(to_numpy(results[with_weights][0]) - out), initial=0.0))
    notes.append(f"output from the {plain} graph; per-head weights from the {with_weights} "
                 f"graph (its output differs from the first by at most {delta:.2e})")
    acc = graphs[plain]
    if acc["exported_weights"] != acc["framework_parameters"]:
        notes.append(f"graph weights differ from {framework}'s count: {acc['explanation']}")
    return out, to_numpy(results[with_weights][1]), delta


KERAS_EXPORT_FORMAT = 2  # 2: tf2onnx's name counter reset before each export


def keras_onnx_bytes(model, prefix: str = "conformance-keras-onnx-") -> bytes:
    """Keras 3's `model.export(format="onnx")` (tf2onnx) as bytes.  tf2onnx names the
    tensors it makes from one process-wide counter (`Reshape__3113`), so the same model
    got other names after other exports (or none, from the cache): the counter is reset
    first, and a graph's names depend on the model alone."""
    import tempfile

    import tf2onnx.utils

    tf2onnx.utils.INTERNAL_NAME = 1
    with tempfile.TemporaryDirectory(prefix=prefix) as tmp:
        path = os.path.join(tmp, "model.onnx")
        model.export(path, format="onnx", verbose=False)
        with open(path, "rb") as fh:
            return fh.read()
