"""plugin/plain_imports.py: pytest does not assert-rewrite the suite's own package (it holds
no assert; rewriting parsed and compiled ~430 modules again in every pytest process), while
the test modules keep their rewritten asserts."""
from __future__ import annotations

import ast
import sys

from conformance.paths import ROOT
from conformance.plugin import plain_imports

REWRITER = "AssertionRewritingHook"


def test_the_suite_s_modules_in_this_session_are_plain_and_tests_rewritten():
    import conformance.plugin.items
    import conformance.run.evaluate

    for module in (conformance.run.evaluate, conformance.plugin.items):
        assert type(module.__spec__.loader).__name__ != REWRITER, module.__name__
    assert type(sys.modules[__name__].__spec__.loader).__name__ == REWRITER


def test_the_package_holds_no_assert_a_rewrite_would_change():
    """What makes leaving it plain safe: no module of the package asserts."""
    found = [f"{path.relative_to(ROOT)}:{node.lineno}"
             for path in sorted((ROOT / "conformance").rglob("*.py"))
             for node in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
             if isinstance(node, ast.Assert)]
    assert found == []


class AssertionRewritingHook:
    """A planted hook with pytest's name and fields: the package marked, as pytest marks it."""

    def __init__(self, marked):
        self._must_rewrite = set(marked)
        self._marked_for_rewrite_cache = {name: True for name in marked} | {
            "conformance.run.evaluate": True, "numpy": False}


class OtherFinder:
    def __init__(self):
        self._must_rewrite = {"conformance"}


def test_planted_hooks_lose_the_package_and_keep_everything_else():
    hook = AssertionRewritingHook({"conformance", "conformance.plugin", "conformance_x",
                                   "mypackage"})
    other = OtherFinder()
    assert plain_imports.unmark([other, hook]) == 1
    assert hook._must_rewrite == {"conformance_x", "mypackage"}
    assert hook._marked_for_rewrite_cache == {"conformance_x": True, "mypackage": True,
                                              "numpy": False}
    assert other._must_rewrite == {"conformance"}  # not pytest's hook: left alone
    assert plain_imports.unmark([hook]) == 0  # nothing of ours left: unchanged


def test_a_hook_without_the_fields_is_left_as_it_is():
    class AssertionRewritingHookOfAnotherPytest:
        pass

    hook = AssertionRewritingHook({"conformance"})
    del hook._must_rewrite
    assert plain_imports.unmark([hook, AssertionRewritingHookOfAnotherPytest()]) == 0
