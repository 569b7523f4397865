"""The report's figures kept by what they are drawn from (conformance/cache.py).

Drawing the three figures is most of a report's CPU (about 4 s of 6 s for the full
matrix: matplotlib lays out and rasterises some 2,000 texts and a 3-megapixel image),
and a report is often drawn again from the same data: `python -m conformance report`
re-rendering the committed results, tests/test_answers.py, a matrix run whose figures
did not move.  A PNG is a pure function of

- the values the makers read (`DRAWN_FROM`: those columns of the results frame, in row
  order, each value with its type; the case ids and runner names in order);
- the drawing code (report/plots.py, hashed into every key by BytesCache `covers`);
- what rasterises and encodes it: the versions of Python, numpy, matplotlib, FreeType
  (and FREETYPE_PROPERTIES), Pillow and its zlib, the machine and CPU (model and
  numpy's CPU features), matplotlib's rcParams, and every font file matplotlib knows
  (path, name, style, weight, size and mtime of each).

So its bytes are cached under a hash of all of these and taken from the cache when
every one is the same: the same bytes the drawing gives.  An entry is verified before
use (cache.py), so a damaged one is drawn again; CONFORMANCE_CACHE_DIR moves the cache
(an empty folder: every figure drawn).  The cache keeps the KEEP figures used last.
"""
from __future__ import annotations

import os
import platform

from conformance.cache import BytesCache, key

CACHE = BytesCache("figures", ".png", covers=("conformance/report/plots.py",))
KEEP = 30  # figures kept (ten reports' worth); the least recently used go first
# every column of the results frame that a figure maker reads
DRAWN_FROM = ("case", "runner", "max_abs_error", "atol", "outcome", "typed", "parameters",
              "parameters_formula", "fully_masked_row")


def drawing_key(frame, cases, runners) -> str:
    """A hash of what the figures of these rows are drawn from (module docstring); a
    figure's cache key is key(its file name, this)."""
    columns = {c: (str(frame[c].dtype), [(type(v).__qualname__, repr(v)) for v in frame[c]])
               for c in DRAWN_FROM if c in frame}
    return key(_environment(), [c.id for c in cases], [r.name for r in runners], columns)


def _environment() -> list:
    """What rasterises and encodes a figure besides the drawing code (module docstring)."""
    import matplotlib
    import numpy
    import PIL
    from matplotlib import font_manager, ft2font
    from PIL import Image

    manager = font_manager.fontManager
    fonts = sorted((f.fname, f.name, f.style, f.variant, repr(f.weight), repr(f.stretch),
                    repr(f.size), _stamp(f.fname))
                   for f in manager.ttflist + manager.afmlist)
    return [platform.python_version(), numpy.__version__, matplotlib.__version__,
            ft2font.__freetype_version__, os.environ.get("FREETYPE_PROPERTIES", ""),
            PIL.__version__, getattr(Image.core, "zlib_version", ""), _cpu(),
            sorted((k, repr(matplotlib.rcParams[k])) for k in matplotlib.rcParams
                   if k != "backend"), fonts]  # the Agg canvas is used directly


def _cpu() -> list[str]:
    """The machine and CPU (numpy's and zlib's code paths may follow its features)."""
    import numpy

    model = ""
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as f:
            model = next((line.split(":", 1)[1].strip() for line in f
                          if line.lower().startswith("model name")), "")
    except OSError:
        pass
    core = getattr(getattr(numpy, "_core", None), "_multiarray_umath", None)
    features = getattr(core, "__cpu_features__", None) or {}
    return [platform.machine(), model, " ".join(sorted(k for k, v in features.items() if v))]


def _stamp(path: str) -> list[int]:
    try:
        st = os.stat(path)
    except OSError:
        return []
    return [st.st_size, st.st_mtime_ns]


def cached(k: str) -> bytes | None:
    """The figure of key `k` from the cache (marked as used now), or None."""
    png = CACHE.get(k)
    if png is not None:
        try:
            os.utime(CACHE.path(k))
        except OSError:
            pass
    return png


def keep(k: str, png: bytes) -> None:
    """Store a figure drawn now; then only the KEEP figures used last stay."""
    CACHE.put(k, png)
    try:
        entries = sorted(CACHE.directory.glob("*.png"), key=lambda p: p.stat().st_mtime_ns)
        for old in entries[:-KEEP]:
            old.unlink()
            old.with_suffix(".sha256").unlink(missing_ok=True)
    except OSError:
        pass  # another process pruned it: the cache only saves time
