"""One (case x runner) evaluation: translate -> run -> judge -> Row.

Both the pytest items and the report package consume the Row: the item turns
its outcome into pass / skip / fail, the reporter tabulates it.  Every runner
failure is caught here and becomes a row (`error`), so the matrix goes on.
A Row is built once, from the case, the runner and the verdict.
"""
from __future__ import annotations

import traceback
from dataclasses import asdict, dataclass, field
from typing import Any

from .case import Case, tolerance_for
from .contract import NotExpressible, NotExpressibleError, Observation, Runner
from .reference import Expected, attention, formula_parameters
from .verdict import Failure, FailureKind, Outcome, Verdict, judge
from .weights import case_data


@dataclass(frozen=True)
class Row:
    """One line of the scoreboard."""

    case: str
    runner: str
    framework: str
    outcome: Outcome
    reason: str  # why skipped / not expressible / failed, in words
    dtype: str
    native_call: str  # what a user of the system would type ("" when not translated)
    executed: bool  # the system really ran (False for documented models)
    parameters: int | None  # the system's own count
    parameters_formula: int  # analytic count (reference.formula_parameters)
    parameters_expected: int | None  # what this runner must report
    projection_parameters: int | None  # for systems holding none (SDPA)
    max_abs_error: float | None  # output vs reference
    max_rel_error: float | None
    weights_max_abs_error: float | None  # per-head attention weights vs reference
    weights_max_rel_error: float | None
    rtol: float
    atol: float
    weights_returned: str
    fully_masked_row: str | None  # observed behaviour (output)
    fully_masked_row_weights: str | None  # observed behaviour (returned weights)
    fully_masked_row_declared: str | None
    weight_shapes: dict[str, list[int]]
    notes: tuple[str, ...]
    extras: dict[str, Any]
    typed: dict[str, Any]
    failures: tuple[Failure, ...]  # each failed check, typed
    known_mismatch: str  # the case's declared reason this runner mismatches
    # typed data for report sections; not written to the results files as such
    graphs: dict[str, dict] = field(default_factory=dict)  # ONNX graph accounting
    output_digest: dict | None = None  # compact output record (cross-backend tables)

    def failed(self, kind: FailureKind) -> bool:
        return any(f.kind == kind for f in self.failures)

    def as_dict(self) -> dict[str, Any]:
        """The results-file record: plain JSON-able values."""
        d = asdict(self)
        graphs = d.pop("graphs")
        del d["output_digest"]
        d["outcome"] = self.outcome.value
        d["notes"] = list(self.notes)
        d["failures"] = [f.message for f in self.failures]
        if graphs:  # results files keep the accounting beside the other extras
            d["extras"] = {**d["extras"], "graphs": graphs}
        return d


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


def _row(case: Case, runner: Runner, outcome: Outcome, reason: str, native_call: str = "",
         obs: Observation | None = None, verdict: Verdict | None = None,
         notes: tuple[str, ...] = (), fully_masked_row: str | None = None) -> Row:
    tol = tolerance_for(case)
    v = verdict
    return Row(
        case=case.id, runner=runner.name, framework=runner.framework, outcome=outcome,
        reason=reason, dtype=case.inputs.dtype, native_call=native_call,
        executed=obs.executed if obs else False,
        parameters=(0 if obs.parameters is None else obs.parameters) if obs else None,
        parameters_formula=formula_parameters(case),
        parameters_expected=case.expect.parameters_by_runner.get(runner.name),
        projection_parameters=obs.projection_parameters if obs else None,
        max_abs_error=v.max_abs_error if v else None,
        max_rel_error=v.max_rel_error if v else None,
        weights_max_abs_error=v.weights_max_abs_error if v else None,
        weights_max_rel_error=v.weights_max_rel_error if v else None,
        rtol=tol.rtol, atol=tol.atol, weights_returned=obs.weights_returned if obs else "",
        fully_masked_row=v.fully_masked_row if v else fully_masked_row,
        fully_masked_row_weights=v.fully_masked_row_weights if v else None,
        fully_masked_row_declared=_declared(case, runner),
        weight_shapes={k: list(s) for k, s in obs.weight_shapes.items()} if obs else {},
        notes=tuple(obs.notes) if obs else notes, extras=dict(obs.extras) if obs else {},
        typed=dict(case.typed), failures=v.failures if v else (),
        known_mismatch=case.expect.known_mismatch.get(runner.name, ""),
        graphs=dict(obs.graphs) if obs else {}, output_digest=obs.output_digest if obs else None)


def _declared(case: Case, runner: Runner) -> str | None:
    return case.expect.behaviours.get("fully_masked_row", {}).get(runner.name)


def evaluate(case: Case, runner: Runner) -> Row:
    missing = runner.available()
    if missing:
        return _row(case, runner, Outcome.SKIPPED, missing)
    translation = runner.translate(case)
    if isinstance(translation, NotExpressible):
        return _row(case, runner, Outcome.NOT_EXPRESSIBLE, translation.reason)
    call = translation.call
    try:
        obs = observe(runner, case, translation)
    except NotExpressibleError as exc:
        return _row(case, runner, Outcome.NOT_EXPRESSIBLE, str(exc), call)
    except Exception as exc:  # a runner crash is a result, and the matrix goes on
        if _declared(case, runner) == "error":
            return _row(case, runner, Outcome.BEHAVIOUR,
                        f"raised as declared: {type(exc).__name__}: {exc}", call,
                        fully_masked_row="error")
        return _row(case, runner, Outcome.ERROR, f"{type(exc).__name__}: {exc}", call,
                    notes=(traceback.format_exc(limit=-3),))
    verdict = judge(case, runner.name, obs, expected_for(case), formula_parameters(case),
                    case.expect.parameters_by_runner.get(runner.name), _declared(case, runner))
    return _row(case, runner, verdict.outcome, verdict.reason, call, obs, verdict)


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
