"""Rows and runners for report tests, built by hand: no framework, no case files."""
from __future__ import annotations

from dataclasses import dataclass, replace
from types import SimpleNamespace

from conformance.contract.runner import Runner
from conformance.run.evaluate import Row
from conformance.compare.verdict import Failure, FailureKind, Outcome

_DEFAULTS = dict(reason="", dtype="float32", native_call="", executed=True, parameters=None,
                 parameters_formula=10, parameters_expected=None, projection_parameters=None,
                 max_abs_error=None, max_rel_error=None, weights_max_abs_error=None,
                 weights_max_rel_error=None, rtol=1e-5, atol=1e-6, weights_returned="",
                 fully_masked_row=None, fully_masked_row_weights=None,
                 fully_masked_row_declared=None, weight_shapes={}, notes=(), extras={},
                 typed={}, failures=(), known_mismatch="")


def make_row(case: str, runner: Runner | str, outcome: Outcome | str = Outcome.PASS,
             **fields) -> Row:
    """A Row with neutral defaults; a ran outcome gets a call and figures unless given."""
    outcome = Outcome(outcome)
    name = runner if isinstance(runner, str) else runner.name
    framework = fields.pop("framework", "fake" if isinstance(runner, str) else runner.framework)
    values = {**_DEFAULTS, **({"native_call": f"{name}()", "parameters": 10,
                               "max_abs_error": 1e-7, "max_rel_error": 1e-6}
                              if outcome.ran else {}), **fields}
    return Row(case=case, runner=name, framework=framework, outcome=outcome, **values)


def parameter_failure(message: str = "parameters: counts 11, expected 10") -> Failure:
    return Failure(FailureKind.PARAMETERS, message)


def graph(ops: dict[str, int] | None = None) -> dict:
    """One graph's accounting, as onnx_accounting.account gives it (the report's fields)."""
    return {"opset": {"ai.onnx": 23}, "ops": ops or {"MatMul": 4, "Softmax": 1},
            "exported_weights": 10, "framework_parameters": 10, "other_constants": 1,
            "other_constant_tensors": 1, "explanation": "exported weights 10 = framework count 10"}


def stand_in(name: str, framework: str, system: str = "", path: str = "default",
             backend: str = "", **declared) -> Runner:
    """A Runner with descriptors only (never runs); `declared`: other class attributes
    (typed_system, no_parameters_label, ...)."""
    cls = type("StandIn", (Runner,), {"name": name, "framework": framework, "system": system,
                                      "path": path, "backend": backend, **declared})
    return cls()


def renamed(runner: Runner, name: str) -> Runner:
    """Another runner class with the same descriptors under another name."""
    return stand_in(name, runner.framework, runner.system, runner.path, runner.backend,
                    typed_system=runner.typed_system,
                    no_parameters_label=runner.no_parameters_label)


@dataclass
class FakeCase:
    """What sections read of a Case."""

    id: str
    has_fully_masked_rows: bool = False
    key_padding: tuple[int, ...] | None = None

    @property
    def mask(self):
        return SimpleNamespace(key_padding=self.key_padding)


__all__ = ["make_row", "parameter_failure", "graph", "stand_in", "renamed", "FakeCase", "replace"]
