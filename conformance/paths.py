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
CACHE_ENV = "CONFORMANCE_CACHE_DIR"  # overrides the cache root (default: the user's cache)
CACHE_NAME = "attention-conformance"  # the folder in the user's cache folder
CACHE_KEY_ENV = "CONFORMANCE_CACHE_KEY_FILE"  # overrides where the cache's secret key lives


def cache_root() -> Path:
    """Where converted artefacts live: CONFORMANCE_CACHE_DIR, else the user's cache folder
    ($XDG_CACHE_HOME/attention-conformance, else ~/.cache/attention-conformance), so every
    clone on a machine shares one cache and a second clone's first run is warm (every key
    hashes the code and versions that make its entry).  Resolved at each use, so a
    benchmark may change the variable mid-process."""
    if os.environ.get(CACHE_ENV):
        return Path(os.environ[CACHE_ENV])
    xdg = os.environ.get("XDG_CACHE_HOME", "")
    base = Path(xdg) if xdg and Path(xdg).is_absolute() else Path.home() / ".cache"
    return base / CACHE_NAME


def cache_key_path() -> Path:
    """The file of the secret key that signs every cache entry (cache.py): kept outside the
    cache folder, which others may write, in the user's config folder
    ($XDG_CONFIG_HOME/attention-conformance/cache.key, else
    ~/.config/attention-conformance/cache.key), or CONFORMANCE_CACHE_KEY_FILE."""
    if os.environ.get(CACHE_KEY_ENV):
        return Path(os.environ[CACHE_KEY_ENV])
    xdg = os.environ.get("XDG_CONFIG_HOME", "")
    base = Path(xdg) if xdg and Path(xdg).is_absolute() else Path.home() / ".config"
    return base / CACHE_NAME / "cache.key"
