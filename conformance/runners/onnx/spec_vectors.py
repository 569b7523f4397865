"""The ONNX specification's own test vectors of the `Attention` operator, per engine.

The `onnx` wheel no longer ships the backend node data (onnx/onnx#7959), but its case
code still does: importing `onnx.backend.test.case.node.attention` runs every
`export*` method of its classes (the metaclass in onnx/backend/test/case/base.py seeds
NumPy with 0 before each), and each calls `expect(node, inputs, outputs, name,
opset_imports=...)`.  `generate()` records those calls in process, with its own
`expect` bound for the import, and builds one single-node model per case as
onnx/backend/test/case/node/__init__.py does (value infos from the arrays, the opset
the case names).  About 93 cases of opsets 23-25; their expected outputs were computed
by `onnx.reference`, so they prove little about the reference itself.

Each case runs in an engine (onnxruntime, onnx.reference, OpenVINO CPU) and is judged
as the ONNX backend test runner judges it (onnx/backend/test/runner/__init__.py,
assert_similar_outputs): same outputs, shapes and dtypes, then
`assert_allclose(rtol=1e-3, atol=1e-7)` (two bfloat16 ULPs, rtol 2**-6, for bfloat16),
non-finite values where the data has them.  Outcomes: pass, fail (with its kind:
outputs, shape, dtype, nonfinite, values), refuse (the engine raised: its message,
normalised), skipped (the engine is not installed).

`python -m conformance.runners.onnx.spec_vectors ENGINE` prints one engine's rows as
JSON (spec_cache.py runs it in a subprocess, so an engine that crashes costs its rows).
"""
from __future__ import annotations

import json
import re
import sys
from dataclasses import dataclass

import numpy as np

ENGINES = ("onnxruntime", "onnx.reference", "openvino")
# the package whose version decides an engine's results (with onnx, which makes the cases)
PACKAGE = {"onnxruntime": "onnxruntime", "onnx.reference": "onnx", "openvino": "openvino"}
RTOL, ATOL, BF16_RTOL = 1e-3, 1e-7, 2.0 ** -6  # onnx's TestCase defaults; bfloat16 ULPs
MESSAGE_LIMIT = 300  # characters of a normalised engine message
SOURCE = "https://github.com/onnx/onnx/blob/main/onnx/backend/test/case/node/attention.py"
RUNNER_SOURCE = "https://github.com/onnx/onnx/blob/main/onnx/backend/test/runner/__init__.py"


@dataclass(frozen=True)
class SpecCase:
    name: str  # the test name, e.g. test_attention_4d_causal
    opset: int
    model: bytes  # a ModelProto with the one Attention node
    inputs: dict  # graph input name -> array
    outputs: tuple  # (name, expected array), in the node's output order


def generate(op_type: str = "Attention") -> list[SpecCase]:
    """Every case the installed onnx's case code makes for `op_type`, in its order."""
    import importlib

    import onnx.backend.test.case.node as node_cases

    calls: list[tuple] = []

    def record(node, inputs, outputs, name, **kwargs):
        if node.op_type == op_type:
            calls.append((node, inputs, outputs, name, kwargs))

    module = f"onnx.backend.test.case.node.{op_type.lower()}"
    original = node_cases.expect
    node_cases.expect = record
    try:  # the module binds `expect` at import: a fresh import binds the recorder
        sys.modules.pop(module, None)
        importlib.import_module(module)
    finally:
        node_cases.expect = original
        sys.modules.pop(module, None)  # leave no module bound to the recorder
    return [_case(*call) for call in calls]


def _case(node, inputs, outputs, name, kwargs) -> SpecCase:
    import onnx
    from onnx.backend.test.case.node import _extract_value_info, _make_test_model_gen_version

    present_in = [n for n in node.input if n]
    present_out = [n for n in node.output if n]
    graph = onnx.helper.make_graph(
        [node], name, [_extract_value_info(a, n) for a, n in zip(inputs, present_in)],
        [_extract_value_info(a, n) for a, n in zip(outputs, present_out)])
    opsets = list(kwargs.get("opset_imports") or [
        onnx.helper.make_operatorsetid("", onnx.defs.get_schema(node.op_type).since_version)])
    model = _make_test_model_gen_version(graph, producer_name="backend-test",
                                         opset_imports=opsets)
    opset = next(o.version for o in opsets if o.domain in ("", "ai.onnx"))
    return SpecCase(name, int(opset), model.SerializeToString(),
                    dict(zip(present_in, inputs)), tuple(zip(present_out, outputs)))


# ---- engines: (case) -> outputs in the node's output order, or the engine's exception

def run_onnxruntime(case: SpecCase) -> list:
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    options.log_severity_level = 4  # the message is quoted in the row, not logged
    session = ort.InferenceSession(case.model, options, providers=["CPUExecutionProvider"])
    return session.run([n for n, _ in case.outputs], case.inputs)


def run_reference(case: SpecCase) -> list:
    from onnx.reference import ReferenceEvaluator

    return ReferenceEvaluator(case.model).run([n for n, _ in case.outputs], case.inputs)


def run_openvino(case: SpecCase) -> list:
    """OpenVINO CPU, f32 inference precision, one thread.  bfloat16 tensors are passed
    by their bits: OpenVINO's Python API shows a bf16 tensor's data as float16, so an
    ml_dtypes array handed to infer() would be reinterpreted."""
    import openvino as ov

    core = _ov_core()
    model = core.read_model(case.model, ov.Tensor(np.zeros(0, np.uint8)))
    compiled = core.compile_model(model, "CPU", {"INFERENCE_PRECISION_HINT": "f32",
                                                 "INFERENCE_NUM_THREADS": 1})
    request = compiled.create_infer_request()
    for port in compiled.inputs:
        array = case.inputs[port.get_any_name()]
        if array.dtype.name == "bfloat16":
            tensor = ov.Tensor(ov.Type.bf16, ov.Shape(list(array.shape)))
            tensor.data.view(np.uint16)[...] = array.view(np.uint16)
        else:
            tensor = ov.Tensor(np.ascontiguousarray(array))
        request.set_tensor(port, tensor)
    request.infer()
    by_name = {}
    for port in compiled.outputs:
        tensor = request.get_tensor(port)
        data = np.array(tensor.data)
        if tensor.element_type == ov.Type.bf16:
            import ml_dtypes

            data = data.view(np.uint16).view(ml_dtypes.bfloat16)
        for name in port.get_names():
            by_name[name] = data
    return [by_name[n] for n, _ in case.outputs]


def _ov_core():
    import openvino as ov

    global _CORE
    if _CORE is None:
        _CORE = ov.Core()
    return _CORE


_CORE = None
RUN = {"onnxruntime": run_onnxruntime, "onnx.reference": run_reference,
       "openvino": run_openvino}


# ---- judging one case, as the ONNX backend test runner does

def _finite_kind(values: np.ndarray, dtype) -> str:
    """What an engine wrote where the data holds a non-finite value (one word)."""
    finite = values[np.isfinite(values)]
    if finite.size == 0:
        kinds = sorted({"nan" if np.isnan(v) else ("inf" if v > 0 else "-inf") for v in values})
        return "/".join(kinds)
    if np.issubdtype(np.dtype(dtype), np.floating) and np.all(finite == np.finfo(dtype).min):
        return f"{float(np.finfo(dtype).min):.8g} (finfo_min)"
    return "finite numbers"


def _nonfinite(name: str, got: np.ndarray, want: np.ndarray) -> str | None:
    """Where the data or the engine is non-finite, both must hold the same value."""
    g, w = got.astype(np.float64), want.astype(np.float64)
    same = (np.isnan(g) & np.isnan(w)) | (g == w)
    odd = ~(np.isfinite(g) & np.isfinite(w)) & ~same
    if not odd.any():
        return None
    where = ~np.isfinite(w) & odd
    if where.any():
        wanted = "/".join(sorted({"nan" if np.isnan(v) else ("inf" if v > 0 else "-inf")
                                  for v in w[where]}))
        return (f"{name}: the data holds {wanted} at {int(where.sum())} element(s) where the "
                f"engine wrote {_finite_kind(g[where], want.dtype)}")
    return (f"{name}: the engine wrote {_finite_kind(g[odd], want.dtype)} at "
            f"{int(odd.sum())} element(s) where the data is finite")


def judge(expected: tuple, got: list) -> dict:
    """{outcome, kind, reason, max_abs_error} of one case's outputs (max_abs_error: over
    the finite elements, display only)."""
    if len(got) != len(expected):
        return _row("fail", "outputs", f"{len(got)} output(s), the data has {len(expected)}")
    worst, problems, kinds = 0.0, [], []
    for (name, want), out in zip(expected, got):
        want, out = np.asarray(want), np.asarray(out)
        if out.shape != want.shape:
            problems.append(f"{name}: shape {out.shape}, the data {want.shape}")
            kinds.append("shape")
            continue
        if out.dtype != want.dtype:
            problems.append(f"{name}: dtype {out.dtype}, the data {want.dtype}")
            kinds.append("dtype")
            continue
        rtol = BF16_RTOL if want.dtype.name == "bfloat16" else RTOL
        g, w = out.astype(np.float64), want.astype(np.float64)
        finite = np.isfinite(g) & np.isfinite(w)
        diff = np.abs(g[finite] - w[finite])
        worst = max(worst, float(diff.max(initial=0.0)))
        text = _nonfinite(name, out, want)
        if text:
            problems.append(text)
            kinds.append("nonfinite")
        if not np.all(diff <= ATOL + rtol * np.abs(w[finite])):
            off = diff.max()
            problems.append(f"{name}: beyond rtol {rtol:g}, atol {ATOL:g} (max abs error "
                            f"{off:.2e})")
            kinds.append("values")
    if not problems:
        return _row("pass", "", "", worst)
    return _row("fail", ", ".join(dict.fromkeys(kinds)), "; ".join(problems), worst)


def _row(outcome: str, kind: str, reason: str, error: float | None = None) -> dict:
    return {"outcome": outcome, "kind": kind, "reason": reason,
            "max_abs_error": None if error is None else float(f"{error:.3g}")}


# An engine's message without what varies between builds and runs: ANSI colours, source
# locations, C++ signatures (onnxruntime quotes its function's full signature), addresses.
_NOISE = (re.compile(r"\x1b\[[0-9;]*m"),
          re.compile(r"(?:[\w.+-]*/)+[\w.+-]+\.(?:h|hpp|cc|cpp|c|py):\d+"),
          re.compile(r"(?:[\w:]+\s+)?(?:\w+::)+~?\w+\([^()]*\)(?:\s*const)?"),
          re.compile(r"\b0x[0-9a-fA-F]+\b"))
# onnxruntime's wrapper around every kernel's message
_ORT_WRAPPER = re.compile(r"Non-zero status code returned while running (\w+) node\. "
                          r"Name:'[^']*' Status Message: ")


def normalise(exc: BaseException) -> str:
    text = str(exc)
    for pattern in _NOISE:
        text = pattern.sub(" ", text)
    text = _ORT_WRAPPER.sub(r"\1 node: ", " ".join(text.split()))
    text = f"{type(exc).__name__}: {text}"
    return text if len(text) <= MESSAGE_LIMIT else text[:MESSAGE_LIMIT - 1] + "…"


def run_case(engine: str, case: SpecCase) -> dict:
    """One case in one engine, judged: a row {case, runner (the engine), opset, ...}."""
    try:
        got = RUN[engine](case)
    except Exception as exc:  # the engine refuses the model (its own error, quoted)
        row = _row("refuse", "refused", normalise(exc))
    else:
        row = judge(case.outputs, got)
    return {"case": case.name, "runner": engine, "opset": case.opset, **row}


def engine_missing(engine: str) -> str | None:
    """Why an engine cannot run here (None: it can): onnx makes the cases."""
    import importlib.util

    absent = [p for p in dict.fromkeys(("onnx", PACKAGE[engine]))
              if importlib.util.find_spec(p) is None]
    return f"{' and '.join(absent)} not installed" if absent else None


def run_engine(engine: str, cases: list[SpecCase] | None = None) -> list[dict]:
    """Every case in one engine (the engine missing: one skipped row saying why)."""
    missing = engine_missing(engine)
    if missing:
        return [{"case": "(all)", "runner": engine, "opset": 0,
                 **_row("skipped", "", missing)}]
    return [run_case(engine, c) for c in (generate() if cases is None else cases)]


def main(argv: list[str]) -> int:
    if len(argv) != 1 or argv[0] not in ENGINES:
        print(f"usage: python -m {__name__} {{{','.join(ENGINES)}}}", file=sys.stderr)
        return 2
    json.dump(run_engine(argv[0]), sys.stdout, allow_nan=False)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
