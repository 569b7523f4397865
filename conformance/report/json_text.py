"""JSON text of the results files, fast: json.dumps(value, indent=1, ensure_ascii=False,
allow_nan=False) byte for byte, built by one recursive pass over plain values.

With `indent` set, json.dumps runs its pure-Python encoder (one generator per nested
value): 1.4 s of CPU for the full matrix's rows.  `dumps` joins the same pieces for
values of the JSON types (str, int, float, bool, None, dict with str keys, list, tuple;
exact types, not subclasses) and hands anything else (a subclass, another key type, a
non-finite float, a cycle) to json.dumps itself, so errors and odd values come out as
they always did.  `safe=True` gives json.dumps(json_safe(value), ...):
NaN as null, an infinity as the string "inf" / "-inf".
"""
from __future__ import annotations

import json
import math
from json.encoder import encode_basestring  # what ensure_ascii=False quotes strings with

_FLOAT = float.__repr__  # what the encoder writes a finite float with
_WORDS = {True: "true", False: "false", None: "null"}


def json_safe(obj):
    """Strict JSON: NaN becomes null, an infinity the string 'inf' / '-inf'."""
    if isinstance(obj, float) and not math.isfinite(obj):
        return None if math.isnan(obj) else str(obj)
    if isinstance(obj, dict):
        return {k: json_safe(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [json_safe(v) for v in obj]
    return obj


class _Other(Exception):
    """A value left to json.dumps."""


def dumps(value, safe: bool = False) -> str:
    """json.dumps(value, indent=1, ensure_ascii=False, allow_nan=False) (after json_safe
    when `safe`), the same text."""
    parts: list[str] = []
    try:
        _put(value, "\n", parts, _SAFE if safe else _STRICT)
    except (_Other, RecursionError):
        return json.dumps(json_safe(value) if safe else value, indent=1, ensure_ascii=False,
                          allow_nan=False)
    return "".join(parts)


def _strict_float(value: float) -> str:
    if math.isfinite(value):
        return _FLOAT(value)
    raise _Other  # json.dumps raises its own ValueError


def _safe_float(value: float) -> str:
    if math.isfinite(value):
        return _FLOAT(value)
    return "null" if math.isnan(value) else encode_basestring(str(value))


def _word(value) -> str:
    return _WORDS[value]


# exact type -> its JSON text (a container or any other type: not here)
_STRICT = {str: encode_basestring, int: int.__repr__, float: _strict_float, bool: _word,
           type(None): _word}
_SAFE = {**_STRICT, float: _safe_float}


def _put(value, newline: str, parts: list[str], scalars: dict) -> None:
    """Append the text of `value`; `newline`: a line break and the indent of its level."""
    kind = type(value)
    text = scalars.get(kind)
    if text is not None:
        parts.append(text(value))
        return
    if kind is not dict and kind is not list and kind is not tuple:
        raise _Other
    if not value:
        parts.append("{}" if kind is dict else "[]")
        return
    inner = newline + " "
    lead, separator = inner, "," + inner
    if kind is dict:
        parts.append("{")
        for key, item in value.items():
            if type(key) is not str:
                raise _Other  # json.dumps converts other keys (or refuses them)
            text = scalars.get(type(item))
            if text is not None:
                parts.append(lead + encode_basestring(key) + ": " + text(item))
            else:
                parts.append(lead + encode_basestring(key) + ": ")
                _put(item, inner, parts, scalars)
            lead = separator
        parts.append(newline + "}")
        return
    parts.append("[")
    for item in value:
        text = scalars.get(type(item))
        if text is not None:
            parts.append(lead + text(item))
        else:
            parts.append(lead)
            _put(item, inner, parts, scalars)
        lead = separator
    parts.append(newline + "]")
