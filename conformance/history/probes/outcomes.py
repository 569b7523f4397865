"""The outcome words every probe shares (no NumPy: the toy package's env has none)."""
from __future__ import annotations

ABSENT = "api_absent"  # the release has no such argument or operator (not a convention)


class Absent(Exception):
    """Raised by a probe when the API it needs does not exist in this release."""
