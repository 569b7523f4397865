"""The report package: every report section, and the writers of reports/.

- base.py: Section, figure rounding (sig, fmt), the results and section frames;
- sections.py: the core sections and SECTIONS, the one list of every section;
- keras.py, onnx.py: the sections of the Keras and ONNX rows;
- render.py: results.json, results.csv, index.md, index.html, and the
  freshness check (`differences`, outside the run-metadata block).

Sections select rows by framework and typed fields (Row.graphs,
Row.output_digest, the runners' system / path / backend), never by runner
name, so a renamed or added runner lands in every section that applies.
"""
from __future__ import annotations

from .base import Section, fmt, sig
from .render import (METADATA_END, METADATA_START, REPORT_FILES, differences, strip_metadata,
                     write_reports)
from .sections import SECTIONS

__all__ = ["write_reports", "differences", "strip_metadata", "REPORT_FILES", "METADATA_START",
           "METADATA_END", "Section", "sig", "fmt", "SECTIONS"]
