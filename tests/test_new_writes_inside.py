"""`new` writes one new file directly in the cases folder (or the --output named), never
through a symlink and never for an id that is not a case id: each planted way out of
the folder is refused with one line naming the id or path and the fix, and nothing is
written anywhere, not even for a moment."""
from __future__ import annotations

import os

import pytest

from conformance.case.loader import CaseError, parse_case
from tests.inprocess import cli


def tree(root) -> set[str]:
    return {str(p.relative_to(root)) for p in root.rglob("*")}


@pytest.fixture
def folder(tmp_path):
    cases = tmp_path / "a" / "b" / "cases"
    cases.mkdir(parents=True)
    return cases


def test_a_dangling_symlink_out_of_the_folder_is_not_written_through(folder, tmp_path):
    outside = tmp_path / "outside.yaml"
    (folder / "x.yaml").symlink_to(outside)
    done = cli("new", "--cases-dir", folder, "--id", "x")
    assert done.returncode == 1 and not outside.exists()
    assert f"{folder / 'x.yaml'}: a symlink, not replaced; choose --id" in done.stderr
    assert "Traceback" not in done.stderr
    output = tmp_path / "mine.yaml"
    output.symlink_to(outside)
    done = cli("new", "--cases-dir", folder, "--output", output)
    assert done.returncode == 1 and not outside.exists() and "a symlink" in done.stderr


def test_a_symlink_made_after_the_check_is_not_written_through(folder, tmp_path,
                                                                 monkeypatch):
    """The write itself refuses a link (O_NOFOLLOW | O_EXCL), whatever the check saw."""
    from conformance.cli import new

    outside = tmp_path / "outside.yaml"
    (folder / "x.yaml").symlink_to(outside)
    monkeypatch.setattr(new.os.path, "lexists", lambda path: False)  # the check misses it
    done = cli("new", "--cases-dir", folder, "--id", "x")
    assert done.returncode == 1 and not outside.exists()
    assert f"cannot write {folder / 'x.yaml'}" in done.stderr


@pytest.mark.parametrize("case_id", ["../../x", "../x", "a/b", "/tmp/x", ".hidden", "X",
                                     "a" * 101, "x\n", "x\x1b[2J"])
def test_an_id_that_is_not_a_case_id_writes_nothing(folder, tmp_path, case_id, monkeypatch):
    from conformance.cli import new

    def no_write(*args, **kwargs):  # "never, not even briefly": any write is the defect
        raise AssertionError("new wrote a file for a bad id")

    monkeypatch.setattr(new, "_write_new", no_write)
    before = tree(tmp_path)
    done = cli("new", "--cases-dir", folder, "--id", case_id)
    assert done.returncode == 1, done.stdout + done.stderr
    assert tree(tmp_path) == before
    line = done.stderr.strip()
    assert "\n" not in line and "\x1b" not in line
    assert line.startswith("new: id ") and "is not a case id" in line and "choose --id" in line


@pytest.mark.parametrize("case_id", ["../x", "a/b", "X", ".x", "a" * 101, "a" * 100,
                                     "ok-1.2_3", "0"])
def test_new_and_the_loader_agree_on_what_an_id_is(folder, case_id):
    try:
        parse_case({"id": case_id, "attention": {"num_heads": 1, "query_features": 4}}, "t")
        loads = True
    except CaseError:
        loads = False
    done = cli("new", "--cases-dir", folder, "--id", case_id)
    assert (done.returncode == 0) == loads, done.stderr
    assert sorted(p.name for p in folder.iterdir()) == ([f"{case_id}.yaml"] if loads else [])


def test_a_bad_file_in_the_folder_is_no_traceback(folder):
    (folder / "bad.yaml").write_text("cases:\n  - id: Bad Id\n")
    done = cli("new", "--cases-dir", folder, "--id", "fresh")
    assert done.returncode == 0 and (folder / "fresh.yaml").is_file(), done.stderr
    assert not os.path.islink(folder / "fresh.yaml")
    assert oct((folder / "fresh.yaml").stat().st_mode & 0o777) == oct(0o644 & ~current_umask())


def current_umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask
