"""The cells the matrix rows settle describe the system or the program that ran, never the
harness: a weightless function's layout is "none", not the suite's projection arrays; an
exported program's count is what the program holds, not its source framework's; a fully
masked row's condition is the mask the system was given, not the case's mask.fill."""
from __future__ import annotations

from conformance.compare.verdict import Outcome
from conformance.conventions.artifact import artifact_params, bias_elements, held_count
from conformance.conventions.derived import DERIVERS, fully_masked_condition
from conformance.conventions.layout import WEIGHTLESS

from .helpers import make_case
from .test_ledger import row

ZERO = make_case(id="zero-bias", attention={"num_heads": 4, "query_features": 16},
                 inputs={"self_attention": True}, weights={"bias_values": "zeros"})
RANDOM = make_case(id="random-bias", attention={"num_heads": 4, "query_features": 16},
                   inputs={"self_attention": True})
CASES = {c.id: c for c in (ZERO, RANDOM)}
PROJECTIONS = {"wq": [4, 16, 4], "wk": [4, 16, 4], "wv": [4, 16, 4], "wo": [4, 4, 16]}


def _accounting(held: int, missing: dict | None = None) -> dict:
    mapping = {"in_proj_weight": [{"tensor": "val_0", "how": "transposed", "shape": [16, 48]}],
               **(missing or {})}
    return {"need_weights=False": {"framework_parameters": 1088, "exported_weights": held,
                                   "mapping": mapping}}


def test_a_weightless_function_s_layout_is_none_not_the_suite_s_arrays():
    rows = [row(c, "fake.fn", parameters=0, projection_parameters=1088,
                weight_shapes=PROJECTIONS) for c in CASES]
    cell = DERIVERS["weight_layout"]("fake.fn", rows, CASES)
    assert cell.value == WEIGHTLESS
    assert "wq" not in cell.evidence and "holds no parameters in any of the 2" in cell.evidence


def test_a_system_holding_weights_keeps_its_layout_read_from_its_shapes():
    """The control: one row holding parameters is a module's, its layout is read."""
    rows = [row("zero-bias", "fake.mod", parameters=1088,
                weight_shapes={"in_proj_weight": [48, 16], "out_proj.weight": [16, 16]})]
    cell = DERIVERS["weight_layout"]("fake.mod", rows, CASES)
    assert cell.value.startswith("in_proj_weight (3E, E)"), cell.value


def test_an_exported_graph_short_of_its_source_formula_is_not_canonical():
    """The planted defect: the source framework counts 1088 (Row.parameters), the graph
    holds 1072 (out_proj.bias, all zeros, folded away); the cell reads the graph."""
    missing = {"out_proj.bias": "missing (16 elements, all zeros): not in the graph"}
    rows = [row("zero-bias", "fake.export", parameters=1088, parameters_formula=1088,
                graphs=_accounting(1072, missing)),
            row("random-bias", "fake.export", parameters=1088, parameters_formula=1088,
                graphs=_accounting(1088))]
    cell = DERIVERS["parameter_formula"]("fake.export", rows, CASES)
    assert cell.value == "zero biases dropped: out_proj.bias", cell.evidence
    assert "zero-bias[fake.export]: 1,072 vs formula 1,088" in cell.evidence
    assert "equal in 1 case(s)" in cell.evidence


def test_a_runtime_bound_below_the_formula_settles_fewer_and_above_it_settles_nothing():
    """A runtime's float-constant count (weights with scalars) is an upper bound: 1025 of
    1088 where the biases are zeros shows at least 63 not held; 2720 shows nothing."""
    low = row("zero-bias", "fake.ov", parameters=1088, parameters_formula=1088,
              extras={"runtime": {"constant_elements": 1025}})
    high = row("random-bias", "fake.ov", parameters=1088, parameters_formula=1088,
               extras={"runtime": {"constant_elements": 2720}})
    cell = artifact_params("fake.ov", [low, high], CASES)
    assert cell.value == "zero biases dropped" and "at least 63 elements" in cell.evidence
    only_high = artifact_params("fake.ov", [high], CASES)
    assert only_high.value == "not_probed", only_high.evidence
    assert "no weight count can be read" in only_high.evidence


def test_a_shortfall_beyond_zero_biases_reads_differs():
    """Random biases, yet the program lacks 64 elements: not the zero-bias folding."""
    rows = [row("random-bias", "fake.lite", parameters=1088, parameters_formula=1088,
                extras={"litert": {"constants": {"float32": 1024}}})]
    assert artifact_params("fake.lite", rows, CASES).value == "differs"


def test_a_framework_object_without_a_program_keeps_its_own_count():
    rows = [row("zero-bias", "fake.mod", parameters=1088, parameters_formula=1088)]
    assert held_count(rows[0]) is None
    assert DERIVERS["parameter_formula"]("fake.mod", rows, CASES).value == "canonical"
    assert bias_elements(ZERO) == 64 and bias_elements(make_case(
        attention={"num_heads": 2, "query_features": 8, "bias": False})) == 0


FILL = make_case(id="fill", attention={"num_heads": 2, "query_features": 8},
                 inputs={"dtype": "float16"},
                 mask={"attn_mask": {"random": 0.7}, "masked_rows": [1], "fill": "-1e4"})


def test_a_boolean_mask_given_for_a_case_with_a_fill_is_named_boolean():
    """The planted defect: the case says fill -1e4, the runner gave the system a boolean
    mask (no record of a float mask); the condition is the boolean mask."""
    given_bool = row("fill", "fake.b", Outcome.BEHAVIOUR, fully_masked_row="zeros",
                     dtype="float16")
    assert fully_masked_condition(given_bool) == "boolean mask in float16"
    given_float = row("fill", "fake.f", Outcome.BEHAVIOUR, fully_masked_row="finite_other",
                      dtype="float16", extras={"mask_passed": "additive -1e4 mask in float16"})
    assert fully_masked_condition(given_float) == "additive -1e4 mask in float16"
    plain = row("plain", "fake.f", Outcome.BEHAVIOUR, fully_masked_row="uniform",
                extras={"mask_passed": "boolean mask"})
    cell = DERIVERS["fully_masked_row"]("fake.f", [given_float, plain], {"fill": FILL})
    assert cell.value == "depends"
    assert "additive -1e4 mask in float16 -> finite_other" in cell.evidence
    assert "boolean mask in float32 -> uniform" in cell.evidence
    same = DERIVERS["fully_masked_row"]("fake.b", [given_bool, row(
        "plain", "fake.b", Outcome.BEHAVIOUR, fully_masked_row="zeros")], {"fill": FILL})
    assert same.value == "zeros" and "additive" not in same.evidence, same.evidence


def test_an_exported_graph_s_layout_is_the_graph_s_tensor_not_the_source_s():
    """The planted defect: the source module's in_proj_weight is (3E, E) out x in; the graph
    holds it transposed, (E, 3E) in x out: the cell reads the graph."""
    rows = [row("random-bias", "fake.export", parameters=1088, parameters_formula=1088,
                weight_shapes={"in_proj_weight": [48, 16], "out_proj.weight": [16, 16]},
                graphs=_accounting(1088))]
    cell = DERIVERS["weight_layout"]("fake.export", rows, CASES)
    assert cell.value == "in_proj_weight (E, 3E) in x out in the graph (transposed)", cell.value
    assert "graph tensor val_0 (16, 48)" in cell.evidence


def test_a_converted_program_that_records_no_tensor_is_not_probed_not_its_source():
    rows = [row("random-bias", "fake.ov", parameters=1088, parameters_formula=1088,
                weight_shapes={"in_proj_weight": [48, 16]},
                extras={"runtime": {"constant_elements": 1089}})]
    cell = DERIVERS["weight_layout"]("fake.ov", rows, CASES)
    assert cell.value == "not_probed" and "not the program's: in_proj_weight (3E, E)" in \
        cell.evidence, cell.evidence


def _suite_graph() -> dict:
    mapping = {n: [{"tensor": n.upper(), "how": "rearranged", "shape": [16, 16]}]
               for n in ("wq", "wk", "wv", "wo")}
    return {"Attention-23": {"framework_parameters": 1024, "exported_weights": 1024,
                             "mapping": mapping}}


def test_an_op_inside_a_graph_the_suite_builds_holds_no_weights():
    """The planted defect: the graph's initializers are the suite's canonical arrays (its
    accounting maps wq ... wo) around an op that takes projected tensors; the op's cells
    say it holds none, and a count-only row's formula (the suite's figure) is not counted."""
    rows = [row("random-bias", "fake.op", parameters=1024, parameters_formula=1024,
                weight_shapes={"W_q": [16, 16]}, graphs=_suite_graph()),
            row("huge", "fake.op", parameters=10 ** 9, parameters_formula=10 ** 9,
                count_method="formula (no allocation-free path)")]
    assert DERIVERS["weight_layout"]("fake.op", rows, CASES).value == WEIGHTLESS
    cell = DERIVERS["parameter_formula"]("fake.op", rows, CASES)
    assert cell.value == "holds_none" and "graph the suite builds" in cell.evidence
    assert "huge" not in cell.evidence
