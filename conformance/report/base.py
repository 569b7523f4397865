"""What every report section shares: the Section, figure rounding, the frames.

Two frames are built from the rows of a run:
- the *results frame*: one `Row.as_dict()` record per row, figures rounded to
  3 significant digits; results.json and results.csv are written from it;
- the *section frame*: the same rows with typed columns, which sections select
  by (never by runner name):
  `outcome` (an Outcome), `failures` (a tuple of Failure), `graphs`,
  `output_digest` (the Row's typed fields), and `system`, `path`, `backend`
  (the descriptors of the row's runner object).
"""
from __future__ import annotations

from dataclasses import dataclass

FLOATS = ("max_abs_error", "max_rel_error", "weights_max_abs_error", "weights_max_rel_error")
DESCRIPTORS = ("system", "path", "backend")


def sig(x: float | None, digits: int = 3) -> float | None:
    """A figure rounded to `digits` significant digits (None stays None)."""
    return None if x is None else float(f"{x:.{digits - 1}e}")


def fmt(x: float | None) -> str:
    """A figure as a table cell: '' when missing, '0', else 3 significant digits."""
    if x is None:
        return ""
    return "0" if x == 0 else f"{x:.2e}"


@dataclass(frozen=True)
class Section:
    title: str
    intro: str
    table: "object"  # pandas.DataFrame


def results_frame(rows):
    """The results-file records, figures rounded (object dtype: None stays None)."""
    import pandas as pd

    frame = pd.DataFrame([r.as_dict() for r in rows], dtype=object)
    for col in FLOATS:
        if col in frame:
            frame[col] = pd.Series([sig(v) for v in frame[col]], index=frame.index,
                                   dtype=object)
    return frame


def section_frame(results, rows, runners):
    """The results frame with the typed columns sections select by."""
    import pandas as pd

    by_name = {r.name: r for r in runners}
    typed = {
        "outcome": [r.outcome for r in rows],
        "failures": [r.failures for r in rows],
        "graphs": [r.graphs for r in rows],
        "output_digest": [r.output_digest for r in rows],
        **{d: [getattr(by_name.get(r.runner), d, "") for r in rows] for d in DESCRIPTORS},
    }
    frame = results.copy()
    for col, values in typed.items():
        frame[col] = pd.Series(values, index=frame.index, dtype=object)
    return frame


def pivot(frame, column: str, cases, runners):
    """case x runner table of `column`, in case-file and runner order."""
    table = frame.pivot(index="case", columns="runner", values=column)
    names = [r.name for r in runners]
    return table.reindex(index=[c.id for c in cases if c.id in table.index],
                         columns=[n for n in names if n in table.columns]).fillna("")


def section_table(records, index):
    """A listing table from records, or None when there are none."""
    import pandas as pd

    return pd.DataFrame(records, dtype=object).set_index(index) if records else None
