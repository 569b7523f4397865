"""A new runner is its module, one registry line and its expectations file (#16 part 5).

The test adds a toy framework the way a contributor would, in a temporary
project: `<project>/toyframework/attention.py` (a Runner subclass declaring everything the
suite reads of a runner: its README line, its seconds per item, a probe cell),
the registry line (CONFORMANCE_EXTRA_RUNNERS, the out-of-tree spelling of a line
in conformance/runners/__init__.py) and `expectations/toy.numpy.yaml` (its pinned
convention cells, written by --update-conventions and then checked).  Nothing else
is edited: it runs the matrix through the real plugin and finds the toy in every
report section and ledger column that applies.
"""
from __future__ import annotations

import json

import pytest

from conformance.runners import EXTRA_ENV, registry, runner_table
from conformance.report.results_files import read_results

pytest_plugins = ["pytester"]

TOY_MODULE = '''
from conformance.contract.runner import Observation, Runner, Translation
from conformance.contract.api_facts import ApiFact
from conformance.oracle.reference import attention, formula_parameters


class ToyAttention(Runner):
    name, framework, system = "toy.numpy", "toy", "toy.Attention"
    description = "a toy framework: the float64 reference in NumPy"
    seconds = 0.01

    def translate(self, case):
        a = case.attention
        return Translation(f"toy.Attention(heads={a.num_heads}, features={a.query_features})")

    def run(self, case, translation, data):
        exp = attention(case, data)
        a = case.attention
        return Observation(output=exp.output, attention_weights=exp.weights,
                           weights_returned="per_head", parameters=formula_parameters(case),
                           weight_shapes={"w_query": (a.query_features,
                                                      a.num_heads * a.qk_head_dim)})

    def conventions(self):
        return [ApiFact("mask_on_tensor", "none", "a NumPy array carries no mask")]
'''
CASES = {
    "plain.yaml": "id: toy-plain\nattention: {num_heads: 2, query_features: 8}\n"
                  "inputs: {batch: 1, query_len: 3, key_len: 4}\n",
    "causal.yaml": "id: toy-causal\nattention: {num_heads: 2, query_features: 8}\n"
                   "inputs: {batch: 1, query_len: 3}\nmask: {causal: upper_left}\n",
}
TOUCHED = ("toyframework/__init__.py", "toyframework/attention.py",
           f"{EXTRA_ENV}=toyframework.attention:ToyAttention", "expectations/toy.numpy.yaml")


@pytest.fixture
def toy_project(pytester, monkeypatch):
    (pytester.path / "toyframework").mkdir()
    (pytester.path / "toyframework" / "__init__.py").write_text("")
    (pytester.path / "toyframework" / "attention.py").write_text(TOY_MODULE)
    (pytester.path / "expectations").mkdir()
    (pytester.path / "cases").mkdir()  # the shipped-style cases the matrix runs (not edited)
    for name, text in CASES.items():
        (pytester.path / "cases" / name).write_text(text)
    monkeypatch.setenv(EXTRA_ENV, "toyframework.attention:ToyAttention")
    monkeypatch.setenv("PYTHONPATH", str(pytester.path))
    monkeypatch.syspath_prepend(str(pytester.path))
    return pytester


def _run(project, *args):
    return project.runpytest_inprocess(
        "-p", "conformance.plugin", "-p", "no:cacheprovider",
        "--cases-dir", str(project.path / "cases"), "--runner", "toy.numpy",
        f"--expectations-dir={project.path / 'expectations'}",
        f"--report-dir={project.path / 'reports'}", *args)


def _section(md: str, title: str) -> str:
    parts = md.split(f"## {title}\n")
    return parts[1].split("\n## ")[0] if len(parts) > 1 else ""


def test_a_toy_runner_in_three_places_reaches_every_report_and_ledger_column(toy_project):
    p = toy_project
    first = _run(p, "-q")  # no cell pinned yet: the conventions item fails, naming the fix
    first.assert_outcomes(passed=2, failed=1)
    first.stdout.fnmatch_lines(["*toy.numpy: not pinned in*", "*softmax_scale: inv_sqrt_head_dim*"])
    _run(p, "-q", "--update-expectations").assert_outcomes(passed=3)
    pinned = (p.path / "expectations" / "toy.numpy.yaml").read_text()
    assert "conventions:" in pinned and "  softmax_scale: inv_sqrt_head_dim\n" in pinned
    _run(p, "-q").assert_outcomes(passed=3)  # now checked against its own file

    index = (p.path / "reports" / "index.md").read_text()
    md = (p.path / "reports" / "details.md").read_text()  # every table past the answers
    assert "toy.numpy" in index
    assert "| toy.numpy | 2 |" in _section(md, "Outcomes")
    assert "toy.numpy" in _section(md, "Parameter counts")
    assert "| toy-plain | ✓ 0 / 0 |" in _section(md, "Numerical agreement")
    assert "| case | toy.numpy |" in _section(md, "Per-head attention weights")
    for title in ("Keras: differences", "ONNX graphs"):  # they do not apply to it
        assert f"## {title}" not in md and f"## {title}" not in index
    page = (p.path / "reports" / "cases" / "toy-plain.md").read_text()
    assert "- call: toy.Attention(heads=2, features=8)" in page
    ledger = json.loads((p.path / "reports" / "conventions.json").read_text())
    assert ledger["systems"][-1]["id"] == "toy.numpy"  # its column, after the registry's
    cells = {c["axis"]: c for c in ledger["cells"] if c["system"] == "toy.numpy"}
    assert cells["softmax_scale"]["value"] == "inv_sqrt_head_dim"  # its probe
    assert cells["returned_weights"]["value"] == "per_head"  # derived from its rows
    assert "toy.numpy" in (p.path / "reports" / "conventions.md").read_text()
    rows = read_results(p.path / "reports" / "results.json")["rows"]
    assert {(r["case"], r["runner"], r["outcome"]) for r in rows} == {
        ("toy-plain", "toy.numpy", "pass"), ("toy-causal", "toy.numpy", "pass")}
    print("files touched to add the runner:", ", ".join(TOUCHED))


def test_what_the_suite_reads_of_a_runner_comes_from_its_class(toy_project):
    """The README line and the shard cost of the toy come from its class: no table of
    the suite names it."""
    from conformance.plugin.parallel import group_costs
    from conformance.runners import load

    toy = load(*registry()[-1])
    assert toy.name == "toy.numpy"
    assert "| `toy.numpy` | a toy framework: the float64 reference in NumPy |" in runner_table()
    assert group_costs([toy], 100, {}) == {"toy.numpy": pytest.approx(1.0)}
    assert group_costs([toy], 100, {"toy.numpy": 0.5}) == {"toy.numpy": pytest.approx(50.0)}


def test_the_readme_runner_table_is_the_registry_s(monkeypatch):
    """docs/runners.md's runner table is `runner_table()` of the shipped registry, so a new
    runner's line comes from its class `description` (regenerate: paste runner_table())."""
    from conformance.paths import ROOT
    from conformance.runners import all_runners

    monkeypatch.delenv(EXTRA_ENV, raising=False)
    assert all(r.description for r in all_runners()), "every runner class has a description"
    readme = (ROOT / "docs" / "runners.md").read_text(encoding="utf-8")
    assert runner_table() in readme


def test_the_readme_check_fails_on_a_stale_table(monkeypatch):
    monkeypatch.delenv(EXTRA_ENV, raising=False)
    table = runner_table()
    stale = table.replace("`torch.sdpa` | ", "`torch.sdpa` | old words, ", 1)
    assert stale != table and table not in stale
