"""One (case x runner) evaluation: translate -> run -> judge -> Row.

Both the pytest items and the report package consume the Row: the item turns
its outcome into pass / skip / fail, the reporter tabulates it.  Every runner
failure is caught here and becomes a row (`error`), so the matrix goes on.
A Row is built once, from the case, the runner and the verdict.
"""
from __future__ import annotations

import traceback
from dataclasses import asdict, dataclass, field, fields, replace
from typing import Any

from conformance.case.expectations import Declared, Expectations, declared as declare
from conformance.case.loader import Case, tolerance_for
import numpy as np

from conformance.contract.runner import (
    NotExpressible, NotExpressibleError, Observation, Runner, Translation, agreement_sample)
from conformance.run.counting import counted, counts_in_worker, over_budget
from conformance.run.isolation import ItemTimeout, deadline, item_timeout
from conformance.oracle.reference import Expected, attention, formula_parameters
from conformance.compare.verdict import (
    Failure, FailureKind, Outcome, Verdict, judge, nonfinite_applies)
from conformance.oracle.canonical import case_data
from conformance.run.workers import WorkerFault, described, run_in_worker
from conformance.run.workers import prefetch as queue_in_worker, prefetch_count


@dataclass(frozen=True)
class Row:
    """One line of the scoreboard.  Built by `_row` from what an item produced; a field
    nothing settled keeps its default (a row of an item that never ran has no figures)."""

    case: str
    runner: str
    framework: str
    outcome: Outcome
    reason: str  # why skipped / not expressible / failed, in words
    dtype: str = ""
    native_call: str = ""  # what a user of the system would type ("" when not translated)
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
    notes: tuple[str, ...] = ()
    extras: dict[str, Any] = field(default_factory=dict)
    typed: dict[str, Any] = field(default_factory=dict)
    failures: tuple[Failure, ...] = ()  # each failed check, typed
    known_mismatch: str = ""  # the case's declared reason this runner mismatches
    # typed data for report sections; not written to the results files as such
    graphs: dict[str, dict] = field(default_factory=dict)  # ONNX graph accounting
    output_digest: dict | None = None  # compact output record (cross-backend tables)
    count_method: str = ""  # set: a count-only row (counting.py), counted by this method
    nonfinite_input: str | None = None  # observed behaviour on extreme inputs (output)
    nonfinite_input_declared: str | None = None

    def failed(self, kind: FailureKind) -> bool:
        return any(f.kind == kind for f in self.failures)

    def as_dict(self) -> dict[str, Any]:
        """The results-file record: plain JSON-able values.  What dataclasses.asdict gives
        (a deep copy: every nested value copied, in field order), built field by field
        (asdict copied output_digest and failures only to drop them: 0.7 ms a row)."""
        try:
            d = {name: None if name in _SET_BELOW else _copied(getattr(self, name))
                 for name in _RECORD_FIELDS}
        except _Unusual:  # a value of another type: asdict's own copy
            d = asdict(self)
            del d["output_digest"]
        graphs = d.pop("graphs")
        d["outcome"] = self.outcome.value
        d["notes"] = list(self.notes)
        d["failures"] = [f.message for f in self.failures]
        if graphs:  # results files keep the accounting beside the other extras
            d["extras"] = {**d["extras"], "graphs": graphs}
        return d


class _Unusual(Exception):
    """A value _copied leaves to dataclasses.asdict."""


_ATOMS = (str, int, float, bool, type(None))


def _copied(value):
    """`value` as dataclasses.asdict copies it, for plain values (JSON types, tuples);
    _Unusual for anything else (a dataclass, an enum, a namedtuple, a subclass)."""
    kind = type(value)
    if kind in _ATOMS:
        return value
    if kind is dict:
        return {_copied(k): _copied(v) for k, v in value.items()}
    if kind is list:
        return [_copied(v) for v in value]
    if kind is tuple:
        return tuple(_copied(v) for v in value)
    raise _Unusual


# the record's keys, in field order (as_dict drops output_digest and sets the others)
_RECORD_FIELDS = tuple(f.name for f in fields(Row) if f.name != "output_digest")
_SET_BELOW = frozenset(("outcome", "notes", "failures"))
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
        return run_in_worker(runner, case, translation)
    return runner.run(case, translation, case_data(case))


def prefetch(case: Case, runner: Runner) -> None:
    """Queue a worker runner's run (an over-budget case: its count) now (the plugin, once
    collection is done), so workers compute in parallel (workers.py).  A translate that
    raises, refuses or hangs queues nothing: the item's own evaluate makes its row."""
    if not runner.worker or runner.available():
        return
    with deadline(item_timeout(), f"translate of {runner.name} on case {case.id}"):
        translation, _ = _attempt(runner.translate, case)
    if not isinstance(translation, Translation):
        return
    if not over_budget(case):
        queue_in_worker(runner, case, translation)
    elif counts_in_worker(runner):  # an over-budget item is counted, never run
        prefetch_count(runner, case)


def _row(case: Case, runner: Runner, outcome: Outcome, reason: str, native_call: str = "",
         obs: Observation | None = None, verdict: Verdict | None = None,
         notes: tuple[str, ...] = (), fully_masked_row: str | None = None,
         nonfinite_input: str | None = None) -> Row:
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
        fully_masked_row_declared=None,  # the declared answers: evaluate's _with_declared
        weight_shapes={k: list(s) for k, s in obs.weight_shapes.items()} if obs else {},
        notes=tuple(obs.notes) if obs else notes, extras=dict(obs.extras) if obs else {},
        typed=dict(case.typed), failures=v.failures if v else (),
        known_mismatch="",
        graphs=dict(obs.graphs) if obs else {}, output_digest=_digest(obs, case, outcome),
        nonfinite_input=v.nonfinite_input if v else nonfinite_input,
        nonfinite_input_declared=None)


def _digest(obs: Observation | None, case: Case, outcome: Outcome) -> dict | None:
    """The runner's own digest (Keras: the cross-backend table), with the agreement sample
    of every row that ran (report/clusters.py)."""
    if obs is None:
        return None
    out = getattr(obs, "output", None)
    if not outcome.ran or not isinstance(out, np.ndarray) or out.size == 0:
        return obs.output_digest
    return {**(obs.output_digest or {}), "agreement": agreement_sample(out, case.inputs.dtype)}


def evaluate(case: Case, runner: Runner, expectations: Expectations | None = None) -> Row:
    """The row of one item, whatever the runner does: an exception in any stage
    (translate, run, judging), a BaseException other than KeyboardInterrupt
    (SystemExit...), a worker that died or hung (workers.py) or an in-process
    timeout (isolation.py) becomes an `error` row naming what happened.

    `expectations`: the runner's (expectations/<runner>.yaml, loaded by the plugin);
    the case's own pins win over them; None: the case's pins alone."""
    d = declare(case, runner.name, expectations)
    if not runner.pinned:  # the user's attention: observed, not declared
        d = replace(d, observing=True)
    try:
        row = _evaluate(case, runner, d)
    except KeyboardInterrupt:
        raise
    except BaseException as exc:  # a fault of the machinery itself: still a row
        row = _fault_row(case, runner, "evaluating the item", exc)
    return _with_declared(row, case, d)


def _with_declared(row: Row, case: Case, d: Declared) -> Row:
    """The row's declared answers as judged: a fully masked row's behaviour where the run
    met one (judged or raised), the extreme-input one where it applied."""
    masked = row.fully_masked_row is not None
    return replace(row, fully_masked_row_declared=d.fully_masked_row if masked else None,
                   nonfinite_input_declared=d.nonfinite_input
                   if nonfinite_applies(case, d) else None, known_mismatch=d.known_mismatch)


def _attempt(fn, *args):
    """(fn(*args), None), or (None, what it raised): anything but KeyboardInterrupt."""
    try:
        return fn(*args), None
    except KeyboardInterrupt:
        raise
    except BaseException as exc:
        return None, exc


def _evaluate(case: Case, runner: Runner, d: Declared) -> Row:
    missing = runner.available()
    if missing:
        return _row(case, runner, Outcome.SKIPPED, missing)
    if case.attention.scale is not None and not runner.sets_scale:
        return _row(case, runner, Outcome.NOT_EXPRESSIBLE, no_scale_reason(case, runner))
    if case.features - runner.features:
        return _row(case, runner, Outcome.NOT_EXPRESSIBLE, no_feature_reason(case, runner))
    with deadline(item_timeout(), f"translate of {runner.name} on case {case.id}"):
        translation, exc = _attempt(runner.translate, case)
    if exc is not None:
        return _fault_row(case, runner, "translate", exc)
    if isinstance(translation, NotExpressible):
        return _row(case, runner, Outcome.NOT_EXPRESSIBLE, translation.reason)
    call = translation.call
    skipped = over_budget(case)
    if skipped:  # before anything is allocated: no arrays, no reference
        return _count_row(case, runner, call, skipped)
    in_process = 0 if runner.worker else item_timeout()  # a worker times its own runs
    with deadline(in_process, f"run of {runner.name} on case {case.id}"):
        obs, exc = _attempt(observe, runner, case, translation)
    if isinstance(exc, NotExpressibleError):
        return _row(case, runner, Outcome.NOT_EXPRESSIBLE, str(exc), call)
    if exc is not None:
        return _run_fault(case, runner, exc, call, d)
    verdict, exc = _attempt(judge, case, runner.name, obs, expected_for(case),
                            formula_parameters(case),
                            case.expect.parameters_by_runner.get(runner.name), d)
    if exc is not None:
        return _fault_row(case, runner, "judging the observation", exc, call, obs)
    return _row(case, runner, verdict.outcome, verdict.reason, call, obs, verdict)


def _count_row(case: Case, runner: Runner, call: str, skipped: str) -> Row:
    """A count-only row: the parameter count alone (counting.py)."""
    with deadline(item_timeout(), f"count of {runner.name} on case {case.id}"):
        result, exc = _attempt(counted, case, runner, skipped)
    if exc is not None:
        return _fault_row(case, runner, f"count ({skipped})", exc, call)
    obs, verdict = result
    return replace(_row(case, runner, verdict.outcome, verdict.reason, call, obs, verdict),
                   count_method=obs.extras["count_method"])


def no_scale_reason(case: Case, runner: Runner) -> str:
    """Why a runner without a softmax-scale setting cannot run a case that sets one."""
    return (f"{runner.system or runner.name} has no softmax-scale setting: it always scales "
            f"by 1/sqrt(d_k) (the case asks for scale={case.attention.scale})")


FEATURE_WORDS = {  # Case.features -> what a system without it lacks
    "rope": "rotary embeddings (attention.rope)", "qk_norm": "QK-norm (attention.qk_norm)",
    "alibi": "ALiBi bias (attention.alibi)", "softcap": "score softcapping (attention.softcap)",
    "sinks": "attention sinks (attention.sinks)",
    "rope_scaling": "RoPE frequency scaling (attention.rope.scaling)",
    "position_offset": "token positions (inputs.position_offset)",
    "window": "sliding window (mask.window)", "decode": "KV-cache decoding (decode)",
    "multi_axis_rope": "rotary positions per axis (attention.rope.multi_axis)",
    "layer_schedule": "per-layer attention schedule (attention.layer_schedule)",
    "temperature": "attention temperature (attention.temperature)",
    "chunk": "chunked attention (mask.chunk)",
    "mla": "multi-head latent attention (attention.mla)",
    "relative_bias": "relative position bias (attention.relative_bias)",
    "output_gate": "gated head outputs (attention.output_gate)"}


FEATURE_REFUSAL = " (as this runner calls it) has no "  # in every no_feature_reason


def no_feature_reason(case: Case, runner: Runner) -> str:
    """Why a runner cannot run a case asking for features it lacks (rope, ALiBi, a window...)."""
    missing = sorted(case.features - runner.features)
    return (f"{runner.system or runner.name}{FEATURE_REFUSAL}"
            + ", no ".join(FEATURE_WORDS.get(f, f) for f in missing))


def _run_fault(case: Case, runner: Runner, exc: BaseException, call: str,
               d: Declared) -> Row:
    if isinstance(exc, WorkerFault):  # the worker died or timed out: the log tail as a note
        return _row(case, runner, Outcome.ERROR, str(exc), call,
                    notes=(f"worker log ends:\n{exc.log}",) if exc.log else ())
    if not isinstance(exc, Exception) or isinstance(exc, ItemTimeout):
        return _fault_row(case, runner, "run", exc, call)
    edges = {e: "error" for e, word in (("fully_masked_row", d.fully_masked_row),
                                        ("nonfinite_input", d.nonfinite_input))
             if word == "error" and (e != "fully_masked_row" or case.has_fully_masked_rows)}
    if edges:  # a runner raising is a result, as declared
        return _row(case, runner, Outcome.BEHAVIOUR,
                    f"raised as declared: {described(exc)}", call, **edges)
    pin = (f"; if raising is its answer, add to {d.file or 'its expectations file'} under "
           f"'behaviours:' 'nonfinite_input:' the line '{case.id}: error'"
           if nonfinite_applies(case, d) else "")
    return _row(case, runner, Outcome.ERROR, f"{described(exc)}{pin}", call,
                notes=(_trace(exc),))


def _fault_row(case: Case, runner: Runner, stage: str, exc: BaseException, call: str = "",
               obs: Observation | None = None) -> Row:
    """An error row for a fault outside a runner's ordinary exceptions in `run`."""
    if isinstance(exc, ItemTimeout):
        reason = str(exc)
    else:
        reason = f"{stage} raised {described(exc)}"
        if isinstance(exc, SystemExit):
            reason += " (sys.exit was called)"
    try:
        return _row(case, runner, Outcome.ERROR, reason, call, obs, notes=(_trace(exc),))
    except Exception as again:  # the case itself breaks the row's figures: a bare row
        return _bare_row(case, runner, f"{reason}; building the row raised "
                         f"{type(again).__name__}: {again}", call)


def _trace(exc: BaseException) -> str:
    return "".join(traceback.format_exception(type(exc), exc, exc.__traceback__, limit=-3))


def _bare_row(case: Case, runner: Runner, reason: str, call: str) -> Row:
    """An error row with nothing read from the case beyond its id and dtype."""
    return Row(case.id, runner.name, runner.framework, Outcome.ERROR, reason,
               dtype=str(case.inputs.dtype), native_call=call)


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
