"""Resolution before naming, and artifacts judged at the precision they store: checked
against toy float32 systems written here (not the probes' simulations).

- a float16 artifact (weights stored as float16, Keras's huge fill saturated to float16's
  -65504) reads float16_min and a uniform fully masked row; read at float32 without its
  weights' type, the same row is finite_other (the defect the stored precision rules out);
- a tie of fills no input parts is named as a tie, never by the nearest; a number the
  program holds names it; one constant has one name (Keras's -2.3726710e38 and JAX's
  -2.3819763e38 are both -0.7*finfo_max);
- probing.closest and the matrix's fully-masked-row classification follow the same rules.
"""
from __future__ import annotations

from dataclasses import replace

import numpy as np

from conformance.case.loader import load_file
from conformance.compare.verdict import judge
from conformance.contract.runner import (
    NotExpressible, Observation, Runner, Translation)
from conformance.conventions.probes.fill_names import number_word
from conformance.conventions.probes.masks import mask_fill_cell
from conformance.conventions.probes.probing import closest
from conformance.conventions.probes.resolution import alike
from conformance.conventions.probes.rows import fully_masked_row_cell
from conformance.oracle.canonical import case_data
from conformance.oracle.reference import attention
from conformance.oracle.stored import as_stored
from conformance.paths import ROOT

KERAS_FILL = np.float32(3.38953e38 * -0.7)  # keras/src/backend/tensorflow/nn.py
F16_MIN = float(np.finfo(np.float16).min)


def _saturated16(x: float) -> float:
    """A float32 number converted to float16 by clamping to its range (not to -inf)."""
    return float(np.float16(np.clip(x, F16_MIN, -F16_MIN)))


class Toy(Runner):
    """Attention in float32 NumPy, the fill written into masked scores (np.where).
    `weights16`: the weights rounded to float16 first (a float16 weight conversion);
    `reports`: the program's facts it gives the ledger (held_scalars, weights_dtype);
    `only_scales`: the input scales it runs (others raise, as a kernel refusing them)."""

    name, framework, system = "toy.artifact", "toy", "toy"

    def __init__(self, fill: float, weights16: bool = False, reports: bool = True,
                 only_scales: tuple[float, ...] = ()):
        super().__init__()
        self.fill, self.weights16, self.reports = np.float32(fill), weights16, reports
        self.only_scales = only_scales

    def translate(self, case):
        return Translation("toy()") if case.inputs.key_len else NotExpressible("no keys")

    def run(self, case, translation, data):
        if self.only_scales and case.inputs.scale not in self.only_scales:
            raise ValueError(f"inputs x {case.inputs.scale:g} are out of this kernel's range")
        w, x, f = data.weights, data.inputs, np.float32
        t = np.float16 if self.weights16 else f

        def cast(a):
            return a.astype(t).astype(f)

        def proj(inp, wt, b):
            y = np.einsum("ble,hed->bhld", inp.astype(f), cast(wt))
            return y if b is None else y + cast(b)[None, :, None, :]

        q, k, v = proj(x.query, w.wq, w.bq), proj(x.key, w.wk, w.bk), proj(x.value, w.wv, w.bv)
        s = np.einsum("bhtd,bhsd->bhts", q, k) / f(np.sqrt(q.shape[-1]))
        allowed = np.ones(s.shape, bool) if x.allowed is None else np.broadcast_to(
            x.allowed[:, None], s.shape)
        s = np.where(allowed, s, self.fill)
        with np.errstate(all="ignore"):
            e = np.exp(s - s.max(-1, keepdims=True))
            p = e / e.sum(-1, keepdims=True)
        out = np.einsum("bhtd,hde->bte", p @ v, cast(w.wo))
        out = out if w.bo is None else out + cast(w.bo)
        facts = {"held_scalars": (float(self.fill), 0.5),
                 "weights_dtype": "float16" if self.weights16 else "float32"}
        return Observation(out.astype(np.float64), **(facts if self.reports else {}))


def _float16_artifact(reports: bool = True) -> Toy:
    return Toy(_saturated16(float(KERAS_FILL)), weights16=True, reports=reports)


def test_a_float16_artifact_reads_its_saturated_fill_and_a_uniform_row():
    toy = _float16_artifact()
    fill = mask_fill_cell(toy)
    assert fill.value == "float16_min", fill.evidence
    assert "as the program stores them, float16" in fill.evidence
    row = fully_masked_row_cell(toy)
    assert row.value == "uniform", row.evidence


def test_read_without_its_weights_type_the_float16_row_is_finite_other():
    """The planted defect: the same artifact judged at float32 against the float32 weights
    (it does not say it stores float16) is off by its weights' rounding."""
    row = fully_masked_row_cell(_float16_artifact(reports=False))
    assert row.value == "finite_other", row.evidence


def test_minus_1e4_parts_from_float16_min_by_larger_scores():
    cell = mask_fill_cell(Toy(-1e4))
    assert cell.value == "-1e4" and "x 300" in cell.evidence, cell.evidence


def test_a_tie_no_input_parts_is_named_as_a_tie_not_the_nearest():
    """-1e4 and -65504 written in are alike at inputs x 1e5 and x 1; the kernel refuses
    every larger score, so no input parts them: not_probed, both named."""
    toy = Toy(-1e4, reports=False, only_scales=(1e5, 1.0))
    cell = mask_fill_cell(toy)
    assert cell.value == "not_probed", cell.evidence
    assert "float16_min, -1e4 alike here at every input the probe tried" in cell.evidence
    held = Toy(-1e4, only_scales=(1e5, 1.0))  # the program holds -1e4: that names it
    named = mask_fill_cell(held)
    assert named.value == "-1e4" and "the number the program holds, -10000" in named.evidence


def test_one_constant_one_name_whichever_program_holds_it():
    """Keras's -0.7 * 3.38953e38, held by its program, is named -0.7*finfo_max like JAX's
    -0.7 * finfo(float32).max; a program holding finfo.min is finfo_min even where the
    documentation says otherwise; a program that holds none of them says huge_finite."""
    keras = mask_fill_cell(Toy(float(KERAS_FILL)))
    assert keras.value == "-0.7*finfo_max", keras.evidence
    assert "the number the program holds, -2.372671e+38" in keras.evidence
    fmin = Toy(float(np.finfo(np.float32).min))
    fmin.documented_fill = ("-0.7*finfo_max", "https://example.org/source")
    assert mask_fill_cell(fmin).value == "finfo_min"
    assert mask_fill_cell(Toy(float(KERAS_FILL), reports=False)).value == "huge_finite"


def test_numbers_name_one_word_each():
    assert number_word(float(KERAS_FILL)) == "-0.7*finfo_max"
    assert number_word(float(np.float32(-0.7 * np.finfo(np.float32).max))) == "-0.7*finfo_max"
    assert number_word(float(np.finfo(np.float32).min)) == "finfo_min"
    assert number_word(F16_MIN) == "float16_min" and number_word(-1e4) == "-1e4"
    assert number_word(-np.inf) == "-inf" and number_word(0.5) is None
    assert number_word(-5e4) is None  # 24% from -65504: no word's number


def test_closest_names_a_tie_of_candidates_the_input_cannot_part():
    rng = np.random.default_rng(0)
    a = rng.standard_normal((2, 3, 4))
    obs = a + 1e-7
    tied = closest("softcap", obs, {"applied": a, "ignored": a.copy()}, "planted")
    assert tied.value == "not_probed" and "applied, ignored alike" in tied.evidence
    near = closest("softcap", obs, {"applied": a, "ignored": a - 5e-8}, "planted")
    assert near.value == "not_probed", near.evidence  # 5e-8 apart: within 2 x 1e-7
    apart = closest("softcap", obs, {"applied": a, "ignored": a + 1e-3}, "planted")
    assert apart.value == "applied", apart.evidence


def test_alike_parts_nan_from_numbers():
    a = np.array([1.0, np.nan])
    assert alike({"x": 0.0, "y": 0.0}, {"x": a, "y": np.array([1.0, 2.0])}) == ["x"]
    assert alike({"x": 0.0, "y": 0.0}, {"x": a, "y": a.copy()}) == ["x", "y"]


def _fully_masked_case():
    (case,) = load_file(ROOT / "cases" / "fully_masked_row.yaml")
    return case


def test_the_matrix_classifies_a_float16_artifacts_fully_masked_row_at_its_precision():
    """judge(): the fully masked rows of a program storing float16 weights are read
    against the oracle on those weights (uniform); without its weights' type, finite_other."""
    case = _fully_masked_case()
    exp, data = attention(case), case_data(case)
    toy = _float16_artifact()
    obs = toy.run(case, toy.translate(case), data)
    assert judge(case, toy.name, obs, exp, 0, None).fully_masked_row == "uniform"
    bare = replace(obs, weights_dtype="", held_scalars=())
    assert judge(case, toy.name, bare, exp, 0, None).fully_masked_row == "finite_other"


def test_stored_weights_round_the_weights_and_leave_the_inputs():
    case = _fully_masked_case()
    data = case_data(case)
    held = as_stored(data, "float16")
    assert held.inputs is data.inputs
    assert not np.array_equal(held.weights.wq, data.weights.wq)
    assert np.array_equal(held.weights.wq, data.weights.wq.astype(np.float16).astype(float))
    assert as_stored(data, "float32") is data


def test_scale_precision_names_no_reading_where_two_are_within_float64():
    """Two scale readings within 1e-12 of a float64 output (planted distances) cannot be
    told apart: the cell names neither, never the nearest."""
    from conformance.conventions.probes.precision import judged

    tied = judged({"output": {"float64": 1e-16, "float32_rounded": 3e-13,
                              "split_float32": 2e-8}}, "none", "planted")
    assert tied.value == "not_probed", tied.evidence
    assert "float64, float32_rounded alike" in tied.evidence
    one = judged({"output": {"float64": 1e-16, "float32_rounded": 2e-8,
                             "split_float32": 2e-8}}, "none", "planted")
    assert one.value == "float64", one.evidence


def test_a_tie_is_named_by_the_documented_reading_where_it_is_one_of_them():
    a = np.random.default_rng(1).standard_normal((2, 3, 4))
    doc = {"documented": "ignored", "documented_source": "https://example.org/doc"}
    named = closest("softcap", a, {"applied": a, "ignored": a.copy()}, "planted", **doc)
    assert named.value == "ignored" and "example.org/doc" in named.evidence
    other = {"documented": "not_applicable", "documented_source": "https://example.org/doc"}
    assert closest("softcap", a, {"applied": a, "ignored": a.copy()}, "planted",
                   **other).value == "not_probed"
