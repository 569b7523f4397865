"""What a system's documentation states, as data: the `documented:` section of
expectations/<runner>.yaml (conventions/expectations.py), which the ledger's probes show
beside their cells.  Each planted defect is refused naming the file, the field and the fix;
a valid claim reaches the probe's cell; no runner module carries one."""
from __future__ import annotations

import ast
from pathlib import Path

import pytest

from conformance.contract.runner import Runner
from conformance.conventions.expectations import (
    EXPECTATIONS_DIR, ExpectationError, cited, documented, load_file)
from conformance.conventions.probes.asked import documented as cell_fields
from conformance.runners import runner_names

LINK = "https://example.org/doc"


@pytest.mark.parametrize("text, field, words", [
    ("documented: {causal_flags: {word: upper_left, source: 'https://x'}}\n",
     "documented.causal_flags", "unknown axis"),
    ("documented: {causal_flag: {word: sideways, source: 'https://x'}}\n",
     "documented.causal_flag.word", "not in the vocabulary"),
    ("documented: {causal_flag: {word: upper_left, source: docs.html}}\n",
     "documented.causal_flag.source", "https link"),
    ("documented: {causal_flag: {word: upper_left}}\n",
     "documented.causal_flag.source", "https link"),
    ("documented: {causal_flag: {word: upper_left, link: 'https://x'}}\n",
     "documented.causal_flag.link", "word optional"),
    ("documented: {causal_flag: upper_left}\n", "documented.causal_flag", "mapping"),
    ("documented: [causal_flag]\n", "documented", "mapping"),
])
def test_a_bad_claim_names_file_field_and_fix(tmp_path, text, field, words):
    path = tmp_path / "toy.yaml"
    path.write_text(text)
    for read in (lambda: load_file(path, "toy"), lambda: documented("toy", tmp_path)):
        with pytest.raises(ExpectationError) as err:
            read()
        assert field in str(err.value) and words in str(err.value) and "toy.yaml" in str(
            err.value)


def test_a_claim_is_read_with_or_without_a_word(tmp_path):
    (tmp_path / "toy.yaml").write_text(
        "documented:\n"
        "  causal_flag:\n"
        "    word: upper_left\n"
        f"    source: {LINK}\n"
        "  cache_layout:\n"
        f"    source: {LINK}\n")
    assert documented("toy", tmp_path) == {"causal_flag": ("upper_left", LINK),
                                           "cache_layout": (None, LINK)}
    assert documented("absent", tmp_path) == {}


def test_the_probes_show_the_file_s_claim():
    """torch.sdpa's documentation states upper_left for its causal flag: the field every
    probe cell of the axis carries comes from its expectations file."""
    runner = Runner()
    runner.name = "torch.sdpa"
    fields = cell_fields(runner, "causal_flag")
    assert fields["documented"] == "upper_left"
    assert fields["documented_source"].startswith("https://docs.pytorch.org/")
    runner.name = "planted.none"
    assert cell_fields(runner, "causal_flag") == {"documented": None, "documented_source": ""}


CITED = "cited: {causal_flag: {word: upper_left, evidence: 'the page says so', source: '%s'%s}}\n"


@pytest.mark.parametrize("text, field, words", [
    (CITED.replace("causal_flag", "causal_flags") % (LINK, ""), "cited.causal_flags",
     "unknown axis"),
    (CITED.replace("upper_left", "sideways") % (LINK, ""), "cited.causal_flag.word",
     "not in the vocabulary"),
    (CITED % (LINK, ", documented: sideways"), "cited.causal_flag.documented",
     "not in the vocabulary"),
    (CITED % ("docs.html", ""), "cited.causal_flag.source", "https link"),
    (CITED.replace("'the page says so'", "''") % (LINK, ""), "cited.causal_flag.evidence",
     "quotation"),
    (CITED % (LINK, ", quote: x"), "cited.causal_flag.quote", "an entry is"),
    ("cited: {causal_flag: {word: upper_left, source: 'https://x'}}\n", "cited.causal_flag",
     "an entry is"),
])
def test_a_bad_cited_cell_names_file_field_and_fix(tmp_path, text, field, words):
    """A documented model's cells are data too: each planted defect is refused."""
    path = tmp_path / "toy.yaml"
    path.write_text(text)
    for read in (lambda: load_file(path, "toy"), lambda: cited("toy", tmp_path)):
        with pytest.raises(ExpectationError) as err:
            read()
        assert field in str(err.value) and words in str(err.value), str(err.value)


def test_a_documented_model_s_ledger_cells_are_its_cited_data(tmp_path, monkeypatch):
    """The ledger reads a model's cells from its file (not from runner code): a planted
    citation is what the ledger shows, and an unstated behaviour may be not_probed."""
    from conformance.conventions.probes import ledger_cells
    from conformance.runners.documented.matlab import MatlabSelfAttentionModel

    (tmp_path / "matlab.selfAttentionLayer.yaml").write_text(
        "cited:\n"
        f"  causal_flag: {{word: upper_left, evidence: the page says so, source: '{LINK}', "
        "documented: upper_left}\n"
        f"  dropout: {{word: not_probed, evidence: not documented, source: '{LINK}'}}\n")
    monkeypatch.setattr("conformance.conventions.expectations.EXPECTATIONS_DIR", tmp_path)
    cells = {c.axis: c for c in ledger_cells(MatlabSelfAttentionModel())}
    assert cells["causal_flag"].evidence == "the page says so"
    assert cells["causal_flag"].documented == "upper_left"
    assert cells["dropout"].value == "not_probed"
    assert cells["mask_fill"].value == "not_probed"  # the ledger's own probe, not cited


def test_every_file_s_claims_are_valid():
    claims = {name: documented(name, EXPECTATIONS_DIR) for name in runner_names()}
    assert sum(map(len, claims.values())) > 100


def test_no_runner_module_states_documented_conventions():
    """The claims live in the expectations files; a runner class attribute would be a
    second home the ledger no longer reads."""
    root = Path(__file__).resolve().parent.parent / "conformance" / "runners"
    found = []
    for path in sorted(root.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            targets = getattr(node, "targets", [getattr(node, "target", None)])
            found += [path.relative_to(root).as_posix() for t in targets
                      if isinstance(t, ast.Name) and t.id == "documented_conventions"
                      or isinstance(t, ast.Attribute) and t.attr == "documented_conventions"]
    assert found == [], found
