"""The report's figures: PNGs written beside the reports and embedded in index.html.

- error_heatmap.png: log10 max abs error of the output, case x runner; a hatched
  cell is over its absolute tolerance (atol of its dtype), a red outline marks an
  item whose check failed (outcome mismatch);
- parameters.png: grouped bars (log scale) of each system's own parameter count
  for the cases that carry `typed` numbers (what a user typed), the formula as a line;
- fully_masked_rows.png: what each system returns for a fully masked query row
  (categorical grid).

matplotlib is imported lazily, here only, with the Agg canvas directly (no pyplot,
no global backend switch).  Each figure has a fixed size and dpi and is saved with
metadata={'Software': None}, so a PNG is byte-identical between runs on one
machine; across machines it is not (fonts and FreeType versions rasterise text
differently): treat the figures as non-portable.  Input: the results frame
(base.results_frame: one Row.as_dict() record per row).
"""
from __future__ import annotations

import io
import math
from pathlib import Path

DPI = 100
FIGURES = ("error_heatmap.png", "parameters.png", "fully_masked_rows.png")
BEHAVIOURS = ("nan", "zeros", "uniform", "finite_other", "error")
_BEHAVIOUR_COLOURS = ("#d62728", "#1f77b4", "#2ca02c", "#ff7f0e", "#7f7f7f")


_wanted: bool | None = None  # set once by the pytest plugin; None: read the environment


def configure(wanted: bool | None) -> bool | None:
    """Fix whether this process draws figures (the plugin reads CONFORMANCE_FIGURES once,
    at configure, so a test that changes the variable for its subprocesses does not change
    its own session's reports); returns the setting it replaces, for an in-process run to
    put back when it ends."""
    global _wanted
    previous, _wanted = _wanted, wanted
    return previous


def available() -> str:
    """'' when the figures are drawn, else why not: matplotlib missing, or
    CONFORMANCE_FIGURES=0."""
    from conformance.settings import FIGURES_ENV, figures_wanted

    if not (figures_wanted() if _wanted is None else _wanted):
        return f"{FIGURES_ENV}=0; figures left out"
    try:
        import matplotlib  # noqa: F401
    except ImportError as exc:
        return f"matplotlib is not installed ({exc}); figures left out"
    return ""


def _settings() -> None:
    from matplotlib import rcParams

    rcParams["svg.hashsalt"] = "attention-conformance"  # no random ids anywhere


def _figure(width: float, height: float):
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    _settings()
    fig = Figure(figsize=(width, height), dpi=DPI)
    FigureCanvasAgg(fig)
    return fig


def _png(fig) -> bytes:
    """The figure cropped to its artists plus 0.1 in, as PNG bytes.  The crop box is
    computed here (what bbox_inches='tight' computes, without its extra layout pass over
    every artist before the real draw: same bytes, one draw instead of two), measuring
    text on a 1x1 canvas of the same dpi (text extents depend on the dpi only; a canvas of
    the figure's size is a cleared 25 MB buffer)."""
    buf = io.BytesIO()
    from matplotlib.backends.backend_agg import RendererAgg

    bbox = fig.get_tightbbox(RendererAgg(1, 1, fig.dpi)).padded(0.1)
    fig.savefig(buf, format="png", dpi=DPI, bbox_inches=bbox,
                metadata={"Software": None})
    return buf.getvalue()


def _order(frame, cases, runners):
    """Case ids and runner names present in the frame, in file and column order."""
    ids = list(dict.fromkeys([c.id for c in cases] + list(frame["case"])))
    names = list(dict.fromkeys([r.name for r in runners] + list(frame["runner"])))
    have_c, have_r = set(frame["case"]), set(frame["runner"])
    return [c for c in ids if c in have_c], [r for r in names if r in have_r]


def _size(n_rows: int, n_cols: int) -> tuple[float, float]:
    return max(6.0, 2.5 + 0.42 * n_cols), max(3.0, 1.8 + 0.28 * n_rows)


def _axes_labels(ax, case_ids, names):
    ax.set_xticks(range(len(names)))
    ax.set_xticklabels(names, rotation=60, ha="right", fontsize=7)
    ax.set_yticks(range(len(case_ids)))
    ax.set_yticklabels(case_ids, fontsize=7)


def _finite(x) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)


def error_heatmap(frame, cases, runners) -> bytes | None:
    import numpy as np
    from matplotlib.patches import Rectangle

    case_ids, names = _order(frame, cases, runners)
    if not case_ids:
        return None
    grid = np.full((len(case_ids), len(names)), np.nan)
    fig = _figure(*_size(len(case_ids), len(names)))
    ax = fig.add_subplot()
    marks = []
    for r in frame.itertuples(index=False):
        i, j = case_ids.index(r.case), names.index(r.runner)
        err = r.max_abs_error
        if _finite(err):
            grid[i, j] = math.log10(max(err, 1e-18))
            if err > r.atol:
                marks.append(("over", i, j))
        if r.outcome == "mismatch":
            marks.append(("failed", i, j))
    image = ax.imshow(np.ma.masked_invalid(grid), cmap="viridis", aspect="auto",
                      interpolation="nearest")
    ax.set_facecolor("#eeeeee")  # no figure: not run, not expressible, error
    for kind, i, j in marks:
        ax.add_patch(Rectangle((j - 0.5, i - 0.5), 1, 1, fill=False,
                               **({"hatch": "///", "edgecolor": "white", "linewidth": 0}
                                  if kind == "over" else {"edgecolor": "red", "linewidth": 1.5})))
    _axes_labels(ax, case_ids, names)
    fig.colorbar(image, ax=ax, label="log10 max abs error")
    ax.set_title("Output error vs float64 reference (hatched: over atol; red: check failed;"
                 " grey: no figure)", fontsize=8)
    return _png(fig)


def parameter_bars(frame, cases, runners) -> bytes | None:
    import numpy as np

    typed = frame[frame["typed"].map(bool) & frame["parameters"].map(
        lambda p: _finite(p) and p > 0)]
    case_ids, names = _order(typed, cases, runners)
    if not case_ids:
        return None
    fig = _figure(max(6.0, 2.0 + 1.4 * len(case_ids)), 4.5)
    ax = fig.add_subplot()
    width = 0.8 / len(names)
    cmap = _colour_map("tab20", len(names))
    for j, name in enumerate(names):
        sub = typed[typed["runner"] == name]
        xs = [case_ids.index(c) + (j - len(names) / 2 + 0.5) * width for c in sub["case"]]
        ax.bar(xs, list(sub["parameters"]), width=width, color=cmap[j], label=name)
    formula = typed.drop_duplicates("case").set_index("case")["parameters_formula"]
    for i, c in enumerate(case_ids):
        ax.hlines(formula[c], i - 0.45, i + 0.45, colors="black", linestyles="dashed",
                  linewidth=1)
    ax.set_yscale("log")
    ax.set_xticks(np.arange(len(case_ids)))
    ax.set_xticklabels(case_ids, rotation=20, ha="right", fontsize=7)
    ax.set_ylabel("parameters (log scale); dashed: formula")
    ax.set_title("Parameter counts per system, cases with typed numbers", fontsize=9)
    ax.legend(fontsize=6, ncol=2, loc="center left", bbox_to_anchor=(1.01, 0.5))
    return _png(fig)


def _colour_map(name: str, n: int) -> list:
    from matplotlib import colormaps

    cmap = colormaps[name]
    return [cmap(k % cmap.N) for k in range(n)]


def fully_masked_grid(frame, cases, runners) -> bytes | None:
    import numpy as np
    from matplotlib.colors import ListedColormap
    from matplotlib.patches import Patch

    masked = frame[frame["fully_masked_row"].map(lambda v: isinstance(v, str) and v != "")]
    case_ids, names = _order(masked, cases, runners)
    if not case_ids:
        return None
    sub = frame[frame["case"].isin(case_ids)]
    _, names = _order(sub, cases, runners)
    grid = np.full((len(case_ids), len(names)), np.nan)
    words = []
    for r in masked.itertuples(index=False):
        word = r.fully_masked_row if r.fully_masked_row in BEHAVIOURS else "finite_other"
        i, j = case_ids.index(r.case), names.index(r.runner)
        grid[i, j] = BEHAVIOURS.index(word)
        words.append((i, j, word))
    fig = _figure(*_size(len(case_ids), len(names)))
    ax = fig.add_subplot()
    ax.imshow(np.ma.masked_invalid(grid), cmap=ListedColormap(_BEHAVIOUR_COLOURS), vmin=-0.5,
              vmax=len(BEHAVIOURS) - 0.5, aspect="auto", interpolation="nearest")
    ax.set_facecolor("#eeeeee")
    for i, j, word in words:  # the word too, not colour alone
        ax.text(j, i, word, ha="center", va="center", rotation=90, fontsize=6, color="white")
    _axes_labels(ax, case_ids, names)
    ax.legend(handles=[Patch(color=c, label=b) for b, c in zip(BEHAVIOURS, _BEHAVIOUR_COLOURS)]
              + [Patch(color="#eeeeee", label="did not run")], fontsize=7,
              loc="center left", bbox_to_anchor=(1.01, 0.5))
    ax.set_title("Fully masked query rows: what each system returns", fontsize=9)
    return _png(fig)


_MAKERS = {"error_heatmap.png": error_heatmap, "parameters.png": parameter_bars,
           "fully_masked_rows.png": fully_masked_grid}
CAPTIONS = {
    "error_heatmap.png": "Max abs error of the output against the float64 reference (log10), "
                         "case x runner. Hatched: over the absolute tolerance of the case's "
                         "dtype; red outline: a check failed; grey: no figure.",
    "parameters.png": "Each system's own parameter count for the cases carrying the numbers "
                      "a user typed (log scale); the dashed line is the analytic formula.",
    "fully_masked_rows.png": "What each system returns for a query row whose every key is "
                             "masked; grey: the system did not run the case.",
}


def make_figures(frame, cases, runners) -> dict[str, bytes]:
    """{file name: PNG bytes} of every figure that has data ({} without matplotlib); a
    figure drawn before from the same values, code and libraries comes from the cache
    (report/figure_cache.py)."""
    from conformance.cache import key
    from conformance.report.figure_cache import cached, drawing_key, keep

    if available():
        return {}
    _settings()
    drawn_from = drawing_key(frame, cases, runners)
    out = {}
    for name, maker in _MAKERS.items():
        k = key(name, drawn_from)
        png = cached(k)
        if png is None:
            png = maker(frame, cases, runners)
            if png is not None:
                keep(k, png)
        if png is not None:
            out[name] = png
    return out


def write_figures(figures: dict[str, bytes], out_dir) -> list[Path]:
    """Write the PNGs into out_dir; returns their paths."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    paths = []
    for name, png in figures.items():
        (out / name).write_bytes(png)
        paths.append(out / name)
    return paths
