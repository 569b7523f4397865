"""Agreement clusters (issue #18 part 6): per case, which runners' outputs agree with one
another, judged without the float64 reference, and whether the reference sits with the
largest group of independent systems.

One oracle decides every verdict of the matrix; if it were wrong (a flipped mask, a
wrong scale), every system would fail *together* while agreeing with each other.  So
each row that ran keeps AGREEMENT_SAMPLE output elements at indices that depend only on
the output's size (contract/runner.py: agreement_sample), the same for every runner of a
case.  Two rows agree when every sampled element is within twice the case's tolerance
of the other (each may be one tolerance from the truth) and both are non-finite at the
same places; clusters are the connected groups of agreeing rows.

Independent systems: runners are counted by the *implementation* whose arithmetic they
run (IMPLEMENTATIONS), not by runner: the three Keras backends and the Keras ONNX
export run Keras's one MultiHeadAttention; every torch runner and every torch.onnx
export run torch's; HF modules run transformers' code; the onnxruntime runners share
onnxruntime's kernels; onnx.reference is the spec's NumPy code.  Documented models
(executed=False) are the suite's own NumPy and never count.  A case is *reference
suspect* when its largest cluster holds at least two implementations and the reference
agrees with none of its rows; tests/test_clusters.py fails on any that DECLARED does
not list.
"""
from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from conformance.case.loader import tolerance_for
from conformance.contract.runner import agreement_sample

AGREEMENT_FILE = "agreement.json"
# runner-name prefix -> the implementation its arithmetic comes from (first match wins)
IMPLEMENTATIONS = (("onnx.torch-export", "torch"), ("onnx.keras-export", "keras"),
                   ("onnx.attention-op.reference", "onnx.reference"),
                   ("onnx.", "onnxruntime"), ("torch.", "torch"), ("keras.", "keras"),
                   ("hf.", "transformers"), ("flax.", "flax"))
DECLARED: dict[str, str] = {  # case id -> why its reference is known to sit apart
    "extreme-float16-overflow": "float16 systems that overflow to inf/NaN agree with one "
    "another; the float64 reference holds the finite answer the case asks for",
    "extreme-nan-key": "the NaN key is masked out: torch, onnxruntime and onnx.reference "
    "contain it, the reference propagates it through 0 x NaN (IEEE): a convention "
    "(masked_kv_nonfinite), not a wrong number",
    "masked-kv-nan": "the NaN and the infinity sit at key positions no query may attend: "
    "most systems contain them, the reference propagates them through 0 x NaN (IEEE): the "
    "convention masked_kv_nonfinite, not a wrong number"}


def implementation(runner: str, framework: str = "") -> str:
    return next((impl for prefix, impl in IMPLEMENTATIONS if runner.startswith(prefix)),
                framework or runner)


@dataclass(frozen=True)
class CaseClusters:
    case: str
    clusters: list[list[str]]  # runner names, largest group (by implementations) first
    implementations: list[list[str]]  # per cluster, its distinct implementations
    reference_cluster: int | None  # index of the cluster the reference agrees with
    reference_suspect: bool
    declared: str = ""

    def as_dict(self) -> dict:
        return {"case": self.case, "clusters": self.clusters,
                "implementations": self.implementations,
                "reference_cluster": self.reference_cluster,
                "reference_suspect": self.reference_suspect, "declared": self.declared}


def _array(sample) -> np.ndarray:
    return np.array([np.nan if v is None else v for v in sample], dtype=np.float64)


def agree(a, b, atol: float, rtol: float, skip: np.ndarray | None = None) -> bool:
    """Two samples agree: same length, non-finite at the same places, and every other
    element within 2 x (atol + rtol |b|).  `skip`: elements no one is judged on (where the
    reference itself is undefined: fully masked rows, NaN inputs, whose answer is a
    convention the ledger reports, not a number)."""
    x, y = _array(a), _array(b)
    if x.shape != y.shape:
        return False
    keep = np.ones(x.shape, bool) if skip is None or skip.shape != x.shape else ~skip
    x, y = x[keep], y[keep]
    if not np.array_equal(np.isnan(x), np.isnan(y)):
        return False
    ok = ~np.isnan(x)
    return bool(np.all(np.abs(x[ok] - y[ok]) <= 2 * (atol + rtol * np.abs(y[ok]))))


def _components(names: list[str], linked) -> list[list[str]]:
    seen, groups = set(), []
    for name in names:
        if name in seen:
            continue
        group, todo = [], [name]
        seen.add(name)
        while todo:
            n = todo.pop()
            group.append(n)
            for m in names:
                if m not in seen and linked(n, m):
                    seen.add(m)
                    todo.append(m)
        groups.append(sorted(group, key=names.index))
    return groups


def cluster_case(case_id: str, samples: dict[str, list], impls: dict[str, str],
                 reference: list, atol: float, rtol: float) -> CaseClusters:
    """`samples`: runner -> agreement sample (executed rows only, in column order)."""
    names = list(samples)
    skip = np.isnan(_array(reference))
    if skip.all():  # a reference undefined everywhere judges nothing: compare it as it is
        skip = None
    groups = _components(names, lambda n, m: agree(samples[n], samples[m], atol, rtol, skip))
    groups.sort(key=lambda g: (-len({impls[n] for n in g}), -len(g)))
    kinds = [sorted({impls[n] for n in g}) for g in groups]
    ref = next((i for i, g in enumerate(groups)
                if any(agree(reference, samples[n], atol, rtol, skip) for n in g)), None)
    suspect = bool(groups) and len(kinds[0]) >= 2 and ref != 0
    return CaseClusters(case_id, groups, kinds, ref, suspect, DECLARED.get(case_id, ""))


def reference_sample(case) -> list:
    from conformance.oracle.reference import attention

    return agreement_sample(attention(case).output, case.inputs.dtype)


def clusters(rows, cases, reference=reference_sample) -> list[CaseClusters]:
    """Per case with rows that ran, in case order.  `reference(case)` gives the oracle's
    sample (a test passes a wrong one)."""
    out = []
    for case in cases:
        mine = [r for r in rows if r.case == case.id and r.executed and r.outcome.ran
                and (r.output_digest or {}).get("agreement") is not None]
        if not mine or not hasattr(case, "expect"):  # re-rendered from results.json: the
            continue  # case's record only, no oracle to place (the run's agreement.json has it)
        tol = tolerance_for(case)
        samples = {r.runner: r.output_digest["agreement"] for r in mine}
        impls = {r.runner: implementation(r.runner, r.framework) for r in mine}
        out.append(cluster_case(case.id, samples, impls, reference(case), tol.atol, tol.rtol))
    return out


def suspects(found: list[CaseClusters]) -> list[CaseClusters]:
    """Reference-suspect cases that DECLARED does not list."""
    return [c for c in found if c.reference_suspect and not c.declared]


def write_clusters(found: list[CaseClusters], out: Path) -> Path:
    path = Path(out) / AGREEMENT_FILE
    path.write_text(json.dumps({"cases": [c.as_dict() for c in found],
                                "reference_suspect": [c.case for c in suspects(found)]},
                               indent=1) + "\n")
    return path


def verdict(suspect: bool, reference_cluster, declared: str = "") -> str:
    """Where the reference sits among a case's clusters, in the report's words."""
    if suspect:
        return "reference suspect" + (f" (declared: {declared})" if declared else "")
    return ("with the largest group" if reference_cluster == 0 else
            "apart from a one-implementation group")


def verdicts(agreement: dict) -> dict[str, str]:
    """agreement.json read back: case -> its verdict (what check-reports compares)."""
    cases = agreement.get("cases") if isinstance(agreement, dict) else None
    return {str(c.get("case")): verdict(bool(c.get("reference_suspect")),
                                        c.get("reference_cluster"), str(c.get("declared") or ""))
            for c in cases or [] if isinstance(c, dict)}


# The sections that list each case's groups (details.md's table, cases/<id>.md's list).
MEMBERSHIP_HEADING = "## Agreement clusters"


def membership_masked(text: str) -> str:
    """A Markdown report with each case's group membership left out, its verdict kept
    (check-reports: membership is display only, like a figure).  Inside a section whose
    heading starts with MEMBERSHIP_HEADING: a table row keeps its first and last cells
    (case, verdict), a list item (one group of a case page) is dropped."""
    out, inside = [], False
    for line in text.split("\n"):
        if line.startswith("#"):
            inside = line.startswith(MEMBERSHIP_HEADING)
        elif inside and line.startswith("- "):
            continue
        elif inside and line.startswith("|") and not line.startswith("|---"):
            cells = re.split(r"(?<!\\)\|", line)
            if len(cells) >= 5:  # "", case, groups, verdict, ""
                line = "|".join([*cells[:2], " ‹groups› ", *cells[-2:]])
        out.append(line)
    return "\n".join(out)


def section_clusters(found: list[CaseClusters]):
    """The report's section (index.md and index.html): one row per case."""
    import pandas as pd

    from conformance.report.base import Section

    if not found:
        return None
    groups, words = [], []
    for c in found:
        groups.append(" / ".join(
            f"{'[ref] ' if i == c.reference_cluster else ''}{', '.join(g)} ({', '.join(k)})"
            for i, (g, k) in enumerate(zip(c.clusters, c.implementations))))
        words.append(verdict(c.reference_suspect, c.reference_cluster, c.declared))
    table = pd.DataFrame({"groups (implementations)": groups, "reference": words},
                         index=pd.Index([c.case for c in found], name="case"))
    return Section("Agreement clusters: which systems agree without the reference",
                   "Runners grouped by whether their outputs agree with one another (within "
                   "2 x the case's tolerance on the same sampled elements), the float64 "
                   "reference left out; systems are counted by implementation (the Keras "
                   "backends are one, a torch.onnx export is torch's). [ref] marks the group "
                   "the reference agrees with; reference suspect: the largest group of "
                   "independent systems disagrees with it (reports/agreement.json).", table)
