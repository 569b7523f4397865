"""Extreme inputs of a case: `inputs.scale` and `inputs.nonfinite`.

`scale` multiplies query, key and value after they are drawn and before they
are rounded to the case dtype (1e3 saturates the softmax; in float16 a value
over 65504 rounds to inf).  `nonfinite` places NaN, inf or -inf at chosen
(tensor, batch, position, feature) elements after rounding.  Read here, from
the reader `r` of loader.py (its `fail` names file, case and field), to keep
loader.py short; oracle/canonical.py applies them.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Mapping

from conformance.case.numbers import as_float
from conformance.case.model import short

MAX_NONFINITE = 64  # entries of inputs.nonfinite
TENSORS = ("query", "key", "value")
VALUES = {"nan": math.nan, "inf": math.inf, "-inf": -math.inf}
_FIELDS = {"tensor", "batch", "position", "feature", "value"}
# (largest finite, smallest positive subnormal) of each case dtype: a scale outside that
# range would become inf or 0 in the layer, and a later NaN would pass for a mismatch
RANGE = {"float16": (65504.0, 2.0 ** -24), "bfloat16": (3.3895313892515355e38, 2.0 ** -133),
         "float32": (3.4028234663852886e38, 2.0 ** -149), "float64": (1.7976931348623157e308,
                                                                     5e-324)}


@dataclass(frozen=True)
class NonFinite:
    """One non-finite element: tensor[batch, position, feature] = value."""

    tensor: str  # one of TENSORS
    batch: int
    position: int  # a query position (query) or a key position (key, value)
    feature: int
    value: str  # one of VALUES

    @property
    def number(self) -> float:
        return VALUES[self.value]


def scale(r, sec: Mapping[str, Any]) -> float:
    """inputs.scale: a finite number > 0; default 1 (inputs as drawn)."""
    value = sec.get("scale", 1.0)
    x = as_float(value)
    if not (math.isfinite(x) and x > 0):
        raise r.fail("inputs.scale", "must be a finite number > 0 (it multiplies query, key "
                     f"and value before rounding to the case dtype), got {short(value)}")
    return x


def _value_name(value: Any) -> str | None:
    """'nan', 'inf' or '-inf' from a string or YAML's .nan / .inf / -.inf."""
    if isinstance(value, str):
        return value.strip().lower() if value.strip().lower() in VALUES else None
    if isinstance(value, float) and not math.isfinite(value):
        return "nan" if math.isnan(value) else "inf" if value > 0 else "-inf"
    return None


def _entry(r, item: Any, dotted: str, limits: Mapping[str, tuple[int, int, int]],
           self_attention: bool) -> NonFinite:
    if not isinstance(item, Mapping) or set(item) != _FIELDS:
        raise r.fail(dotted, "must be {tensor: query|key|value, batch: i, position: t, "
                     f"feature: f, value: nan|inf|-inf}}, got {short(item)}")
    tensor = item["tensor"]
    if tensor not in TENSORS:
        raise r.fail(f"{dotted}.tensor", f"must be one of {list(TENSORS)}, got {short(tensor)}")
    if self_attention and tensor != "query":
        raise r.fail(f"{dotted}.tensor", "with inputs.self_attention one tensor serves as "
                     "query, key and value: name it 'query'")
    for name, limit in zip(("batch", "position", "feature"), limits[tensor]):
        v = item[name]
        if type(v) is not int or not 0 <= v < limit:
            raise r.fail(f"{dotted}.{name}", f"must be an integer in 0..{limit - 1} (the "
                         f"{tensor}'s {name} size is {limit}), got {short(v)}")
    value = _value_name(item["value"])
    if value is None:
        raise r.fail(f"{dotted}.value", f"must be one of {list(VALUES)}, got "
                     f"{short(item['value'])}")
    return NonFinite(tensor, item["batch"], item["position"], item["feature"], value)


def nonfinite(r, sec: Mapping[str, Any], att, batch: int, query_len: int, key_len: int,
              self_attention: bool) -> tuple[NonFinite, ...]:
    """inputs.nonfinite: at most MAX_NONFINITE entries, each inside the tensor's sizes."""
    items = sec.get("nonfinite")
    if items is None:
        return ()
    if not isinstance(items, list) or len(items) > MAX_NONFINITE:
        raise r.fail("inputs.nonfinite", f"must be a list of at most {MAX_NONFINITE} "
                     f"entries, got {short(items)}")
    limits = {"query": (batch, query_len, att.query_features),
              "key": (batch, key_len, att.key_features),
              "value": (batch, key_len, att.value_features)}
    entries = [_entry(r, item, f"inputs.nonfinite[{n}]", limits, self_attention)
               for n, item in enumerate(items)]
    return tuple(dict.fromkeys(entries))  # duplicates once, order kept


def read(r, sec: Mapping[str, Any], att, inputs):
    """`inputs` with scale and nonfinite read from its section `sec`."""
    from dataclasses import replace

    for dotted, value in (("attention.scale", att.scale), ("inputs.scale", scale(r, sec))):
        _fits(r, dotted, value, inputs.dtype)
    return replace(inputs, scale=scale(r, sec), nonfinite=nonfinite(
        r, sec, att, inputs.batch, inputs.query_len, inputs.key_len, inputs.self_attention))


def _fits(r, dotted: str, value: float | None, dtype: str) -> None:
    """A scale the case dtype can hold: neither overflowing to inf nor underflowing to 0."""
    high, low = RANGE[dtype]
    if value is not None and not low <= value <= high:
        raise r.fail(dotted, f"{value:g} cannot be held in {dtype} (finite positive values "
                     f"lie in {low:g}..{high:g}); it would become "
                     f"{'inf' if value > high else '0'} in the layer")


def extreme(case) -> bool:
    """The case scales its inputs or places non-finite values in them."""
    return case.inputs.scale != 1.0 or bool(case.inputs.nonfinite)


def checked(r, expect, inputs):
    """`expect`, once a declared nonfinite_input behaviour is known to have extreme inputs."""
    if "nonfinite_input" in expect.behaviours and inputs.scale == 1 and not inputs.nonfinite:
        raise r.fail("expect.behaviours.nonfinite_input", "declares a non-finite input "
                     "behaviour, but the case sets neither inputs.scale nor inputs.nonfinite")
    return expect
