"""index.html's answers: the headline findings and the two-system comparison.

The findings (findings.py) are Markdown sentences; `inline` turns their three
marks (links, **bold**, `code`) into HTML after escaping the text, and keeps a
link only when it stays in the report folder or goes to an http(s) page (no
script URL can come through).  The comparison is drawn by report.js from the
ledger cells already embedded for the case view, plus one row per axis here:
its id, title and what to do (porting.ADVICE).
"""
from __future__ import annotations

import html
import re

from conformance.report.porting import ADVICE, GENERIC

_LINK = re.compile(r"\[([^\]]*)\]\(([^)\s]*)\)")
_BOLD = re.compile(r"\*\*(.+?)\*\*")
_CODE = re.compile(r"`([^`]*)`")
_ESCAPED = re.compile(r"\\([\\|\[\]*_!()])")
_HIDDEN = 0xE000  # the first private-use code point
_SAFE_HREF = re.compile(r"^(?:https?://|#|[A-Za-z0-9_][A-Za-z0-9_./-]*(?:#[\w.-]*)?$)")


def _href(url: str) -> str | None:
    url = html.unescape(url)
    if ".." in url or not _SAFE_HREF.match(url):
        return None
    return html.escape(url, quote=True)


def _hide(text: str) -> str:
    """A backslash-escaped character (escaping.md_text's) as a private-use stand-in, so
    no link, bold or code mark is read in it; `_reveal` shows it, escaped."""
    return _ESCAPED.sub(lambda m: chr(_HIDDEN + ord(m[1])), text)


def _reveal(out: str) -> str:
    return re.sub("[\ue000-\ue07f]", lambda m: html.escape(chr(ord(m[0]) - _HIDDEN)), out)


def inline(text: str) -> str:
    """One Markdown sentence of findings.py as safe HTML: what untrusted text it quotes
    (escaped by escaping.md_text) stays text, never a link, bold or code mark."""
    raw = _hide(html.unescape(text))
    out, last = [], 0
    for m in _LINK.finditer(raw):
        out.append(_marks(html.escape(raw[last:m.start()])))
        href = _href(m[2])
        label = _marks(html.escape(m[1]))
        out.append(f'<a href="{href}">{label}</a>' if href else label)
        last = m.end()
    out.append(_marks(html.escape(raw[last:])))
    return _reveal("".join(out))


def _marks(escaped: str) -> str:
    return _CODE.sub(r"<code>\1</code>", _BOLD.sub(r"<strong>\1</strong>", escaped))


def headline_block(found) -> str:
    if not found:
        return ""
    items = "".join(f"<li>{inline(f.text)}</li>" for f in found)
    return (f'<section id="headline"><h2>Headline findings</h2><p>This run\'s answers, '
            f"generated from its results and its conventions ledger.</p><ul>{items}</ul>"
            "</section>")


def diff_block(names: list[str]) -> str:
    """Two selects and an empty table report.js fills (nothing when fewer than two)."""
    if len(names) < 2:
        return ""

    def select(which: str, chosen: str) -> str:
        opts = "".join(f'<option value="{html.escape(n, quote=True)}"'
                       + (" selected" if n == chosen else "") + f">{html.escape(n)}</option>"
                       for n in names)
        return f'<label>{which} <select id="diff-{which.lower()}">{opts}</select></label>'

    return ('<section id="diff"><h2>Compare two systems</h2><p>Every ledger axis where '
            "the two differ, both values, what to do and the evidence (the same as "
            "<code>python -m conformance diff A B</code>).</p>"
            + select("A", names[0]) + " " + select("B", names[1])
            + '<p id="diff-count"></p><table id="diff-table"></table></section>')


def diff_axes(ledger) -> list[list[str]]:
    """[[axis id, title, what to do]] in ledger order ([] without a ledger)."""
    if not ledger or not hasattr(ledger, "get"):
        return []
    return [[str(a["id"]), str(a.get("title", a["id"])), ADVICE.get(str(a["id"]), GENERIC)]
            for a in ledger.get("axes", [])]
