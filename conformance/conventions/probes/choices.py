"""A cell whose reading may hang on a choice the harness makes for the system, measured
under each alternative (Runner.harness_choices), so that no cell describes the harness.

HF's attention modules are built by their runners with attn_implementation="eager", while a
model built from a config gets "sdpa" wherever the class supports it
(transformers/modeling_utils.py, get_correct_attn_implementation: `"sdpa" if
requested_attention is None`), and the two attention functions read a causal switch
differently (eager_attention_forward takes no is_causal; sdpa_attention_forward,
transformers/integrations/sdpa_attention.py, passes it to SDPA).  `under_choices` asks the
probe again with the runner built under each other alternative (the same runner class with
that parameter set): where every alternative reads alike the cell is the runner's own,
the agreement noted; where they differ it is `depends`, each alternative with its reading
and evidence.  The probes asked so: the mask flags (flags.py), the fill (masks.py; the
attention function's too, attention_function.py), the fully masked row (rows.py), the
returned weights (returned.py), the native inputs (native_inputs.py); the rows run under
the harness's own choice read that choice only (derived.under_own_choice).
"""
from __future__ import annotations

from typing import Callable

from conformance.conventions.axes import DEPENDS, Convention


def variant(runner, name: str, value):
    """The runner's class with its parameters and `name` set to `value`; a view of another
    runner (a module's attention function asked as a runner) rebuilds itself over that
    runner's variant (its `with_choice`)."""
    rebuild = getattr(runner, "with_choice", None)
    if rebuild is not None:
        return rebuild(name, value)
    return type(runner)(**{**runner.params, name: value})


def chosen(runner) -> bool:
    """Whether the runner names harness choices its cells may hang on (a table way that
    re-measures what its matrix rows read under its own choice only)."""
    return bool(runner.harness_choices)


def under_choices(runner, cell_of: Callable[[object], Convention]) -> Convention:
    """cell_of(runner), or where the runner names harness choices, the readings under each
    alternative: the runner's own cell where all agree, else `depends`."""
    cell = cell_of(runner)
    choices = runner.harness_choices
    if not choices:
        return cell
    own = ", ".join(f"{name}={getattr(runner, name)!r}" for name in choices)
    readings = [(f"{own} (the runner's)", cell)]
    for name, values in choices.items():
        for value in values:
            if value != getattr(runner, name):
                readings.append((f"{name}={value!r}", cell_of(variant(runner, name, value))))
    if len({c.value for _, c in readings}) == 1:
        alike = ", ".join(label for label, _ in readings[1:])
        return Convention(cell.axis, cell.value, f"{cell.evidence}; under {alike}: the same "
                          "reading", cell.documented, cell.documented_source)
    text = "; ".join(f"under {label}: {c.value}: {c.evidence}" for label, c in readings)
    return Convention(cell.axis, DEPENDS, f"the reading depends on a choice the harness "
                      f"makes: {text}", cell.documented, cell.documented_source)
