"""The report package: every report section, and the writers of reports/.

- base.py: Section, figure rounding (sig, fmt), escaping (md, csv_text), framework
  families and table splitting, the results and section frames;
- escaping.py: untrusted text made inert for each reader (md_text for Markdown text,
  md_code for code spans, html_text for HTML): every writer's escaper;
- sections.py: the core sections, ANSWERS, DETAILS and SECTIONS (every section);
- keras.py, onnx.py: the sections of the Keras and ONNX rows (onnx.py: also one exported
  model in each runtime);
- spec_vectors.py: the ONNX specification's Attention test vectors per engine
  (spec_vectors.md / .json, the headline finding, the ledger evidence they add);
- pages.py: one page per case (reports/cases/<id>.md);
- results_files.py: results.json (the index) and results/<runner>.json and .csv;
- render.py: index.md, index.html (report/html.py's write_html when it exists), the
  machine in the metadata block;
- results.py: rows_from_results, to re-render from results.json (records.py: the
  schema each record read back is checked against);
- staging.py: reports written whole or not at all (the staging folder made the whole
  new folder, swapped in by one exchange with signals held; no symbolic link in or as
  the folder), the --report-dir writability check;
- drift.py: check-reports' comparison (what belongs to the systems exactly);
- masking.py: what the CPU moves and how a comparison leaves it out (figure kinds,
  masked texts);
- terminal.py: the case x runner symbol matrix at the end of pytest.

Sections select rows by framework and typed fields (Row.graphs,
Row.output_digest, the runners' system / path / backend), never by runner
name, so a renamed or added runner lands in every section that applies.
"""
from __future__ import annotations

from conformance.report.base import Section, fmt, sig
from conformance.report.drift import compare_reports, differences
from conformance.report.render import (
    METADATA_END, METADATA_START, REPORT_FILES, strip_metadata, write_reports)
from conformance.report.sections import SECTIONS

__all__ = ["write_reports", "differences", "compare_reports", "strip_metadata", "REPORT_FILES",
           "METADATA_START", "METADATA_END", "Section", "sig", "fmt", "SECTIONS"]
