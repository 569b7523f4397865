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

The registry itself (`ONNXRegistry.from_torchlib(opset_version)`: one OnnxDecompMeta and
its signature per function, 0.29 s of a 0.6-0.9 s export) is kept too, per opset and per
listing, and every export gets a copy of its function table (an export with a custom
translation table registers into its registry, so no export may change another's).
"""
from __future__ import annotations

import contextlib
import importlib

APIS = "onnxscript._framework_apis.torch_2_11"  # the module torch's exporter calls (_lazy_import)
REGISTRATION = "torch.onnx._internal.exporter._registration"
_LISTED: dict[str, object] = {}
_REGISTRIES: dict[tuple, object] = {}  # (opset, id of the listing) -> the registry built


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
        with _registry_built_once(listed):
            yield
    finally:
        apis.get_torchlib_ops = original


@contextlib.contextmanager
def _registry_built_once(listed):
    """Within the block, ONNXRegistry.from_torchlib builds each opset's registry once per
    listing and hands out copies (the same functions, a table of its own)."""
    try:
        registration = importlib.import_module(REGISTRATION)
        cls = registration.ONNXRegistry
        own = vars(cls)["from_torchlib"]  # the classmethod
    except (ImportError, AttributeError, KeyError):  # another torch: build as it comes
        yield
        return
    build = own.__func__

    def from_torchlib(klass, opset_version=registration._constants.TORCHLIB_OPSET):
        key = (klass, opset_version, id(listed()))
        if key not in _REGISTRIES:
            _REGISTRIES[key] = build(klass, opset_version)
        kept = _REGISTRIES[key]
        copy = klass()
        copy._opset_version = kept._opset_version
        copy.functions = {target: list(metas) for target, metas in kept.functions.items()}
        return copy

    cls.from_torchlib = classmethod(from_torchlib)
    try:
        yield
    finally:
        cls.from_torchlib = own
