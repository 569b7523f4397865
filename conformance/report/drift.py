"""Portable reports: what check-reports compares exactly, and what it leaves out.

Exact: what belongs to the systems: outcomes, failures (the within-tolerance
verdict of each compared tensor), counts, names, shapes, calls, behaviours,
declared mismatches, ledger words and refusal kinds, rtol / atol.  Never by
value: what CPU kernels move (masking.py): the error figures
(max_abs_error, max_rel_error, weights_*), any float inside extras and
output_digest are compared by their kind only (missing, a number, NaN, ±inf);
the texts that quote figures or framework messages (a row's reason and notes,
ledger evidence) after masking.  results.json and its row files (results/<runner>.json
and .csv, results_files.py) are compared row by row (keyed by case + runner),
conventions.json cell by cell (keyed by system + axis; the systems list without the
suite's own import path of each runner class); index.md, index.html (entities decoded,
embedded JSON included), cases/*.md, conventions.md and spec_vectors.md line by line
(spec_vectors.json as results.json: rows keyed by case and engine), every line masked
before the lines are aligned (so a moved figure can neither fail a line nor
misalign its neighbours).  agreement.json through each case's verdict (where the
reference sits among the clusters): which runners form which group is display only
in every file (clusters.membership_masked).  The run-metadata block and index.html's
figures block (PNG bytes) are ignored.
"""
from __future__ import annotations

import csv
import html
import io
import json
import re
from dataclasses import dataclass

from conformance.report.base import FLOATS
from conformance.report.clusters import AGREEMENT_FILE, membership_masked, verdicts
from conformance.report.results_files import ROWS_DIR
from conformance.report.masking import figures_agree, mask, structures_agree, texts_agree
from conformance.report.spec_vectors import SPEC_FILES, SPEC_JSON

# Blocks of text files left out like the metadata block: report/html.py's figures (PNG
# bytes differ across machines).
SKIPPED_BLOCKS = (("<!-- figures: start", "<!-- figures: end -->"),)
TEXT_FILES = ("index.md", "index.html")
IGNORED_KEYS = ("metadata",)
# may quote figures and framework messages: masked.  `failures` are the words of each
# failed tolerance verdict ("output: 80 of 100 values differ beyond ..."): their element
# counts move with the kernels; which tensor failed and how is `failure_kinds`, exact
TEXT_FIELDS = ("reason", "notes", "failures")
# a ledger cell's texts: its evidence and the second witness's reading ("<word>: <evidence>",
# quoting a row's error figure), masked; every other field of a cell exact
LEDGER_TEXT_FIELDS = ("evidence", "second_witness")
# conventions.json's systems list: the suite's import path of the runner class is the
# harness, not the system (a module move must not read as a changed result)
HARNESS_FIELDS = ("runner",)
DATA_BLOB = re.compile(r'(<script type="application/json" id="report-data">)(.*?)(</script>)',
                       re.DOTALL)
EXCERPT = 160  # characters of a long changed line shown around its first difference


@dataclass(frozen=True)
class Change:
    file: str
    case: str  # or the line number of a text file
    runner: str
    field: str
    old: object
    new: object

    def __str__(self) -> str:
        where = f"{self.case}[{self.runner}]" if self.runner else self.case
        return f"{self.file}: {where} {self.field}: {self.old!r} -> {self.new!r}"


# extras the CPU picks, display only: OpenVINO's CPU plugin compiles another runtime graph
# per ISA (a fused `Subgraph` with AVX2 and up; Eltwise, MatMul, Softmax under SSE4.1)
CPU_EXTRAS = (("openvino", "kernels"),)


def without_cpu_extras(extras):
    """`extras` without the CPU_EXTRAS entries (copied, never changed in place)."""
    if not isinstance(extras, dict):
        return extras
    out = dict(extras)
    for outer, inner in CPU_EXTRAS:
        if isinstance(out.get(outer), dict):
            out[outer] = {k: v for k, v in out[outer].items() if k != inner}
    return out


# fields of a row that name what the checking CPU moved (spec_cache.py `isa_moved`: the
# outcome at the CPU's own instruction sets beside the floor's): display only
CPU_FIELDS = ("isa_moved",)


def field_agrees(name: str, a, b) -> bool:
    """One field of a row, by its rule (module docstring)."""
    if name in CPU_FIELDS:
        return True
    if name == "extras":
        a, b = without_cpu_extras(a), without_cpu_extras(b)
    if name in FLOATS:
        return figures_agree(a, b)
    if name in TEXT_FIELDS:
        return texts_agree(a, b)
    return structures_agree(a, b)


def compare_rows(old: list[dict], new: list[dict], file: str) -> list[Change]:
    """Row by row, keyed by (case, runner) (spec_vectors.json: runner = the engine), each
    field by its rule."""
    a = {(r.get("case"), r.get("runner")): r for r in old}
    b = {(r.get("case"), r.get("runner")): r for r in new}
    changes = [Change(file, c, n, "(row)", "present" if (c, n) in a else "absent",
                      "present" if (c, n) in b else "absent")
               for c, n in sorted(set(a) ^ set(b), key=str)]
    for key in [k for k in a if k in b]:
        ra, rb = a[key], b[key]
        for name in list(ra) + [k for k in rb if k not in ra]:
            va, vb = ra.get(name), rb.get(name)
            if not field_agrees(name, va, vb):
                changes.append(Change(file, key[0], key[1], name, va, vb))
    return changes


def compare_json(old_text: str, new_text: str, file: str = "results.json") -> list[Change]:
    old, new = json.loads(old_text), json.loads(new_text)
    changes = compare_rows(old.get("rows", []), new.get("rows", []), file)
    for key in sorted(set(old) | set(new)):
        if key not in ("rows", *IGNORED_KEYS) and old.get(key) != new.get(key):
            changes.append(Change(file, key, "", "(top level)", old.get(key), new.get(key)))
    return changes


def _csv_rows(text: str) -> list[dict]:
    rows = []
    for raw in csv.DictReader(io.StringIO(text)):
        row = {}
        for k, v in raw.items():
            if k in FLOATS or k in ("rtol", "atol"):
                row[k] = float(v) if v not in ("", None) else None
            elif k == "extras" and v:
                row[k] = json.loads(v)
            else:
                row[k] = v
        rows.append(row)
    return rows


def compare_csv(old_text: str, new_text: str, file: str = "results.csv") -> list[Change]:
    old, new = _csv_rows(old_text), _csv_rows(new_text)
    header_a = old_text.split("\n", 1)[0]
    header_b = new_text.split("\n", 1)[0]
    changes = [] if header_a == header_b else [Change(file, "header", "", "columns",
                                                      header_a, header_b)]
    return changes + compare_rows(old, new, file)


def excerpt(a: str, b: str) -> tuple[str, str]:
    """Long masked lines (index.html's embedded JSON is one line) cut around their first
    difference, so the change names what changed instead of quoting the whole page."""
    i = next((k for k, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))
    lo = max(0, i - EXCERPT // 2)

    def cut(t: str) -> str:
        return ("…" if lo else "") + t[lo:lo + EXCERPT] + ("…" if len(t) > lo + EXCERPT else "")

    return cut(a), cut(b)


def data_changes(a, b, file: str, where: str = "report-data") -> list[Change]:
    """index.html's embedded data, compared as data: keys, lengths, numbers and booleans
    exactly (case configuration), every string as a masked text (figures, evidence,
    reasons, notes)."""
    if isinstance(a, dict) and isinstance(b, dict) and a.keys() == b.keys():
        return [c for k in a for c in data_changes(a[k], b[k], file, f"{where}.{k}")]
    if isinstance(a, list) and isinstance(b, list) and len(a) == len(b):
        return [c for i, (x, y) in enumerate(zip(a, b))
                for c in data_changes(x, y, file, f"{where}[{i}]")]
    if texts_agree(a, b):
        return []
    return [Change(file, where, "", "data", _shown(a), _shown(b))]


def _shown(value):
    """A changed data value as a Change holds it (a list or mapping: its JSON, cut)."""
    if isinstance(value, (list, dict)):
        text = json.dumps(value, ensure_ascii=False)
        return text if len(text) <= 2 * EXCERPT else text[:2 * EXCERPT - 1] + "…"
    return value


def compare_html(old_text: str, new_text: str, file: str) -> list[Change]:
    """index.html: its embedded JSON as data (data_changes), the rest line by line."""
    changes = []
    blobs = [DATA_BLOB.search(t) for t in (old_text, new_text)]
    if all(blobs):
        changes = data_changes(*(json.loads(m.group(2)) for m in blobs), file)
        old_text, new_text = (DATA_BLOB.sub(r"\1(data)\3", t) for t in (old_text, new_text))
    return changes + compare_text(old_text, new_text, file)


def compare_text(old_text: str, new_text: str, file: str) -> list[Change]:
    """Line by line, every line masked before the lines are aligned (texts already stripped
    of metadata); a change quotes the original lines."""
    a, b = old_text.splitlines(), new_text.splitlines()
    if file.endswith(".html"):  # quotes and other entities as the page shows them
        a, b = [html.unescape(x) for x in a], [html.unescape(x) for x in b]
    masked_a, masked_b = [mask(x) for x in a], [mask(x) for x in b]
    changes = []
    for op, i1, i2, j1, j2 in _opcodes(masked_a, masked_b):
        if op == "equal" or (op == "replace" and i2 - i1 == j2 - j1 and all(
                texts_agree(x, y) for x, y in zip(a[i1:i2], b[j1:j2]))):
            continue
        old, new = "\n".join(a[i1:i2]), "\n".join(b[j1:j2])
        if len(old) > 2 * EXCERPT or len(new) > 2 * EXCERPT:
            old, new = excerpt("\n".join(masked_a[i1:i2]), "\n".join(masked_b[j1:j2]))
        changes.append(Change(file, f"line {i1 + 1}", "", "text", old, new))
    return changes


MAX_ALIGNED = 4_000_000  # line pairs difflib may weigh (its alignment is quadratic)


def _opcodes(a: list[str], b: list[str]) -> list[tuple]:
    """difflib's opcodes of `a` against `b`, in bounded time: the common head and tail
    are equal; a middle of the same length on both sides is compared line by line; any
    other middle is aligned by difflib only when it is small, else one replaced block."""
    import difflib

    head = next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))
    tail = 0
    while tail < min(len(a), len(b)) - head and a[-1 - tail] == b[-1 - tail]:
        tail += 1
    i2, j2 = len(a) - tail, len(b) - tail
    if i2 - head == j2 - head:
        middle = [("equal" if a[i] == b[i] else "replace", i, i + 1, i, i + 1)
                  for i in range(head, i2)]
    elif (i2 - head) * (j2 - head) <= MAX_ALIGNED:
        matcher = difflib.SequenceMatcher(None, a[head:i2], b[head:j2], autojunk=False)
        middle = [(op, x1 + head, x2 + head, y1 + head, y2 + head)
                  for op, x1, x2, y1, y2 in matcher.get_opcodes()]
    else:
        middle = [("replace", head, i2, head, j2)]
    return middle


def _systems(ledger: dict) -> list[dict]:
    return [{k: v for k, v in s.items() if k not in HARNESS_FIELDS} if isinstance(s, dict)
            else s for s in ledger.get("systems") or []]


def compare_ledger(old_text: str, new_text: str, file: str = "conventions.json") -> list[Change]:
    """Cell by cell, keyed by (system, axis): every field exact (the value word, the
    documented word and source, the contradiction flag, the number of witnesses) except
    the evidence texts (LEDGER_TEXT_FIELDS), which are masked (their distances move with
    the CPU, their quoted messages with the kernels); axes
    exact, systems without the suite's import path of each runner."""
    old, new = json.loads(old_text), json.loads(new_text)
    changes = []
    if old.get("axes") != new.get("axes"):
        changes.append(Change(file, "axes", "", "list", old.get("axes"), new.get("axes")))
    if _systems(old) != _systems(new):
        changes.append(Change(file, "systems", "", "list", _systems(old), _systems(new)))
    cells_a = {(c["system"], c["axis"]): c for c in old.get("cells", [])}
    cells_b = {(c["system"], c["axis"]): c for c in new.get("cells", [])}
    for key in sorted(set(cells_a) | set(cells_b)):
        a, b = cells_a.get(key), cells_b.get(key)
        if a is None or b is None:
            changes.append(Change(file, f"{key[0]} / {key[1]}", "", "cell", a, b))
            continue
        for field in sorted(set(a) | set(b)):
            x, y = a.get(field), b.get(field)
            same = texts_agree(x, y) if field in LEDGER_TEXT_FIELDS else x == y
            if not same:
                changes.append(Change(file, key[0], key[1], field, x, y))
    return changes


def compare_file(name: str, old_text: str | None, new_text: str | None) -> list[Change]:
    """One report file (`name` relative to the report folder)."""
    from conformance.report.render import strip_metadata

    if old_text is None or new_text is None:
        return [Change(name, "(file)", "", "exists", old_text is not None, new_text is not None)]
    if name.endswith(("results.json", SPEC_JSON)) or name.startswith(f"{ROWS_DIR}/") and \
            name.endswith(".json"):  # rows: outcomes exact, figures by kind
        return compare_json(old_text, new_text, name)
    if name.endswith(".csv"):
        return compare_csv(old_text, new_text, name)
    if name.endswith("conventions.json"):
        return compare_ledger(old_text, new_text, name)
    if name.endswith(AGREEMENT_FILE):
        return compare_agreement(old_text, new_text, name)
    if name.endswith(".json"):  # other data: exact outside metadata
        if strip_metadata(old_text, name) == strip_metadata(new_text, name):
            return []
        return [Change(name, "(file)", "", "content", "…", "differs")]
    if name.endswith(".html"):
        return compare_html(*(_skip_blocks(strip_metadata(t, name)) for t in
                              (old_text, new_text)), name)
    return compare_text(*(membership_masked(_skip_blocks(strip_metadata(t, name))) for t in
                          (old_text, new_text)), name)


def compare_agreement(old_text: str, new_text: str, file: str = AGREEMENT_FILE) -> list[Change]:
    """agreement.json through each case's verdict (clusters.verdict: with the largest group,
    apart, reference suspect and its declaration) and the list of undeclared suspects.  Which
    runners form which group is display only: membership hangs on elementwise distances at
    twice the tolerance, which a CPU's kernels move (a row's NaN pattern, a float16 output)."""
    old, new = json.loads(old_text), json.loads(new_text)
    a, b = verdicts(old), verdicts(new)
    changes = [Change(file, case, "", "verdict", a.get(case), b.get(case))
               for case in list(a) + [c for c in b if c not in a] if a.get(case) != b.get(case)]
    if old.get("reference_suspect") != new.get("reference_suspect"):
        changes.append(Change(file, "reference_suspect", "", "(top level)",
                              old.get("reference_suspect"), new.get("reference_suspect")))
    return changes


def _skip_blocks(text: str) -> str:
    """`text` without its SKIPPED_BLOCKS, in one pass (linear in the text, however many
    blocks it holds)."""
    for start, end in SKIPPED_BLOCKS:
        kept, at = [], 0
        while (a := text.find(start, at)) >= 0 and (b := text.find(end, a + len(start))) >= 0:
            kept.append(text[at:a])
            at = b + len(end)
        text = "".join(kept) + text[at:]
    return text


def report_names(folder) -> list[str]:
    """The report files of a folder, relative to it: REPORT_FILES, the ledger files and
    the per-case pages that exist there."""
    from pathlib import Path

    from conformance.report.pages import PAGES_DIR
    from conformance.report.render import REPORT_FILES

    folder = Path(folder)
    from conformance.report.ledger_groups import AXIS_PAGES

    pages = sorted(f"{d}/{p.name}" for d in (PAGES_DIR, AXIS_PAGES)
                   for p in (folder / d).glob("*.md"))
    ledger = [n for n in LEDGER_FILES + (AGREEMENT_FILE,) + SPEC_FILES
              if (folder / n).exists()]
    rows = sorted(f"{ROWS_DIR}/{p.name}" for p in (folder / ROWS_DIR).glob("*")
                  if p.suffix in (".json", ".csv"))
    return list(REPORT_FILES) + rows + ledger + pages


LEDGER_FILES = ("conventions.json", "conventions.md")


def compare_reports(old, new) -> list[Change]:
    """Every change between two report folders (old: the baseline)."""
    from pathlib import Path

    def read(folder, name):
        path = Path(folder) / name
        return path.read_text(encoding="utf-8") if path.exists() else None

    names = list(dict.fromkeys(report_names(old) + report_names(new)))
    return [c for n in names for c in compare_file(n, read(old, n), read(new, n))]


def differences(old, new) -> list[str]:
    """compare_reports as lines (empty = the reports hold)."""
    return [str(c) for c in compare_reports(old, new)]
