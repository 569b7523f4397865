"""index.html in a real browser: headless Chromium opens it from disk.

The page's own self-test (index.html#selftest: counts rows, tries every filter
value, opens every case view, writes the results into <pre id="selftest-result">)
runs in Chromium, and the DOM is read back with --dump-dom: no driver, no
download.  Skips when no Chromium is installed (Debian: apt-get install chromium;
or set CHROMIUM to a Chromium/Chrome binary).  Also saves reports/matrix.png,
a screenshot of the matrix of the committed results.
"""
from __future__ import annotations

import html
import json
import os
import re
import shutil
import subprocess
from pathlib import Path
from types import SimpleNamespace

import pytest

from conformance.paths import ROOT
from conformance.report import html as page_html

from .test_html import PAYLOAD, real_data

FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         "--disable-extensions", "--disable-default-apps", "--hide-scrollbars",
         "--virtual-time-budget=5000")
PLANTED = "planted-script"
PASS_RGB = (0xB7, 0xE4, 0xB0)  # .o-pass in assets/report.css


def chromium() -> str | None:
    found = [os.environ.get("CHROMIUM")] + [shutil.which(n) for n in (
        "chromium", "chromium-browser", "google-chrome", "google-chrome-stable")]
    found += ["/usr/bin/chromium"]
    return next((p for p in found if p and os.access(p, os.X_OK)), None)


BROWSER = chromium()
pytestmark = pytest.mark.skipif(
    BROWSER is None, reason="no headless Chromium: apt-get install chromium (Debian), "
                            "or set CHROMIUM to a Chromium/Chrome binary")


def run_browser(tmp: Path, url: str, *args: str) -> str:
    cmd = [BROWSER, *FLAGS, f"--user-data-dir={tmp / 'profile'}", *args, url]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=120,
                          env={**os.environ, "HOME": str(tmp)})
    assert done.returncode == 0, f"{' '.join(cmd)}: {done.stderr[-2000:]}"
    return done.stdout


def planted_page(tmp: Path):
    """index.html of the committed results plus a case whose every text is PAYLOAD."""
    import pandas as pd

    frame, cases, runners = real_data()
    first = frame[frame["case"] == frame["case"].iloc[0]].copy()
    first["case"] = PLANTED
    first["reason"] = PAYLOAD
    frame = pd.concat([frame, first], ignore_index=True)
    cases = list(cases) + [SimpleNamespace(id=PLANTED, title=PAYLOAD, description=PAYLOAD,
                                           source=PAYLOAD, tags=("planted", PAYLOAD))]
    path = tmp / "index.html"
    path.write_text(page_html.page(frame, cases, runners, [], {}, "planted"), encoding="utf-8")
    in_run = set(frame["case"])
    return path, [c for c in cases if c.id in in_run], runners


def test_matrix_filters_and_no_script_from_a_case(tmp_path):
    path, cases, runners = planted_page(tmp_path)
    dom = run_browser(tmp_path, path.as_uri() + "#selftest", "--dump-dom")
    found = re.search(r'<pre id="selftest-result">([^<]*)</pre>', dom)
    assert found, "the page's self-test did not run: " + dom[-1000:]
    result = json.loads(html.unescape(found[1]))
    ids = [c.id for c in cases]
    assert result["rows"] == result["cases"] == len(ids)  # one row per case
    assert result["cells_per_row"] == [len(runners)] * len(ids)
    filters = result["filters"]
    assert all(counts[""] == len(ids) for counts in filters.values())
    assert filters["tag"]["planted"] == 1  # a filter hides every other row
    for tag, count in filters["tag"].items():
        if tag:
            assert count == sum(tag in getattr(c, "tags", ()) for c in cases), tag
    assert any(n < len(ids) for o, n in filters["outcome"].items() if o)
    assert "pwned" not in dom.replace("dataset.pwned", "")  # the planted script never ran
    assert "&lt;script&gt;document.body.dataset.pwned" in dom  # shown as text in the view
    assert result["scripts"] == 2
    # the script draws both views of a cell and a refusal's bare coloured cell
    assert re.search(r'<td class="o-pass"><span class="v-err">[^<]+</span>'
                     r'<span class="v-par">[^<]*</span></td>', dom)
    assert '<td class="o-not_expressible"></td>' in dom
    # every drawn cell's two views are html.py's cell_texts of its row
    drawn = re.findall(r'<td class="o-[^"]*"(?: title="[^"]*")?><span class="v-err">([^<]*)'
                       r'</span><span class="v-par">([^<]*)</span></td>', dom)
    frame = real_data()[0]
    first = frame[frame["case"] == frame["case"].iloc[0]]
    records = frame.to_dict(orient="records") + first.to_dict(orient="records")  # + planted
    assert sorted((html.unescape(a), html.unescape(b)) for a, b in drawn) == sorted(
        page_html.cell_texts(r) for r in records
        if page_html.label(r) not in ("not_expressible", "skipped"))
    # the case view left open (the planted case, the last) writes each row's figures in
    # the words of html.py's figures_text
    frame, _, _ = real_data()
    shown = html.unescape(dom.split('id="case-view"')[1])
    rows = frame[frame["case"] == frame["case"].iloc[0]].to_dict(orient="records")
    texts = [page_html.figures_text(page_html.figures_data(r)) for r in rows]
    assert any("parameters " in t for t in texts)
    assert all(t in shown for t in texts if t), [t for t in texts if t not in shown][:3]


def test_a_cell_missing_from_the_data_is_seen_by_the_self_test(tmp_path, monkeypatch):
    """Planted: the data's first matrix row loses its last cell; the page draws what the
    data holds, and the self-test's count of cells per row says so."""
    real = page_html.matrix_rows
    monkeypatch.setattr(page_html, "matrix_rows", lambda *a: [
        row[:-1] if n == 0 else row for n, row in enumerate(real(*a))])
    path, cases, runners = planted_page(tmp_path)
    dom = run_browser(tmp_path, path.as_uri() + "#selftest", "--dump-dom")
    result = json.loads(html.unescape(
        re.search(r'<pre id="selftest-result">([^<]*)</pre>', dom)[1]))
    assert result["cells_per_row"][0] == len(runners) - 1
    assert result["cells_per_row"][1:] == [len(runners)] * (len(cases) - 1)


def test_screenshot_of_the_matrix(tmp_path):
    frame, cases, runners = real_data()
    path = tmp_path / "index.html"
    path.write_text(page_html.page(frame, cases, runners, [], {}, "committed results"),
                    encoding="utf-8")
    shot = ROOT / "reports" / "matrix.png"
    run_browser(tmp_path, path.as_uri(), "--window-size=1600,1000", f"--screenshot={shot}")
    assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    image = pytest.importorskip("matplotlib.image").imread(shot)
    rgb = (image[..., :3] * 255).round()
    green = ((abs(rgb - PASS_RGB)).max(axis=-1) <= 2).sum()
    assert green > 5000, "the screenshot shows no pass-coloured matrix cells"


def test_the_headline_and_the_two_system_view(tmp_path):
    """index.html as `report` writes it from the committed results and ledger: the headline
    findings are there, and the comparison of two systems lists their differences (and
    nothing for a system against itself)."""
    from conformance.__main__ import main

    for name in ("results.json", "conventions.json"):
        (tmp_path / name).write_bytes((ROOT / "reports" / name).read_bytes())
    if (ROOT / "reports" / "results").is_dir():  # row files (an older results.json: inline)
        shutil.copytree(ROOT / "reports" / "results", tmp_path / "results")
    assert main(["report", "--results", str(tmp_path / "results.json")]) == 0
    page = tmp_path / "index.html"
    dom = run_browser(tmp_path, page.as_uri() + "#selftest", "--dump-dom")
    found = re.search(r'<pre id="selftest-result">([^<]*)</pre>', dom)
    assert found, "the page's self-test did not run: " + dom[-1000:]
    result = json.loads(html.unescape(found[1]))
    assert result["headline"] >= 4
    assert "39,350,528" in dom and "Mask polarity" in dom
    ledger = json.loads((tmp_path / "conventions.json").read_text())
    first, second = result["diff"]["pair"]
    assert [first, second] == [s["id"] for s in ledger["systems"][:2]]
    cells = {(c["system"], c["axis"]): c["value"] for c in ledger["cells"]}
    silent = ("", "not_applicable", "not_probed")
    differ = [a["id"] for a in ledger["axes"] if cells.get((first, a["id"]), "") !=
              cells.get((second, a["id"]), "") and not (cells.get((first, a["id"]), "") in
                                                        silent and cells.get((second, a["id"]),
                                                                             "") in silent)]
    assert result["diff"]["rows"] == len(differ) > 0
    assert result["diff"]["same"] == 0 and "nothing differs" in result["diff"]["same_text"]
