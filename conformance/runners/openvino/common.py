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


def compile_model(model, precision: str):
    """CPU plugin, one thread (tiny graphs), the given INFERENCE_PRECISION_HINT."""
    try:
        return core().compile_model(model, "CPU", {"INFERENCE_PRECISION_HINT": precision,
                                                   "INFERENCE_NUM_THREADS": 1})
    except Exception as exc:  # the plugin refuses a graph it cannot compile
        raise NotExpressibleError(f"OpenVINO CPU plugin cannot compile the model: "
                                  f"{short(exc)}") from exc


def execute(compiled, feed: dict) -> list[np.ndarray]:
    """Run on named inputs (a graph input the model dropped is not fed); a model whose
    inputs carry other names (torch.export's `args_0`, ...) is fed in order."""
    names = {n for p in compiled.inputs for n in p.get_names()}
    request = compiled.create_infer_request()
    named = {n: v for n, v in feed.items() if n in names}
    if not named:
        _check_shapes(compiled, list(feed.values()))
    result = request.infer(named if named else list(feed.values()))
    return [np.asarray(result[o]) for o in compiled.outputs]


def _check_shapes(compiled, arrays: list) -> None:
    """Inputs fed in order must fit the compiled shapes: OpenVINO 2026.4.1's infer() on a
    model converted from torch.export (dynamic dims) killed the process (SIGSEGV) when fed
    a 2-D array where a 3-D one was compiled, instead of raising; so it is refused here."""
    for port, array in zip(compiled.inputs, arrays):
        shape = port.get_partial_shape()
        dims = [None if d.is_dynamic else d.get_length() for d in shape]
        given = np.shape(array)
        if len(dims) != len(given) or any(d not in (None, g) for d, g in zip(dims, given)):
            raise ValueError(f"input {port.get_any_name()} of shape {given} does not fit the "
                             f"compiled shape {shape} (refused before infer(), which crashed "
                             "the process with SIGSEGV on it)")


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
