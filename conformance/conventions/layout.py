"""The weight_layout cell from this run's rows: the query projection's native name and
shape, each dimension named by the size it has in the case (E, H, d_k, ...) and its role
(in, out, heads, dim).  Split from ledger.py (which stays under 400 lines)."""
from __future__ import annotations

import re
from typing import Mapping

from conformance.conventions.artifact import converted, graph_tensors, suite_built
from conformance.conventions.cells import NOT_PROBED
from conformance.run.evaluate import Row


_QUERY = (re.compile(r"in_proj_weight$"), re.compile(r"q_proj"),
          re.compile(r"query(?!.*bias)", re.I), re.compile(r"(^|[/._])w_?q($|[/._])", re.I))


def _query_weight(shapes: Mapping[str, list[int]]) -> str | None:
    for pattern in _QUERY:
        for name in shapes:
            if pattern.search(name) and "bias" not in name.lower():
                return name
    return None


def _symbols(case) -> list[tuple[str, int]]:
    """The sizes a dimension may be, in the order a name is chosen when several fit."""
    a = case.attention
    return [("E", a.query_features), ("H", a.num_heads), ("d_k", a.qk_head_dim),
            ("H*d_k", a.num_heads * a.qk_head_dim), ("3E", 3 * a.query_features),
            ("E_k", a.key_features), ("E_v", a.value_features), ("H_kv", a.num_kv_heads),
            ("d_v", a.v_head_dim), ("3*H*d_k", 3 * a.num_heads * a.qk_head_dim)]


ROLE = {"E": "in", "E_k": "in", "E_v": "in", "H": "heads", "H_kv": "heads", "d_k": "dim",
        "d_v": "dim", "H*d_k": "out", "3E": "out", "3*H*d_k": "out"}


def _clear(shape: list[int], case) -> int:
    """How many dimensions of `shape` have one role (in, out, heads, dim) in this case."""
    if case is None:
        return -1
    syms = _symbols(case)
    return sum(len({ROLE[s] for s, v in syms if v == n}) == 1 for n in shape)


def _layout(name: str, shape: list[int], case) -> str:
    if case is None:
        return f"{name} {tuple(shape)}"
    syms = [next((s for s, v in _symbols(case) if v == n), str(n)) for n in shape]
    roles = [ROLE.get(s, "?") for s in syms]
    if roles == ["in", "in"]:  # square (E = H*d_k in every case): shapes cannot orient it
        return f"{name} ({', '.join(syms)}) square: orientation not visible in the shapes"
    return f"{name} ({', '.join(syms)}) {' x '.join(roles)}"


# the cell of a system that holds no weights: the arrays in its rows' weight_shapes are the
# suite's own projections, applied before the call, and describe no layout of the system's
WEIGHTLESS = "none: the function takes projected tensors"


def counted(rows: list[Row]) -> list[Row]:
    """The rows that ran with a count of the system's: not a count-only row whose figure
    is the suite's formula (Count.method, "formula (...)": no allocation-free path)."""
    return [r for r in rows if r.outcome.ran and r.parameters is not None
            and not r.count_method.startswith("formula")]


def holds_none(rows: list[Row]) -> list[Row]:
    """The rows that ran, where every one of them holds no parameters (Observation.parameters
    None, the projections passed in counted apart); [] where any holds some."""
    ran = counted(rows)
    if ran and all((r.parameters == 0 and r.projection_parameters is not None)
                   or suite_built(r) for r in ran):
        return ran
    return []


def weight_layout(name: str, rows: list[Row], cases) -> tuple[Row, str, str] | None:
    """(the row it is read from, the cell's value, its evidence after the row's id)."""
    weightless = holds_none(rows)
    if weightless:
        return weightless[0], WEIGHTLESS, (
            f"holds no parameters in any of the {len(weightless)} case(s) it ran; the query, "
            "key and value it takes were projected before the call by the suite's own "
            "arrays" + (" (the initializers of the graph the suite builds around the op)"
                        if suite_built(weightless[0]) else "") + ", which are not the system's")
    ran = [r for r in rows if r.outcome.ran]
    return _program_layout(ran, cases) or _shapes_layout(rows, cases)


def _program_layout(rows: list[Row], cases) -> tuple[Row, str, str] | None:
    """An exported graph's layout is the graph's tensor (its shape, how the exporter laid
    the parameter out); a converted program that records no tensors is not_probed, its
    source framework's layout quoted as that, not as the program's."""
    graph = [(r, held) for r in rows if (held := graph_tensors(r))]
    found = [(r, held, q) for r, held in graph
             if (q := _query_weight({n: list(h.shape) for n, h in held.items()}))]
    if found:
        row, held, q = max(found, key=lambda f: _clear(list(f[1][f[2]].shape),
                                                      cases.get(f[0].case)))
        h = held[q]
        value = (f"{_layout(q, list(h.shape), cases.get(row.case))} in the graph "
                 f"({h.how.split(' (')[0]})")
        source = row.weight_shapes.get(q)
        return row, value, (f"{q} is graph tensor {h.tensor} {h.shape} ({h.how})"
                            + (f"; the source framework's {q} is {tuple(source)}"
                               if source else ""))
    source = _shapes_layout(rows, cases) if any(converted(r) for r in rows) else None
    if source is None:
        return None
    row, word, text = source
    return row, NOT_PROBED, (f"the program's tensors are not recorded by name and shape (its "
                             f"record counts float constants only); its source framework's "
                             f"layout, not the program's: {word} ({text})")


def _shapes_layout(rows: list[Row], cases) -> tuple[Row, str, str] | None:
    """The layout read from the rows' native weight names and shapes."""
    found = [(r, _query_weight(r.weight_shapes)) for r in rows if r.weight_shapes]
    found = [(r, q) for r, q in found if q]
    if not found:
        return None
    # the row whose query weight's dimensions each have one reading (E != H*d_k ...)
    row, q = max(found, key=lambda rq: _clear(rq[0].weight_shapes[rq[1]], cases.get(rq[0].case)))
    value = _layout(q, row.weight_shapes[q], cases.get(row.case))
    others = ", ".join(f"{n} {tuple(s)}" for n, s in row.weight_shapes.items() if n != q)
    return row, value, f"{q} {tuple(row.weight_shapes[q])}; also {others or 'nothing'}"
