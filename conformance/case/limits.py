"""The element budgets of a case: what the numerical comparison may hold (Budget, read
from the environment) and the loader's limit on absurd sizes.

No imports from the rest of the package at import time, so case/model.py re-exports it.
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Mapping

# Element budgets (counted arithmetically, see element_counts): the case's
# weights, and every activation the float64 reference holds at once.
DEFAULT_MAX_WEIGHT_ELEMENTS = 50_000_000
DEFAULT_MAX_ACTIVATION_ELEMENTS = 50_000_000
WEIGHT_ENV = "CONFORMANCE_MAX_WEIGHT_ELEMENTS"
ACTIVATION_ENV = "CONFORMANCE_MAX_ACTIVATION_ELEMENTS"
# Those budgets bound the numerical comparison (counting.py: a case over them
# loads and gets a count-only row); the loader refuses only absurd sizes, far above.
LOAD_LIMIT_ELEMENTS = 10**12
LOAD_ENV = "CONFORMANCE_MAX_LOAD_ELEMENTS"  # raises (or lowers) that limit


def load_limit(environ: Mapping[str, str] | None = None) -> int:
    """The loader's limit: LOAD_LIMIT_ELEMENTS unless CONFORMANCE_MAX_LOAD_ELEMENTS says
    (a whole number of elements; `1e12` and `10^12` read as written)."""
    from conformance.settings import positive_number

    return int(positive_number(environ, LOAD_ENV, LOAD_LIMIT_ELEMENTS, "elements",
                               integer=True))

def load_budget() -> "Budget":
    """The loader's limit (absurd sizes only: LOAD_ENV raises it), read from the
    environment at each load, so a bad value is a named error there, not at import."""
    limit = load_limit()
    return Budget(limit, limit)


@dataclass(frozen=True)
class Budget:
    """Most elements a case may ask for; refused over it, before allocating."""

    weights: int = DEFAULT_MAX_WEIGHT_ELEMENTS
    activations: int = DEFAULT_MAX_ACTIVATION_ELEMENTS

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> "Budget":
        env = os.environ if environ is None else environ
        values = []
        for name, default in ((WEIGHT_ENV, cls.weights), (ACTIVATION_ENV, cls.activations)):
            text = env.get(name, "").strip().replace("_", "")
            try:
                value = int(text) if text else default
            except ValueError:
                value = -1
            if value < 1:
                raise ValueError(f"{name}={str(env.get(name))[:80]!r}: must be a positive integer "
                                 "(a count of elements)")
            values.append(value)
        return cls(*values)
