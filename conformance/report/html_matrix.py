"""index.html's case x runner matrix: a static header, and the body as data that the
page's own script (assets/report.js) builds into one <tr> per case and one <td> per runner.

A static <td> per cell cost about 70 bytes; cases x runners grows with both, and with
~110 runners the page passed 1 MB.  In the data a cell costs a few bytes: an index into
the page's string table (its outcome word) and, where it shows figures, the two views'
texts.  The cell's hover text is the case view's reason (already in the data), cut where
the script draws the cell.
"""
from __future__ import annotations

from conformance.report.escaping import html_text

TITLE_LIMIT = 80  # characters of a cell's hover text (the case view has the whole reason)
# outcomes whose cell shows only its colour and a word from the CSS (::after)
STABLE_REASONS = ("not_expressible", "skipped")


def e(value) -> str:
    return html_text(value)


def figures_views(figures: list) -> tuple[str, str]:
    """The two views a cell shows when they are its case-view figures' own (html.py
    figures_data: max abs first, the parameter count fourth): the usual cell, which then
    holds only its word."""
    count = figures[3] if len(figures) > 3 else ""
    return (figures[0] if figures else "",
            str(count) if isinstance(count, int) and not isinstance(count, bool) else
            ("" if count == "" else "\0"))  # a float count: its text is Python's, kept


def matrix_cell(word_index: int, word: str, texts: tuple[str, str],
                figures: list | None = None) -> int | list:
    """One matrix cell as the data holds it: the outcome word's index into the string
    table alone (a refusal or a skip: the CSS says its word), [index] when both views
    are its case-view figures' (figures_views), else [index, error view] or [index, error
    view, parameter view] when the two views differ."""
    if word in STABLE_REASONS:
        return word_index
    err, params = texts
    if figures is not None and err != "" and figures_views(figures) == texts:
        return [word_index]
    return [word_index, err] if params == err else [word_index, err, params]


def matrix_rows(case_ids, names, cell_of) -> list[list]:
    """Per case, in case order (data.cases's): its cells in column order, each
    cell_of(case, runner) (a matrix_cell) or None where the case has no row for that
    runner (an empty cell).  A row's tags are its case's (data.cases[i].tags)."""
    return [[cell_of(cid, n) for n in names] for cid in case_ids]


def expand_matrix_cell(cell, strings: list[str], figures: list | None = None) -> dict | None:
    """A data cell as what the page draws: {"word", "err", "params"} (for tests and tools;
    report.js does the same; `figures`: its case-view cell's figures_data, for [index]),
    None for an empty cell."""
    if cell is None:
        return None
    if isinstance(cell, int):
        return {"word": strings[cell], "err": "", "params": ""}
    if len(cell) == 1:
        err, params = figures_views(figures or [])
        return {"word": strings[cell[0]], "err": err, "params": params}
    word, err, *rest = cell
    return {"word": strings[word], "err": err, "params": rest[0] if rest else err}


def matrix_table(names, framework_of) -> str:
    """The table's header (one th per runner, its name and framework as attributes: the
    column filters read them) and an empty body the script fills from the data."""
    head = "".join(f'<th class="runner" data-runner="{e(n)}" data-framework='
                   f'"{e(framework_of[n])}">{e(n)}</th>' for n in names)
    return (f'<table id="matrix"><thead><tr><th>case</th>{head}</tr></thead>'
            "<tbody></tbody></table>"
            '<p id="matrix-count"></p><section id="case-view" hidden></section>')
