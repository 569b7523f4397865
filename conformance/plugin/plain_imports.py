"""The suite's own package is imported as Python imports it, not assert-rewritten by pytest.

pytest rewrites the asserts of every module of a package that provides a `pytest11` plugin:
for an editable install it marks the plugin's outermost package (`conformance`), so each
pytest process (the main job's controller and its xdist workers, every pytest a test starts)
parses, rewrites and compiles every suite module it imports (~430 with the runners), and
never from a cached file where PYTHONDONTWRITEBYTECODE is set.  The package holds no
`assert` (its checks raise their own errors with their own words), so the rewrite changes
nothing it runs; this module, imported first by the plugin, takes the package off the
rewrite list before the plugin's own imports.  Test modules are still rewritten: pytest
marks them by file, not by this list.  Where pytest keeps the list elsewhere (another
version), nothing is changed and imports are rewritten as before.
"""
from __future__ import annotations

import sys

PACKAGE = "conformance"


def _ours(name: str) -> bool:
    return name == PACKAGE or name.startswith(PACKAGE + ".")


def unmark(meta_path: list | None = None) -> int:
    """Take the suite's package off every pytest assertion-rewriting hook in `meta_path`
    (default sys.meta_path); the number of hooks changed."""
    changed = 0
    for finder in sys.meta_path if meta_path is None else meta_path:
        marked = getattr(finder, "_must_rewrite", None)
        decided = getattr(finder, "_marked_for_rewrite_cache", None)
        if type(finder).__name__ != "AssertionRewritingHook" or not isinstance(marked, set):
            continue
        ours = {name for name in marked if _ours(name)}
        if not ours:
            continue
        marked -= ours
        if isinstance(decided, dict):  # names already looked up keep no stale answer
            for name in [n for n in decided if _ours(n)]:
                del decided[name]
        changed += 1
    return changed


unmark()
