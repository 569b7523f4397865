"""index.html's case-view figures: a row's figures as data, and the words around them
(report.js writes the same words: figuresText), so a cell carries its figures and not the
words "max abs", "parameters", "(= formula)" again."""
from __future__ import annotations

import math
import numbers

from conformance.report.base import fmt


def _number(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def figures_data(r) -> list:
    """A row's figures in the case view as data: [max abs, rel, weights max abs, parameters,
    formula, fully masked row] (each "" where the row has none; empty trailing ones left
    out); report.js writes them as figures_text does (its tolerance and dtype: the case's,
    shown once).  The words around the figures are the script's, not repeated per cell."""
    def count(v):  # a JSON number as the text shows it (an int, else a float or its word)
        return int(v) if isinstance(v, numbers.Integral) else (
            float(v) if _number(v) else str(v))

    error, counted = _number(r["max_abs_error"]), _number(r["parameters"])
    out = [fmt(r["max_abs_error"]) if error else "", fmt(r["max_rel_error"]) if error else "",
           fmt(r["weights_max_abs_error"]) if _number(r["weights_max_abs_error"]) else "",
           count(r["parameters"]) if counted else "",
           count(r["parameters_formula"]) if counted else "",
           str(r["fully_masked_row"] or "")]
    while out and out[-1] == "":
        out.pop()
    return out


def figures_text(figures: list) -> str:
    """figures_data as the case view shows it (report.js: figuresText, the same words)."""
    mae, rel, weights, n, formula, masked = [*figures, *[""] * (6 - len(figures))]
    parts = [f"max abs {mae}, rel {rel}"] if mae != "" else []
    parts += [f"weights max abs {weights}"] if weights != "" else []
    if n != "":
        parts.append(f"parameters {n} ({'= formula' if n == formula else f'formula {formula}'})")
    return "\n".join(parts + ([f"fully masked row: {masked}"] if masked != "" else []))
