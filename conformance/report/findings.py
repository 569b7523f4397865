"""The headline findings: the answers of this run, in sentences, each with its evidence.

They open index.md and index.html and end the pytest run (terminal summary).
Every sentence is generated from the run's data, never typed:
- the MATLAB answer: the typed-numbers readings (case/typed_numbers.py) of the
  cases typed in MATLAB's words, against the Keras and torch readings;
- the seed's head-size question: the outcomes of the seed cases whose head width
  is not width / heads, by system;
- ledger sentences (conventions.json grouped by value, ledger_groups.py), one per
  axis of LEDGER_SENTENCES that the ledger holds with at least one word: an axis
  family that is absent, or not_applicable / not_probed everywhere, says nothing;
- the known mismatches declared with an upstream link (framework bugs);
- the version drift (reports/drift.json, written by `python -m conformance drift`):
  one sentence per library whose probed conventions changed between releases, each
  change with the first release that has the new value.
"""
from __future__ import annotations

import re
from dataclasses import dataclass

from conformance.report.base import md
from conformance.report.escaping import md_code, md_unescape
from conformance.report.ledger_groups import axis_groups, evidence_link, group_text

# (axis, lead) in the order they are told; the lead names the question in words
LEDGER_SENTENCES: tuple[tuple[str, str], ...] = (
    ("size_arguments", "The head-size argument, per system"),
    ("attn_mask_polarity", "Mask polarity (what True means in a boolean attention mask)"),
    ("fully_masked_row", "A fully masked query row returns"),
    ("rope_style", "Rotary pairing"),
    ("kv_head_mapping", "Grouped-query head mapping"),
    ("window_width", "Sliding windows (what the window number w means)"),
    ("cache_causal_alignment", "Cache alignment of a decode step"),
    ("rope_scaling_magnitude", "Where RoPE scaling's attention factor lands (YaRN's "
                               "0.1 ln(factor) + 1)"),
    ("rope_scaling_frequencies", "RoPE scaling frequencies, per type"),
    # M-RoPE and 2-D RoPE
    ("mrope_layout", "M-RoPE at image positions (which rotated pair takes t, h or w; with "
                     "text-only positions every layout is 1-D RoPE)"),
    ("vision_rope_layout", "2-D vision RoPE (which frequencies the patch row and column take "
                           "in the head)"),
    # per-layer schedules
    ("per_layer_rope", "Per-layer RoPE and windows of a layer schedule (Gemma 3: base 1e4 and a "
                       "window on five layers of six, 1e6 with linear x8 on the sixth)"),
    ("nope_placement", "NoPE layers of a schedule (SmolLM3's every fourth layer without RoPE; "
                       "no_rope_layers flags, 1 = RoPE)"),
    # chunked attention and temperature
    ("chunk_mask", "Chunked attention (Llama 4: blocks of C absolute positions, a block's "
                   "first query sees one key, not a window of C)"),
    ("attention_temperature", "Llama 4's attention temperature (q times log1p(floor((p + 1) / "
                              "floor_scale)) * attn_scale + 1: exactly 1 below floor_scale - 1)"),
    # multi-head latent attention
    ("mla_rope_slice", "Which dims multi-head latent attention rotates (DeepSeek: the last "
                       "qk_rope_head_dim of each head, the key's one shared rope head)"),
    # T5's relative bias
    ("relative_bias_buckets", "T5's relative position buckets (key - query; 32 buckets, max "
                              "distance 128; the decoder's face back)"),
    # gated head outputs
    ("gate_packing", "How the query projection holds the output gate (which packing of "
                     "W_q and W_g gives the gated output)"),
)
DRIFT_FILE = "drift.json"  # python -m conformance drift writes it beside the reports
# ... and its page, which the headline links.  Neither is a result of the run: a report
# folder without them (a run's --report-dir, benchmarks/portability.py's --out) takes the
# committed ones of reports/ (run_reports.py), so its headline is the committed folder's
DRIFT_FILES = (DRIFT_FILE, "drift.md")
TERMINAL = ("matlab", "seed", "attn_mask_polarity", "fully_masked_row", "bugs")
# a declared upstream link, only of the characters a Markdown link destination takes as they
# are (no '<', '>', quotes, brackets or parentheses: nothing of it can end the link early)
_URL = re.compile(r"https?://[A-Za-z0-9\-._~:/?#@!$&*+,;=%]+")
_LINK = re.compile(r"(?<!\\)\[((?:[^\]\\]|\\.)*)\]\([^)]*\)")  # no escaped bracket


@dataclass(frozen=True)
class Finding:
    key: str  # what it answers: matlab, seed, bugs, or a ledger axis id
    text: str  # one Markdown sentence, its evidence linked

    @property
    def plain(self) -> str:
        """The sentence without Markdown links or code marks (the terminal's)."""
        text = _LINK.sub(r"\1", self.text).replace("`", "").replace("**", "")
        return md_unescape(text)  # untrusted text shown as written (escaping.py)


def _case_link(cid: str) -> str:
    return f"[{md(cid)}](cases/{cid}.md)"


def _first_rows(frame, system: str):
    first = frame.drop_duplicates("case")
    return [(c, t) for c, t in zip(first["case"], first["typed"])
            if t and t.get("system") == system]


def matlab_finding(frame) -> Finding | None:
    """MATLAB's counts, why, and what the same numbers give in Keras and torch."""
    from conformance.case.typed_numbers import _why, derive, meaning

    typed_cases = _first_rows(frame, "matlab")
    if not typed_cases:
        return None
    counts, other = [], None
    for cid, typed in typed_cases:
        by = {m.system: m for m in meaning(typed)}
        counts.append(f"`{md_code(by['matlab'].call)}` has {by['matlab'].parameters:,} parameters "
                      f"({_case_link(cid)})")
        other = other or (cid, typed, by)
    cid, typed, by = other
    why = _why(typed, "qk_head_dim", derive(typed))
    keras, torch = by.get("keras"), by.get("torch")
    text = f"**MATLAB's selfAttentionLayer**: {' and '.join(counts)}, because {md(why)}"
    if keras and torch and keras.parameters is not None:
        same = keras.parameters == torch.parameters
        text += (f"; `{md_code(keras.call)}` reads {keras.per_head:,} per head and "
                 f"`{md_code(torch.call)}` derives {torch.per_head:,} per head, so the same "
                 f"numbers give {keras.parameters:,}" + ("" if same else
                                                         f" and {torch.parameters:,}")
                 + " parameters ([typed numbers](#typed-numbers))")
    return Finding("matlab", text + ".")


def _seed_case(cases):
    for c in cases:
        a = getattr(c, "attention", None)
        if "seed-question" in (getattr(c, "tags", ()) or ()) and a is not None and \
                a.qk_head_dim * a.num_heads != a.query_features:
            return c, a
    return None, None


def seed_finding(frame, cases) -> Finding | None:
    """Which systems can set a head size other than width / heads (the seed claim)."""
    case, a = _seed_case(cases)
    if case is None:
        return None
    rows = frame[frame["case"] == case.id]
    can, cannot = {}, {}
    for r in rows.itertuples(index=False):
        name = r.system or r.runner
        if r.outcome.ran:
            can.setdefault(name, None)
        elif r.outcome.value == "not_expressible":
            cannot.setdefault(name, None)
    cannot = {n: None for n in cannot if n not in can}
    if not can and not cannot:
        return None
    text = (f"**The seed's head-size question** ({_case_link(case.id)}: "
            f"{a.query_features} features, {a.num_heads} heads of {a.qk_head_dim}, not "
            f"{a.query_features // a.num_heads}): settable in {', '.join(map(md, can)) or 'none'}"
            f"; not expressible in {', '.join(map(md, cannot)) or 'none'} "
            "(each system's own words on the case page).")
    return Finding("seed", text)


def ledger_findings(ledger: dict | None) -> list[Finding]:
    """One sentence per axis of LEDGER_SENTENCES with at least one word in the ledger."""
    if not ledger:
        return []
    by_axis = {g.axis: g for g in axis_groups(ledger)}
    out = []
    for axis, lead in LEDGER_SENTENCES:
        g = by_axis.get(axis)
        if g is None or not g.groups:
            continue
        out.append(Finding(axis, f"**{lead}**: {group_text(g)} "
                                 f"([evidence]({evidence_link(axis)}))."))
    return out


def _link_text(url: str) -> str:
    m = re.match(r"https://github\.com/([^/]+/[^/]+)/(?:pull|issues)/(\d+)", url)
    return f"{m[1]}#{m[2]}" if m else url


def bugs_finding(frame) -> Finding | None:
    """The known mismatches whose declaration cites an upstream report (a link)."""
    failed = frame["outcome"].map(lambda o: o.failed)
    sub = frame[failed & frame["known_mismatch"].map(lambda k: bool(_URL.search(k or "")))]
    if sub.empty:
        return None
    by_url: dict[str, list[str]] = {}
    for r in sub.itertuples(index=False):
        url = _URL.search(r.known_mismatch)[0].rstrip(".,;")
        by_url.setdefault(url, []).append(f"{r.case}[{r.runner}]")
    parts = [f"[{md(_link_text(u))}]({u}): {md(', '.join(items))}" for u, items in
             by_url.items()]
    return Finding("bugs", f"**Known mismatches that are framework bugs** (declared with an "
                           f"upstream link; [all known mismatches](#known-mismatches)): "
                           f"{'; '.join(parts)}.")


def drift_findings(drift: dict | None) -> list[Finding]:
    """One sentence per library of the drift report with convention changes (an API that
    appeared is not a convention change), linked to reports/drift.md."""
    out = []
    for lib in (drift or {}).get("libraries", []):
        changes = [c for c in lib.get("changes", []) if c.get("kind") == "convention"]
        if not changes:
            continue
        told = "; ".join(f"`{md_code(str(c['cell']))}` {md(str(c['old_value']))} -> "
                         f"{md(str(c['new_value']))} from {md(str(c['first_release']))}"
                         for c in changes)
        out.append(Finding(f"drift:{lib.get('id')}", f"**Which release changed it** "
                           f"({md(str(lib.get('id')))}): {told} "
                           f"([drift report](drift.md))."))
    return out


def read_drift(folder) -> dict | None:
    """drift.json beside the reports, read as bounded data (None when absent or bad)."""
    from pathlib import Path

    from conformance.datafile import DataFileError, read_json

    path = Path(folder) / DRIFT_FILE
    if not path.is_file():
        return None
    try:
        value = read_json(path, "drift report")
    except DataFileError:
        return None
    return value if isinstance(value, dict) else None


def findings(frame, cases, ledger: dict | None, drift: dict | None = None) -> list[Finding]:
    """Every headline finding of the run, in reading order."""
    made = [matlab_finding(frame), seed_finding(frame, cases)] + ledger_findings(ledger)
    made.append(bugs_finding(frame))
    return [f for f in made if f is not None] + drift_findings(drift)


def terminal_lines(found: list[Finding], limit: int = 5) -> list[str]:
    """The 3-5 sentences printed after the symbol matrix (TERMINAL order)."""
    by_key = {f.key: f for f in found}
    return [by_key[k].plain for k in TERMINAL if k in by_key][:limit]


def headline_lines(found: list[Finding]) -> list[str]:
    """index.md's opening section."""
    if not found:
        return []
    return ["## Headline findings", "",
            "This run's answers, generated from its results and its conventions ledger; "
            "each links to its evidence.", ""] + [f"- {f.text}" for f in found] + [""]
