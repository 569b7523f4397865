"""Keras: differences between backends.

Rows hold figures, not arrays, so each Keras row carries a compact digest of
its output (Row.output_digest, made by the Keras runners): the values, whole
up to 512 elements, else 256 evenly spaced ones (the table then says
"sampled", and its figure is a lower bound).  Differences are rounded to 3
significant digits like every other figure, so the report stays byte-identical
across runs.

The columns come from the runners' descriptors, not their names: rows of
framework "keras" with a digest are grouped by (system, path, backend), and
- within each (system, path), the first backend against each other one;
- within each system, its first path against each other path, on the first backend;
- each later system against the first system, same path, on the first backend;
in runner (column) order.  No framework is imported here.
"""
from __future__ import annotations

import numpy as np

from conformance.report.base import MAX_COLUMNS, Section, chunks

FRAMEWORK = "keras"
# Short labels of column titles; other names label themselves (last dotted part).
BACKEND_LABELS = {"tensorflow": "tf"}
SYSTEM_LABELS = {"keras.layers.MultiHeadAttention": "mha",
                 "keras.layers.GroupQueryAttention": "gqa"}


def _short(labels: dict[str, str], name: str) -> str:
    return labels.get(name, name.rsplit(".", 1)[-1].lower())


def max_difference(a: dict | None, b: dict | None) -> str:
    """One cell: max |a - b| over elements both give as numbers, 3 significant digits."""
    if not a or not b or a.get("size") != b.get("size"):
        return ""
    x = np.array([np.nan if v is None else v for v in a["values"]], dtype=np.float64)
    y = np.array([np.nan if v is None else v for v in b["values"]], dtype=np.float64)
    both = np.isfinite(x) & np.isfinite(y)
    if not both.any():
        return "n/a"
    d = float(np.max(np.abs(x[both] - y[both])))
    text = "0" if d == 0 else f"{d:.2e}"
    if a.get("sampled"):
        text += f" (sampled {len(x)} of {a['size']})"
    if (~both).any():
        text += f" ({int((~both).sum())} non-finite skipped)"
    return text


def _layout(runners) -> dict[str, dict[str, dict[str, str]]]:
    """system -> path -> backend -> runner name, each level in column order."""
    layout: dict = {}
    for r in runners:
        layout.setdefault(r.system, {}).setdefault(r.path, {}).setdefault(r.backend, r.name)
    return layout


def pairs(runners) -> list[tuple[str, str, str]]:
    """(column title, runner a, runner b) for the given Keras runners, by the rule above."""
    layout = _layout(runners)
    if not layout:
        return []
    first_system = next(iter(layout))
    out = []
    for system, paths in layout.items():
        sys_label = "" if system == first_system else _short(SYSTEM_LABELS, system)
        first_path = next(iter(paths))
        for path, backends in paths.items():
            prefix = " ".join(p for p in (sys_label, "" if path == first_path else path) if p)
            prefix = f"{prefix}: " if prefix else ""
            b0, *others = backends
            out += [(f"{prefix}{_short(BACKEND_LABELS, b0)} − {_short(BACKEND_LABELS, b)}",
                     backends[b0], backends[b]) for b in others]
        base = paths[first_path]
        b0 = next(iter(base))
        on = f"{_short(BACKEND_LABELS, b0)}: {sys_label + ' ' if sys_label else ''}"
        out += [(f"{on}{first_path} − {path} path", base[b0], paths[path][b0])
                for path in list(paths)[1:] if b0 in paths[path]]
        other = layout[first_system].get(first_path, {})
        if system != first_system and b0 in other:
            out.append((f"{_short(BACKEND_LABELS, b0)}: {sys_label} − "
                        f"{_short(SYSTEM_LABELS, first_system)}", base[b0], other[b0]))
    return out


def section_keras_backends(frame, cases, runners):
    """Cases x backend pairs: how far apart Keras backends are on the same case."""
    import pandas as pd

    rows = frame[(frame["framework"] == FRAMEWORK) & frame["output_digest"].notna()]
    digests = {(r.case, r.runner): r.output_digest for r in rows.itertuples(index=False)}
    present = {name for _, name in digests}
    columns = pairs([r for r in runners if r.framework == FRAMEWORK and r.name in present])
    if not columns:
        return None
    ids = [c.id for c in cases if any((c.id, n) in digests for n in present)]
    table = pd.DataFrame({t: [max_difference(digests.get((cid, a)), digests.get((cid, b)))
                              for cid in ids] for t, a, b in columns},
                         index=pd.Index(ids, name="case"))
    intro = ("Max |a − b| between the outputs of two Keras rows on the same case "
             "(float32-rounded digests unless the case is float64; empty = one side "
             "did not run). fused = return_attention_scores=False "
             "(ops.dot_product_attention), scores = return_attention_scores=True.")
    parts = chunks(list(table.columns), MAX_COLUMNS)  # at most 8 data columns a table
    if len(parts) == 1:
        return Section("Keras: differences between backends", intro, table)
    return Section("Keras: differences between backends", intro, table[parts[0]], tuple(
        (f"pairs ({n} of {len(parts)})", table[part]) for n, part in enumerate(parts, 1)))
