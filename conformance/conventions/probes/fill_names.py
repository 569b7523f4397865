"""The words of mask_fill, one per number, and how a tie of the fill probe's outputs is named.

A word names one number wherever it appears: `-0.7*finfo_max` is -0.7 times a float type's
largest finite number as a source computes it in float32 (jax.nn's
`-0.7 * jnp.finfo(dtype).max`, -2.3819763e38; Keras's `_get_large_negative`, `3.38953e38 *
-0.7`, -2.3726710e38, in keras/src/backend/tensorflow/nn.py, and in the ONNX and LiteRT
programs converted from the layer); `float16_min` is float16's most negative finite number,
-65504, which a huge float32 fill becomes where a float16 conversion saturates it (the
LiteRT float16 weight conversion of the Keras layer holds -65504 where the float32 program
holds -2.37e38).  A number is matched to a word within NUMBER_RTOL (the candidates lie
30% apart or more), so each source's own rounding of its formula keeps its word.

Where the outputs cannot tell two fills apart (after the probe changed its inputs to part
them: masks.py), the tie is named in this order: by the number the system shows (its masked
scores, where it returns them), then by the number its program holds (an exported or
converted program's constants, Observation.held_scalars), then by the number its source
documents, then `huge_finite` for the two huge fills alone (no output a probe can make parts
them), else the cell says `not_probed` and names every tied word: never the nearest.
"""
from __future__ import annotations

import numpy as np

from conformance.conventions.axes import NOT_PROBED, Convention

FILLS32 = {"-inf": -np.inf, "finfo_min": float(np.finfo(np.float32).min),
           "-0.7*finfo_max": float(-0.7 * np.finfo(np.float32).max), "-1e9": -1e9,
           "float16_min": float(np.finfo(np.float16).min), "-1e4": -1e4}
HUGE = ("finfo_min", "-0.7*finfo_max")  # alike in every output a probe can make
HUGE_WORD = "huge_finite"  # a huge finite fill whose number no documentation names
NUMBER_RTOL = 1e-2  # a number within this (relative) of a word's number is that word


def number_word(number: float) -> str | None:
    """The FILLS32 word of `number` (-inf exactly, a finite one within NUMBER_RTOL), else
    None."""
    for word, value in FILLS32.items():
        if number == value or (np.isfinite(value) and np.isfinite(number) and
                               abs(number - value) <= NUMBER_RTOL * abs(value)):
            return word
    return None


def shown_word(reading: Convention | None) -> str | None:
    """The word of the one number a runner's own reading says its masked scores hold (its
    value: that number as text, e.g. "-inf", "-3.4028235e+38"); None where the reading holds
    no single such number."""
    try:
        shown = float(reading.value) if reading is not None else None
    except ValueError:
        return None
    return None if shown is None else number_word(float(np.float32(shown)))


def held_words(held: tuple[float, ...], ties: list[str]) -> dict[str, float]:
    """The tied words among the numbers a program holds (word -> the number held)."""
    found = {}
    for number in held:
        word = number_word(number)
        if word in ties:
            found.setdefault(word, number)
    return found


def _documented(runner) -> tuple[str | None, str]:
    """(word, source) of the fill the runner's documentation or source states, if any."""
    doc = runner.documented_fill
    return (doc[0], doc[1]) if doc else (None, "")


def named(runner, word: str, ties: list[str], reading: Convention | None = None,
          held: tuple[float, ...] = ()) -> tuple[str, str]:
    """(the cell's word, a note) for a best match `word` tied with `ties` (itself among
    them), in the order of the module docstring."""
    if len(ties) == 1:
        return word, ""
    alike = f" ({', '.join(ties)} alike here"
    shown = shown_word(reading)
    if shown in ties:
        return shown, (f"{alike}: named by the number the system shows, "
                       f"{' '.join(reading.evidence.split())[:300]})")
    in_program = held_words(held, ties)
    if len(in_program) == 1:
        (w, number), = in_program.items()
        return w, (f"{alike}: named by the number the program holds, {number:.8g}, among "
                   f"its scalar constants {', '.join(f'{h:.8g}' for h in held)})")
    doc, source = _documented(runner)
    if doc in ties:
        return doc, f"{alike}: named by the number its source writes, {source})"
    if set(ties) <= set(HUGE):
        return HUGE_WORD, f"{alike}: a huge finite fill whose number no probe output tells)"
    return NOT_PROBED, (f"{alike} at every input the probe tried, and no number shown, "
                        "held or documented names one: the probe cannot tell them apart)")
