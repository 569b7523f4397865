"""A refusal that is the suite's own rule (a runner that decodes only, a model's habit the
runner copies while the module takes other input) is marked harness_limit at its source,
and the ledger's refusals cell never counts it as the system's.

The scan reads the runners' sources: a NotExpressible reason (or a `*limits` method's
reason) that speaks of the runner itself ("this runner ..."), of the suite's decode loop
("a decode is causal self-attention ...") or of what a model always does around the module
("BloomModel always builds one") is the harness's, and must be wrapped in harness_limit."""
from __future__ import annotations

import ast
from pathlib import Path
import re

import pytest

from conformance.compare.verdict import Outcome
from conformance.contract.runner import HARNESS_LIMIT, NotExpressible
from conformance.conventions.derived import derive

from .helpers import make_case
from .test_ledger import fake, row

RUNNERS = Path(__file__).resolve().parents[1] / "conformance" / "runners"
SUITE_RULE = re.compile(r"^(this runner\b|a decode (here )?is causal)|[Mm]odel always\b")
REFUSING = {"NotExpressible", "NotExpressibleError"}


def _text(node: ast.AST | None) -> str:
    """The literal words of a reason expression (f-string parts, implicit concatenation)."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if isinstance(node, ast.JoinedStr):
        return "".join(_text(v) for v in node.values)
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
        return _text(node.left) + _text(node.right)
    return ""


def _marked(node: ast.AST | None) -> bool:
    return (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
            and node.func.id == "harness_limit")


def _reasons(tree: ast.AST):
    """Each reason expression: NotExpressible(...)'s first argument and what a `*limits`
    method returns (both arms of a conditional)."""
    for node in ast.walk(tree):
        if (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
                and node.func.id in REFUSING and node.args):
            yield node.args[0]
        if isinstance(node, ast.FunctionDef) and node.name.endswith("limits"):
            for ret in (n for n in ast.walk(node) if isinstance(n, ast.Return)):
                value = ret.value
                yield from ((value.body, value.orelse) if isinstance(value, ast.IfExp)
                            else (value,))


def unmarked_suite_rules(source: str, name: str = "<source>") -> list[str]:
    """'name:line: words' of every reason that reads as the suite's rule, not marked."""
    found = []
    for reason in _reasons(ast.parse(source)):
        words = _text(reason)
        if not _marked(reason) and SUITE_RULE.search(words):
            found.append(f"{name}:{reason.lineno}: {words[:80]}")
    return found


def test_the_scan_catches_a_planted_unmarked_rule_and_passes_a_marked_one():
    planted = '''
from conformance.contract.runner import NotExpressible, harness_limit
class R:
    def translate(self, case):
        if case.decode is None:
            return NotExpressible("this runner decodes: the case has no decode section")
        return NotExpressible(harness_limit("this runner decodes: marked"))
    def model_limits(self, case):
        return None if case.attention.alibi else ("no alibi: FooModel always passes one")
    def other(self):
        return NotExpressible("grouped-query: Foo has one key/value head per query head")
'''
    found = unmarked_suite_rules(planted)
    assert sorted(f.split(":")[1] for f in found) == ["6", "9"], found


def test_no_runner_reason_passes_the_suite_s_rule_as_the_system_s():
    found = [f for path in sorted(RUNNERS.rglob("*.py"))
             for f in unmarked_suite_rules(path.read_text(), str(path.relative_to(RUNNERS)))]
    assert not found, "wrap these reasons in contract.runner.harness_limit:\n" + \
        "\n".join(found)


def _plain_case():
    return make_case(id="plain", attention={"num_heads": 2, "query_features": 8},
                     inputs={"self_attention": True})


@pytest.mark.parametrize("target", [
    "conformance.runners.torch.sdpa_cache:TorchSDPACache",
    "conformance.runners.mlx.sdpa_cache:MlxSDPACache",
    "conformance.runners.keras.cached:KerasCached",
    "conformance.runners.hf.mpt:HFMpt",
    "conformance.runners.hf.bloom:HFBloom",
])
def test_a_runner_s_own_rule_reaches_the_rows_marked_and_is_not_a_refusal(target):
    """translate (no framework imported) of a case the runner's rule turns away: the
    reason is a harness limit, and the refusals cell of such rows counts no refusal."""
    import importlib

    module, _, cls = target.partition(":")
    try:
        runner = getattr(importlib.import_module(module), cls)()
    except (ImportError, AttributeError) as exc:
        pytest.skip(f"{target}: {exc}")
    t = runner.translate(_plain_case())
    assert isinstance(t, NotExpressible) and t.reason.startswith(HARNESS_LIMIT), t
    rows = [row("plain", runner.name, Outcome.NOT_EXPRESSIBLE, reason=t.reason),
            row("ran", runner.name)]
    (cell,) = [c for c in derive(rows, [fake(runner.name)]) if c.axis == "refusals"]
    assert cell.value == "none", cell.evidence
    assert "1 harness limit(s), not the system's" in cell.evidence


def test_a_harness_limit_about_float64_is_not_the_system_s_float64_refusal():
    """The planted defect: the suite's graph cannot hold a float64 case; the system's
    float64_compute cell stays unsettled rather than reading `refused`."""
    from conformance.contract.runner import harness_limit

    rows = [row("f64", "fake.h", Outcome.NOT_EXPRESSIBLE, dtype="float64",
                reason=harness_limit("this runner's graph is built in float32 only"))]
    assert not [c for c in derive(rows, [fake("fake.h")]) if c.axis == "float64_compute"]
    rows = [row("f64", "fake.h", Outcome.NOT_EXPRESSIBLE, dtype="float64",
                reason="the runtime has no float64 kernel")]
    (cell,) = [c for c in derive(rows, [fake("fake.h")]) if c.axis == "float64_compute"]
    assert cell.value == "refused"


def test_a_form_the_harness_cannot_ask_sends_the_probe_on_to_the_next_form():
    """The planted runner takes self-attention only, by the suite's rule (a harness limit,
    GPT-2's causal-only model is one): the written cross-attention form is not asked, and
    the self-attention form is, where the system answers."""
    from conformance.contract.runner import Observation, Runner, Translation, harness_limit
    from conformance.conventions.probes.forms import first_taken, forms
    from conformance.oracle.reference import attention

    class SelfOnly(Runner):
        name, framework, system = "toy.self-only", "toy", "toy.api"

        def translate(self, case):
            if not case.inputs.self_attention:
                return NotExpressible(harness_limit("this runner models self-attention only"))
            return Translation("toy()")

        def run(self, case, translation, data):
            return Observation(output=attention(case, data).output)

    case, got, note = first_taken(SelfOnly(), forms("probe-x", inputs={"key_len": 5}))
    assert case.inputs.self_attention and got.answered, got
    assert "this runner models self-attention only" in note
