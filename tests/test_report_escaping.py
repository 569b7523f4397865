"""Untrusted text in the reports stays text for every reader (report/escaping.py).

A CommonMark parser (markdown-it-py, with tables, told to accept every link URL so any
link at all shows) stands in for the reader's Markdown renderer: what a case title,
a runner's reason or a probe's evidence holds must come out as the same text, with no
element, link, image or emphasis of its own.  The checker is shown to catch the
escapers it replaced (the ledger's, which let raw HTML through; the old `md`, which
let a link through).
"""
from __future__ import annotations

import html
import os
import random
import re
import shutil
import subprocess
from pathlib import Path
from dataclasses import dataclass

import pytest

from conformance.conventions.axes import Convention
from conformance.conventions.ledger import build
from conformance.report import write_reports
from conformance.report.answers_html import inline
from conformance.report.base import plain
from conformance.report.escaping import html_text, md_code, md_text, md_unescape, one_line
from conformance.report.findings import Finding
from conformance.report.ledger import render_markdown

from .report_rows import FakeCase, make_row, stand_in

markdown_it = pytest.importorskip("markdown_it", reason="markdown-it-py is not installed")

TITLE_SCRIPT = "document.title='pwned'"
PAYLOADS = [f"<script>{TITLE_SCRIPT}</script>", "[x](javascript:alert(1))",
            "![img](http://x)", "a | b\nc", "[x]: javascript:alert(1)", "<http://x.example>",
            "*bold* and _it_", "**strong**", "`code` here", "&lt;script&gt;", "back\\slash\\[x](y)",
            "a\u202eb\x1b[2Jc\x07", "<img src=x onerror=alert(1)>", "[a][b]", "x]( y", "!["]
PAYLOAD = " ".join(PAYLOADS)
FAKE = stand_in("fake.one", "fake", "fake.Attention")


def OLD_LEDGER_ESCAPE(text: str) -> str:
    """The ledger's escaper before escaping.py: pipes and controls only."""
    return plain(text).replace("\\", "\\\\").replace("|", "\\|").replace("`", "'")


def OLD_MD(text: str) -> str:
    """base.md before escaping.py: entities too, but no link or emphasis escaped."""
    text = plain(text).replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
    return text.replace("\\", "\\\\").replace("|", "\\|").replace("`", "'")


def renderer():
    md = markdown_it.MarkdownIt("commonmark").enable("table")
    md.validateLink = lambda url: True  # every link shows: none may come from the text
    return md


def inert(rendered: str, wrapper: str = "p") -> str:
    """The text of one rendered paragraph (or cell), failing on any element inside it."""
    inner = re.fullmatch(f"<{wrapper}>(.*)</{wrapper}>\n?", rendered.strip() + "\n", re.S)
    assert inner, rendered
    assert "<" not in inner[1], f"markup came through: {rendered}"
    return html.unescape(inner[1])


def markup_from(text: str, escape) -> list[str]:
    """The elements a document made of `text`, escaped by `escape` in the places report
    writers put untrusted text, holds beyond the writers' own: [] when the text is inert."""
    doc = "\n".join([f"# c: {escape(text)}", "", f"- **r**: {escape(text)}", "",
                     f"- {escape(text)}: {escape(text)}", "", "| a | b |", "|---|---|",
                     f"| {escape(text)} | x |", "", "[x] [a] [click]", ""])
    out = renderer().render(doc)
    tags = re.findall(r"<(?!/)([a-z0-9]+)", out)
    own = {"h1", "ul", "li", "strong", "table", "thead", "tr", "th", "tbody", "td", "p"}
    return [t for t in tags if t not in own] + re.findall(r"javascript:[^\"<]*\"", out)


def fuzzed(seed: int, count: int) -> list[str]:
    pieces = list("<>&[]()!*_`|\\#:- ~\"'=/") + ["\n", "\u202e", "\x1b", "ab", "x1",
                                                 "](", "![", "**", "__", "&amp;"]
    rng = random.Random(seed)
    return ["".join(rng.choice(pieces) for _ in range(rng.randint(1, 14)))
            for _ in range(count)]


def shown(text: str) -> str:
    """What a reader must see of `text`: one line, controls shown, a backtick as '."""
    return one_line(text).replace("`", "'")


@pytest.mark.parametrize("text", PAYLOADS + fuzzed(39, 400))
def test_md_text_comes_out_as_the_same_text_and_nothing_else(text):
    md = renderer()
    assert inert(md.render(f"x {md_text(text)} y")) == f"x {shown(text)} y"
    table = md.render(f"| a | b |\n|---|---|\n| {md_text(text)} | z |\n")
    cells = re.findall(r"<td>(.*?)</td>", table, re.S)
    assert len(cells) == 2, table  # no cell break
    assert inert(f"<td>{cells[0]}</td>", "td") == shown(text).strip(" ")
    assert md_unescape(md_text(text)) == shown(text)


@pytest.mark.parametrize("text", PAYLOADS + fuzzed(7, 100))
def test_md_code_stays_one_code_span(text):
    table = renderer().render(f"| a |\n|---|\n| `{md_code(text)}` |\n")
    code = re.findall(r"<td><code>(.*?)</code></td>", table, re.S)
    assert len(code) == 1, table
    want = shown(text)
    if len(want) > 1 and want[0] == want[-1] == " " and want.strip(" "):
        want = want[1:-1]  # CommonMark drops one space each side of a code span
    assert html.unescape(code[0]) == want


def test_ordinary_text_is_written_as_before():
    for text in ("in_proj_weight (3E, E) out x in", "case[runner]", "-0.7*finfo_max",
                 "Attention(Q, K, V) [opset 23] -> MatMul", "q_num_heads / kv_num_heads"):
        assert md_text(text) == OLD_MD(text), text


def test_the_checker_catches_the_escapers_it_replaced():
    assert "script" in markup_from(PAYLOADS[0], OLD_LEDGER_ESCAPE)  # raw HTML
    assert "a" in markup_from("[x](javascript:alert(1))", OLD_MD)  # a live link
    assert "img" in markup_from("![img](http://x)", OLD_MD)
    assert "em" in markup_from("*bold* and _it_", OLD_MD)
    assert markup_from(PAYLOAD, md_text) == []


@dataclass
class TitledCase(FakeCase):
    title: str = ""


def test_planted_text_reaches_no_report_as_markup(tmp_path):
    """A case title, a runner's reason and a probe's evidence full of markup, through
    write_reports and the ledger: every Markdown file parses to the writers' own
    elements only, the text shown as written; index.html has only its own scripts."""
    rows = [make_row("c", FAKE, "error", reason=PAYLOAD),
            make_row("d", FAKE, "not_expressible", reason=PAYLOAD)]
    write_reports(rows, [TitledCase("c", title=PAYLOAD), TitledCase("d", title=PAYLOAD)],
                  [FAKE], tmp_path, PAYLOAD)
    ledger = build([], {"fake.one": [Convention("dropout", PAYLOAD, PAYLOAD)]}, [FAKE])
    (tmp_path / "conventions.md").write_text(render_markdown(ledger), encoding="utf-8")
    shown = html.escape(one_line(PAYLOADS[1]), quote=False)
    for path in sorted(tmp_path.rglob("*.md")):
        out = renderer().render(path.read_text(encoding="utf-8"))
        assert "<script" not in out and "<img" not in out, path
        assert not re.search(r"<a href=\"(?!#|cases/|[\w./-]+\.md|https://)", out), path
        assert "<em>" not in out and "javascript:" not in re.sub(r">[^<]*<", "><", out)
        if "pwned" in path.read_text(encoding="utf-8"):
            assert shown in out, path  # the link's text is there, as text
    page = (tmp_path / "index.html").read_text(encoding="utf-8")
    assert page.count("<script") == 2 and "<img src=x" not in page


def test_a_finding_quoting_untrusted_text_is_text_in_html_and_the_terminal():
    found = Finding("x", f"**Case** [{md_text('c')}](cases/c.md): {md_text(PAYLOAD)}")
    out = inline(found.text)
    assert out.count("<a ") == 1 and 'href="cases/c.md"' in out
    assert "<script" not in out and "<img" not in out and "<em>" not in out
    assert html.escape(one_line(PAYLOADS[1])) in out
    assert found.plain.endswith(shown(PAYLOAD))


def test_html_text_shows_bidi_and_controls():
    assert html_text('a\u202e"<b>') == "a‹U+202E›&quot;&lt;b&gt;"


def _chromium() -> str | None:
    found = [os.environ.get("CHROMIUM"), shutil.which("chromium"), "/usr/bin/chromium"]
    return next((p for p in found if p and os.access(p, os.X_OK)), None)


def _dump_dom(page: Path, tmp_path: Path) -> subprocess.CompletedProcess:
    """`page` opened in headless Chromium with a fresh profile: the DOM after its scripts."""
    return subprocess.run([_chromium(), "--headless", "--no-sandbox", "--disable-gpu",
                           f"--user-data-dir={tmp_path / 'profile'}", "--dump-dom",
                           "--virtual-time-budget=3000", page.as_uri()],
                          capture_output=True, text=True, timeout=120,
                          env={**os.environ, "HOME": str(tmp_path)})


@pytest.mark.skipif(_chromium() is None, reason="no headless Chromium (/usr/bin/chromium)")
def test_rendered_reports_run_no_script_in_chromium(tmp_path):
    """conventions.md with the planted evidence, rendered (markdown-it with raw HTML on,
    as a renderer that trusts its input would), opened in Chromium: the title a planted
    script would set stays."""
    ledger = build([], {"fake.one": [Convention("dropout", PAYLOAD, PAYLOAD)]}, [FAKE])
    body = renderer().render(render_markdown(ledger))
    page = tmp_path / "conventions.html"
    page.write_text(f"<!doctype html><title>kept</title>{body}", encoding="utf-8")
    done = _dump_dom(page, tmp_path)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "<title>kept</title>" in done.stdout and "pwned</title>" not in done.stdout


def test_the_browser_check_sees_a_script_that_runs(tmp_path):
    """The Chromium check above, given the old ledger escaper's output: the title changes
    (skipped with it where no Chromium is installed)."""
    if _chromium() is None:
        pytest.skip("no headless Chromium (/usr/bin/chromium)")
    body = renderer().render(f"- {OLD_LEDGER_ESCAPE(PAYLOADS[0])}")
    page = tmp_path / "old.html"
    page.write_text(f"<!doctype html><title>kept</title>{body}", encoding="utf-8")
    done = _dump_dom(page, tmp_path)
    assert "<title>pwned</title>" in done.stdout


def test_the_spec_vector_page_escapes_an_outcome_and_an_opset_it_reads(tmp_path):
    """spec_vectors.md quotes what the shared cache held: an outcome, opset or count that
    is markup stays text."""
    from conformance.report import spec_vectors

    rows = [{"case": "test_attention_4d", "runner": "openvino", "opset": PAYLOADS[0],
             "outcome": PAYLOADS[1], "kind": "", "reason": PAYLOAD, "max_abs_error": 0.1}]
    spec = {"engines": ["openvino"], "rows": rows, "cached": [],
            "versions": {"openvino": {"onnx": "1"}}}
    spec_vectors.write_spec_vectors(spec, tmp_path)
    out = renderer().render((tmp_path / spec_vectors.SPEC_MD).read_text(encoding="utf-8"))
    assert "<script" not in out and "<a " not in out and "<img" not in out, out


def test_a_declared_upstream_link_cannot_carry_markup():
    """A known mismatch's declaration (an expectations file, or results.json read back)
    citing a 'URL' with markup in it: the finding links only the URL's safe head."""
    import pandas as pd

    from conformance.report.findings import bugs_finding

    rows = [make_row("c", FAKE, "mismatch",
                     known_mismatch="https://x.example/a<script>alert(1)</script>(y) bug")]
    frame = pd.DataFrame({"outcome": [r.outcome for r in rows], "case": ["c"],
                          "runner": [FAKE.name], "known_mismatch": [rows[0].known_mismatch]})
    out = renderer().render(bugs_finding(frame).text)
    assert "<script" not in out and out.count("<a ") == 2, out  # its own and the URL's
    assert 'href="https://x.example/a"' in out


def test_drift_md_shows_a_release_error_and_evidence_as_text():
    """drift.md quotes what an installed release printed (its install error, its probes'
    evidence): markup there stays text."""
    from conformance.history.render import as_markdown

    change = {"cell": "c", "kind": "convention", "old_value": "a", "new_value": "b",
              "first_release": "2", "last_old_release": "1", "walked": [], "skipped": [],
              "evidence_old": PAYLOAD, "evidence_new": PAYLOAD}
    release = {"version": "1", "status": "env_broken", "error": PAYLOAD, "cells": {},
               "requirements": []}
    doc = {"libraries": [{"id": "x", "package": "p", "scope": "s", "releases": [release],
                          "changes": [change]}]}
    out = renderer().render(as_markdown(doc))
    assert "<script" not in out and "<img" not in out and "<a " not in out, out
    assert html.escape(one_line(PAYLOADS[1]), quote=False) in out


def test_the_page_data_shows_bidi_and_control_characters():
    """index.html's embedded data is written with textContent by report.js: a U+202E
    there, even JSON-escaped, would reorder what the reader sees, so it is shown."""
    import json

    from conformance.report.html import script_json

    text = script_json({"title\u202e": ["evil\u202etxt", "a\x1b[2Jb", "line\nbreak"]})
    data = json.loads(text)
    assert data == {"title‹U+202E›": ["evil‹U+202E›txt", "a‹U+001B›[2Jb", "line\nbreak"]}
    assert "\u202e" not in text and "\\u202e" not in text and "<" not in text
