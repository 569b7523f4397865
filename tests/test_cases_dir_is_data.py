"""`--cases-dir=DIR` reads DIR's case files and nothing else: a conftest.py, test_*.py or
__init__.py in DIR is never imported, and its pytest.ini / pyproject.toml / tox.ini /
setup.cfg never configure the run (the plugin lists DIR's files itself and collects them
under its own file, items.ListedCases).  Each planted file writes a marker when run."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
RUNNER = "matlab.selfAttentionLayer"  # a documented model: NumPy only, no framework
TINY = """cases:
  - id: tiny-one
    title: "one head, two queries"
    attention: {num_heads: 1, query_features: 4}
    inputs: {batch: 1, query_len: 2, self_attention: true}
"""
CODE = ("conftest.py", "test_planted.py", "__init__.py")
# each would stop the run (a pytest that requires version 99) if pytest read it
CONFIGS = {"pytest.ini": "[pytest]\nminversion = 99\n",
           "pyproject.toml": '[tool.pytest.ini_options]\nminversion = "99"\n',
           "tox.ini": "[pytest]\nminversion = 99\n",
           "setup.cfg": "[tool:pytest]\nminversion = 99\n"}


@pytest.fixture
def planted(tmp_path) -> Path:
    cases = tmp_path / "their-cases"
    cases.mkdir()
    (cases / "tiny.yaml").write_text(TINY)
    (cases / "bad.yaml").write_text("cases:\n  - id: Bad Id\n")
    for name in CODE:
        marker = tmp_path / f"ran-{name}"
        (cases / name).write_text(f"open({str(marker)!r}, 'w').write('ran')\n"
                                  "def test_planted():\n    pass\n")
    for name, text in CONFIGS.items():
        (cases / name).write_text(text)
    return cases


def run_pytest(cwd: Path, *args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", *args],
                          cwd=cwd, env=env, capture_output=True, text=True, timeout=300)


def ran(cases: Path) -> list[str]:
    return sorted(p.name for p in cases.parent.glob("ran-*"))


def test_a_cases_folder_runs_no_code_and_sets_no_config(planted, tmp_path):
    """From the repository (its conftest loads the plugin) and from elsewhere (-p): the
    case's item runs, the bad file is its error item, no planted file ran."""
    for cwd, extra in ((ROOT, ()), (tmp_path, ("-p", "conformance.plugin"))):
        done = run_pytest(cwd, *extra, f"--cases-dir={planted}", "--runner", RUNNER,
                          f"--report-dir={tmp_path / 'out'}", "-rA")
        text = done.stdout + done.stderr
        assert "1 failed, 1 passed in" in text, text[-3000:]
        assert f"tiny.yaml::tiny-one[{RUNNER}]" in text and "bad.yaml::case-file-error" in text
        assert "minversion" not in text and "test_planted" not in text, text[-3000:]
        assert ran(planted) == [], cwd


def test_the_planted_files_would_run_if_pytest_walked_the_folder(planted, tmp_path):
    """The plant is live: naming the folder as a path hands it to pytest, which imports
    its conftest.py (and reads its pytest.ini), so the test above can fail."""
    (planted / "pytest.ini").unlink()  # else pytest stops at minversion before importing
    for name in ("pyproject.toml", "tox.ini", "setup.cfg"):
        (planted / name).unlink()
    run_pytest(tmp_path, "-p", "conformance.plugin", str(planted), f"--cases-dir={planted}",
               "--runner", RUNNER, f"--report-dir={tmp_path / 'out'}", "--collect-only")
    assert "ran-conftest.py" in ran(planted)


def test_listed_items_keep_the_yaml_node_id(planted, tmp_path):
    """Items of a listed folder read as `<file>.yaml::<case>[<runner>]` (the progress line
    and xdist grouping parse that form), relative to the rootdir when inside it."""
    from conformance.plugin.parallel import _RUNNER_IN_ID
    from conformance.plugin.progress import item_key

    done = run_pytest(tmp_path, "-p", "conformance.plugin", f"--cases-dir={planted}",
                      "--runner", RUNNER, "--collect-only", "-q")
    ids = [line for line in done.stdout.splitlines() if "::" in line]
    assert ids == ["their-cases/bad.yaml::case-file-error",
                   f"their-cases/tiny.yaml::tiny-one[{RUNNER}]"], done.stdout[-2000:]
    assert item_key(ids[1]) == (RUNNER, "tiny-one") and _RUNNER_IN_ID.search(ids[1])
    assert ran(planted) == []


def test_a_cases_dir_that_is_not_a_folder_is_a_usage_error(tmp_path):
    """Listed by the plugin, a missing folder would otherwise be an empty run."""
    (tmp_path / "a-file").write_text(TINY)
    for given in ("nowhere", "a-file"):
        done = run_pytest(tmp_path, "-p", "conformance.plugin", f"--cases-dir={given}")
        assert done.returncode == pytest.ExitCode.USAGE_ERROR, done.stdout[-2000:]
        assert f"--cases-dir {given}: not a folder" in done.stderr


def test_a_run_configured_from_inside_the_folder_is_refused(planted, tmp_path):
    """`--cases-dir DIR` with a space: pytest's ini search (before any plugin option is
    known) takes DIR for a test path and reads DIR's pytest.ini; the plugin refuses that
    run before any item, naming the file and the `=` form."""
    for name in ("pyproject.toml", "tox.ini", "setup.cfg"):
        (planted / name).unlink()
    (planted / "pytest.ini").write_text("[pytest]\n")  # read, but stops nothing by itself
    done = run_pytest(tmp_path, "-p", "conformance.plugin", "--cases-dir", str(planted),
                      "--runner", RUNNER, f"--report-dir={tmp_path / 'out'}")
    assert done.returncode == pytest.ExitCode.USAGE_ERROR, done.stdout[-2000:]
    assert f"configured by {planted / 'pytest.ini'}" in done.stderr
    assert "--cases-dir=DIR" in done.stderr and ran(planted) == []


def test_the_space_form_from_the_repository_runs_no_code(planted, tmp_path):
    """`--cases-dir DIR` with a space, from the repository with no -p: the installed
    plugin (a pytest11 entry point) is loaded before pytest reads the command line, so DIR
    is the option's value, never a test path whose conftest.py pytest would import."""
    from importlib.metadata import entry_points

    if "conformance.plugin" not in {e.name for e in entry_points(group="pytest11")}:
        pytest.skip("the suite is not pip-installed here (no pytest11 entry point)")
    for name in CONFIGS:
        (planted / name).unlink()
    done = run_pytest(ROOT, "--cases-dir", str(planted), "--runner", RUNNER,
                      f"--report-dir={tmp_path / 'out'}", "-rA")
    text = done.stdout + done.stderr
    assert f"tiny.yaml::tiny-one[{RUNNER}]" in text and "1 failed, 1 passed in" in text, \
        text[-3000:]
    assert ran(planted) == [] and "test_planted" not in text
