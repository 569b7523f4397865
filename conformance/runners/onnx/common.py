"""What only the ONNX runners share: the parameter count of a graph built here.  The
export cache, sessions, the checker and combining two graphs are shared with OpenVINO too
(runners/_export/onnx_runtime.py); the Keras model's ONNX bytes with LiteRT's probes
(runners/_export/keras_export.py).

numpy at import; onnx is imported inside the function.
"""
from __future__ import annotations

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
