"""Building cases in tests without files."""
from __future__ import annotations

from conformance.case.loader import parse_case


def make_case(**sections):
    """parse_case from keyword sections, e.g. make_case(attention={...}, mask={...})."""
    raw = {"id": sections.pop("id", "t"), **sections}
    raw.setdefault("attention", {"num_heads": 2, "query_features": 8})
    return parse_case(raw, "<test>")
