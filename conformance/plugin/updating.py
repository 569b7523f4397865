"""`--update-expectations` for matrix items: an observed fully-masked-row or
non-finite-input behaviour that the runner's file does not declare (or declares
otherwise) is written into `expectations/<runner>.yaml` for review, and the item is
judged again against the file as written.  What a case pins itself is the case's:
it is never written over.  (The conventions items write their cells: pinning.update.)
"""
from __future__ import annotations

from conformance.case.expectations import Expectations, declared
from conformance.compare.verdict import FailureKind
from conformance.run.evaluate import Row, evaluate


def answers(case, runner: str, row: Row, expected: Expectations | None) -> dict:
    """(keys path -> observed word) for each behaviour the runner's file should state."""
    if not row.failed(FailureKind.BEHAVIOUR):
        return {}
    d, pins = declared(case, runner, expected), case.expect.behaviours
    out = {}
    if row.fully_masked_row and row.fully_masked_row != d.fully_masked_row \
            and runner not in pins.get("fully_masked_row", {}):
        out[("behaviours", "fully_masked_row")] = row.fully_masked_row
    if row.nonfinite_input and row.nonfinite_input != d.nonfinite_input \
            and runner not in pins.get("nonfinite_input", {}):
        out[("behaviours", "nonfinite_input", case.id)] = row.nonfinite_input
    return out


def record_answers(directory, case, runner, row: Row, expected: Expectations | None
                   ) -> tuple[Row, Expectations | None]:
    """Write the row's undeclared answers into the runner's file under `directory`; the
    row judged again and the file as read back (None, and the row, when nothing changed)."""
    entries = answers(case, runner.name, row, expected)
    if not entries:
        return row, None
    from conformance.conventions.expectations import load_file, path_for, update

    path = path_for(directory, runner.name)
    update(path, runner.name, entries)
    fresh = load_file(path, runner.name)
    return evaluate(case, runner, fresh), fresh
