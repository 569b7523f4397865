"""Convention probes of nn.MultiheadAttention exported by torch.onnx (onnx.torch-export,
-legacy, .opset23, .opset24): five small graphs per runner (the default call with a bool
attn_mask, key padding, a float mask, is_causal beside a non-causal mask, a float64
module), exported with the runner's own exporter and cached in the export cache
(conformance/cache.py, keyed by runner, probe, case, versions), so a warm run does no
export.  Each runs in onnxruntime with one input passed raw; the cell is the reading the
output matches (probes.closest).  Where onnxruntime fails inside a graph (the opset-23
Attention node on a (B, H, 1, S) key-padding mask) the cell reads the graph in
onnx.reference and quotes ORT's message.  The axes the rows settle (fully_masked_row,
float64_compute, parameter_formula, weight_layout, refusals) are left to ledger.py.
"""
from __future__ import annotations

import numpy as np

from conformance.contract.axes import IGNORED
from conformance.contract.runner import Convention
from conformance.contract.probing import (
    causal_candidates, closest, distances, feature_cells, output_with, probe_case, probe_mask)
from conformance.oracle.canonical import case_data
from conformance.contract import probe_cells as _ledger
from conformance.runners._export.onnx_runtime import short, split_scale, tried


PROBE_FORMAT = 1  # bump when an export probe graph changes


class ExportProbe:
    """Exports a probe module with the runner's exporter (cached), runs it in onnxruntime;
    where ORT fails inside the graph, runs it in onnx.reference and keeps ORT's message."""

    def __init__(self, runner, wrap):
        import onnx

        from conformance.runners._export.torch_mha import import_torch

        self.runner, self.wrap, self.torch = runner, wrap, import_torch()
        self.versions = (self.torch.__version__, onnx.__version__)
        self.what = f"{runner.name} probe graph"
        self.ort_errors: dict[str, str] = {}

    def graph(self, label: str, case, masks: dict, kwargs: dict, **ctor) -> bytes:
        import logging
        import warnings

        from conformance.cache import key
        from conformance.runners._export.onnx_runtime import CACHE, FORMAT
        from conformance.runners._export.same_graph import SameGraph
        from conformance.runners._export.torch_mha import probe_mha

        torch = self.torch
        mha, qkv = probe_mha(torch, case, **ctor)
        args = qkv[:1] if case.inputs.self_attention else qkv
        names = ("query",) if case.inputs.self_attention else ("query", "key", "value")
        module = self.wrap(torch, mha, case.inputs.self_attention, tuple(masks), kwargs)

        def make() -> bytes:
            logging.getLogger("torch.onnx").setLevel(logging.ERROR)
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                return self.runner._export(torch, module, args + tuple(masks.values()),
                                           names + tuple(masks))

        k = key(self.runner.name, "probe", label, case.fingerprint(), sorted(kwargs.items()),
                sorted(ctor.items()), self.versions, FORMAT, PROBE_FORMAT)
        inputs = args + tuple(masks.values())  # probes of equal programs share one artifact
        return SameGraph(CACHE).get_or_make(k, torch, module, inputs, make, self.runner.name,
                                            names + tuple(masks), self.versions, FORMAT,
                                            PROBE_FORMAT)[0]

    def run(self, label: str, blob: bytes, feed: dict, index: int = 0,
            strict: bool = False) -> np.ndarray:
        from conformance.runners._export.onnx_runtime import ort_session

        import onnx

        names = {i.name for i in onnx.load_from_string(blob).graph.input}
        feed = {n: v for n, v in feed.items() if n in names}  # an unused mask is dropped
        try:
            return ort_session(blob, self.what).run(None, feed)[index]
        except Exception as exc:  # ORT failed inside the graph: read it in onnx.reference
            if strict:
                raise
            from onnx.reference import ReferenceEvaluator

            text = short(exc, 3000)  # ORT's head and its check's own words at the end
            self.ort_errors[label] = text if len(text) < 420 else f"{text[:200]} ... {text[-200:]}"
            model = onnx.load_from_string(blob)
            return ReferenceEvaluator(model).run(None, feed)[index]

    def note(self, cell: Convention, label: str) -> Convention:
        err = self.ort_errors.get(label)
        if not err:
            return cell
        return Convention(cell.axis, cell.value, f"{cell.evidence} [read in onnx.reference: "
                          f"onnxruntime fails inside the graph: {err}]", cell.documented,
                          cell.documented_source)


def _qkv_feed(case, dtype=np.float32) -> dict:
    x = case_data(case).inputs
    feed = {"query": x.query.astype(dtype)}
    if not case.inputs.self_attention:
        feed.update(key=x.key.astype(dtype), value=x.value.astype(dtype))
    return feed


def _default_call_cells(e: ExportProbe) -> list[Convention]:
    """The default call (need_weights=True, averaged) of a dropout=0.5 module in eval, with a
    bool attn_mask (B*H, T, S) input fed raw."""
    from conformance.runners._export.torch_mha import MHA_DOC, per_head

    case = probe_case("export-mask")
    m = probe_mask(case)
    blob = e.graph("default-bool", case, {"attn_mask": per_head(e.torch, case, m)}, {},
                   dropout=0.5)
    feed = _qkv_feed(case)

    def fwd(mask, strict=False, **f):
        return e.run("default-bool", blob, {**feed, **f, "attn_mask": np.repeat(mask, 2, 0)},
                     strict=strict)

    pol = e.note(_ledger.mask_polarity(case, fwd, f"{e.what}: default call, bool attn_mask "
                                       "(B*H, T, S) fed raw", documented="true_blocks",
                                       documented_source=MHA_DOC), "default-bool")
    allowed = ~m if pol.value == "true_blocks" else m
    out, oracle = fwd(m), output_with(case, allowed)
    weights = e.run("default-bool", blob, {**feed, "attn_mask": np.repeat(m, 2, 0)}, 1)
    drop = float(np.max(np.abs(out - oracle)))
    swapped = fwd(m, key=feed["value"], value=feed["key"])
    return [pol, closest("argument_order", oracle, {"query_key_value": out,
                                                    "query_value_key": swapped},
                         f"{e.what}: graph inputs {list(feed)} fed as named and with key/value "
                         "swapped", documented="query_key_value", documented_source=MHA_DOC),
            Convention("input_layout", "batch_first", f"{e.what}: the runner exports "
                       f"batch_first=True; (B, T, E) inputs read batch-first: {drop:.1e} from "
                       "the oracle (torch's own default is sequence_first)"),
            closest("softmax_scale", out, {"inv_sqrt_head_dim": oracle,
                                           "none": output_with(case, allowed, scale=1.0)},
                    f"{e.what}: nn.MultiheadAttention has no scale argument"),
            Convention("returned_weights", "head_averaged" if weights.ndim == 3 else "per_head",
                       f"{e.what}: the default call (need_weights=True, average_attn_weights="
                       f"True) exported: second graph output {weights.shape} for (B, H, T, S) "
                       "= (2, 2, 3, 5); the matrix rows export average_attn_weights=False for "
                       "per-head weights", documented="head_averaged", documented_source=MHA_DOC),
            Convention("dropout", "never", f"{e.what}: dropout=0.5 module exported in eval: "
                       f"output {drop:.1e} from the oracle without dropout; the graph has no "
                       "training input"),
            Convention("weights_dropout", IGNORED, f"{e.what}: dropout=0.5 accepted "
                       "(nn.MultiheadAttention(dropout=0.5), exported in eval; the graph has no "
                       f"Dropout node): output {drop:.1e} and returned weights "
                       f"{_weights_distance(case, allowed, weights):.1e} from the oracle "
                       "without dropout"),
            tried("unbatched_input",
                  lambda: [fwd(m[:1], True, **{n: v[0] for n, v in feed.items()})],
                   f"{e.what}: 2-D (T, E) inputs"),
            tried("mixed_dtype", lambda: [fwd(m, True, **_qkv_feed(case, np.float64))],
                   f"{e.what}: float64 inputs fed to the float32 graph")]


def _weights_distance(case, allowed, weights) -> float:
    """max |returned weights - the oracle's head-averaged weights| (no dropout); a graph
    returning per-head weights is compared per head."""
    from dataclasses import replace

    from conformance.oracle.reference import attention

    data = case_data(case)
    exp = attention(case, replace(data, inputs=replace(data.inputs, allowed=allowed)))
    ref = exp.weights.mean(axis=1) if np.ndim(weights) == 3 else exp.weights
    return float(np.nanmax(np.abs(np.asarray(weights, np.float64) - ref)))


def _mask_graph_cells(e: ExportProbe) -> list[Convention]:
    """need_weights=False (the inference form the rows' output comes from): key_padding_mask
    (B, S) bool, float attn_mask (B*H, T, S), is_causal=True beside a non-causal attn_mask."""
    from conformance.runners._export.torch_mha import MHA_DOC, per_head

    torch, case = e.torch, probe_case("export-mask")
    m, feed, inference = probe_mask(case), _qkv_feed(case), {"need_weights": False}
    kp = e.graph("key-padding", case, {"key_padding_mask": torch.from_numpy(m[:, 0, :])},
                 inference)
    cells = [e.note(key_padding_cell(
        case, lambda k: e.run("key-padding", kp, {**feed, "key_padding_mask": k}),
        f"{e.what}: need_weights=False, bool key_padding_mask (B, S) fed raw",
        documented="true_blocks", documented_source=MHA_DOC), "key-padding")]
    fl = e.graph("float-mask", case, {"attn_mask": per_head(torch, case, m).float()}, inference)
    cells.append(e.note(float_mask_cell(
        case, lambda f: e.run("float-mask", fl, {**feed, "attn_mask": np.repeat(
            f, 2, 0).astype(np.float32)}),
        f"{e.what}: need_weights=False, float attn_mask (B*H, T, S) fed raw",
        documented="added", documented_source=MHA_DOC), "float-mask"))
    causal = e.graph("causal-hint", case, {"attn_mask": per_head(torch, case, ~m)},
                     {**inference, "is_causal": True})
    out = e.run("causal-hint", causal, {**feed, "attn_mask": np.repeat(~m, 2, 0)})
    cands = {"hint_only": output_with(case, m),
             **{k: v for k, v in causal_candidates(case).items() if k != "ignored"}}
    cells.append(e.note(closest("causal_flag", out, cands, f"{e.what}: need_weights=False, "
                                "is_causal=True with a non-causal attn_mask, T=3 != S=5",
                                documented="hint_only", documented_source=MHA_DOC),
                        "causal-hint"))
    return cells


def _best(cell: Convention) -> float:
    """The smallest distance a closest() cell quotes."""
    return min(float(x.split()[-1]) for x in cell.evidence.split(": ")[-1].split("; "))


def _float64_cell(e: ExportProbe) -> list[Convention]:
    """A float64 module exported twice: need_weights=False (the rows' output) and the
    default call (need_weights=True, the kind of graph the rows' weights come from)."""

    c64, cells, outs = scale_probe_case(), [], []
    for label, kwargs, what in (("float64", {"need_weights": False}, "need_weights=False"),
                                ("float64-weights", {}, "default call, need_weights=True")):
        out = e.run(label, e.graph(label, c64, {}, kwargs), _qkv_feed(c64, np.float64))
        outs.append(out)
        cells.append(e.note(scale_precision_cell(c64, out, f"{e.what}: float64 module, d_k=3, "
                                                 f"{what}"), label))
    rounded = [c for c in cells if c.value != "float64"]
    worst = min(rounded, key=_best) if rounded else cells[0]
    noisy = ("; the float32_rounded reading is not within 1e-12 either: that graph computes "
             "the float64 scores below float64, so the scale's own rounding is not separable"
             if worst.value != "float64" and _best(worst) > 1e-12 else "")
    return [Convention("scale_precision", worst.value,
                       " | ".join(c.evidence for c in cells) + noisy),
            _float64_compute(c64, outs[0], f"{e.what}: float64 module, d_k=3, need_weights=False")]


def float64_readings(case, out) -> dict[str, float]:
    """Distances of a float64 output from the oracle at the exact scale, the float32-rounded
    scale and the split scale (split_scale)."""
    d = case.attention.qk_head_dim
    return distances(out, {"exact scale": output_with(case, None),
                           "float32 scale": output_with(case, None,
                                                        scale=float(np.float32(1 / np.sqrt(d)))),
                           "split float32 scale": output_with(case, None, scale=split_scale(d))})


def _float64_compute(case, out, what: str) -> Convention:
    """float64_compute of the export's float64 graph: float64 when one reading of the scale
    (exact, float32, split float32: float64_readings) is within 1e-12."""
    r = float64_readings(case, out)
    best = min(r, key=r.get)
    return Convention("float64_compute", "float64" if r[best] < 1e-12 else "below_float64",
                      f"{what}: against the float64 oracle under three readings of the "
                      "scale: " + ", ".join(f"{k} {v:.1e}" for k, v in r.items()))


def export_cells(runner, wrap, probe: ExportProbe | None = None) -> list[Convention]:
    """Every probe of an onnx.torch-export runner; `wrap` is the runner's module wrapper
    (torch, mha, self_attention, mask_names, kwargs) -> nn.Module.  `probe` replaces the
    onnxruntime probe (_export/deployed.py runs the same probes in another runtime)."""
    from conformance.runners._export.torch_mha import MHA_DOC

    e = probe or ExportProbe(runner, wrap)
    cells = _default_call_cells(e) + _mask_graph_cells(e) + _float64_cell(e)
    return cells + [
        Convention("size_arguments", "derived_from_width", f"{e.what}: the exported module is "
                   "nn.MultiheadAttention(8, 2): head_dim = 8 // 2 = 4 (no head-size argument)",
                   documented="derived_from_width", documented_source=MHA_DOC),
        Convention("implicit_mask", "none", f"{e.what}: ONNX graph inputs are plain tensors; "
                   "masks reach the graph only as the key_padding_mask / attn_mask inputs"),
        *feature_cells("nn.MultiheadAttention (the exported module; the opset-23 export "
                       "writes Attention(softcap=0.0))", e.torch.nn.MultiheadAttention.__init__,
                       e.torch.nn.MultiheadAttention.forward)]


# ---- the judgements of nn.MultiheadAttention's probes these export probes share (moved
# from _export/torch_mha.py, which builds the module only)

def key_padding_cell(case, fwd, what: str, **doc):
    """A (B, S) boolean key-padding mask passed raw: True = attends or True = blocks."""
    from conformance.contract.probing import closest, output_with, probe_mask, refusal

    kp = probe_mask(case)[:, 0, :]  # key 0 True, the last False: both readings defined
    allowed = np.broadcast_to(kp[:, None, :], probe_mask(case).shape)
    try:
        out = fwd(kp)
    except Exception as exc:  # the system's refusal is the observation
        return refusal("key_padding_polarity", exc, what)
    return closest("key_padding_polarity", out, {"true_attends": output_with(case, allowed),
                                                 "true_blocks": output_with(case, ~allowed)},
                   what, **doc)


def float_mask_cell(case, fwd, what: str, **doc):
    """_ledger.float_mask (0 / -1e9), and the same with -inf, quoted beside it."""
    from dataclasses import replace

    from conformance.contract.probing import distances, output_with, probe_mask
    from conformance.contract.probe_cells import float_mask

    cell = float_mask(case, fwd, what, **doc)
    if cell.value != "added":
        return cell
    m = probe_mask(case)
    d = distances(fwd(np.where(m, 0.0, -np.inf)), {"added": output_with(case, m)})
    return replace(cell, evidence=f"{cell.evidence}; 0 / -inf mask: added {d['added']:.1e}")


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
