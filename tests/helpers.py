"""Building cases in tests without files."""
from __future__ import annotations

from conformance.case.loader import parse_case


def make_case(**sections):
    """parse_case from keyword sections, e.g. make_case(attention={...}, mask={...})."""
    raw = {"id": sections.pop("id", "t"), **sections}
    raw.setdefault("attention", {"num_heads": 2, "query_features": 8})
    return parse_case(raw, "<test>")


# module -> the pyproject extra that installs it
EXTRA = {"torch": "torch", "flax": "flax", "jax": "flax", "onnx": "onnx",
         "onnxruntime": "onnx", "matplotlib": "dev"}


def require(*modules: str, reason: str = "") -> None:
    """Skip the calling test module when a module is not installed, without importing it:
    pytest.importorskip imports it at collection (torch and jax cost about 3 s each, in a
    process whose runners run in workers and never need them)."""
    import importlib.util

    import pytest

    missing = [m for m in modules if importlib.util.find_spec(m) is None]
    if missing:
        extras = sorted({EXTRA.get(m, m) for m in missing})
        pytest.skip(reason or f"{', '.join(missing)} not installed (pip install -e "
                              f"'.[{','.join(extras)}]')", allow_module_level=True)

