"""Where things live: the repository root, cases, reports and the cache.

One module, so that no other module works out the root from its own file
(and the CLI need not import the pytest plugin to find it).
"""
from __future__ import annotations

import os
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent  # the repository root
CASES_DIR = ROOT / "cases"
REPORTS_DIR = ROOT / "reports"
CACHE_ENV = "CONFORMANCE_CACHE_DIR"  # overrides the cache root (default: <repo>/.cache)


def cache_root() -> Path:
    """Resolved at each use, so a benchmark may change the variable mid-process."""
    return Path(os.environ.get(CACHE_ENV) or ROOT / ".cache")
