"""Text from a file, made safe to print on a terminal.

A case file, a results file or a folder listing is untrusted: a title may hold an
ANSI escape (colours, clear screen, a window title by OSC), a carriage return that
overwrites the line before it, a newline that forges a line of its own, or a bidi
override that shows the text in another order than it is.  `visible` shows each
such character as a visible escape instead of letting the terminal obey it, so what
a reader sees is what the file holds.  The CLI passes every line it prints through
it; the Markdown and HTML reports escape for their own readers (report/escaping.py).
"""
from __future__ import annotations

import re

# C0 controls (newline and tab included: a title is one line), DEL, C1 controls
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")
# bidi marks, embeddings, overrides and isolates; line and paragraph separators;
# lone surrogates (a YAML "\ud800" escape: not printable, an encoding error on write)
_FORMAT = re.compile("[\u061c\u200e\u200f\u2028-\u202e\u2066-\u2069\ud800-\udfff]")


def visible(text: object) -> str:
    """`text` with every control character as `\\xNN` and every bidi or separator
    character as `<U+XXXX>`: nothing in it can move the cursor, change the terminal
    or reorder what is shown.  Idempotent; other characters are kept as they are."""
    shown = _CONTROL.sub(lambda m: f"\\x{ord(m.group()):02x}", str(text))
    return _FORMAT.sub(lambda m: f"<U+{ord(m.group()):04X}>", shown)


def say(*lines: object, file=None) -> None:
    """Print each of `lines` as one visible line (to stdout unless `file`)."""
    import sys

    out = sys.stdout if file is None else file
    for line in lines:
        print(visible(line), file=out)
