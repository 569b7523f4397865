"""The ONNX sections: what each exported graph holds, masking against eager torch, and
one exported model in every runtime.

The accounting itself (onnx_accounting.account) runs in the ONNX runners and
reaches the report as Row.graphs: {graph label: accounting}.  The accounting
and operator sections show every row that has graphs, whatever its runner;
the masking section puts the rows of framework "onnx" beside the eager rows of
the system most of them export (EAGER: system and path descriptors); the runtimes
section puts eager torch beside the first runner of each (deployment framework,
backend) that runs the exported torch module (RUNTIMES: onnxruntime, OpenVINO,
ExecuTorch where its runner exists), on the fully masked row, key padding and
causal cases.
"""
from __future__ import annotations

from conformance.report.base import Section, pivot, section_table

FRAMEWORK = "onnx"
EAGER = ("torch", "torch.nn.MultiheadAttention")  # framework, system of the eager rows
EAGER_PATHS = ("ordinary", "ordinary, need_weights=False")  # the paths shown beside the graphs
RUNTIMES = ("onnx", "openvino", "executorch")  # frameworks that run an exported torch module
# The torch exports' row output comes from the graph exported with need_weights=False
# (runners/_export/torch_onnx.py), so that eager path is their like-for-like counterpart.
LIKE_FOR_LIKE = "ordinary, need_weights=False"


def _graph_rows(frame):
    for r in frame.itertuples(index=False):
        for variant, acc in (r.graphs or {}).items():
            yield r, variant, acc


def section_onnx_accounting(frame, cases, runners):
    records = [{"case": r.case, "runner": r.runner, "graph": variant,
                "opset": ", ".join(f"{d} {v}" for d, v in acc["opset"].items()),
                "exported weights": acc["exported_weights"],
                "framework count": acc["framework_parameters"],
                "other constants": f"{acc['other_constants']} in {acc['other_constant_tensors']}",
                "explanation": acc["explanation"]}
               for r, variant, acc in _graph_rows(frame)]
    table = section_table(records, ["case", "runner", "graph"])
    if table is None:
        return None
    return Section("ONNX graphs: parameter accounting",
                   "Elements of the initializers and Constant tensors of each exported graph: "
                   "weights (float tensors holding a framework parameter) against the "
                   "framework's own count, other constants (shape vectors, scalars such as the "
                   "scale) as elements in tensors, and where each parameter went "
                   "(results.json: extras.graphs.*.mapping).", table)


def section_onnx_ops(frame, cases, runners):
    records = [{"case": r.case, "runner": r.runner, "graph": variant,
                "operators": ", ".join(f"{op} {n}" for op, n in acc["ops"].items())}
               for r, variant, acc in _graph_rows(frame)]
    table = section_table(records, ["case", "runner", "graph"])
    if table is None:
        return None
    return Section("ONNX graphs: operator inventory",
                   "Operator type and count in each exported graph.", table)


def _cell_masking(r) -> str:
    if not r.outcome.ran:
        return r.outcome.cell
    err = "" if r.max_abs_error is None else f"{r.max_abs_error:.2e}"
    label = f"{r.fully_masked_row} / " if r.fully_masked_row else ""
    return label + err + ("" if r.outcome.agrees else " ✗")


def _masking_runners(runners) -> list:
    """The graphs exported from eager torch MHA, and the eager rows they come from (the
    other ONNX rows show their fully masked rows in the edge-case table)."""
    return [r for r in runners if r.system == EAGER[1] and (
        r.framework == FRAMEWORK or (r.framework == EAGER[0] and r.path in EAGER_PATHS))]


def _like_for_like(sub, runners) -> dict[str, str]:
    """Per case: the torch exports whose fully-masked-row label differs from eager
    torch called the same way (need_weights=False), e.g. 'onnx.torch-export nan vs zeros'."""
    eager = [r.name for r in runners if (r.framework, r.system) == EAGER
             and r.path == LIKE_FOR_LIKE]
    exports = [r.name for r in runners if r.framework == FRAMEWORK and r.system == EAGER[1]]
    label = {(r.case, r.runner): r.fully_masked_row for r in sub.itertuples(index=False)}
    found = {}
    for case in dict.fromkeys(sub["case"]):
        want = next((label.get((case, e)) for e in eager if label.get((case, e))), None)
        differ = [f"{x} {label[(case, x)]}" for x in exports
                  if want and label.get((case, x)) not in (None, want)]
        found[case] = (f"{', '.join(differ)} vs eager {want}" if differ else
                       "same" if want else "")
    return found


def section_onnx_masking(frame, cases, runners):
    """Eager torch against each exported graph on the masking edge cases."""
    ids = [c.id for c in cases if c.has_fully_masked_rows or c.mask.key_padding is not None]
    shown = _masking_runners(runners)
    sub = frame[frame["case"].isin(ids) & frame["runner"].isin([r.name for r in shown])]
    if sub.empty or not (sub["framework"] == FRAMEWORK).any():
        return None
    sub = sub.assign(cell=sub.apply(_cell_masking, axis=1))
    masking_cases = [c for c in cases if c.id in ids]
    table = pivot(sub, "cell", masking_cases, shown)
    like = _like_for_like(sub, runners)
    table.insert(0, "torch exports vs eager, like for like", [like.get(i, "")
                                                              for i in table.index])
    return Section("ONNX graphs against eager torch: masking edge cases",
                   "Fully masked row label / max abs error of the output (rows with "
                   "defined output) for eager nn.MultiheadAttention (its default "
                   "need_weights=True call, and need_weights=False) and each graph exported "
                   "from it. "
                   "The torch exports' output comes from the graph exported with "
                   "need_weights=False, so the like-for-like eager row is the need_weights="
                   "False one: the first column names every export whose label differs "
                   "from it.", table)


def _runtime_runners(runners, ran: set) -> list:
    """Eager torch called like the exports (need_weights=False; else its default call),
    then per (framework, backend) of RUNTIMES the first runner of the exported torch
    module, in registry order (the default export: the one model every runtime runs);
    runners of this run only."""
    mine = [r for r in runners if r.name in ran]
    eager = sorted((r for r in mine if (r.framework, r.system) == EAGER
                    and r.path in EAGER_PATHS), key=lambda r: r.path != LIKE_FOR_LIKE)
    first: dict[tuple, object] = {}
    for r in mine:
        if r.framework in RUNTIMES and r.system == EAGER[1]:
            first.setdefault((r.framework, r.backend), r)
    return eager[:1] + list(first.values())


def section_export_runtimes(frame, cases, runners):
    """One exported model side by side in each runtime, against eager torch."""
    ids = [c.id for c in cases if c.has_fully_masked_rows or c.mask.key_padding is not None
           or getattr(c.mask, "causal", "none") != "none"]
    shown = _runtime_runners(runners, set(frame.loc[frame["case"].isin(ids), "runner"]))
    sub = frame[frame["case"].isin(ids) & frame["runner"].isin([r.name for r in shown])]
    if sub.empty or sub["framework"].nunique() < 2 or not (sub["framework"] != EAGER[0]).any():
        return None
    sub = sub.assign(cell=sub.apply(_cell_masking, axis=1))
    table = pivot(sub, "cell", [c for c in cases if c.id in ids], shown)
    table.columns = [f"{n} ({r.backend or 'eager'})" for n in table.columns
                     for r in shown if r.name == n]
    return Section("One exported model in each runtime: masking edge cases",
                   "The torch nn.MultiheadAttention module exported once and run in each "
                   "runtime (the first runner of each deployment framework and backend: "
                   "onnxruntime, OpenVINO, ExecuTorch where its runner exists), beside eager "
                   "torch called the way the export is (need_weights=False, else its default "
                   "call), on the cases with a fully masked row, key padding or a causal "
                   "mask: fully masked row label / max abs error of the output (✗: beyond "
                   "tolerance).", table)
