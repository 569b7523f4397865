"""Convention probes of the HF attention modules for the axes the base cells
(common.HFRunner.conventions, observations.py) and the ledger leave open: the scale's
precision in a float64 module and the softmax scale (the ledger asks float64_compute,
the fully masked row and the causal switch: scores.py, rows.py, flags.py /
causal_self.py).  Each runs the runner's own module (its config call, its canonical
weights) on a small seeded probe case; torch is imported by common.py.
"""
from __future__ import annotations


import numpy as np

from conformance.contract.axes import IGNORED, NA, NOT_PROBED, REFUSED
from conformance.contract.runner import Convention, NotExpressible, to_numpy
from conformance.contract.probing import (
    closest, distances, output_with, probe_case, refusal)
from conformance.oracle.canonical import case_data
from conformance.contract import probe_cells as _ledger
from conformance.runners.hf.cache_decode import CacheDecoding
from conformance.runners.hf.common import HFRunner, import_torch

NEAR = _ledger.NEAR


def module(runner, case, dropout: float = 0.0):
    """(torch, the runner's module for `case` in the case's dtype, its input tensor)."""
    torch = import_torch()
    data = case_data(case)
    plan = {**runner.config_call(case)[1], "attn_implementation": runner.attn_implementation,
            "dropout": dropout}
    mod = runner.module_for(torch, case, plan, data.weights)
    return torch, mod, torch.tensor(data.inputs.query, dtype=getattr(torch, case.inputs.dtype))


def where(runner, case) -> str:
    return f"{runner.name} on {case.id} ({runner.attn_implementation})"


def _float64_output(runner, name: str, length: int, detail: str):
    """(case, output or the exception its module raised, what ran): the runner's module
    built in float64 (head size 6: 1/sqrt(6) is not a float32 number) on a float64
    self-attention input of `length` positions, no mask."""
    case = probe_case(name, attention={"num_heads": 2, "query_features": 12,
                                       **runner.probe_attention},
                      inputs={"self_attention": True, "query_len": length,
                              "key_len": length, "dtype": "float64"})
    what = f"{where(runner, case)}: float64 module, {detail}"
    try:
        torch, mod, x = module(runner, case)
        with torch.no_grad():
            return case, to_numpy(runner.forward(mod, x, None)[0]), what
    except Exception as exc:
        return case, exc, what


def scale_precision(runner) -> Convention:
    """A float64 module with head size 6: 1/sqrt(6) is not a float32 number."""
    case, out, what = _float64_output(runner, "scale-precision", 3, "head size 6")
    if isinstance(out, Exception):  # the float64 module's own error
        return refusal("scale_precision", out, what, value=REFUSED)
    if runner.probe_scale is not None:
        d = float(np.max(np.abs(out - output_with(case, None, scale=runner.probe_scale))))
        return Convention("scale_precision", NA, f"{what}: the scores are not scaled "
                          f"(scaling = {runner.probe_scale}, exact in any precision): "
                          f"{d:.1e} from the oracle at that scale")
    s32 = float(np.float32(1 / np.sqrt(6)))
    cands = {"float64": output_with(case, None),
             "float32_rounded": output_with(case, None, scale=s32)}
    cell = closest("scale_precision", out, cands, what)
    gap = float(np.max(np.abs(cands["float64"] - cands["float32_rounded"])))
    if min(distances(out, cands).values()) < gap / 2:
        return cell
    return Convention("scale_precision", NOT_PROBED, f"{cell.evidence}: both readings are farther "
                      f"than their own gap {gap:.1e}, so the module is not float64 elsewhere (e.g. "
                      "Llama's eager softmax(..., dtype=torch.float32)) and the scale's rounding "
                      "cannot show")


def scale_setting(runner) -> list[Convention]:
    """A config field that sets the scale (`scale_setting`: Gemma2's query_pre_attn_scalar,
    MPT's attn_config softmax_scale): a probe case with scale 1.0 run through translate and
    run, and the module with the field left at the config's default (`scale_default`: the
    plan's value for it), each against the oracle at 1/sqrt(d), at 1.0 and at the default
    the config documents (`scale_default_value`).  Replaces the base softmax_scale cell, which
    reads the runner's own setting of the field, not its default."""
    setting = getattr(runner, "scale_setting", "")
    if not setting:
        return []
    att = {"num_heads": 2, "query_features": 8, **runner.probe_attention}
    case = probe_case("scale-setting", attention={**att, "scale": 1.0},
                      inputs={"self_attention": True, "query_len": 3, "key_len": 3})
    plain = probe_case("scale-setting", attention=att,
                       inputs={"self_attention": True, "query_len": 3, "key_len": 3})
    t = runner.translate(case)
    if isinstance(t, NotExpressible):
        return [Convention("softmax_scale", NOT_PROBED, f"{setting}: the runner cannot build "
                           f"the scale-1.0 case: {t.reason}")]
    out = runner.run(case, t, case_data(case)).output
    default = plain.attention.qk_head_dim ** -0.5
    d = distances(out, {"1.0": output_with(plain, None, scale=1.0),
                        "inv_sqrt_head_dim": output_with(plain, None, scale=default)})
    torch, mod, x = module(runner, plain)
    mod = runner.module_for(torch, plain, {**runner.config_call(plain)[1], **runner.scale_default,
                                           "attn_implementation": runner.attn_implementation,
                                           "dropout": 0.0}, case_data(plain).weights)
    with torch.no_grad():
        own = to_numpy(runner.forward(mod, x, None)[0])
    cands = {"inv_sqrt_head_dim": output_with(plain, None, scale=default),
             "none": output_with(plain, None, scale=1.0)}
    if getattr(runner, "scale_default_value", None):
        value, label = runner.scale_default_value
        cands[label] = output_with(plain, None, scale=value)
    cell = closest("softmax_scale", own, cands,
                   f"the config's default, head size {plain.attention.qk_head_dim}")
    word = ("configurable" if d["1.0"] < NEAR else
            IGNORED if d["inv_sqrt_head_dim"] < NEAR else NOT_PROBED)
    return [Convention("softmax_scale", word, f"{where(runner, case)}: {setting} for scale 1.0: "
                       f"{d['1.0']:.1e} from the scale-1.0 oracle, {d['inv_sqrt_head_dim']:.1e} "
                       f"from 1/sqrt(d); default: {cell.value} ({cell.evidence})")]


def hf_cells(runner) -> list[Convention]:
    """The scale's precision in a float64 module (the API facts are observations.py's; the
    ledger asks float64_compute, the rotation, the grouped heads, QK-norm, ALiBi and the
    config windows: ledger_axes)."""
    return [scale_precision(runner)]


def probe_forward(runner, case):
    """fwd(mask): the runner's module on the probe case, `mask` (NumPy (B, T, S)) passed raw
    as attention_mask (B, 1, T, S)."""
    torch = import_torch()
    module, x = runner.probe_module(case)

    def fwd(mask):
        m = None if mask is None else torch.from_numpy(np.ascontiguousarray(mask[:, None]))
        with torch.no_grad():
            return to_numpy(runner.forward(module, x, m)[0])
    return fwd


def softmax_scale(runner) -> Convention:
    """The default scale the module's output matches (1/sqrt(d) or none)."""
    case = runner.probe("layout")
    return _ledger.softmax_scale(case, probe_forward(runner, case), where(runner, case))


class ProbedHFRunner(CacheDecoding, HFRunner):
    """An HFRunner whose `probe_cells` are this module's (the base class lives in
    common.py, which these probes build on, so the runner modules derive from this); the
    ledger asks its cache axes through its own decode (cache_decode.py) and float64_compute
    (scores.float64_compute_cell: a float64 causal case with probe_needs, translate/run)."""

    ledger_axes = CacheDecoding.ledger_axes | {"float64_compute"}

    def probe_cells(self):
        return hf_cells(self)

    def conventions(self):
        """The API facts of HFRunner.conventions, these probes' cells, and the scale: a
        scale config field's softmax_scale (scale_setting), else the default's."""
        from conformance.contract.cache_probes import override

        cells = super().conventions() + [softmax_scale(self)] + self.probe_cells()
        return override(cells, scale_setting(self))
