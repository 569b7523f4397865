"""The report of the ONNX specification's test vectors per engine: spec_vectors.md and
spec_vectors.json, the headline finding (index.md, index.html), and the ledger cells they bear on.

The rows come from runners/onnx/spec_cache.py (one per case and engine: outcome, the
failure's kind, the reason, max_abs_error as a display figure).  They are written
when the run ran a runner whose backend is one of the engines (typed field `backend`,
never a runner name), so a torch-only subset pays nothing.  check-reports compares
spec_vectors.json like results.json (rows keyed by case and engine: outcome and kind
exactly, the reason as a masked text, the figure by its kind; metadata ignored) and
spec_vectors.md line by line, masked (drift.py).
"""
from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

from conformance.report.base import METADATA_END, METADATA_START, md

SPEC_JSON, SPEC_MD = "spec_vectors.json", "spec_vectors.md"
SPEC_FILES = (SPEC_JSON, SPEC_MD)
# engine -> the `backend` descriptor of the runners that run on it
BACKENDS = {"onnxruntime": "onnxruntime", "onnx.reference": "onnx.reference",
            "openvino": "OpenVINO CPU"}
OUTCOMES = ("pass", "fail", "refuse", "skipped", "error")
OPERATOR_SYSTEM = "onnx Attention"  # ledger systems that run the operator itself (prefix)
CAVEAT = {"onnx.reference": "the expected outputs were computed by onnx.reference itself, "
                            "so its column proves little about it"}
# engines held at the ISA floor (runners/onnx/spec_cache.py): their note in the summary
ISA_NOTE = {"openvino": "run at ONEDNN_MAX_CPU_ISA=AVX2, so its outcomes hold on any CPU; "
                        "the outcomes this CPU's own instruction sets move are in the run "
                        "metadata (CPU-dependent, never compared)"}
SOURCE = ("onnx/backend/test/case/node/attention.py (generated in process: the wheel no "
          "longer ships the node data, onnx/onnx#7959)")
CELL = 60  # characters of a reason in the per-case table (the full text: the list below)


def wanted(rows, runners) -> bool:
    """Whether this run ran a runner on one of the engines."""
    ran = {r.runner for r in rows}
    return any(r.name in ran and r.backend in BACKENDS.values() for r in runners)


def summary(rows: list[dict], engines: list[str]) -> dict[str, dict[str, int]]:
    return {e: {o: n for o in OUTCOMES
                if (n := sum(1 for r in rows if r["runner"] == e and r["outcome"] == o))}
            for e in engines}


def payload(spec: dict) -> dict:
    """spec_vectors.json: what check-reports compares (metadata aside)."""
    from conformance.runners.onnx.spec_vectors import ATOL, BF16_RTOL, RTOL

    return {"metadata": {"versions": spec["versions"], "cached": spec.get("cached", []),
                         "isa": spec.get("isa", {})},
            "source": SOURCE,
            "tolerance": {"rtol": RTOL, "atol": ATOL, "bfloat16_rtol": BF16_RTOL},
            "engines": spec["engines"], "caveats": CAVEAT,
            "summary": summary(spec["rows"], spec["engines"]), "rows": spec["rows"]}


def _cell(row: dict | None) -> str:
    if row is None:
        return ""
    if row["outcome"] in ("pass", "skipped"):
        return row["outcome"]
    what = row["kind"] if row["outcome"] == "fail" else row["reason"]
    what = what if len(what) <= CELL else what[:CELL - 1] + "…"
    return md(f"{row['outcome']}: {what}")


def _summary_table(data: dict) -> list[str]:
    lines = ["| engine | " + " | ".join(OUTCOMES) + " | note |",
             "|---|" + "---|" * (len(OUTCOMES) + 1)]
    for engine in data["engines"]:
        counts = data["summary"].get(engine, {})
        lines.append(f"| {md(engine)} | " + " | ".join(md(str(counts.get(o, 0))) for o in OUTCOMES)
                     + f" | {md(CAVEAT.get(engine, '') or ISA_NOTE.get(engine, ''))} |")
    return lines


def render_markdown(data: dict) -> str:
    engines = data["engines"]
    by = {(r["case"], r["runner"]): r for r in data["rows"]}
    cases = list(dict.fromkeys((r["case"], r["opset"]) for r in data["rows"]))
    tol = data["tolerance"]
    lines = ["# ONNX specification test vectors: Attention", "",
             f"Every case of {md(data['source'])}, run in each engine that executes ONNX "
             "here and judged as onnx's backend test runner judges it: the same outputs, "
             f"shapes and dtypes, then rtol {tol['rtol']:g} and atol {tol['atol']:g} "
             f"(bfloat16: rtol {tol['bfloat16_rtol']:g}), non-finite values where the data "
             "has them. pass, fail (its kind: outputs, shape, dtype, nonfinite, values), "
             "refuse (the engine raised: its message, normalised), skipped (not installed), "
             "error (the engine's process died). Generated; do not edit.", "",
             "## Summary", "", *_summary_table(data), "",
             "## Per case", "",
             "| case | opset | " + " | ".join(
                 md(e) + (" (made the data)" if e in CAVEAT else "") for e in engines) + " |",
             "|---|---|" + "---|" * len(engines)]
    for case, opset in cases:
        lines.append(f"| {md(case)} | {md(str(opset))} | "
                     + " | ".join(_cell(by.get((case, e))) for e in engines) + " |")
    lines += ["", "## Failures and refusals", ""]
    odd = [r for r in data["rows"] if r["outcome"] not in ("pass", "skipped")]
    lines += [f"- {md(r['case'])} [{md(r['runner'])}] {md(r['outcome'])}"
              + (f" ({md(r['kind'])})" if r["kind"] else "") + f": {md(r['reason'])}"
              for r in odd] or ["None."]
    meta = data.get("metadata", {})
    lines += ["", METADATA_START, "## Run metadata", "",
              *[f"- {md(e)}: {md(json.dumps(v, sort_keys=True))}"
                for e, v in meta.get("versions", {}).items()],
              f"- cached: {md(', '.join(meta.get('cached', [])) or 'none')}",
              *_isa_lines(meta.get("isa", {}), data["rows"]), METADATA_END, ""]
    return "\n".join(lines)


def _isa_lines(isa: dict, rows: list[dict]) -> list[str]:
    """The run metadata's account of the instruction sets: the floor, this CPU's features,
    and each outcome they move (rows' `isa_moved`)."""
    if not isa:
        return []
    lines = [f"- ISA floor: {md(str(isa.get('floor', '')))}; this CPU's features: "
             f"{md(' '.join(isa.get('features', [])) or 'unknown')}"]
    for r in rows:
        m = r.get("isa_moved")
        if isinstance(m, dict):
            err = m.get("max_abs_error")
            lines.append(f"- moved by this CPU: {md(r['case'])} [{md(r['runner'])}] "
                         f"{md(r['outcome'])} at the floor, {md(str(m.get('outcome')))} "
                         f"at {md(str(m.get('features')))}"
                         + (f" (max abs error {err:.3g})" if isinstance(err, float) else ""))
    return lines


def write_spec_vectors(spec: dict, out: Path) -> list[Path]:
    data = payload(spec)
    out = Path(out)
    (out / SPEC_JSON).write_text(json.dumps(data, indent=1, ensure_ascii=False,
                                            allow_nan=False) + "\n", encoding="utf-8")
    (out / SPEC_MD).write_text(render_markdown(data), encoding="utf-8")
    return [out / SPEC_JSON, out / SPEC_MD]


def _counts_text(counts) -> str:
    if not isinstance(counts, dict):
        return "?"
    return " / ".join(f"{n} {o}" for o, n in counts.items()
                      if o in OUTCOMES and isinstance(n, int) and not isinstance(n, bool))


def summary_finding(folder: Path):
    """The headline finding (index.md and index.html) of spec_vectors.json in `folder`,
    read back as untrusted data (bounded, every text escaped); None when there is none or
    it is unreadable."""
    from conformance.datafile import DataFileError, read_json
    from conformance.report.findings import Finding

    path = Path(folder) / SPEC_JSON
    if not path.is_file():
        return None
    try:
        data = read_json(path, "a spec_vectors.json")
        counts, engines = data["summary"], data["engines"]
        total = len({r["case"] for r in data["rows"]})
    except (DataFileError, KeyError, TypeError):
        return None
    if not isinstance(engines, list) or not isinstance(counts, dict):
        return None
    parts = [f"{md(e)} {_counts_text(counts.get(e))}"
             + (" (its own data: proves little about it)" if e in CAVEAT else "")
             for e in engines if isinstance(e, str)]
    return Finding("spec_vectors", f"**The ONNX specification's test vectors** (the {total} "
                   "`Attention` cases of onnx's own case code, opsets 23-25) per engine: "
                   + "; ".join(parts) + f" ([{SPEC_MD}]({SPEC_MD})).")


# ---- ledger cells the vectors bear on: (axis, test on one failing row); a row bears on
# the first axis it matches (what the engine wrote before what the case's name says)
BEARS_ON = (
    ("mask_fill", lambda r: "nonfinite" in r["kind"] and "-inf" in r["reason"]
     and "finfo_min" in r["reason"]),
    ("window_width", lambda r: "window" in r["case"]),
    ("softcap", lambda r: "softcap" in r["case"]),
    ("kv_head_mapping", lambda r: "gqa" in r["case"]),
    ("cache_causal_alignment", lambda r: "past" in r["case"] and "causal" in r["case"]),
)


def findings(rows: list[dict]) -> dict[tuple[str, str], str]:
    """{(engine, axis): text} of the failing or refused rows that bear on an axis."""
    found: dict[tuple[str, str], list[dict]] = {}
    for r in rows:
        if r["outcome"] not in ("fail", "refuse"):
            continue
        axis = next((a for a, bears in BEARS_ON if bears(r)), None)
        if axis is not None:
            found.setdefault((r["runner"], axis), []).append(r)
    return {k: f"ONNX spec vectors ({SPEC_MD}): {len(v)} {k[1]}-related case(s) not passing "
               f"in {k[0]}, e.g. {v[0]['case']} {v[0]['outcome']}: {v[0]['reason'][:200]}"
            for k, v in found.items()}


def annotate(ledger, spec: dict):
    """The ledger with each finding appended to the evidence of the cells it bears on:
    systems that run the ONNX Attention operator itself on that engine (typed fields:
    system, backend).  The cell's word is the probe's; the finding is evidence beside it."""
    found = findings(spec["rows"])
    engine_of = {b: e for e, b in BACKENDS.items()}
    systems = {s.id: engine_of.get(s.backend) for s in ledger.systems
               if s.system.startswith(OPERATOR_SYSTEM)}
    cells = []
    for cell in ledger.cells:
        text = found.get((systems.get(cell.system), cell.axis))
        cells.append(replace(cell, evidence=f"{cell.evidence}; {text}") if text else cell)
    return replace(ledger, cells=cells, _index={})
