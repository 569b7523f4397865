"""Figures drawn once per set of inputs (report/figure_cache.py): the cached bytes are the
drawn bytes, and any input a figure is drawn from, changed, draws it again."""
from __future__ import annotations

import pytest

from conformance.cache import CACHE_ENV
from conformance.report import figure_cache, plots
from conformance.report.base import results_frame

from tests.helpers import require

from .report_rows import FakeCase, make_row, stand_in

require("matplotlib")

FAKE = stand_in("fake.one", "fake", "fake.Attention")
OTHER = stand_in("other.two", "other", "other.Attention")
CASES = [FakeCase("a", has_fully_masked_rows=True), FakeCase("b")]


def _rows(error: float = 3e-4):
    return [make_row("a", FAKE, fully_masked_row="nan", typed={"heads": 2}),
            make_row("a", OTHER, fully_masked_row="zeros", typed={"heads": 2}),
            make_row("b", FAKE, max_abs_error=error),
            make_row("b", OTHER, "mismatch", max_abs_error=0.5)]


@pytest.fixture
def drawn(monkeypatch, tmp_path):
    """The names of the figures drawn (not taken from the cache), in a fresh cache."""
    monkeypatch.setenv(CACHE_ENV, str(tmp_path / "cache"))
    names = []
    for name, maker in list(plots._MAKERS.items()):
        def counted(*args, _maker=maker, _name=name):
            names.append(_name)
            return _maker(*args)
        monkeypatch.setitem(plots._MAKERS, name, counted)
    return names


def test_a_figure_comes_from_the_cache_with_the_drawn_bytes(drawn):
    frame = results_frame(_rows())
    first = plots.make_figures(frame, CASES, [FAKE, OTHER])
    assert sorted(first) == sorted(plots.FIGURES) and sorted(drawn) == sorted(plots.FIGURES)
    again = plots.make_figures(frame, CASES, [FAKE, OTHER])
    assert again == first and len(drawn) == len(plots.FIGURES)  # nothing drawn again


def test_a_changed_input_draws_again(drawn):
    plots.make_figures(results_frame(_rows()), CASES, [FAKE, OTHER])
    drawn.clear()
    plots.make_figures(results_frame(_rows(error=4e-4)), CASES, [FAKE, OTHER])
    assert sorted(drawn) == sorted(plots.FIGURES)  # one error figure: every figure's key
    drawn.clear()
    plots.make_figures(results_frame(_rows()), CASES, [OTHER, FAKE])  # runner order
    assert sorted(drawn) == sorted(plots.FIGURES)


def test_the_libraries_settings_are_in_the_key():
    from matplotlib import rc_context

    frame = results_frame(_rows())
    plots._settings()
    before = figure_cache.drawing_key(frame, CASES, [FAKE, OTHER])
    with rc_context({"font.size": 11}):
        assert figure_cache.drawing_key(frame, CASES, [FAKE, OTHER]) != before
    assert figure_cache.drawing_key(frame, CASES, [FAKE, OTHER]) == before


def test_a_damaged_entry_is_drawn_again(drawn, capsys):
    frame = results_frame(_rows())
    first = plots.make_figures(frame, CASES, [FAKE, OTHER])
    for png in figure_cache.CACHE.directory.glob("*.png"):
        png.write_bytes(png.read_bytes()[:100])
    drawn.clear()
    assert plots.make_figures(frame, CASES, [FAKE, OTHER]) == first
    assert sorted(drawn) == sorted(plots.FIGURES) and "evicted" in capsys.readouterr().err


def test_only_the_figures_used_last_are_kept(drawn, monkeypatch):
    monkeypatch.setattr(figure_cache, "KEEP", 3)
    for error in (1e-4, 2e-4, 3e-4):
        plots.make_figures(results_frame(_rows(error)), CASES, [FAKE, OTHER])
    assert len(list(figure_cache.CACHE.directory.glob("*.png"))) == 3
    assert len(list(figure_cache.CACHE.directory.glob("*.sha256"))) == 3
    drawn.clear()
    plots.make_figures(results_frame(_rows(3e-4)), CASES, [FAKE, OTHER])  # the last set
    assert drawn == []
