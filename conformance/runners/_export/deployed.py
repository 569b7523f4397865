"""What the runners of deployment runtimes share (OpenVINO, ExecuTorch): the convention
probes of a converted nn.MultiheadAttention (the module a user ships, fed as the
`onnx.torch-export` rows feed it: torch_onnx.module_call), and `both_calls`, one module
making both of those rows' calls so a runtime converts once per case.

A deployment runtime runs an *artifact* (an ONNX graph, an OpenVINO IR, an ExecuTorch
program), not a Python module, so its probes are the export probes of
runners/_export/torch_onnx_probes.py (the same small probe modules, converted the runtime's way
and cached) executed in the runtime (`RuntimeProbe`), plus two of this module's own on the
key-padding graph: which number masked scores are filled with (`mask_fill`) and whether a
NaN behind the mask reaches the output (`masked_kv_nonfinite`).  A runtime runner provides
`_export(torch, module, args, names) -> bytes` (the artifact) and
`execute(blob, feed) -> list[np.ndarray]` (run it on named inputs).
"""
from __future__ import annotations

from dataclasses import replace

import numpy as np

from conformance.contract.runner import Convention
from conformance.contract.probing import probe_case
from conformance.oracle.canonical import case_data
from conformance.oracle.reference import project
from conformance.runners._export.torch_onnx_probes import ExportProbe, export_cells


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
    """ExportProbe whose graphs are the runner's artifacts, run in the runner's runtime."""

    def __init__(self, exporter, execute, wrap, what: str, versions=()):
        super().__init__(exporter, wrap)
        self.what, self.execute = what, execute
        if versions:  # the runtime's own versions key its cached probe artifacts too
            self.versions = (*self.versions, *versions)

    def run(self, label: str, blob: bytes, feed: dict, index: int = 0,
            strict: bool = False) -> np.ndarray:
        return np.asarray(self.execute(blob, feed)[index], np.float64)


def filled_output(case, data, allowed: np.ndarray, fill: float) -> np.ndarray:
    """The float64 attention output when masked scores are *replaced* by `fill` (-inf: the
    usual softmax; a finite fill: masked keys keep a weight exp(fill - max))."""
    w, x = data.weights, data.inputs
    q, k, v = project(x.query, w.wq, w.bq), project(x.key, w.wk, w.bk), project(
        x.value, w.wv, w.bv)
    scores = np.einsum("bhtd,bhsd->bhts", q, k) / np.sqrt(case.attention.qk_head_dim)
    scores = np.where(allowed[:, None], scores, fill)
    with np.errstate(invalid="ignore", over="ignore"):
        e = np.exp(scores - scores.max(-1, keepdims=True))
        heads = (e / e.sum(-1, keepdims=True)) @ v
    out = np.einsum("bhtd,hde->bte", heads, w.wo)
    return out if w.bo is None else out + w.bo


FILLS = {"-inf": -np.inf, "-1e4": -1e4, "-1e9": -1e9, "finfo_min": float(np.finfo(np.float32).min)}
SCALES = (1.0, 1e2, 1e3, 1e5)  # query and key multiplied: scores ~1e4..1e10 pass the fills


def _gap(observed: np.ndarray, candidate: np.ndarray) -> float:
    """max |difference|, or inf where the two are not finite at the same places."""
    if (np.isfinite(observed) != np.isfinite(candidate)).any():
        return float("inf")
    both = np.isfinite(observed)
    return float(np.max(np.abs(observed[both] - candidate[both]), initial=0.0))


def mask_cells(e: ExportProbe, kp_blob: bytes, what: str) -> list[Convention]:
    """mask_fill and masked_kv_nonfinite from the need_weights=False key-padding graph."""
    case = probe_case("export-mask")
    data = case_data(case)
    blocked = np.zeros((2, 5), bool)
    blocked[1, 3:] = True  # item 1 attends to keys 0-2
    allowed = np.broadcast_to(~blocked[:, None, :], (2, 3, 5))
    gaps = {word: 0.0 for word in FILLS}
    for alpha in SCALES:
        x = replace(data.inputs, query=data.inputs.query * alpha, key=data.inputs.key * alpha)
        scaled = replace(data, inputs=x)
        out = e.run("key-padding", kp_blob, {"query": x.query.astype(np.float32),
                                             "key": x.key.astype(np.float32),
                                             "value": x.value.astype(np.float32),
                                             "key_padding_mask": blocked})
        for word, fill in FILLS.items():
            gaps[word] = max(gaps[word], _gap(out, filled_output(case, scaled, allowed, fill)))
    word = min(gaps, key=gaps.get)
    full = np.zeros((2, 5), bool)
    full[0] = True  # item 0 fully padded: -inf and finfo_min part ways only here
    x = data.inputs
    base = {"query": x.query.astype(np.float32), "key": x.key.astype(np.float32),
            "value": x.value.astype(np.float32)}
    row = e.run("key-padding", kp_blob, {**base, "key_padding_mask": full})[0]
    uniform = filled_output(case, data, np.broadcast_to(~full[:, None, :], (2, 3, 5)),
                            FILLS["finfo_min"])[0]
    if word in ("-inf", "finfo_min"):
        word = "finfo_min" if _gap(row, uniform) < 1e-4 else "-inf"
    figures = "; ".join(f"{k} {v:.1e}" for k, v in gaps.items())
    fill = Convention("mask_fill", word, f"{what}: key_padding_mask blocking keys 3-4 of item "
                      f"1, query and key scaled by {SCALES} (scores up to ~1e10): max |output -"
                      f" oracle with masked scores set to the fill|: {figures}; a fully padded "
                      f"item gives {'NaN' if np.isnan(row).any() else 'finite'} rows "
                      f"({_gap(row, uniform):.1e} from the uniform average a finite fill gives)")
    poisoned = {n: a.copy() for n, a in base.items()}
    poisoned["key"][1, 4], poisoned["value"][1, 4] = np.nan, np.inf
    out = e.run("key-padding", kp_blob, {**poisoned, "key_padding_mask": blocked})
    clean = filled_output(case, data, allowed, -np.inf)
    bad = int((~np.isfinite(out[1])).sum())
    kv = Convention("masked_kv_nonfinite", "propagates" if bad else "contained",
                    f"{what}: key NaN and value inf at key 4 of item 1, which key_padding_mask "
                    f"blocks: {bad} of {out[1].size} outputs of that item non-finite"
                    + ("" if bad else f", {_gap(out[1], clean[1]):.1e} from the oracle"))
    return [fill, kv]


def runtime_cells(exporter, execute, wrap, what: str, versions=()) -> list[Convention]:
    """Every probe of a runtime that runs the converted nn.MultiheadAttention: `exporter`
    has the `name` that keys the cached artifacts and `_export(torch, module, args, names)`;
    `execute(blob, feed)` runs one in the runtime; `versions` join the cache key."""
    from conformance.runners._export.torch_mha import import_torch

    torch = import_torch()
    e = RuntimeProbe(exporter, execute, wrap, what, versions)
    cells = export_cells(exporter, wrap, probe=e)
    case = probe_case("export-mask")
    m = np.zeros((2, 5), bool)
    kp = e.graph("key-padding", case, {"key_padding_mask": torch.from_numpy(m)},
                 {"need_weights": False})
    return cells + mask_cells(e, kp, what)
