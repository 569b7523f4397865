"""The first small call of a target, before the run: a target that fails to import, raises
or returns the wrong shape is one TargetError naming it (the CLI and the plugin print it as
a usage error), never a traceback from inside a worker."""
from __future__ import annotations

import numpy as np

from conformance.runners.target import TargetError, TargetSpec
from conformance.runners.target.loading import quoted

SHAPE = (1, 2, 3, 4)  # (B, H, T, d) of the first call


def first_call(spec: TargetSpec) -> None:
    """Raise TargetError unless the target answers one small call as its kind says (the
    kind's runner class says how: its `check`)."""
    import importlib

    from conformance.runners.target import KINDS

    module, cls = KINDS[spec.kind].split(":")
    getattr(importlib.import_module(module), cls).check(spec)


def sdpa_call(spec: TargetSpec) -> None:
    import importlib.util

    from conformance.runners.target.arrays import REQUIRES, Arrays
    from conformance.runners.target.loading import callable_target

    missing = [m for m in REQUIRES[spec.array] if importlib.util.find_spec(m) is None]
    if missing:
        raise TargetError(f"--array {spec.array}: {', '.join(missing)} is not installed")
    fn, _ = callable_target(spec)
    arrays = Arrays(spec.array)
    rng = np.random.default_rng(0)
    q, k, v = (arrays.put(rng.standard_normal(SHAPE), "float32") for _ in range(3))
    try:
        got = fn(q, k, v)
    except Exception as exc:  # the user's code: its failure named, no traceback
        raise TargetError(f"TARGET {spec.target}: raised on a first call f(q, k, v) with "
                          f"{spec.array} float32 arrays of shape {SHAPE}: {quoted(exc)}") from None
    if isinstance(got, (tuple, list)) and got:
        got = got[0]
    try:
        shape = tuple(arrays.get(got).shape)
    except Exception as exc:
        raise TargetError(f"TARGET {spec.target}: returned a {type(got).__name__}, not an "
                          f"array ({quoted(exc)})") from None
    if shape != SHAPE:
        raise TargetError(f"TARGET {spec.target}: returned shape {shape} for q, k, v of shape "
                          f"{SHAPE}; an sdpa returns (B, H, T, d_v) = {SHAPE}")
