"""check-reports across CPUs, the cases measured after part 1 of issue #18: the sse4.2 run of
benchmarks/portability.py against the committed (AVX-512) reports named 80 changes from
texts and figures added later.  Each test plants the CPU-moved variant measured there and
shows check-reports ignores it, then plants a real change (an outcome, a word, a failure's
tensor) and shows it is still named."""
from __future__ import annotations

import json

from conformance.report import differences
from conformance.report.drift import compare_ledger

from .report_rows import replace
from .test_drift import ledger, rows, write

# onnx.attention-op.ort's float64_compute: the matrix row, quoted as the second witness
SECOND = ("below_float64: dtype-float64[k.one]: max abs error {} against the float64 oracle "
          "(atol 1e-12, rtol 1e-12); known: the split float32 scale")


def _with_second(second: str, value: str = "refused"):
    led = ledger()
    cells = [replace(c, witnesses=2, second=second) if c.axis == "unbatched_input" else c
             for c in led.cells]
    return type(led)(led.systems, cells, axes=led.axes)


def test_a_second_witness_quoting_a_moved_error_figure_holds(tmp_path):
    """conventions.json's second_witness quotes the row's max abs error (9 changes in the
    sse4.2 run: 7.17e-08 -> 7.15e-08 and the like)."""
    base = write(tmp_path, "here", rows(), _with_second(SECOND.format("7.17e-08")))
    moved = write(tmp_path, "there", rows(), _with_second(SECOND.format("7.15e-08")))
    assert (base / "conventions.json").read_text() != (moved / "conventions.json").read_text()
    assert differences(base, moved) == []


def test_a_second_witness_word_or_count_of_witnesses_is_still_named():
    old = _with_second(SECOND.format("7.17e-08")).as_dict()
    worded = _with_second(SECOND.format("7.17e-08").replace("below_float64", "float64"))
    [change] = compare_ledger(json.dumps(old), json.dumps(worded.as_dict()))
    assert (change.runner, change.field) == ("unbatched_input", "second_witness")
    one = json.loads(json.dumps(old))
    one["cells"][0]["witnesses"] = 1
    [change] = compare_ledger(json.dumps(old), json.dumps(one))
    assert (change.field, change.old, change.new) == ("witnesses", 2, 1)
