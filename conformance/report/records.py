"""The schema of a results record (one row as results.json and shard files hold it),
checked before a Row is built from it.

A record read back may come from anywhere (a CI artifact, a hand-edited file), so
every field the reports read is checked for its type here, the case id through the
loader's slug rule (it names a page file) and the runner name through the registry's
name rule; a wrong one is a DataFileError naming the file, the row and the field.
Unknown fields are ignored (a newer writer may add some).
"""
from __future__ import annotations

import math
import re
from numbers import Real
from pathlib import Path
from typing import Any

from conformance.case.model import CAUSAL
from conformance.compare.verdict import FailureKind, Outcome
from conformance.datafile import DataFileError, check_id, excerpt

RUNNER_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._+-]{0,99}")
_NUMBER, _INT, _STR, _BOOL, _DICT, _LIST = "number", "integer", "string", "boolean", \
    "mapping", "list"
_OPTIONAL = {  # field -> kind; None allowed
    "parameters": _INT, "parameters_expected": _INT, "projection_parameters": _INT,
    "max_abs_error": _NUMBER, "max_rel_error": _NUMBER, "weights_max_abs_error": _NUMBER,
    "weights_max_rel_error": _NUMBER, "fully_masked_row": _STR,
    "fully_masked_row_weights": _STR, "fully_masked_row_declared": _STR,
    "nonfinite_input": _STR, "nonfinite_input_declared": _STR, "output_digest": _DICT,
}
_REQUIRED = {"outcome": _STR}
_DEFAULTED = {  # field -> (kind, default when absent)
    "framework": (_STR, ""), "reason": (_STR, ""), "dtype": (_STR, ""),
    "native_call": (_STR, ""), "executed": (_BOOL, True), "rtol": (_NUMBER, 0.0),
    "atol": (_NUMBER, 0.0), "weights_returned": (_STR, ""), "weight_shapes": (_DICT, {}),
    "notes": (_LIST, []), "extras": (_DICT, {}), "typed": (_DICT, {}),
    "failures": (_LIST, []), "known_mismatch": (_STR, ""), "count_method": (_STR, ""),
    "parameters_formula": (_INT, 0),
}


_TYPES = {_STR: str, _BOOL: bool, _DICT: dict, _LIST: list}
_OUTCOMES = frozenset(o.value for o in Outcome)
_FAILURE_KINDS = frozenset(f.value for f in FailureKind)


def _is(value: Any, kind: str) -> bool:
    if kind == _NUMBER:
        if type(value) is float or type(value) is int:  # the usual case, without the ABC
            return True
        return (isinstance(value, Real) and not isinstance(value, bool)) or value in (
            "inf", "-inf", "nan")
    if kind == _INT:
        return isinstance(value, int) and not isinstance(value, bool)
    return isinstance(value, _TYPES[kind])


def number(value):
    """A figure as results.json writes it ('inf' strings for infinities) as a float."""
    return float(value) if isinstance(value, str) else value


def _fail(path, where: str, name: str, kind: str, value) -> DataFileError:
    return DataFileError(path, f"{where}.{name}: expected {kind}, got "
                         f"{type(value).__name__} {excerpt(repr(value), 60)}")


def check_record(path: Path | str, d: Any, where: str) -> dict:
    """`d` checked as a results record: a copy with absent defaulted fields filled."""
    if not isinstance(d, dict):
        raise DataFileError(path, f"{where}: expected a mapping (a row), got "
                            f"{type(d).__name__}")
    out = dict(d)
    check_id(path, d.get("case"), f"{where}.case")
    runner = d.get("runner")
    if not isinstance(runner, str) or not RUNNER_NAME.fullmatch(runner):
        raise DataFileError(path, f"{where}.runner: {excerpt(repr(runner), 60)} is not a "
                            "runner name (letters, digits, '.', '_', '+', '-')")
    for name, kind in _REQUIRED.items():
        if not _is(d.get(name), kind):
            raise _fail(path, where, name, kind, d.get(name))
    for name, kind in _OPTIONAL.items():
        if out.setdefault(name, None) is not None and not _is(d[name], kind):
            raise _fail(path, where, name, kind, d[name])
    for name, (kind, default) in _DEFAULTED.items():
        value = out.setdefault(name, default)
        if not _is(value, kind):
            raise _fail(path, where, name, kind, value)
    _check_words(path, where, out)
    return out


def _check_words(path, where: str, d: dict) -> None:
    """Enumerations and the inner types of lists and weight shapes."""
    if d["outcome"] not in _OUTCOMES:
        raise DataFileError(path, f"{where}.outcome: {excerpt(repr(d['outcome']), 40)} is "
                            f"not one of {[o.value for o in Outcome]}")
    kinds = d.get("failure_kinds") or []
    if not isinstance(kinds, list) or any(k not in _FAILURE_KINDS for k in kinds):
        raise DataFileError(path, f"{where}.failure_kinds: expected a list of "
                            f"{[f.value for f in FailureKind]}")
    for name in ("notes", "failures"):
        if not all(isinstance(x, str) for x in d[name]):
            raise DataFileError(path, f"{where}.{name}: expected a list of strings")
    for key, shape in d["weight_shapes"].items():
        if not isinstance(shape, list) or not all(_is(n, _INT) for n in shape):
            raise DataFileError(path, f"{where}.weight_shapes.{excerpt(key, 40)}: expected "
                                "a list of integers")
    for name in ("rtol", "atol"):
        if isinstance(d[name], float) and math.isnan(d[name]):
            raise DataFileError(path, f"{where}.{name}: NaN is not a tolerance")
    from conformance.case.typed_numbers import BY_KEY, TypedError, derive

    system = d["typed"].get("system")
    if isinstance(system, str) and system in BY_KEY:  # report/typed.py derives its meaning
        try:
            derive(d["typed"])
        except TypedError as exc:
            raise DataFileError(path, f"{where}.{excerpt(str(exc), 200)}") from None
    sample = (d.get("output_digest") or {}).get("agreement")  # clusters.py compares it
    if sample is not None and (not isinstance(sample, list) or not all(
            v is None or (type(v) in (int, float)) for v in sample)):
        raise DataFileError(path, f"{where}.output_digest.agreement: expected a list of "
                            "numbers (null for a non-finite element)")


# what sections read of a runner (typed.py: the typed-numbers vocabulary it speaks)
RUNNER_WORDS = ("framework", "system", "path", "backend", "typed_system",
                "no_parameters_label")


def check_runner(path, d: Any, where: str) -> dict:
    """A runner descriptor of results.json: name, framework and the section words."""
    if not isinstance(d, dict) or not isinstance(d.get("name"), str) \
            or not RUNNER_NAME.fullmatch(d["name"]):
        raise DataFileError(path, f"{where}: expected {{name: a runner name, framework, "
                            "system, path, backend}}")
    out = {k: d.get(k, "") for k in ("name", *RUNNER_WORDS)}
    if not all(isinstance(v, str) for v in out.values()):
        raise DataFileError(path, f"{where}: {', '.join(RUNNER_WORDS)} must be strings")
    return out


def check_case(path, d: Any, where: str) -> dict:
    """A case descriptor of results.json: id (slug), title, the mask facts sections read."""
    if not isinstance(d, dict):
        raise DataFileError(path, f"{where}: expected a mapping {{id, title, ...}}")
    cid = check_id(path, d.get("id"), f"{where}.id")
    title, masked, padding = d.get("title", cid), d.get("has_fully_masked_rows", False), \
        d.get("key_padding")
    if not isinstance(title, str) or not isinstance(masked, bool):
        raise DataFileError(path, f"{where}: title must be a string, has_fully_masked_rows "
                            "a boolean")
    if padding is not None and not (isinstance(padding, list)
                                    and all(_is(n, _INT) for n in padding)):
        raise DataFileError(path, f"{where}.key_padding: expected null or a list of integers")
    tags, heads = d.get("tags", []), d.get("heads")
    if not (isinstance(tags, list) and all(isinstance(t, str) for t in tags)):
        raise DataFileError(path, f"{where}.tags: expected a list of strings")
    if heads is not None and not (isinstance(heads, list) and len(heads) == 3
                                  and all(_is(n, _INT) for n in heads)):
        raise DataFileError(path, f"{where}.heads: expected null or [num_heads, "
                            "query_features, qk_head_dim] (integers)")
    causal = d.get("causal", "none")
    if causal not in CAUSAL:
        raise DataFileError(path, f"{where}.causal: expected one of {', '.join(CAUSAL)}")
    return {"id": cid, "title": title, "has_fully_masked_rows": masked, "key_padding": padding,
            "tags": tags, "heads": heads, "causal": causal}
