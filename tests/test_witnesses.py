"""Two witnesses per ledger cell (issue #18 part 4): where a probe and this run's rows both
read an axis, both readings are kept; different words make a `conflict` cell that names
both pieces of evidence, and the committed ledger may hold none."""
from __future__ import annotations

import json

from conformance.conventions.axes import Convention
from conformance.conventions.ledger import CONFLICT, build, conflicts
from conformance.paths import REPORTS_DIR
from conformance.report.ledger import render_axis_page, render_json, render_markdown
from conformance.compare.verdict import Outcome

from .test_ledger import CASES, fake, row

RUNNER = fake("fake.w")
ROWS = [row("masked", "fake.w", Outcome.BEHAVIOUR, fully_masked_row="zeros",
            weights_returned="per_head"),
        row("f64", "fake.w", dtype="float64", max_abs_error=2e-16, atol=1e-12,
            weight_shapes={"in_proj_weight": [96, 32]})]


def ledger_with(*probes: Convention):
    return build(ROWS, {"fake.w": list(probes)}, [RUNNER], CASES)


def test_a_planted_conflict_names_both_witnesses_and_is_found():
    planted = Convention("fully_masked_row", "nan", "probe-masked: row (0, 1) holds NaN")
    ledger = ledger_with(planted)
    cell = ledger.cell("fake.w", "fully_masked_row")
    assert cell.value == CONFLICT and cell.witnesses == 2
    assert "'nan' (probe[fake.w]: probe-masked: row (0, 1) holds NaN)" in cell.evidence
    assert "the rows read 'zeros' (masked[fake.w]: output zeros" in cell.evidence
    assert conflicts(ledger) == [cell]
    assert "`conflict`: 1 cell(s)" in render_markdown(ledger)
    data = json.loads(render_json(ledger))
    assert [c["value"] for c in data["cells"] if c.get("witnesses", 1) == 2] == [CONFLICT]


def test_agreeing_witnesses_keep_the_probe_and_quote_the_rows():
    ledger = ledger_with(Convention("fully_masked_row", "zeros", "probe-masked: zeros 0.0"),
                         Convention("float64_compute", "float64", "probe-f64: 1e-16"),
                         Convention("softmax_scale", "inv_sqrt_head_dim", "probe-scale: 0.0"))
    assert not conflicts(ledger)
    cell = ledger.cell("fake.w", "fully_masked_row")
    assert (cell.value, cell.witnesses, cell.source) == ("zeros", 2, "probe")
    assert cell.second.startswith("zeros: masked[fake.w]: output zeros")
    f64 = ledger.cell("fake.w", "float64_compute")
    assert f64.witnesses == 2 and f64.second.startswith("float64: f64[fake.w]")
    assert ledger.cell("fake.w", "softmax_scale").witnesses == 1  # no row reads the scale
    assert ledger.cell("fake.w", "dropout").witnesses == 0  # nothing does
    page = render_axis_page(ledger, next(a for a in ledger.axes if a.id == "fully_masked_row"))
    assert "and the rows agree: zeros: masked[fake.w]" in page


def test_a_probe_that_settled_nothing_leaves_the_rows_cell():
    """A probe not asked (a system that takes no mask, say) is no witness against the rows:
    the rows' word stands, the probe's reason beside it, and no conflict."""
    ledger = ledger_with(Convention("fully_masked_row", "not_probed", "not asked: no mask"))
    cell = ledger.cell("fake.w", "fully_masked_row")
    assert (cell.value, cell.witnesses) == ("zeros", 1) and not conflicts(ledger)
    assert "not asked: no mask" in cell.second
    planted = ledger_with(Convention("fully_masked_row", "nan", "probe-masked: NaN"))
    assert planted.cell("fake.w", "fully_masked_row").value == CONFLICT  # a word still counts


def test_free_text_axes_keep_both_texts_without_judging_them():
    probe = Convention("weight_layout", "in_proj_weight (3E, E) out x in", "probe-layout")
    cell = ledger_with(probe).cell("fake.w", "weight_layout")
    assert cell.value == probe.value and cell.witnesses == 2 and "in_proj_weight" in cell.second


def test_the_committed_ledger_holds_no_conflict():
    path = REPORTS_DIR / "conventions.json"
    data = json.loads(path.read_text())
    split = [(c["system"], c["axis"], c["evidence"][:300]) for c in data["cells"]
             if c["value"] == CONFLICT]
    assert not split, f"probe and rows disagree: {split}"


def test_a_harness_limit_is_not_counted_as_the_system_s_refusal():
    from conformance.contract.runner import harness_limit
    from conformance.conventions.ledger import derive

    rows = [row("a", "fake.w", Outcome.NOT_EXPRESSIBLE, reason="the system rejects float64"),
            row("b", "fake.w", Outcome.NOT_EXPRESSIBLE,
                reason=harness_limit("this graph always adds the biases")),
            row("c", "fake.w")]
    (cell,) = [c for c in derive(rows, [RUNNER]) if c.axis == "refusals"]
    assert cell.value == "1 kind"
    assert "2 of 3" not in cell.evidence and "1 of 3 case(s) not expressible" in cell.evidence
    assert "1 harness limit(s), not the system's: b[fake.w]: this graph always adds" \
        in cell.evidence


def test_a_row_reading_another_question_is_quoted_not_judged():
    """The rows' own call (need_weights=False) is not the default call the probe reads, and
    a declared known mismatch explains a float64 error: neither makes a conflict."""
    from conformance.compare.verdict import Failure, FailureKind

    rows = [row("f64", "fake.w", Outcome.MISMATCH, dtype="float64", max_abs_error=7e-8,
                atol=1e-12, known_mismatch="the scale is rounded through float32",
                failures=(Failure(FailureKind.VALUES, "output: 7e-8"),))]
    ledger = build(rows, {"fake.w": [
        Convention("returned_weights", "head_averaged", "probe-weights: default call"),
        Convention("float64_compute", "float64", "probe-f64: 1e-16 at the split scale")]},
        [RUNNER], CASES)
    assert not conflicts(ledger)
    for axis in ("returned_weights", "float64_compute"):
        cell = ledger.cell("fake.w", axis)
        assert cell.witnesses == 1 and cell.second.startswith("(reads another question) ")
    unexplained = [replace_known(rows[0])]
    split = build(unexplained, {"fake.w": [
        Convention("float64_compute", "float64", "probe-f64: 1e-16")]}, [RUNNER], CASES)
    assert [c.axis for c in conflicts(split)] == ["float64_compute"]


def replace_known(r):
    from dataclasses import replace

    return replace(r, known_mismatch="")


def test_float64_reads_the_arithmetic_under_every_reading_of_the_scale():
    """onnxruntime scales Q and K each by float32(sqrt(float32(1/sqrt(d)))): an output exact
    at that split scale is float64 arithmetic (the ledger's float64_compute, scores.py over
    float64.py's three readings); one that is float32 anywhere is not."""
    import numpy as np

    from conformance.contract.runner import Observation, Runner, Translation
    from conformance.conventions.probes.float64 import split_scale
    from conformance.conventions.probes.scores import float64_compute_cell
    from conformance.oracle.reference import attention

    class Planted(Runner):
        name = "planted"

        def __init__(self, output):
            self.output = output

        def translate(self, case):
            return Translation("planted call", None)

        def run(self, case, translation, data):
            return Observation(output=self.output(case))

    assert split_scale(16) == 0.25 and split_scale(3) != 1 / np.sqrt(3)
    split = float64_compute_cell(Planted(lambda c: attention(c, scale=split_scale(
        c.attention.qk_head_dim)).output))
    assert split.value == "float64" and "split float32 scale" in split.evidence
    low = float64_compute_cell(Planted(
        lambda c: attention(c).output.astype(np.float32).astype(np.float64)))
    assert low.value == "below_float64", low.evidence


def _fill_case(fill, dtype="float16"):
    from types import SimpleNamespace

    return SimpleNamespace(mask=SimpleNamespace(fill=fill), inputs=SimpleNamespace(dtype=dtype))


def test_fully_masked_rows_that_differ_by_condition_read_depends_and_keep_every_one():
    """Nothing measured is dropped: a boolean mask's uniform rows and an additive -1e4
    mask's finite_other rows make a `depends` cell naming both (jax.dpa's case); a probe
    reading one of the conditions' words agrees with it, any other word is a conflict."""
    from conformance.conventions.derived import _fully_masked
    from conformance.conventions.ledger import witnessed, from_probe

    rows = [row("bool-mask", "fake.w", Outcome.BEHAVIOUR, fully_masked_row="uniform"),
            row("fill-1e4", "fake.w", Outcome.BEHAVIOUR, fully_masked_row="finite_other",
                extras={"mask_passed": "additive -1e4 mask in float16"}),
            row("fill-1e9", "fake.w", Outcome.BEHAVIOUR, fully_masked_row="nan",
                extras={"mask_passed": "additive -1e9 mask in float16"})]
    cases = {"bool-mask": _fill_case(None), "fill-1e4": _fill_case("-1e4"),
             "fill-1e9": _fill_case("-1e9")}
    cell = _fully_masked("fake.w", rows, cases)
    assert cell.value == "depends" and set(cell.words) == {"uniform", "finite_other", "nan"}
    for text in ("boolean mask in float32 -> uniform (bool-mask[fake.w])",
                 "additive -1e4 mask in float16 -> finite_other (fill-1e4[fake.w])",
                 "additive -1e9 mask in float16 -> nan (fill-1e9[fake.w])"):
        assert text in cell.evidence, cell.evidence
    agree = witnessed(from_probe("fake.w", Convention("fully_masked_row", "uniform", "p")),
                      cell)
    assert agree.value == "depends" and agree.witnesses == 2 and "the probe: uniform" in \
        agree.evidence
    planted = witnessed(from_probe("fake.w", Convention("fully_masked_row", "zeros", "p")),
                        cell)
    assert planted.value == CONFLICT


def test_one_word_for_every_condition_is_that_word():
    from conformance.conventions.derived import _fully_masked

    rows = [row("bool-mask", "fake.w", Outcome.BEHAVIOUR, fully_masked_row="nan"),
            row("fill-1e9", "fake.w", Outcome.BEHAVIOUR, fully_masked_row="nan",
                extras={"mask_passed": "additive -1e9 mask in float16"})]
    cell = _fully_masked("fake.w", rows, {"bool-mask": _fill_case(None),
                                          "fill-1e9": _fill_case("-1e9")})
    assert cell.value == "nan" and "additive -1e9 mask in float16" in cell.evidence


def test_a_probes_own_runner_name_is_said_once():
    """from_probe labels the evidence probe[<runner>]: a probe's own opening '<runner>, ' or
    '<runner>: ' is dropped (it is the label), any other text is kept whole."""
    from conformance.conventions.ledger import from_probe

    said = from_probe("fake.w", Convention("float_mask", "added", "fake.w, probe_case x: 1e-7"))
    assert said.evidence == "probe[fake.w]: probe_case x: 1e-7"
    assert from_probe("fake.w", Convention("float_mask", "added", "fake.w: schema")
                      ).evidence == "probe[fake.w]: schema"
    other = from_probe("fake.w", Convention("float_mask", "added", "fake.wx, 3"))
    assert other.evidence == "probe[fake.w]: fake.wx, 3"
