"""The feature axes (axes.FEATURE_ARGUMENTS: softcap, rotary embeddings, grouped heads,
QK-norm, ALiBi, caches, windows, sinks) a runner's system takes no argument for, read by
the ledger from the signatures of the callables the runner names (`Runner.signatures`):
`not_applicable` where none of an axis's argument names is there, `not_probed` (a probe
is needed) where one is.  Axes a probe settles for the runner are left to it.
"""
from __future__ import annotations

from conformance.conventions.probes.probing import feature_cells, feature_cells_from_names
from conformance.conventions.axes import Convention


def signature_cells(runner, settled: set[str]) -> list[Convention]:
    """The feature cells of `runner` for the axes not in `settled` ([] where it names no
    callables).  A system described by names, not a Python signature (an ONNX operator
    schema's attributes and inputs), names them in `schema_names()`: (what, names, where
    they are listed)."""
    schema = runner.schema_names()
    if schema:
        what, names, source = schema
        return feature_cells_from_names(what, list(names), source, skip=tuple(settled))
    named = runner.signatures()
    if not named:
        return []
    what, callables = named
    return feature_cells(what, *callables, skip=tuple(settled))
