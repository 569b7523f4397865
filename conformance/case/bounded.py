"""Bounded text of untrusted values: a repr that never expands more than a few levels and
items, and a cut with an ellipsis.  No imports from the package, so every case module
(model.py and the feature modules it names) may import it.
"""
from __future__ import annotations

import reprlib
from typing import Any

_REPR = reprlib.Repr()
_REPR.maxlevel, _REPR.maxstring, _REPR.maxother = 3, 80, 80
_REPR.maxlist = _REPR.maxtuple = _REPR.maxdict = _REPR.maxset = 8


def cut(text: str, limit: int = 200) -> str:
    """`text` shortened to at most `limit` characters, with an ellipsis."""
    return text if len(text) <= limit else text[:limit - 3] + "..."


def short(value: Any, limit: int = 200) -> str:
    """A bounded repr: never expands more than a few levels and items of `value`."""
    try:
        text = _REPR.repr(value)
    except Exception:  # a repr that fails must not hide the real error
        text = f"<{type(value).__name__}>"
    return cut(text, limit)
