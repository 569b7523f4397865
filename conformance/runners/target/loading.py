"""Importing the user's target, and the checks that turn its failures into one clear line.

TARGET runs the user's code by design (`module:attribute` is imported, an .onnx file is
loaded into onnxruntime): everything else the suite reads stays untrusted data.  A target
that fails to import, is not callable, raises or returns the wrong shape on a first small
call is a TargetError naming it and what to do, never a traceback.
"""
from __future__ import annotations

import importlib
import inspect
import sys
from pathlib import Path

from conformance.runners.target import TargetError, TargetSpec

MESSAGE = 300  # characters of the target's own error quoted


def quoted(exc: BaseException) -> str:
    text = " ".join(f"{type(exc).__name__}: {exc}".split())
    return text if len(text) <= MESSAGE else text[:MESSAGE - 3] + "..."


def import_attribute(spec: TargetSpec):
    """The object `module:attribute` names, imported with spec.cwd first on sys.path."""
    module, _, attribute = spec.target.partition(":")
    if spec.cwd and spec.cwd not in sys.path:
        sys.path.insert(0, spec.cwd)
    try:
        obj = importlib.import_module(module)
    except Exception as exc:  # the user's module: any failure is theirs, named
        raise TargetError(f"TARGET {spec.target}: importing {module!r} failed: {quoted(exc)} "
                          f"(run from the directory that holds it, or fix the module)") from None
    for part in attribute.split("."):
        if not hasattr(obj, part):
            names = sorted(n for n in dir(obj) if not n.startswith("_"))[:12]
            raise TargetError(f"TARGET {spec.target}: {module!r} has no attribute {part!r} "
                              f"(it has: {', '.join(names) or 'nothing public'})")
        obj = getattr(obj, part)
    return obj


def callable_target(spec: TargetSpec):
    """The function a --kind sdpa target names, and its parameter names."""
    fn = import_attribute(spec)
    if not callable(fn):
        raise TargetError(f"TARGET {spec.target}: is a {type(fn).__name__}, not a function "
                          "f(q, k, v, *, mask=None, is_causal=False, scale=None)")
    try:
        params = inspect.signature(fn).parameters
    except (TypeError, ValueError) as exc:
        raise TargetError(f"TARGET {spec.target}: its signature cannot be read "
                          f"({quoted(exc)}); wrap it in a Python function") from None
    positional = [p for p in params.values()
                  if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    if len(positional) < 3 and not any(p.kind == p.VAR_POSITIONAL for p in params.values()):
        raise TargetError(f"TARGET {spec.target}: takes {len(positional)} positional "
                          "argument(s); a --kind sdpa target takes q, k, v first")
    return fn, tuple(params)


def onnx_path(spec: TargetSpec) -> Path:
    path = Path(spec.cwd or ".") / spec.target
    if not path.is_file():
        raise TargetError(f"TARGET {spec.target}: no such .onnx file (from {spec.cwd or '.'})")
    return path
