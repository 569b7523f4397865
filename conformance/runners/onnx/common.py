"""What only the ONNX runners share: the parameter count of a graph built here and the
Keras export's bytes.  The export cache, sessions, the checker and combining two graphs
are shared with OpenVINO too: runners/_export/onnx_runtime.py.

numpy at import; onnx and tf2onnx are imported inside the functions.
"""
from __future__ import annotations

import os

import numpy as np


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
