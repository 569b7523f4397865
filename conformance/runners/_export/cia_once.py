"""torch.export's list of preservable composite operators, built once per operator registry
instead of on every decomposition.

`ExportedProgram.run_decompositions` (which the dynamo ONNX exporter, ExecuTorch's
`to_edge_transform_and_lower` and OpenVINO's torch frontend all call, ExecuTorch five times
per lowering) asks `torch._export.utils._collect_all_valid_cia_ops` for every
CompositeImplicitAutograd operator it may keep: a walk over every operator namespace that
getattr-materialises each C++ registration, 0.12 s of CPU per call on this machine (0.58 s
of a 3.7 s ExecuTorch lowering).  torch does not cache it because a custom operator
registered later adds entries; so the list is kept here per registry state: the number of
operators the dispatcher knows, the number of its CompositeImplicitAutograd registrations
and the namespaces torch.ops holds.  Registering an operator changes that key and the walk
runs again.  The programs are unchanged: tests/test_cia_once.py lowers and exports the same
module with and without this and compares the bytes, and plants a kept list without an
operator.  torch is imported inside the function; where a release moves the function,
conversions run as they would without this.
"""
from __future__ import annotations

import contextlib
import importlib

# the modules that import the function by name (torch 2.13): each is patched
CALLERS = ("torch.export.exported_program", "torch.export.decomp_utils")
NAME = "_collect_all_valid_cia_ops"
_KEPT: dict[tuple, frozenset] = {}


def registry_state(torch) -> tuple:
    """What the walk's answer depends on, cheaply (~4 ms): operator and CIA registration
    counts and torch.ops's namespaces."""
    return (len(torch._C._dispatch_get_all_op_names()),
            len(torch._C._dispatch_get_registrations_for_dispatch_key(
                "CompositeImplicitAutograd")),
            tuple(sorted(torch.ops._dir)))


@contextlib.contextmanager
def cia_ops_listed_once():
    """Within the block, torch.export's decompositions get the list kept for the current
    registry state (a fresh set each call: callers may not share one object)."""
    try:
        import torch
        from torch._export import utils
        original = getattr(utils, NAME)
        callers = [importlib.import_module(m) for m in CALLERS]
    except (ImportError, AttributeError):  # another torch: convert as it comes
        yield
        return
    patched = [m for m in callers if getattr(m, NAME, None) is original]

    def listed():
        key = registry_state(torch)
        if key not in _KEPT:
            _KEPT.clear()  # one registry state is current at a time
            _KEPT[key] = frozenset(original())
        return set(_KEPT[key])

    for m in patched:
        setattr(m, NAME, listed)
    try:
        yield
    finally:
        for m in patched:
            setattr(m, NAME, original)
