"""index.html: self-contained, escaped, one matrix row per case, deterministic."""
from __future__ import annotations

import json
import re
from dataclasses import dataclass
from html.parser import HTMLParser
from types import SimpleNamespace

import pytest

from conformance.paths import CACHE_ENV, ROOT
from conformance.report import html as page_html
from conformance.report.base import results_frame
from conformance.report.html_matrix import STABLE_REASONS as STABLE
from conformance.report.html_matrix import expand_matrix_cell
from conformance.compare.verdict import Failure, FailureKind, Outcome
from conformance.report.results_files import read_results

from .report_rows import FakeCase, make_row, stand_in

# Every free-text field gets this: a script, an event handler, a comment opener and
# a script-end, so escaping anywhere (text, attribute, JSON in <script>) is checked.
PAYLOAD = ('<script>document.body.dataset.pwned="1"</script><img src=x '
           'onerror="document.body.dataset.pwned=2">"\'<!-- </script> &amp;')
FAKE = stand_in("fake.one", "fake", "fake.Attention")
OTHER = stand_in("other.two", "other", "other.Attention")


@dataclass
class PlantedCase(FakeCase):
    """A case with the free-text fields a case file gives."""

    title: str = PAYLOAD
    description: str = PAYLOAD
    source: str = PAYLOAD
    tags: tuple = ("planted", PAYLOAD)
    typed: dict | None = None


def planted_rows():
    """Rows with the payload in every free-text field a framework or a case fills."""
    return [
        make_row("a", FAKE, Outcome.MISMATCH, reason=PAYLOAD, native_call=PAYLOAD,
                 notes=(PAYLOAD,), weight_shapes={PAYLOAD: [2, 3]}, typed={PAYLOAD: PAYLOAD},
                 known_mismatch=PAYLOAD, extras={"call": PAYLOAD},
                 failures=(Failure(FailureKind.VALUES, PAYLOAD),)),
        make_row("a", OTHER, Outcome.ERROR, reason=PAYLOAD, notes=(PAYLOAD,)),
        make_row("b", FAKE, Outcome.NOT_EXPRESSIBLE, reason=PAYLOAD),
        make_row("b", OTHER, parameters=77, fully_masked_row="nan"),
    ]


PLANTED_CASES = [PlantedCase("a", typed={PAYLOAD: 1}), PlantedCase("b")]
PLANTED_LEDGER = {"cells": [{"system": "fake.one", "axis": "mask_polarity", "value": PAYLOAD,
                             "source": "probe", "evidence": PAYLOAD}]}


def render(rows, cases, runners, meta=None, figures=None, ledger=None, selection="test"):
    return page_html.page(results_frame(rows), cases, runners, [], meta or {"time": "t"},
                          selection, ledger, figures)


def real_data():
    """(frame, cases, runners) of the committed reports/results.json and cases/."""
    import pandas as pd

    from conformance.case.loader import load_cases

    data = read_results(ROOT / "reports" / "results.json")
    frame = pd.DataFrame(data["rows"], dtype=object)
    runners = [SimpleNamespace(name=n, framework=f)
               for n, f in dict.fromkeys(zip(frame["runner"], frame["framework"]))]
    return frame, load_cases(ROOT / "cases"), runners


SAFE_TAGS = {"html", "head", "meta", "title", "style", "body", "h1", "h2", "h3", "p", "div",
             "label", "select", "option", "input", "span", "table", "thead", "tbody", "tr",
             "th", "td", "a", "section", "figure", "img", "figcaption", "ul", "li", "script",
             "strong", "code"}


class _Tags(HTMLParser):
    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.tags = []

    def handle_starttag(self, tag, attrs):
        self.tags.append((tag, attrs))


def elements(text: str) -> list:
    """(tag, attributes) of every element the page really has (what a browser parses)."""
    parser = _Tags()
    parser.feed(text)
    return parser.tags


def test_self_contained_no_network():
    frame, cases, runners = real_data()
    text = page_html.page(frame, cases, runners, [], {"time": "t"}, "full",
                          figures={"error_heatmap.png": b"\x89PNG fake"})
    refs = re.findall(r'\b(?:src|href|action|srcset)\s*=\s*["\']?([^"\'\s>]*)', text, re.I)
    assert refs and all(not re.match(r"(?:https?:)?//", r, re.I) for r in refs), refs
    # the page's own anchors, and links to the report files beside it (details, ledger,
    # figures): nothing outside the report folder, nothing fetched (the CSP below)
    assert all(r.startswith("#") or re.fullmatch(r"[\w.-]+(#[\w.-]*)?", r) for r in refs), refs
    assert not re.search(r"<link\b|@import|url\(|<iframe\b|<object\b", text, re.I)
    assert "default-src 'none'" in text  # and the CSP forbids any fetch


def test_every_free_text_field_is_escaped():
    text = render(planted_rows(), PLANTED_CASES, [FAKE, OTHER], meta={"time": PAYLOAD},
                  ledger=PLANTED_LEDGER, selection=PAYLOAD)
    # only the page's two own scripts: the data (JSON) and the code
    assert len(re.findall(r"<script\b", text, re.I)) == 2
    assert len(re.findall(r"</script", text, re.I)) == 2
    assert "<img" not in text and "<!-- </script>" not in text
    tags = elements(text)
    assert [t for t, _ in tags if t == "script"] == ["script", "script"]
    assert {t for t, _ in tags} <= SAFE_TAGS
    assert not [a for _, attrs in tags for a, _ in attrs if a.startswith("on")]
    assert "&lt;script&gt;document.body.dataset.pwned" in text  # shown as text
    data = text.split('<script type="application/json" id="report-data">')[1].split(
        "</script>")[0]
    assert "<" not in data and ">" not in data and "&" not in data
    parsed = json.loads(data)
    case = parsed["cases"][0]
    assert case["description"] == PAYLOAD and case["title"] == PAYLOAD
    cell = page_html.expand_cells(parsed, 0)[0]
    assert cell["reason"] == PAYLOAD  # notes are cut at NOTE_LIMIT in the page
    assert any(PAYLOAD.startswith(n.rstrip("…")) for n in cell["notes"])
    assert case["config"]["typed"] == {PAYLOAD: 1}
    evidence = parsed["ledger"][0]["cells"][0][parsed["ledger_fields"].index("evidence")]
    assert PAYLOAD.startswith(evidence.rstrip("…")) and len(evidence) >= 40


def test_sections_and_metadata_escaped_through_write_reports(tmp_path):
    from conformance.report import write_reports

    write_reports(planted_rows(), PLANTED_CASES, [FAKE, OTHER], tmp_path, PAYLOAD)
    text = (tmp_path / "index.html").read_text(encoding="utf-8")
    assert len(re.findall(r"<script\b", text, re.I)) == 2
    assert not re.findall(r"<img\b[^>]*>", text)  # the figures are linked, not embedded
    assert text.count("&lt;script&gt;document.body") >= 3  # selection, sections, matrix
    tags = elements(text)
    assert {t for t, _ in tags} <= SAFE_TAGS
    assert not [a for _, attrs in tags for a, _ in attrs if a.startswith("on")]


def page_data(text: str) -> dict:
    return json.loads(text.split('id="report-data">')[1].split("</script>")[0])


def matrix_problems(text: str, frame, names: list[str]) -> list[str]:
    """What the page's matrix data gets wrong against the rows: a case missing or out of
    order, a row with a cell too many or too few, a cell whose outcome word is not its
    row's, or a cell drawn where the case has no row."""
    data = page_data(text)
    by_cell = {(r["case"], r["runner"]): r for r in frame.to_dict(orient="records")}
    problems = [] if len(data["matrix"]) == len(data["cases"]) else ["matrix rows != cases"]
    for case, cells in zip(data["cases"], data["matrix"]):
        cid, stored = case["id"], iter(case["cells"])  # the page's own figures, in order
        if len(cells) != len(names):
            problems.append(f"{cid}: {len(cells)} cells for {len(names)} runners")
        for name, cell in zip(names, cells):
            row = by_cell.get((cid, name))
            figures = (next(stored, None) or [[]])[0] if cell is not None else None
            shown = expand_matrix_cell(cell, data["strings"], figures)
            if (shown is None) != (row is None) or (row is not None and (
                    shown["word"] != page_html.label(row) or shown["word"] not in
                    STABLE and (shown["err"], shown["params"]) != page_html.cell_texts(row))):
                problems.append(f"{cid}[{name}]: {shown} for {row and row['outcome']}")
    return problems


def test_one_matrix_row_per_case_and_one_cell_per_runner():
    """The matrix is drawn by report.js from the page's data (test_browser.py runs it): the
    data holds one row per case, in case-file order, one cell per runner column, each with
    its row's outcome word; a dropped cell and a swapped word are caught."""
    frame, cases, runners = real_data()
    text = page_html.page(frame, cases, runners, [], {}, "full")
    ids = list(dict.fromkeys(frame["case"]))
    names = [r.name for r in runners]
    assert [c["id"] for c in page_data(text)["cases"]] == [c.id for c in cases if c.id in
                                                           set(ids)]  # file order
    assert sorted(c["id"] for c in page_data(text)["cases"]) == sorted(ids)
    assert matrix_problems(text, frame, names) == []
    assert text.count('class="runner"') == len(runners)
    data = page_data(text)
    data["matrix"][0] = data["matrix"][0][:-1]  # planted: a cell dropped
    dropped = text.replace(text.split('id="report-data">')[1].split("</script>")[0],
                           page_html.script_json(data))
    assert matrix_problems(dropped, frame, names) == [
        f"{ids[0]}: {len(names) - 1} cells for {len(names)} runners"]
    moved = frame.copy()  # planted: the rows say another figure than the page
    moved.loc[moved["outcome"] == "pass", "max_abs_error"] = 0.5
    changed = sum(page_html.cell_texts(a) != page_html.cell_texts(b) for a, b in zip(
        frame.to_dict(orient="records"), moved.to_dict(orient="records")))
    assert len(matrix_problems(text, moved, names)) == changed > 100
    swapped = frame.copy()  # planted: the rows say another outcome than the page
    swapped.loc[0, "outcome"] = "error" if swapped.loc[0, "outcome"] != "error" else "pass"
    assert len(matrix_problems(text, swapped, names)) == 1


def test_cells_coloured_by_outcome_with_both_views():
    text = render(planted_rows(), PLANTED_CASES, [FAKE, OTHER])
    data = page_data(text)
    by = {(r["case"], r["runner"]): r
          for r in results_frame(planted_rows()).to_dict(orient="records")}
    cells = [[expand_matrix_cell(c, data["strings"], page_html.figures_data(by[(cid, n)]))
              for c, n in zip(row, ("fake.one", "other.two"))]
             for cid, row in zip("ab", data["matrix"])]
    assert len(data["matrix"][1][1]) == 1  # the usual cell: its word, views from its figures
    assert cells[0][0]["word"] == "known mismatch"  # a declared failure
    assert cells[0][1] == {"word": "error", "err": "error", "params": "error"}
    # a refused cell carries only its outcome (its words come from the CSS; the reason is
    # in the case view's data)
    assert data["matrix"][1][0] == data["strings"].index("not_expressible")
    assert cells[1][1] == {"word": "pass", "err": "1.00e-07", "params": "77"}
    view = page_html.expand_cells(data, 1)  # the case view's words around the figures
    assert view[1]["figures"] == ("max abs 1.00e-07, rel 1.00e-06\nparameters 77 (formula "
                                  "10)\nfully masked row: nan") and view[0]["figures"] == ""
    assert "<tbody></tbody>" in text and "<td" not in text.split("<tbody>")[1].split(
        "</tbody>")[0]  # the body is the script's: no static cell is shipped
    for name in page_html.FILTERS:
        assert f'id="filter-{name}"' in text
    assert '<option value="planted">planted</option>' in text


def test_deterministic_across_two_renders(tmp_path, monkeypatch):
    pytest.importorskip("matplotlib")
    monkeypatch.setattr(page_html.plots, "_wanted", True)
    rows = planted_rows() + [make_row("b", FAKE, max_abs_error=3e-4, typed={"heads": 2})]
    frame = results_frame(rows)
    monkeypatch.setenv(CACHE_ENV, str(tmp_path / "cache-one"))  # each render draws
    one = page_html.write_html(frame, PLANTED_CASES, [FAKE, OTHER], [], {"time": "1"},
                               tmp_path / "one", "s")
    monkeypatch.setenv(CACHE_ENV, str(tmp_path / "cache-two"))
    two = page_html.write_html(frame, PLANTED_CASES, [FAKE, OTHER], [], {"time": "2"},
                               tmp_path / "two", "s")
    a, b = one.read_text(encoding="utf-8"), two.read_text(encoding="utf-8")
    assert a != b  # the time differs, inside the metadata block only
    start, end = page_html._markers()
    assert a.split(start)[0] == b.split(start)[0] and a.split(end)[1] == b.split(end)[1]
    pngs = sorted(p.name for p in (tmp_path / "one").glob("*.png"))
    assert pngs and all((tmp_path / "one" / n).read_bytes() == (tmp_path / "two" / n)
                        .read_bytes() for n in pngs)
    assert page_html.FIGURES_START in a and 'href="error_heatmap.png"' in a  # linked


def test_figures_left_out_when_turned_off(tmp_path, monkeypatch):
    """CONFORMANCE_FIGURES=0 (what the suite's tests give their pytest subprocesses): no
    PNG, no figures block, and the rest of the page as with figures."""
    rows = planted_rows()
    frame = results_frame(rows)
    monkeypatch.setattr(page_html.plots, "_wanted", None)  # read the environment
    monkeypatch.setenv("CONFORMANCE_FIGURES", "0")
    page = page_html.write_html(frame, PLANTED_CASES, [FAKE, OTHER], [], {"time": "1"},
                                tmp_path / "off", "s").read_text(encoding="utf-8")
    assert not list((tmp_path / "off").glob("*.png"))
    assert page_html.FIGURES_START not in page and "error_heatmap.png" not in page
    assert page_html.plots.available() == "CONFORMANCE_FIGURES=0; figures left out"


def test_script_json_cannot_end_the_script():
    text = page_html.script_json({"x": "</script><!--<script>&\u2028"})
    assert "<" not in text and ">" not in text and "&" not in text and "\u2028" not in text
    assert json.loads(text) == {"x": "</script><!--<script>&\u2028"}


def test_case_configuration_and_ledger_in_the_case_view():
    frame, cases, runners = real_data()
    ledger = {"cells": [{"system": runners[0].name, "axis": "a", "value": "v", "source": "probe",
                         "evidence": f"probe[{runners[0].name}]: e"},
                        {"system": "not.in.run", "axis": "a", "value": "v"}]}
    text = page_html.page(frame, cases, runners, [], {}, "full", ledger)
    data = json.loads(text.split('id="report-data">')[1].split("</script>")[0])
    first = data["cases"][0]
    assert first["config"]["attention"]["num_heads"] >= 1 and first["file"].endswith(".yaml")
    cells = page_html.expand_cells(data, 0)
    rows = frame[frame["case"] == first["id"]]
    assert [(c["runner"], c["label"]) for c in cells] == [  # column order, each its own
        (r["runner"], page_html.label(r)) for r in sorted(
            rows.to_dict(orient="records"), key=lambda r: data["runners"].index(r["runner"]))]
    assert [s["system"] for s in data["ledger"]] == [runners[0].name]
    # the page names the system and the source: the probe[...] label is not said again
    # interned (an evidence with no digit too: the same head over systems)
    assert [data["strings"][n] for n in data["ledger"][0]["cells"][0]] == [
        "a", "v", "probe", "e"]
    assert "/" not in first["file"]  # no machine path in the page
