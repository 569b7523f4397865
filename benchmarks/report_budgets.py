"""The report budgets of #21: sizes of the answers, and how fast index.html opens.

    .venv/bin/python benchmarks/report_budgets.py [REPORT_DIR] [--from DIR] [--runs 5]

Sizes (bytes; deterministic, also checked in tests/test_answers.py on the committed
results): index.md <= 60 KB, index.html < 1 MB, and every other report file for
reference.  Opening time (not asserted in a test: it depends on the machine): headless
Chromium loads index.html from disk with a page script that records
performance.now() at the load event (the page's own report.js runs, the data is parsed,
the matrix filtered); the median of --runs loads is printed, against the 1 s budget.
Without a REPORT_DIR, the reports are re-rendered from the committed results.json and
conventions.json (or those of --from DIR) into a temporary folder (reports/ is never
touched).
"""
from __future__ import annotations

import argparse
import json
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BUDGETS = {"index.md": 60_000, "index.html": 1_000_000}
FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
         "--disable-background-networking", "--disable-extensions", "--dump-dom")


def rendered(folder: Path | None, source: Path | None = None) -> Path:
    """`folder` as it is; else the reports of `source` (default: the committed reports/)
    re-rendered into a temporary folder: conventions.json re-written by the current
    report/ledger.py (render_json_data: a file read back re-renders unchanged), then every
    other report by `conformance report`."""
    if folder is not None:
        return folder
    from conformance.report.ledger import render_json_data

    source = source or ROOT / "reports"
    out = Path(tempfile.mkdtemp(prefix="budgets-"))
    shutil.copy(source / "results.json", out / "results.json")
    ledger = json.loads((source / "conventions.json").read_text(encoding="utf-8"))
    (out / "conventions.json").write_text(render_json_data(ledger), encoding="utf-8")
    if (source / "results").is_dir():  # row files (an older results.json: inline)
        shutil.copytree(source / "results", out / "results")
    subprocess.run([sys.executable, "-m", "conformance", "report", "--results",
                    str(out / "results.json")], cwd=ROOT, check=True, capture_output=True)
    return out


def sizes(folder: Path) -> None:
    """Every report file's size; a file over 1 MB (the repository's limit) is marked."""
    for path in sorted(p for p in folder.rglob("*") if p.is_file()):
        budget = BUDGETS.get(path.name, 1_000_000)
        mark = "" if budget is None else (" within" if path.stat().st_size <= budget
                                          else " OVER") + f" budget {budget:,}"
        print(f"{str(path.relative_to(folder)):<40} {path.stat().st_size:>12,} bytes{mark}")


def open_times(folder: Path, runs: int) -> list[float]:
    """Load-event times (ms) of a copy of index.html with a timing script appended (the
    page's CSP allows only its own script's hash, so the copy drops the CSP)."""
    chromium = shutil.which("chromium") or "/usr/bin/chromium"
    text = (folder / "index.html").read_text(encoding="utf-8")
    text = re.sub(r'<meta http-equiv="Content-Security-Policy"[^>]*>', "", text)
    probe = ("<script>window.addEventListener('load',function(){var p=document."
             "createElement('pre');p.id='load-ms';p.textContent=performance.now();"
             "document.body.appendChild(p);});</script>")
    timed = folder / "index.timed.html"
    timed.write_text(text.replace("</body>", probe + "</body>"), encoding="utf-8")
    out = []
    with tempfile.TemporaryDirectory() as profile:
        for _ in range(runs):
            started = time.perf_counter()
            dom = subprocess.run([chromium, *FLAGS, f"--user-data-dir={profile}",
                                  timed.as_uri()], capture_output=True, text=True,
                                 timeout=120).stdout
            wall = (time.perf_counter() - started) * 1000
            found = re.search(r'<pre id="load-ms">([0-9.]+)</pre>', dom)
            out.append(float(found[1]) if found else float("nan"))
            print(f"  load event at {out[-1]:.0f} ms (browser process {wall:.0f} ms)")
    timed.unlink()
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("folder", nargs="?", type=Path,
                        help="a report folder, measured as it is")
    parser.add_argument("--from", dest="source", type=Path,
                        help="re-render this report folder's results.json and "
                             "conventions.json (default: the committed reports/)")
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    folder = rendered(args.folder, args.source)
    print(f"reports in {folder}")
    sizes(folder)
    times = open_times(folder, args.runs)
    median = statistics.median(times)
    print(f"index.html load event: median {median:.0f} ms over {len(times)} runs "
          f"({'within' if median < 1000 else 'OVER'} the 1 s budget)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
