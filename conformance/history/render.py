"""reports/drift.md and reports/drift.json from the probed releases and the changes.

Portable content only: values, evidence words, versions and errors; the wall times
(CPU-dependent) are printed by the command, never written here.
"""
from __future__ import annotations

import json
from dataclasses import asdict
from pathlib import Path

from conformance.report.escaping import md_text  # the messages a release's probes gave

OUTCOMES = ("env broken: the release could not be installed or imported (the error is "
            "quoted); api_absent: the release has no such argument or operator; any other "
            "word: the convention measured (words of conformance/conventions/axes.py; "
            "finite_other: a finite value matching no named convention; uniform_where_zero: "
            "a float mask read as (1 - m) * -1e9, so the weights are uniform over the keys "
            "where it is 0; probe_error: the probe itself failed, quoted)")


def as_json(table: list[dict]) -> dict:
    """The drift document: per library, each release's cells and every change found."""
    libraries = []
    for entry in table:
        lib = entry["library"]
        libraries.append({
            "id": lib.id, "package": lib.package, "scope": lib.note,
            "releases": [{k: v for k, v in asdict(p).items() if k != "seconds"}
                         for p in entry["releases"]],
            "changes": [{**asdict(c), "kind": c.kind} for c in entry["changes"]]})
    return {"command": "python -m conformance drift", "outcomes": OUTCOMES,
            "libraries": libraries}


def _headline(doc: dict) -> list[str]:
    lines, added = [], []
    for lib in doc["libraries"]:
        for c in lib["changes"]:
            if c["kind"] != "convention":
                added.append(f"`{lib['id']}` `{c['cell']}` {c['kind'].replace('_', ' ')} "
                             f"in {c['first_release']}")
                continue
            lines.append(f"- **{lib['id']}** `{c['cell']}`: `{c['old_value']}` up to "
                         f"{c['last_old_release']}, `{c['new_value']}` from "
                         f"**{c['first_release']}** on.")
    lines = lines or ["- No convention changed between the releases probed."]
    if added:
        lines += ["", "APIs that appeared or went (not convention changes): "
                  + "; ".join(added) + "."]
    return lines


def _table(lib: dict) -> list[str]:
    releases = lib["releases"]
    boundary = {(c["cell"], c["first_release"]): "changed" if c["kind"] == "convention"
                else c["kind"].replace("api_", "") for c in lib["changes"]}
    cells = sorted({cell for r in releases for cell in r["cells"]})
    lines = ["| cell | " + " | ".join(r["version"] for r in releases) + " |",
             "|---|" + "---|" * len(releases)]
    for cell in cells:
        row, prev = [], None
        for r in releases:
            value = r["cells"].get(cell, {}).get("value", "—")
            if r["status"] != "ok":
                value = "env broken"
            mark = boundary.get((cell, r["version"]))
            shown = f"**{value}** ⟵ {mark}" if mark else (
                f"**{value}**" if prev not in (None, value) and r["status"] == "ok" else value)
            row.append(shown)
            prev = value if r["status"] == "ok" else prev
        lines.append(f"| `{cell}` | " + " | ".join(row) + " |")
    return lines


def _library(lib: dict) -> list[str]:
    out = [f"## {lib['id']} ({lib['package']})", "", lib["scope"], ""]
    out += _table(lib) + [""]
    for r in lib["releases"]:
        if r["status"] != "ok":
            out.append(f"- {lib['package']} {r['version']}: env broken: {md_text(r['error'])}")
    for c in lib["changes"]:
        walked = ", ".join(c["walked"]) or "none (the table's releases are adjacent)"
        skipped = (f"; skipped (env broken or no comparable value): {', '.join(c['skipped'])}"
                   if c["skipped"] else "")
        what = "changed" if c["kind"] == "convention" else c["kind"].replace("_", " ") + ":"
        out.append(f"- `{c['cell']}` {what} `{c['old_value']}` -> `{c['new_value']}` in "
                   f"**{c['first_release']}** (last with the old value: "
                   f"{c['last_old_release']}; releases the bisect probed here: {walked}{skipped})."
                   f" Evidence {c['last_old_release']}: {md_text(c['evidence_old'])}; "
                   f"{c['first_release']}: {md_text(c['evidence_new'])}")
    companions = {r["version"]: ", ".join(r["requirements"]) for r in lib["releases"]}
    out += ["", "Installed per release: " + "; ".join(
        f"{v}: {reqs}" for v, reqs in companions.items()), ""]
    return out


def as_markdown(doc: dict) -> str:
    lines = ["# Version drift: which release changed which convention", "",
             "Written by `python -m conformance drift` (needs the registry; not by the "
             "README run). Each release runs in its own uv env, all its probes in one "
             "process. A **bold** value differs from the release before it; "
             "`⟵ changed` marks the first release with the new value, `⟵ added` the first "
             "release with the API (bisected with `--bisect`).", "",
             f"Outcomes: {OUTCOMES}.", "", "## Answers first", ""]
    lines += _headline(doc) + [""]
    for lib in doc["libraries"]:
        lines += _library(lib)
    return "\n".join(lines).rstrip() + "\n"


def write(doc: dict, out_dir: Path) -> list[Path]:
    out_dir.mkdir(parents=True, exist_ok=True)
    md, js = out_dir / "drift.md", out_dir / "drift.json"
    js.write_text(json.dumps(doc, indent=1, sort_keys=True) + "\n")
    md.write_text(as_markdown(doc))
    return [md, js]
