"""The dynamo ONNX exporter's operator list, built once per process instead of per export.

`torch.onnx.export(dynamo=True)` builds its registry of ATen -> ONNX functions on every
call (`ONNXRegistry.from_torchlib`), and listing onnxscript's torchlib there reads the
source of ~3,000 functions again each time (`OnnxFunction.function_ir` parses it): 1.4 s
of CPU per export on this machine, half of a small graph's whole export, spent before the
graph is looked at.  The list depends on nothing but what was imported (the functions
register themselves at import), so within one process the first listing is handed to every
later export.  The registry built from it, and so every exported graph, is unchanged:
tests/test_torchlib_once.py exports the same module with and without this and compares the
bytes.  torch and onnxscript are imported inside the function only; where a release moves
the function, exports run as they would without this.
"""
from __future__ import annotations

import contextlib
import importlib

APIS = "onnxscript._framework_apis.torch_2_11"  # the module torch's exporter calls (_lazy_import)
_LISTED: dict[str, object] = {}


@contextlib.contextmanager
def torchlib_listed_once():
    """Within the block, torch's exporter gets the process's first torchlib listing."""
    try:
        apis = importlib.import_module(APIS)
        original = apis.get_torchlib_ops
    except (ImportError, AttributeError):  # another onnxscript: export as it comes
        yield
        return

    def listed():
        if "ops" not in _LISTED:
            _LISTED["ops"] = original()
        return _LISTED["ops"]

    apis.get_torchlib_ops = listed
    try:
        yield
    finally:
        apis.get_torchlib_ops = original
