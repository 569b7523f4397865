"""Untrusted text made inert for each reader of a report: Markdown text, Markdown code
spans and HTML.

Case titles and ids, runner reasons, probe evidence, exception messages and whatever a
shard or results file holds are untrusted: a report shows them, and the reader's tools
(a Markdown renderer, a browser) must never obey them.  Every writer under
conformance/report/ sends such text through one of these functions:

- `md_text`: Markdown inline text (table cells, list lines, headings).  One line;
  control, bidi and invisible characters shown as ‹U+XXXX› rather than obeyed; `<`,
  `>`, `&` as entities (no raw HTML, no autolink, no entity); `\\` and `|` escaped (no
  escape of the writer's, no table cell break); a backtick as `'` (no code span).  The
  characters that make links, images and emphasis (`[`, `]`, `!`, `(`, `*`, `_`) are
  escaped with a backslash wherever CommonMark could read them as markup: `](`, `][`,
  `![`, a leading `[` (a reference definition), and every `*` / `_` that could open or
  close emphasis when the text holds both an opener and a closer.  Where they cannot
  act they stay as written, so ordinary text (`in_proj_weight`, `case[runner]`,
  `[opset 23]`, `-0.7*finfo_max`) is written byte for byte as before.
- `md_code`: the inside of a code span the writer opens itself: one line, controls
  shown, a backtick as `'` (it cannot close the span), `|` as `\\|` (GFM splits table
  rows before code spans).  Nothing else: a code span shows its text literally.
- `html_text`: text or attribute value for HTML, html.escape(quote=True), controls and
  bidi characters shown.
- `md_unescape`: `md_text`'s backslash escapes undone, for readers that show the
  Markdown as plain text or parse it themselves (answers_html.inline).
"""
from __future__ import annotations

import html
import re

# C0/C1 controls (tab and line breaks handled apart), the bidi controls that reorder what
# a reader sees (U+202A-U+202E, U+2066-U+2069, U+061C, U+200E/F) and the invisible ones
_CONTROL = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f\u061c\u200b-\u200f"
                      "\u202a-\u202e\u2060-\u2069\ufeff]")
_BREAKS = re.compile("[\r\n\t\u2028\u2029]+")
_ENTITY = {"&": "&amp;", "<": "&lt;", ">": "&gt;"}
_ESCAPED = re.compile(r"\\([\\|\[\]*_!()])")
SHOWN = "‹U+{:04X}›"  # how a control or bidi character is shown


def shown(text) -> str:
    """`text` with every control, bidi and invisible formatting character shown as
    ‹U+XXXX› (an ANSI sequence's ESC too, so its remainder is inert text)."""
    text = "" if text is None else str(text)
    if text.isprintable() and "\u200b" not in text and "\ufeff" not in text:
        return text
    return _CONTROL.sub(lambda m: SHOWN.format(ord(m[0])), text)


def one_line(text) -> str:
    """`text` on one line (line breaks and tabs as one space), controls shown."""
    text = "" if text is None else str(text)
    return shown(_BREAKS.sub(" ", text))


def _flanks(text: str, n: int) -> tuple[bool, bool]:
    """(can open, can close) emphasis: CommonMark's flanking rules for the `*` or `_` at
    `n` (the string's ends count as whitespace; `_` within a word does neither)."""
    before, after = text[n - 1:n] or " ", text[n + 1:n + 2] or " "
    punct_before = not before.isalnum() and not before.isspace()
    punct_after = not after.isalnum() and not after.isspace()
    left = not after.isspace() and (not punct_after or before.isspace() or punct_before)
    right = not before.isspace() and (not punct_before or after.isspace() or punct_after)
    if text[n] == "*":
        return left, right
    return left and (not right or punct_before), right and (not left or punct_after)


def _emphasis(text: str) -> set[int]:
    """Where a `*` or `_` of `text` could open or close emphasis, for each mark that has
    an opener before a closer in `text` (a lone mark, or only openers, is shown as is)."""
    out: set[int] = set()
    for mark in "*_":
        ends = {n: _flanks(text, n) for n, ch in enumerate(text) if ch == mark}
        opens = [n for n, (o, _) in ends.items() if o]
        if opens and any(c and n > opens[0] for n, (_, c) in ends.items()):
            out |= {n for n, (o, c) in ends.items() if o or c}
    return out


def _bracket(text: str, n: int) -> bool:
    """Whether the `[`, `]`, `!`, `(` or `)` at `n` could take part in a link, an image or
    a reference definition: a `]` before `(` or `[`; a `[` after `!` or `]`, or first
    (a writer's `- {text}: ` line would start a definition with it); a `!` before
    `[` or last; a `(` after `]`.  A lone `[x]` stays as it is: no
    definition can be made for it, so it is no link."""
    ch, before, after = text[n], text[n - 1:n], text[n + 1:n + 2]
    if ch == "]":
        return after in ("(", "[")
    if ch == "[":
        return n == 0 or before in ("!", "]")
    if ch == "!":
        return after in ("[", "")
    return ch == "(" and before == "]"


def md_text(text) -> str:
    """Untrusted text as Markdown inline text: shown as written, never markup."""
    text = one_line(text)
    marks = _emphasis(text) if "*" in text or "_" in text else set()
    out = []
    for n, ch in enumerate(text):
        if ch in _ENTITY:
            out.append(_ENTITY[ch])
        elif ch == "`":
            out.append("'")
        elif ch in "\\|":
            out.append("\\" + ch)
        elif ch in "[]!()":
            out.append("\\" + ch if _bracket(text, n) else ch)
        elif ch in "*_":
            out.append("\\" + ch if n in marks else ch)
        else:
            out.append(ch)
    return "".join(out)


def md_code(text) -> str:
    """Untrusted text for the inside of a code span the writer opens: one line, controls
    shown, no backtick (it would close the span), `|` escaped for a GFM table row."""
    return one_line(text).replace("`", "'").replace("|", "\\|")


def md_unescape(text: str) -> str:
    """`md_text`'s output read back as plain text: backslash escapes and entities undone
    (the control characters stay shown)."""
    return html.unescape(_ESCAPED.sub(r"\1", text))


def html_text(value) -> str:
    """Text or attribute value for HTML: escaped (quotes too), controls and bidi shown."""
    return html.escape(shown(value), quote=True)
