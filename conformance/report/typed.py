"""The typed-numbers section: what the numbers a user typed mean in every system.

For each case whose `typed` names a system (conformance/case/typed_numbers.py), one table:
per system, the call its user writes with the same numbers, the per-head and
total key width, the parameter count of that reading (the analytic formula),
the system's refusal where it has no word for a number, and the call that
builds the typed layer itself.  Under it, where the numbers act on the MATLAB
Answers network's 3136 features, the whole network's learnables per system
(conformance/report/digit_network.py).  Cases with free typed numbers (no system) show
them beside the analytic count.  Everything is arithmetic on the case file:
the section is deterministic and needs no framework.
"""
from __future__ import annotations

from conformance.report.digit_network import totals
from conformance.case.typed_numbers import BY_KEY, call_text, meaning
from conformance.report.base import Section

INTRO = ("What the numbers a user typed mean in each system: the call a user of that system "
         "writes with the same numbers, the key width per head and over all heads, and the "
         "parameter count that reading gives (the analytic formula); a system with no word "
         "for a number says so and shows the nearest call. 'typed layer' = the call that "
         "builds the layer the user typed, or why there is none. Under each, where the "
         "numbers act on the MATLAB Answers digit network (3136 flattened features: one "
         "position x 3136 channels), that network's learnables per system (batch norm "
         "moving mean and variance are state: Keras's count_params() includes them).")


def _n(value) -> str:
    return "" if value is None else f"{value:,}"


def no_parameters_labels() -> tuple[str, ...]:
    """The typed-numbers rows of the registry's systems that hold no parameters, from
    each runner class's `no_parameters_label` (registry order, once each)."""
    from conformance.runners import all_runners

    return tuple(dict.fromkeys(r.no_parameters_label for r in all_runners()
                               if r.no_parameters_label))


def _runner_names(runners) -> dict[str, str]:
    """System key (or label) -> the run's runner names that speak it (each runner
    class declares its `typed_system` or `no_parameters_label`)."""
    names: dict[str, list[str]] = {}
    for r in runners:
        for key in (r.typed_system, r.no_parameters_label):
            if key:
                names.setdefault(key, []).append(r.name)
    return {k: ", ".join(v) for k, v in names.items()}


def meaning_table(typed, runners=()):
    """The typed-numbers table of one case (pandas), one row per system."""
    import pandas as pd

    names = _runner_names(runners)
    rows = meaning(typed, no_parameters_labels())
    return pd.DataFrame({
        "same numbers typed there": [m.call for m in rows],
        "per head": [_n(m.per_head) for m in rows],
        "total": [_n(m.total) for m in rows],
        "parameters": [_n(m.parameters) for m in rows],
        "refusal / note": [m.note for m in rows],
        "typed layer": [m.same_layer for m in rows],
        "runners": [names.get(m.system, "") for m in rows],
    }, index=pd.Index([m.system for m in rows], name="system"))


def network_table(typed):
    """The whole network's learnables per system, or None when it does not apply."""
    import pandas as pd

    rows = totals(typed)
    if not rows:
        return None
    return pd.DataFrame({
        "attention layer": [r.call for r in rows],
        "attention": [_n(r.attention) for r in rows],
        "other layers": [_n(r.rest) for r in rows],
        "trainable": [_n(r.trainable) for r in rows],
        "state (non-trainable)": [_n(r.state) for r in rows],
        "system's own total": [_n(r.total) for r in rows],
        "counted by": [r.how for r in rows],
    }, index=pd.Index([r.system for r in rows], name="system"))


def _free_table(free):
    table = free.assign(typed_text=free["typed"].map(
        lambda t: ", ".join(f"{k}={v}" for k, v in t.items())))[
        ["case", "typed_text", "parameters_formula"]].set_index("case")
    table.columns = ["typed by the user", "parameters (formula)"]
    return table


def _first_matlab(frame) -> str | None:
    """The first case typed in MATLAB's words (the question that started the project)."""
    typed = frame.drop_duplicates("case")
    found = [c for c, t in zip(typed["case"], typed["typed"])
             if t and t.get("system") == "matlab"]
    return found[0] if found else None


def section_typed_numbers(frame, cases, runners):
    """index.md's answer: the first case typed in MATLAB's words and its network (a table
    of every system's reading: one is what the front page holds as systems are added);
    every other typed case is in details.md."""
    first = _first_matlab(frame)
    return _typed_section(frame, runners, lambda case_id, system: case_id == first,
                          "Typed numbers", free=False)


def section_typed_numbers_more(frame, cases, runners):
    """details.md: every other typed case (MATLAB's others, other systems' words) and free
    typed numbers."""
    first = _first_matlab(frame)
    return _typed_section(frame, runners, lambda case_id, system: case_id != first,
                          "Typed numbers in other cases", free=True)


def _typed_section(frame, runners, chosen, title: str, free: bool):
    """One table per chosen typed case (`chosen(case_id, system)`; and its network), then
    (with `free`) the cases with free typed numbers; None when there is nothing to show."""
    import pandas as pd

    first = frame.drop_duplicates("case")
    first = first[first["typed"].map(bool)]
    if first.empty:
        return None
    with_system = first["typed"].map(lambda t: t.get("system") in BY_KEY)
    picked = [chosen(c, t.get("system")) for c, t in zip(first["case"], first["typed"])]
    mine = first[with_system & pd.Series(picked, index=first.index, dtype=bool)]
    parts = []
    for case_id, typed in zip(mine["case"], mine["typed"]):
        parts.append((f"{case_id}: {call_text(typed)}", meaning_table(typed, runners)))
        network = network_table(typed)
        if network is not None:
            parts.append((f"{case_id}: the whole digit network", network))
    rest = first[~with_system]
    if free and not rest.empty:
        parts.append(("free typed numbers (no system)", _free_table(rest)))
    if not parts:
        return None
    return Section(title, INTRO, parts[0][1], tuple(parts) if len(parts) > 1 else ())
