"""How the ledger's own probes ask a runner: a probe case and its arrays in, the arrays the
system produced (or its own refusal, or why the suite cannot ask) out.

The runner answers through the native calls it already has (`translate`, then `run`), so a
probe owned here needs no framework code of its own: the judgement (candidate readings,
distances, the word) stays in conformance/conventions/probes/, the system's call in its
runner.  Three ways a request ends, kept apart because they are different cells:
- `answered`: the output, as the system gave it, with the call the runner made (and the
  attention weights its run returned beside it, per head or averaged, where it returns any);
- `raised`: the system's own error on running it (quoted: the cell is `refused`);
- `inexpressible`: its runner's reason that the system has no way to say the case (quoted:
  `not_applicable`, the system has no such argument);
- `unasked`: a limit of the suite's harness (HARNESS_LIMIT reasons): never a cell of the
  system, the cell is `not_probed` with the reason.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from conformance.contract.runner import (
    HARNESS_LIMIT, NotExpressible, NotExpressibleError, Observation)
from conformance.oracle.canonical import CaseData, case_data

REASON_LIMIT = 260  # characters of one quoted message (the ledger's files stay under 1 MiB)
HEAD = 100  # of a longer one, its first characters and its end are kept: a kernel's
# words often come after a long prefix (onnxruntime's "Non-zero status code ... Status
# Message: GroupQueryAttention (CPU): q_norm_weight / k_norm_weight inputs are not supported")


@dataclass(frozen=True)
class Answer:
    """What one request to a runner gave."""

    output: np.ndarray | None  # (B, T, E_o) float64, as the system produced it
    call: str = ""  # the native call the runner made (its Translation.call)
    raised: str = ""  # the system's own error, quoted
    inexpressible: str = ""  # the runner's reason the system cannot express the case
    unasked: str = ""  # the harness cannot make this request (not the system's)
    extras: dict = field(default_factory=dict)  # the Observation's extras, when run gave one
    # the attention weights the run returned beside its output (Observation.attention_weights
    # as float64: (B, H, T, S) per head, (B, T, S) averaged) and which (weights_returned)
    attention_weights: np.ndarray | None = None
    weights_returned: str = "none"  # "per_head", "averaged" or "none"
    native_dtype: str = ""  # the dtype of the system's own output, where the runner gave it
    # what the program the run executed holds (Observation.held_scalars, weights_dtype): its
    # scalar float constants and its weights' element type, where the runner read them
    held_scalars: tuple[float, ...] = ()
    weights_dtype: str = ""

    @property
    def answered(self) -> bool:
        return self.output is not None


def quoted(exc: BaseException | str) -> str:
    """One line, bounded: an exception as `Type: message`, or a reason as it is."""
    text = exc if isinstance(exc, str) else f"{type(exc).__name__}: {exc}"
    text = " ".join(str(text).split())
    if len(text) <= REASON_LIMIT:
        return text
    return text[:HEAD] + " ... " + text[len(text) - (REASON_LIMIT - HEAD - 5):]


def ask(runner, case, data: CaseData | None = None) -> Answer:
    """The runner's output for `case` (with `data`, default the case's canonical data).  A
    runner may define `probe_output(case, translation, data)` to return its raw output
    without a guard of its matrix rows (e.g. one refusing a non-finite float32 output), and
    `probe_translate(case)` to take a probe case its matrix rows do not (a decode runner
    answering a single call with the op every step calls)."""
    t = (runner.probe_translate or runner.translate)(case)
    if isinstance(t, NotExpressible):
        if t.reason.startswith(HARNESS_LIMIT):
            return Answer(None, unasked=quoted(t.reason[len(HARNESS_LIMIT):]))
        return Answer(None, inexpressible=quoted(t.reason))
    data = data if data is not None else case_data(case)
    run = runner.probe_output
    extras: dict = {}
    weights, returned, held = None, "none", {}
    try:
        if run:
            out = run(case, t, data)
        else:
            obs = runner.run(case, t, data)
            out, extras = obs.output, dict(getattr(obs, "extras", None) or {})
            weights, returned = returned_weights(obs)
            held = held_by(obs)
    except NotExpressibleError as exc:  # a harness limit found on running is the suite's
        if str(exc).startswith(HARNESS_LIMIT):
            return Answer(None, t.call, unasked=quoted(str(exc)[len(HARNESS_LIMIT):]))
        return Answer(None, t.call, raised=quoted(str(exc)))
    except Exception as exc:  # the system's refusal is the observation
        return Answer(None, t.call, raised=quoted(exc))
    return Answer(np.asarray(out, np.float64), t.call, extras=extras,
                  attention_weights=weights, weights_returned=returned, **held)


def held_by(obs) -> dict:
    """What an Observation says its program holds, as Answer fields."""
    return {"held_scalars": tuple(getattr(obs, "held_scalars", ()) or ()),
            "weights_dtype": getattr(obs, "weights_dtype", "") or ""}


def returned_weights(obs) -> tuple[np.ndarray | None, str]:
    """(the weights an Observation returned as float64, per_head / averaged), or (None,
    "none") where it returned none."""
    w = getattr(obs, "attention_weights", None)
    returned = getattr(obs, "weights_returned", "none") or "none"
    if w is None or returned == "none":
        return None, "none"
    return np.asarray(w, np.float64), returned


def first_answer(runner, cases) -> tuple[object, Answer]:
    """The first of `cases` the runner answers, and its answer.  When none is: (None, an
    answer naming every reason): `unasked` if the harness stopped any of them, else
    `raised` if the system raised on any, else `inexpressible`."""
    reasons: dict[str, list[str]] = {"unasked": [], "raised": [], "inexpressible": []}
    call = ""
    for case in cases:
        got = ask(runner, case)
        if got.answered:
            return case, got
        call = got.call or call
        for kind, why in reasons.items():
            if getattr(got, kind):
                why.append(getattr(got, kind))
    kind = next(k for k in ("unasked", "raised", "inexpressible") if reasons[k]) \
        if any(reasons.values()) else "inexpressible"
    text = "; ".join(dict.fromkeys(w for k in reasons for w in reasons[k])) or "no probe case"
    return None, Answer(None, call, **{kind: text})


def suite_own(exc: BaseException) -> str:
    """The reason, where an exception is the suite's own and so never the system's word: a
    harness limit (NotExpressibleError with HARNESS_LIMIT), or an exception of a class the
    suite defines (a runner's own check), which names no system's error.  NotExpressibleError
    otherwise carries the system's own words (a converter's refusal, quoted); "" for those."""
    if isinstance(exc, NotExpressibleError):
        text = str(exc)
        return quoted(text[len(HARNESS_LIMIT):]) if text.startswith(HARNESS_LIMIT) else ""
    if type(exc).__module__.split(".")[0] == "conformance":
        return quoted(f"the suite's own {type(exc).__name__}, not the system's: {exc}")
    return ""


def ask_raw(runner, case, raw, data: CaseData | None = None) -> Answer:
    """The runner's output for `case` with one argument passed raw (Runner.answer): the
    system's error is `raised`, an argument the runner cannot pass `unasked`."""
    data = data if data is not None else case_data(case)
    if raw.argument not in runner.answers:
        return Answer(None, unasked=f"{runner.name} passes no raw {raw.argument}")
    try:
        out, call = runner.answer(case, data, raw)
    except NotImplementedError as exc:
        return Answer(None, unasked=quoted(str(exc)))
    except Exception as exc:  # the system's refusal is the observation
        own = suite_own(exc)
        return Answer(None, unasked=own) if own else Answer(None, raised=quoted(exc))
    if isinstance(out, Observation):  # more than the output: its dtype, its weights
        weights, returned = returned_weights(out)
        return Answer(np.asarray(out.output, np.float64), call, extras=dict(out.extras),
                      attention_weights=weights, weights_returned=returned,
                      native_dtype=out.native_dtype)
    return Answer(np.asarray(out, np.float64), call)
