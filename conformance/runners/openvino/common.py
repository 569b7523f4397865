"""What the OpenVINO runners share: one Core, models compiled for CPU with an inference
precision hint, IR serialised to bytes for the cache, and the converted model's own
accounting (its float constants, the operations it became and the kernels the CPU plugin
compiled them into).  openvino is imported inside the functions.
"""
from __future__ import annotations

import functools
import struct

import numpy as np

from conformance.contract.runner import NotExpressibleError

DOC = ("https://docs.openvino.ai/2026/openvino-workflow/running-inference/optimize-inference/"
       "precision-control.html")


@functools.lru_cache(maxsize=1)
def core():
    import openvino as ov

    return ov.Core()


def short(exc: BaseException, limit: int = 500) -> str:
    text = " ".join(str(exc).split())
    return f"{type(exc).__name__}: {text[:limit]}" + ("..." if len(text) > limit else "")


def ir_bytes(model) -> bytes:
    """An ov.Model as one blob: the XML's length, the XML, the weights."""
    import os
    import tempfile

    import openvino as ov

    with tempfile.TemporaryDirectory(prefix="conformance-openvino-") as tmp:
        path = os.path.join(tmp, "model.xml")
        ov.save_model(model, path, compress_to_fp16=False)
        with open(path, "rb") as fh:
            xml = fh.read()
        with open(path[:-4] + ".bin", "rb") as fh:
            weights = fh.read()
    return struct.pack("<Q", len(xml)) + xml + weights


def read(blob: bytes, onnx: bool):
    """An ov.Model from ONNX bytes or from ir_bytes()."""
    import openvino as ov

    if onnx:
        return core().read_model(blob, ov.Tensor(np.zeros(0, np.uint8)))
    (n,) = struct.unpack("<Q", blob[:8])
    weights = np.frombuffer(blob[8 + n:], np.uint8).copy()
    return core().read_model(blob[8:8 + n], ov.Tensor(weights))


def compile_model(model, precision: str, one_thread: bool = True):
    """CPU plugin, the given INFERENCE_PRECISION_HINT; one thread (tiny graphs), or
    (`one_thread` False) the plugin's default thread count: the native calls of the ledger
    feed inputs of another shape, and with INFERENCE_NUM_THREADS=1 OpenVINO 2026.4.1's CPU
    plugin skips the shape check its default makes (a 2-D query into a converted
    torch.export model gives a (2, 3, 8) output 7.6e31 off, where the default refuses:
    "ParameterMismatch: Can not clone with new dims")."""
    config = {"INFERENCE_PRECISION_HINT": precision}
    if one_thread:
        config["INFERENCE_NUM_THREADS"] = 1
    try:
        return core().compile_model(model, "CPU", config)
    except Exception as exc:  # the plugin refuses a graph it cannot compile
        raise NotExpressibleError(f"OpenVINO CPU plugin cannot compile the model: "
                                  f"{short(exc)}") from exc


def execute(compiled, feed: dict) -> list[np.ndarray]:
    """Run on named inputs (a graph input the model dropped is not fed); a model whose
    inputs carry other names (torch.export's `args_0`, ...) is fed in order.  An input of
    another shape or dtype goes to OpenVINO as it is: its infer() converts a dtype to the
    port's (openvino/utils/data_helpers/data_dispatcher.py, value_to_tensor: "If types
    are mismatched, convert and always copy") and refuses a shape the compiled model cannot
    take with its own error under its default thread count (compile_model)."""
    names = {n for p in compiled.inputs for n in p.get_names()}
    request = compiled.create_infer_request()
    named = {n: v for n, v in feed.items() if n in names}
    result = request.infer(named if named else list(feed.values()))
    return [np.asarray(result[o]) for o in compiled.outputs]


def constants(model) -> int:
    """Elements of the model's float constants of rank >= 1: its weights (scalars are
    scales and fills, integer constants are shapes and axes)."""
    total = 0
    for op in model.get_ordered_ops():
        if op.get_type_name() == "Constant" and op.get_output_element_type(0).is_real():
            shape = list(op.get_output_shape(0))
            if shape:
                total += int(np.prod(shape))
    return total


def accounting(model, compiled) -> dict:
    """The operations of the converted model and the kernels (layer types) the CPU
    plugin compiled, with the precision it actually runs."""
    ops = sorted({op.get_type_name() for op in model.get_ordered_ops()})
    kernels = sorted({str(op.get_rt_info()["layerType"].astype(str))
                      for op in compiled.get_runtime_model().get_ordered_ops()})
    return {"operations": ops, "kernels": kernels,
            "inference_precision": str(compiled.get_property("INFERENCE_PRECISION_HINT")),
            "constant_elements": constants(model)}
