"""A --kind onnx target: an .onnx file whose graph inputs are named query, key and value
(and optionally attn_mask), (B, H, T, d) heads in and (B, H, T, d_v) out, run in
onnxruntime's CPU provider.  It is an sdpa target (sdpa.py) whose function is the session:
the same projections, masks and probes.  The graph's element type fixes the dtype of the
cases it takes (onnxruntime refuses another: its INVALID_ARGUMENT is quoted).  A graph whose
attn_mask is a required input gets a neutral one where the case has no mask: all True for a
boolean input (ONNX Attention's "attend"), zeros for a float one.  The file is loaded as the
user's code is (by design), once per process.
"""
from __future__ import annotations

import inspect

import numpy as np

from conformance.contract.runner import NotExpressible, NotExpressibleError
from conformance.runners.target import TargetError, TargetSpec
from conformance.runners.target.sdpa import TargetSDPA

NAMES = ("query", "key", "value")


def session_for(spec: TargetSpec):
    """(an onnxruntime session of the file, its inputs by name) or a TargetError."""
    from conformance.runners.target.loading import onnx_path, quoted

    path = onnx_path(spec)
    try:
        import onnxruntime as ort

        session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    except Exception as exc:  # the user's file: named, no traceback
        raise TargetError(f"TARGET {spec.target}: onnxruntime cannot load it: {quoted(exc)}") \
            from None
    inputs = {i.name: i for i in session.get_inputs()}
    missing = [n for n in NAMES if n not in inputs]
    if missing:
        raise TargetError(f"TARGET {spec.target}: the graph has no input {missing[0]!r} (its "
                          f"inputs: {', '.join(inputs)}); name them query, key, value "
                          "[, attn_mask]")
    return session, inputs


def session_function(spec: TargetSpec):
    """f(query, key, value[, attn_mask]) running the session: an sdpa target's function."""
    session, inputs = session_for(spec)
    takes_mask = "attn_mask" in inputs
    mask_type = inputs["attn_mask"].type if takes_mask else ""

    def f(query, key, value, attn_mask=None):
        feeds = {"query": query, "key": key, "value": value}
        if takes_mask:
            if attn_mask is None:  # a required input: the neutral mask (module docstring)
                shape = (query.shape[0], 1, query.shape[2], key.shape[2])
                attn_mask = np.ones(shape, bool) if mask_type == "tensor(bool)" \
                    else np.zeros(shape, query.dtype)
            feeds["attn_mask"] = np.asarray(attn_mask)  # as given: onnxruntime checks it
        return session.run(None, feeds)[0]

    params = [inspect.Parameter(n, inspect.Parameter.POSITIONAL_OR_KEYWORD) for n in NAMES]
    if takes_mask:
        params.append(inspect.Parameter("attn_mask", inspect.Parameter.KEYWORD_ONLY,
                                        default=None))
    f.__signature__ = inspect.Signature(params)
    return f


class TargetOnnx(TargetSDPA):
    description = "your attention: an .onnx graph of query, key, value you point the suite at"
    requires = ("onnxruntime",)
    extras = "onnx"
    no_parameters_label = "your onnx graph"

    @staticmethod
    def check(spec) -> None:
        session_for(spec)

    def load(self):
        fn = session_function(self.target_spec)
        return fn, tuple(inspect.signature(fn).parameters)

    def translate(self, case):
        try:
            self.loaded()
        except TargetError as exc:
            return NotExpressible(str(exc))
        return super().translate(case)

    def invoke(self, case, data, call, mask=None):
        """As sdpa's, with onnxruntime's refusal of an input (a dtype the graph does not
        take: INVALID_ARGUMENT) quoted as the system's own."""
        from onnxruntime.capi.onnxruntime_pybind11_state import InvalidArgument

        try:
            return super().invoke(case, data, call, mask)
        except InvalidArgument as exc:
            raise NotExpressibleError(f"onnxruntime: {' '.join(str(exc).split())[:300]}") \
                from exc
