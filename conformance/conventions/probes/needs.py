"""A probe case in every form a system may take, with what the system applies on every call.

`needed_forms(runner, name, **sections)` is forms.forms(name, **sections) (as written, as
self-attention, with the head size derived from the width) followed by the same forms of
the probe case with the runner's `probe_needs` (Runner.probe_needs: the attention fields
its system applies on every call, e.g. Qwen3's RMS QK-norm, MPT's ALiBi with no bias)
merged under the probe's own fields: a field the probe sets keeps the probe's value (a
nested section such as rope is merged key by key, the probe's keys winning).  Asked with
forms.first_taken, a runner that takes the written case is asked nothing else, so its
cell is the written case's; the forms with the needs are asked only where every plain
form is inexpressible.
"""
from __future__ import annotations

from conformance.case.model import CaseError
from conformance.conventions.probes.forms import NEEDS_SUFFIX, forms


def with_needs(runner, attention: dict) -> dict:
    """`attention` with the runner's probe_needs under it (the probe's fields win)."""
    needs = dict(getattr(runner, "probe_needs", None) or {})
    out = {**needs, **attention}
    for key, value in needs.items():
        if isinstance(value, dict) and isinstance(attention.get(key), dict):
            out[key] = {**value, **attention[key]}
    return out


def needed_forms(runner, name: str, **sections) -> list:
    """The probe case's forms (forms.forms), then its forms with probe_needs where they
    change the attention section and make a valid case."""
    cases = forms(name, **sections)
    attention = dict(sections.get("attention", {}))
    needed = with_needs(runner, attention)
    if needed == attention:
        return cases
    try:
        return cases + forms(name + NEEDS_SUFFIX, **{**sections, "attention": needed})
    except CaseError:  # the needs contradict the probe's sizes: the plain forms only
        return cases
