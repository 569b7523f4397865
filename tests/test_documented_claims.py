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
    EXPECTATIONS_DIR, ExpectationError, documented, load_file)
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


def test_every_file_s_claims_are_valid():
    claims = {name: documented(name, EXPECTATIONS_DIR) for name in runner_names()}
    assert sum(map(len, claims.values())) > 100


def test_no_runner_module_states_documented_conventions():
    """The claims live in the expectations files; a runner class attribute would be a
    second home the ledger no longer reads (the export runners' shared table goes last)."""
    root = Path(__file__).resolve().parent.parent / "conformance" / "runners"
    found = []
    for path in sorted(root.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            targets = getattr(node, "targets", [getattr(node, "target", None)])
            found += [path.relative_to(root).as_posix() for t in targets
                      if isinstance(t, ast.Name) and t.id == "documented_conventions"
                      or isinstance(t, ast.Attribute) and t.attr == "documented_conventions"]
    assert sorted(found) == sorted(STILL_STATED), found


# the three runners that take the export answers' shared table (runners/_export/
# torch_export_answers.py DOCUMENTED, another task's file): their claims are in their
# expectations files already, the attribute is read by nothing
STILL_STATED = ["executorch/xnnpack.py", "onnx/torch_export.py", "openvino/mha.py"]
