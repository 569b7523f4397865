"""The README is the first hour of a new user: short, its commands and its case real, and
every document it points to present."""
from __future__ import annotations

import re

from conformance.case.loader import load_file
from conformance.paths import ROOT

README = (ROOT / "README.md").read_text(encoding="utf-8")


def test_the_readme_fits_on_a_few_screens():
    assert len(README.splitlines()) <= 250


def test_the_readme_shows_the_two_commands_first():
    run = README.index("## Run")
    assert README.index("python -m pytest -n 2") > run
    assert README.index("python -m pytest tests -n 2") > run
    assert README.index("python -m pytest -n 2") < README.index("## Read the report")


def test_every_linked_document_exists():
    links = re.findall(r"\]\((docs/[^)#]+)", README)
    assert len(links) >= 10
    missing = [link for link in links if not (ROOT / link).is_file()]
    assert missing == []


def test_the_readme_case_is_a_valid_case(tmp_path):
    block = re.search(r"```yaml\n(.*?)```", README, re.S).group(1)
    path = tmp_path / "readme_case.yaml"
    path.write_text(block)
    cases = load_file(path)
    assert [c.id for c in cases] == ["my-gqa-causal"]


def test_the_main_job_is_the_matrix_and_tests_are_apart():
    text = (ROOT / "pyproject.toml").read_text()
    assert 'testpaths = ["cases"]' in text
    ci = (ROOT / ".ci" / "run").read_text()
    assert "pytest tests -n 2" in ci and "check-reports" in ci
