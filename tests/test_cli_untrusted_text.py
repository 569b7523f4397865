"""What a case file holds reaches the terminal as visible text, never as a command to it
(text_safety.visible): `validate`, `list` and `show` on a planted case file with ANSI
escapes, an OSC window title, clear screen, carriage returns, forged lines and bidi
overrides in its title, id and file name.  And one bad file among good ones is one line
of `list` and `show`, the good ones still shown, no traceback."""
from __future__ import annotations

import re

import pytest

from conformance.cli.text_safety import visible
from tests.inprocess import cli

# every character a terminal obeys, and ones a reader's eye is misled by
HOSTILE = ("\x1b]0;pwned\x07", "\x1b[2J\x1b[H", "\x1b[31mred", "\x9b31m", "a\rb", "a\nb",
           "\x08\x7f\x00", "\u202eevil\u202c", "\u2066x\u2069", "\u200f\u061c", "\u2028",
           "\ud800")
OBEYED = re.compile("[\x00-\x1f\x7f-\x9f\u061c\u200e\u200f\u2028-\u202e\u2066-\u2069"
                    "\ud800-\udfff]")
FORGED = "ok      forged.yaml: 1 case(s)"
# a title with each of them, written as YAML escapes (the file itself is plain ASCII)
TITLE = r'"T \e]0;pwned\a \e[2J \e[31mred \x9b \r\nok      forged.yaml: 1 case(s) \u202eevil"'
GOOD = """cases:
  - id: good-one
    title: {title}
    attention: {{num_heads: 1, query_features: 4}}
    inputs: {{batch: 1, query_len: 2, self_attention: true}}
"""


@pytest.mark.parametrize("text", HOSTILE)
def test_visible_leaves_nothing_a_terminal_obeys(text):
    shown = visible(text)
    assert OBEYED.search(shown) is None, repr(shown)
    assert shown != text and visible(shown) == shown  # escaped, and escaping twice is a no-op


def test_visible_names_each_character_and_keeps_the_rest():
    assert visible("\x1b[2J") == "\\x1b[2J"
    assert visible("a\rb\nc\td") == "a\\x0db\\x0ac\\x09d"
    assert visible("\u202eabc\u2069") == "<U+202E>abc<U+2069>"
    assert visible("é 日本 🙂 C:\\x") == "é 日本 🙂 C:\\x"


@pytest.fixture
def hostile_folder(tmp_path):
    cases = tmp_path / "cases"
    cases.mkdir()
    (cases / "good.yaml").write_text(GOOD.format(title=TITLE))
    (cases / "evil\x1b[2J\u202e.yaml").write_text(
        'cases:\n  - id: "bad\\e[2J\\u202e"\n    attention: {num_heads: 1}\n')
    return cases


def assert_clean(done) -> str:
    text = done.stdout + done.stderr
    assert "Traceback" not in text
    assert OBEYED.search(text.replace("\n", "")) is None, repr(text[:2000])
    assert not any(line.startswith(FORGED) for line in text.splitlines()), text
    return text


def test_validate_shows_hostile_names_and_values(hostile_folder):
    done = cli("validate", hostile_folder)
    text = assert_clean(done)
    assert done.returncode == 1
    assert "evil\\x1b[2J<U+202E>.yaml" in text  # the file name, shown
    assert "ok      " in text and "good.yaml: 1 case(s)" in text


def test_list_shows_the_good_cases_and_one_line_for_the_bad_file(hostile_folder):
    done = cli("list", "--cases-dir", hostile_folder)
    text = assert_clean(done)
    assert done.returncode == 1  # a bad file: the folder is not clean
    assert "good-one: T \\x1b]0;pwned\\x07 \\x1b[2J" in done.stdout
    assert "\\x0d\\x0aok      forged.yaml" in done.stdout and "<U+202E>evil" in done.stdout
    bad = [line for line in done.stderr.splitlines() if "evil" in line]
    assert len(bad) == 1 and bad[0].startswith("list: invalid ") and "'id'" in bad[0], text


def test_show_shows_one_case_though_another_file_is_bad(hostile_folder, tmp_path):
    done = cli("show", "good-one", "--cases-dir", hostile_folder,
               "--results", tmp_path / "none.json")
    text = assert_clean(done)
    assert done.returncode == 0, text
    assert done.stdout.startswith("good-one: T \\x1b]0;pwned")
    assert "parameters by the formula:" in done.stdout
    assert [line for line in done.stderr.splitlines() if "evil" in line][0].startswith(
        "show: invalid ")
    missing = cli("show", "bad", "--cases-dir", hostile_folder)
    assert missing.returncode == 1 and "no case 'bad'" in assert_clean(missing)


def test_a_folder_that_is_not_one_is_one_line(tmp_path):
    for command in (("list",), ("show", "x")):
        done = cli(*command, "--cases-dir", tmp_path / "nowhere")
        assert done.returncode == 1 and "not a folder of case files" in assert_clean(done)


def test_merge_and_check_reports_show_what_a_shard_holds_without_obeying_it(tmp_path, capsys):
    """A shard's text reaches merge's error line and check-reports' change lines: the CLI
    prints them through text_safety, so an ESC or U+202E arrives shown, not obeyed."""
    from argparse import Namespace

    from conformance.cli.reports import merge
    from conformance.paths import CASES_DIR

    shard = tmp_path / "shard\x1b]0;owned\x07\u202e.json"
    shard.write_text('{"rows": "\x1b[2J"}')
    code = merge(Namespace(shards=[str(shard)], out=str(tmp_path / "out"),
                          cases_dir=str(CASES_DIR)))
    err = capsys.readouterr().err
    assert code != 0 and "merge:" in err
    assert "\x1b" not in err and "\u202e" not in err and "\x07" not in err
