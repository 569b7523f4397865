"""What every runner that runs an ONNX graph shares (the ONNX runners, and OpenVINO on the
same exports): the export cache, error quoting, dtypes, the onnxruntime session, the
checker, combining the two exported graphs of a case into one observation, the
effective scale of onnxruntime's split float32 scaling (split_scale, arithmetic only).  It
compares nothing with the oracle: the float64 readings that do are the ledger's
(conventions/probes/float64.py).

numpy and the contract at import; onnx, onnxruntime and ml_dtypes are imported
inside the functions.
"""
from __future__ import annotations

import numpy as np

from conformance.cache import BytesCache, onnx_external_data
from conformance.contract.runner import NotExpressibleError, to_numpy


CACHE = BytesCache("onnx", ".onnx", covers=("conformance/oracle/canonical.py",),  # weights
                   check=onnx_external_data)  # no tensor read from outside the entry


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


def split_scale(d: int) -> float:
    """The effective scale when sqrt(scale) is rounded to float32 and applied to Q and to K
    (onnxruntime's CPU Attention): float32(sqrt(float32(1/sqrt(d))))^2, not separable from
    float64 arithmetic by one head size (exact at d = 1, 16)."""
    root = float(np.float32(np.sqrt(np.float32(1 / np.sqrt(d)))))
    return root * root
