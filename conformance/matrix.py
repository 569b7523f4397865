"""One (case x runner) evaluation: translate -> run -> compare -> Row.

Both the pytest items and the reporter consume the Row: the item turns its
outcome into pass / skip / fail, the reporter tabulates it.  Every runner
failure is caught here and becomes a row (`error`), so the matrix goes on.
"""
from __future__ import annotations

import traceback
from dataclasses import asdict, dataclass, field
from typing import Any

from .case import Case, tolerance_for
from .compare import agree, classify_fully_masked, classify_masked_weights
from .reference import Expected, attention, formula_parameters
from .runners import NotExpressible, NotExpressibleError, Observation, Runner
from .weights import case_data

OUTCOMES = ("pass", "behaviour", "mismatch", "not_expressible", "skipped", "error")


@dataclass
class Row:
    """One line of the scoreboard; JSON-able."""

    case: str
    runner: str
    framework: str
    outcome: str = "pass"  # one of OUTCOMES
    reason: str = ""  # why skipped / not expressible / failed, in words
    dtype: str = ""
    native_call: str = ""  # what a user of the system would type
    executed: bool = False  # the system really ran (False for documented models)
    parameters: int | None = None  # the system's own count
    parameters_formula: int = 0  # analytic count (reference.formula_parameters)
    parameters_expected: int | None = None  # what this runner must report
    projection_parameters: int | None = None  # for systems holding none (SDPA)
    max_abs_error: float | None = None  # output vs reference
    max_rel_error: float | None = None
    weights_max_abs_error: float | None = None  # per-head attention weights vs reference
    weights_max_rel_error: float | None = None
    rtol: float = 0.0
    atol: float = 0.0
    weights_returned: str = ""
    fully_masked_row: str | None = None  # observed behaviour (output)
    fully_masked_row_weights: str | None = None  # observed behaviour (returned weights)
    fully_masked_row_declared: str | None = None
    weight_shapes: dict[str, list[int]] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    extras: dict[str, Any] = field(default_factory=dict)
    typed: dict[str, Any] = field(default_factory=dict)
    failures: list[str] = field(default_factory=list)  # each failed check, in words
    known_mismatch: str = ""  # the case's declared reason this runner mismatches

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


_EXPECTED: dict[str, Expected] = {}


def expected_for(case: Case) -> Expected:
    key = case.fingerprint()
    if key not in _EXPECTED:
        _EXPECTED.clear()  # items of one case run together; keep memory flat
        _EXPECTED[key] = attention(case)
    return _EXPECTED[key]


def observe(runner: Runner, case: Case, translation) -> Observation:
    """Run in this process, or in the runner's worker subprocess."""
    if runner.worker:
        from .workers import run_in_worker

        return run_in_worker(runner, case, translation)
    return runner.run(case, translation, case_data(case))


def evaluate(case: Case, runner: Runner) -> Row:
    tol = tolerance_for(case)
    row = Row(case.id, runner.name, runner.framework, dtype=case.inputs.dtype,
              parameters_formula=formula_parameters(case), rtol=tol.rtol, atol=tol.atol,
              typed=dict(case.typed),
              fully_masked_row_declared=case.expect.behaviours.get(
                  "fully_masked_row", {}).get(runner.name))
    row.parameters_expected = case.expect.parameters_by_runner.get(runner.name)
    row.known_mismatch = case.expect.known_mismatch.get(runner.name, "")
    missing = runner.available()
    if missing:
        row.outcome, row.reason = "skipped", missing
        return row
    translation = runner.translate(case)
    if isinstance(translation, NotExpressible):
        row.outcome, row.reason = "not_expressible", translation.reason
        return row
    row.native_call = translation.call
    try:
        obs = observe(runner, case, translation)
    except NotExpressibleError as exc:
        row.outcome, row.reason = "not_expressible", str(exc)
        return row
    except Exception as exc:  # a runner crash is a result, and the matrix goes on
        if row.fully_masked_row_declared == "error":
            row.outcome, row.fully_masked_row = "behaviour", "error"
            row.reason = f"raised as declared: {type(exc).__name__}: {exc}"
            return row
        row.outcome = "error"
        row.reason = f"{type(exc).__name__}: {exc}"
        row.notes.append(traceback.format_exc(limit=-3))
        return row
    judge(case, row, obs, expected_for(case))
    return row


def judge(case: Case, row: Row, obs: Observation, exp: Expected) -> None:
    """Fill the row's figures from the observation and decide its outcome."""
    tol = tolerance_for(case)
    row.executed, row.notes, row.extras = obs.executed, list(obs.notes), dict(obs.extras)
    # A system holding no parameters (SDPA) counts 0; what it was given is separate.
    row.parameters = 0 if obs.parameters is None else obs.parameters
    row.projection_parameters = obs.projection_parameters
    row.weight_shapes = {k: list(v) for k, v in obs.weight_shapes.items()}
    row.weights_returned = obs.weights_returned
    fails = row.failures
    if case.expect.parameters is not None and row.parameters_formula != case.expect.parameters:
        fails.append(f"parameter formula gives {row.parameters_formula}, "
                     f"case expects {case.expect.parameters}")
    want = row.parameters_expected if row.parameters_expected is not None \
        else row.parameters_formula
    if obs.parameters is not None and obs.parameters != want:
        fails.append(f"parameters: {row.runner} counts {obs.parameters}, expected {want} "
                     f"(formula {row.parameters_formula})")
    if obs.parameters is None and obs.projection_parameters not in (None, want):
        fails.append(f"projections given: {obs.projection_parameters}, formula {want}")
    defined = ~exp.fully_masked[:, :, None]
    out = agree(exp.output, obs.output, tol, where=defined)
    row.max_abs_error, row.max_rel_error = out.max_abs_error, out.max_rel_error
    if not out.ok:
        fails.append(f"output: {out.problem}")
    if obs.attention_weights is not None and obs.weights_returned == "per_head":
        wa = agree(exp.weights, obs.attention_weights, tol,
                   where=~exp.fully_masked[:, None, :, None])
        row.weights_max_abs_error, row.weights_max_rel_error = wa.max_abs_error, wa.max_rel_error
        if not wa.ok:
            fails.append(f"attention weights: {wa.problem}")
    if exp.fully_masked.any() and out.problem[:14] != "shape mismatch":
        row.fully_masked_row = classify_fully_masked(exp, obs.output, tol)
        if obs.attention_weights is not None and obs.weights_returned == "per_head" \
                and obs.attention_weights.shape == exp.weights.shape:
            row.fully_masked_row_weights = classify_masked_weights(
                obs.attention_weights, exp.fully_masked)
        declared = row.fully_masked_row_declared
        if declared is None:
            fails.append(f"fully masked row: observed '{row.fully_masked_row}', undeclared; "
                         f"pin it in the case: expect.behaviours.fully_masked_row."
                         f"{row.runner}: {row.fully_masked_row}")
        elif declared != row.fully_masked_row:
            fails.append(f"fully masked row: declared '{declared}', observed "
                         f"'{row.fully_masked_row}'")
    if fails:
        row.outcome, row.reason = "mismatch", "; ".join(fails)
    elif row.fully_masked_row is not None:
        row.outcome = "behaviour"
        row.reason = f"fully masked row gives {row.fully_masked_row}, as declared"


def failure_message(case: Case, row: Row, nodeid: str) -> str:
    """What a failing item prints: case, runner, shapes, dtype, errors, repro."""
    a, i = case.attention, case.inputs
    lines = [f"{case.id}[{row.runner}] {row.outcome}: {row.reason}",
             f"  native call: {row.native_call or '-'}",
             f"  shapes: query ({i.batch}, {i.query_len}, {a.query_features}), key "
             f"({i.batch}, {i.key_len}, {a.key_features}), value ({i.batch}, {i.key_len}, "
             f"{a.value_features}) -> output ({i.batch}, {i.query_len}, {a.output_features}); "
             f"heads {a.num_heads} (kv {a.num_kv_heads}), d_k {a.qk_head_dim}, d_v {a.v_head_dim}",
             f"  dtype {row.dtype}: max abs error {row.max_abs_error}, max rel error "
             f"{row.max_rel_error} (rtol {row.rtol:g}, atol {row.atol:g})",
             f"  parameters: {row.parameters} (formula {row.parameters_formula})",
             f"  repro: python -m pytest '{nodeid}'"]
    lines += [f"  note: {n}" for n in row.notes]
    return "\n".join(lines)
