"""The convention probes of nn.MultiheadAttention exported by torch.onnx (onnx.torch-export,
-legacy, .opset23, .opset24) and converted for OpenVINO and ExecuTorch (deployed.py) that
still judges here (issue #29): scale_precision (a float64 module exported with
need_weights=False and with the default call: the ledger's probe asks the rows' call only,
and would read float64 where the default call rounds the scale to float32).  The probe graphs are
export_probe.py's (exported with the runner's own exporter, cached); every other axis of
these runners the ledger asks (torch_export_answers.py: ledger_axes through translate/run,
`answer`), and their API facts are observations with no oracle there.
"""
from __future__ import annotations

import numpy as np

from conformance.contract.runner import Convention
from conformance.runners._export.export_probe import ExportProbe, qkv_feed as _qkv_feed


def _best(cell: Convention) -> float:
    """The smallest distance a closest() cell quotes."""
    return min(float(x.split()[-1]) for x in cell.evidence.split(": ")[-1].split("; "))


def _scale_cell(e: ExportProbe) -> Convention:
    """scale_precision of a float64 module exported twice: need_weights=False (the rows'
    output) and the default call (need_weights=True, the kind of graph the rows' weights
    come from); the worse reading is the cell, both quoted."""
    c64, cells = scale_probe_case(), []
    for label, kwargs, what in (("float64", {"need_weights": False}, "need_weights=False"),
                                ("float64-weights", {}, "default call, need_weights=True")):
        out = e.run(label, e.graph(label, c64, {}, kwargs), _qkv_feed(c64, np.float64))
        cells.append(e.note(scale_precision_cell(c64, out, f"{e.what}: float64 module, d_k=3, "
                                                 f"{what}"), label))
    rounded = [c for c in cells if c.value != "float64"]
    worst = min(rounded, key=_best) if rounded else cells[0]
    noisy = ("; the float32_rounded reading is not within 1e-12 either: that graph computes "
             "the float64 scores below float64, so the scale's own rounding is not separable"
             if worst.value != "float64" and _best(worst) > 1e-12 else "")
    return Convention("scale_precision", worst.value,
                      " | ".join(c.evidence for c in cells) + noisy)


def export_cells(runner, wrap, probe: ExportProbe | None = None) -> list[Convention]:
    """The cells still judged here of a runner of the converted nn.MultiheadAttention;
    `wrap` is the runner's module wrapper (torch, mha, self_attention, mask_names, kwargs)
    -> nn.Module.  `probe` replaces the onnxruntime probe (_export/deployed.py runs the same
    probes in another runtime)."""
    e = probe or ExportProbe(runner, wrap)
    return [_scale_cell(e)]


def scale_probe_case():
    """float64, d_k = 3: 1/sqrt(3) is not a float32 number, so its rounding shows."""
    from conformance.contract.probing import probe_case

    return probe_case("scale-precision", attention={"num_heads": 2, "query_features": 6},
                      inputs={"dtype": "float64", "self_attention": True, "key_len": 3})


def scale_precision_cell(case64, out, what: str):
    from conformance.contract.probing import closest, output_with

    s32 = float(np.float32(1 / np.sqrt(case64.attention.qk_head_dim)))
    cands = {"float64": output_with(case64, None),
             "float32_rounded": output_with(case64, None, scale=s32)}
    return closest("scale_precision", out, cands, what)
