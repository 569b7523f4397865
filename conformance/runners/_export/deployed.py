"""What the runners of deployment runtimes share (OpenVINO, ExecuTorch): the convention
probes of a converted nn.MultiheadAttention (the module a user ships, fed as the
`onnx.torch-export` rows feed it: torch_onnx.module_call), and `both_calls`, one module
making both of those rows' calls so a runtime converts once per case.

A deployment runtime runs an *artifact* (an ONNX graph, an OpenVINO IR, an ExecuTorch
program), not a Python module, so its probe graphs are the export probes of
runners/_export/export_probe.py (the same small probe modules, converted the runtime's way
and cached) executed in the runtime (`RuntimeProbe`): the ledger asks them through the
runner's `answer` (torch_export_answers.py); the other ledger probes ask the runner's
translate and run like every runner's.  A runtime runner provides
`_export(torch, module, args, names) -> bytes` (the artifact) and
`execute(blob, feed) -> list[np.ndarray]` (run it on named inputs).
"""
from __future__ import annotations

import numpy as np

from conformance.runners._export.export_probe import ExportProbe


def both_calls(torch, mha, self_attention: bool, mask_names: tuple[str, ...]):
    """One module making both calls the ONNX rows export apart, so a runtime whose
    conversion costs seconds converts once per case: (output of need_weights=False, output
    of need_weights=True, its per-head weights)."""
    from conformance.runners._export.torch_onnx import VARIANTS, wrap_module

    plain, weighted = (wrap_module(torch, mha, self_attention, mask_names, kwargs)
                       for kwargs in VARIANTS.values())

    class Both(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.plain, self.weighted = plain, weighted

        def forward(self, *args):
            return (self.plain(*args), *self.weighted(*args))

    return Both().eval()


class RuntimeProbe(ExportProbe):
    """ExportProbe whose graphs are the runner's artifacts, run in the runner's runtime:
    `exporter` has the `name` that keys the cached artifacts and `_export(torch, module,
    args, names)`; `execute(blob, feed)` runs one in the runtime; `native(blob, feed)`
    (default `execute`) runs one as the runtime's defaults do, for the native calls of
    torch_native_calls.py; `versions` join the cache key; `cache` holds the artifacts (the
    runtime's own namespace; default the ONNX exports', for an ONNX exporter)."""

    def __init__(self, exporter, execute, wrap, what: str, versions=(), native=None,
                 cache=None):
        super().__init__(exporter, wrap, cache)
        self.what, self.execute, self.native = what, execute, native or execute
        if versions:  # the runtime's own versions key its cached probe artifacts too
            self.versions = (*self.versions, *versions)

    def run(self, label: str, blob: bytes, feed: dict, index: int = 0,
            strict: bool = False) -> np.ndarray:
        return np.asarray(self.execute(blob, feed)[index], np.float64)

    def outputs(self, blob: bytes, feed: dict) -> list[np.ndarray]:
        """Every output of one execution in the runtime, as the runtime gave it."""
        return list(self.native(blob, feed))

    def holds(self, blob: bytes, op: str) -> str:
        """An artifact of another runtime is not read for its operators here."""
        return ""
