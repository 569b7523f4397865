"""Count-only rows: a case over the numbers budget is counted, not computed.

A case whose weights or activations exceed the budget (`--max-elements N`, else
$CONFORMANCE_MAX_WEIGHT_ELEMENTS / $CONFORMANCE_MAX_ACTIVATION_ELEMENTS, else
50,000,000 each) still loads (the loader refuses only absurd sizes, far
above: case.model.load_budget()).  The matrix asks such an item's runner for
`Runner.count(case)` (a meta device, shape inference, or the labelled formula)
instead of `run`, before anything is allocated: no canonical arrays, no
reference.  The row is PASS or MISMATCH on the parameter count alone, its
reason says why the numbers were skipped, and `Row.count_method` (non-empty)
marks it "count only" in every report.
"""
from __future__ import annotations

import numpy as np

from conformance.case.loader import Budget, Case, element_counts
from conformance.case.model import ACTIVATION_ENV, WEIGHT_ENV
from conformance.contract.runner import Count, Observation, Runner
from conformance.oracle.reference import formula_parameters
from conformance.compare.verdict import Outcome, Verdict, parameter_failures

OPTION = "--max-elements"
_BUDGET: Budget | None = None  # set by the plugin from --max-elements


def configure(max_elements: int | None) -> None:
    """The numbers budget of this process: N elements for weights and for
    activations alike; None: from the environment (Budget.from_env)."""
    global _BUDGET
    if max_elements is not None and max_elements < 1:
        raise ValueError(f"{OPTION} {max_elements}: must be a positive count of elements")
    _BUDGET = None if max_elements is None else Budget(max_elements, max_elements)


def budget() -> Budget:
    return _BUDGET or Budget.from_env()


def over_budget(case: Case) -> str | None:
    """Why the case's numbers are skipped (arithmetic only), or None."""
    counts, b = element_counts(case), budget()
    for kind, limit, env in (("weight", b.weights, WEIGHT_ENV),
                             ("activation", b.activations, ACTIVATION_ENV)):
        if counts[f"{kind}s"] > limit:
            return (f"numbers skipped: {counts[kind + 's']:,} {kind} elements over the "
                    f"budget of {limit:,} ({OPTION} / {env})")
    return None


def counts_in_worker(runner: Runner) -> bool:
    """Whether the runner's count runs in its worker: it has one and counts natively
    (the default formula needs no framework, so it stays here)."""
    return bool(runner.worker) and type(runner).count is not Runner.count


def count_of(runner: Runner, case: Case) -> Count:
    """The runner's count, in its worker when `counts_in_worker`."""
    if counts_in_worker(runner):
        from conformance.run.workers import count_in_worker

        return count_in_worker(runner, case)
    return runner.count(case)


def counted(case: Case, runner: Runner, skipped: str) -> tuple[Observation, Verdict]:
    """The observation and verdict of a count-only item: the parameter checks of
    an ordinary row (verdict.py), nothing numerical."""
    count = count_of(runner, case)
    obs = Observation(output=np.empty(0), parameters=count.parameters,
                      projection_parameters=count.projection_parameters,
                      weight_shapes=dict(count.weight_shapes),
                      notes=[f"count only: parameters by {count.method}; {skipped}"],
                      executed=not count.method.startswith("formula"),
                      extras={"count_method": count.method})
    formula = formula_parameters(case)
    fails = parameter_failures(case, obs, formula,
                               case.expect.parameters_by_runner.get(runner.name), runner.name)
    reason = f"count only ({count.method}); {skipped}"
    if fails:
        outcome, reason = Outcome.MISMATCH, "; ".join([f.message for f in fails] + [reason])
    else:
        outcome = Outcome.PASS
    return obs, Verdict(outcome, reason, tuple(fails), None, None)
