"""The probe of the bisect test's toy package `toyattn` (tests/test_version_drift.py).

`toyattn.FULLY_MASKED` is the toy's convention for a fully masked row; a release
without `toyattn.masked_row` is `api_absent`.
"""
from __future__ import annotations

from outcomes import Absent

PACKAGES = ("toyattn",)
IMPORTS = ("toyattn",)


def _fully_masked():
    import toyattn
    if not hasattr(toyattn, "masked_row"):
        raise Absent("toyattn.masked_row does not exist in this release")
    return toyattn.masked_row(), f"toyattn.masked_row() = {toyattn.masked_row()!r}"


def probes(library):
    return {"fully_masked_row": _fully_masked}
