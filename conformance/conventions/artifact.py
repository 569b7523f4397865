"""The parameter_formula cell of an exported or converted program, read from what the
program holds as its row records it, never from the framework it came from.

An exporter may fold all-zero biases away or fold the softmax scale into a weight, so the
program can hold fewer elements than its source framework counts (Row.parameters keeps
that count).  Two kinds of record exist:
- an ONNX graph's accounting (Row.graphs, or extras["graphs"] in a results file;
  runners/_export/onnx_accounting.py): `exported_weights`, the framework's parameters found
  in the graph, and `mapping`, which names each parameter the graph lacks: exact;
- a runtime's count of every float constant in the program it ran (an extras entry with
  `constant_elements`, or `constants` by dtype): weights together with scalars and mask
  constants, so only an upper bound of the weights held.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

from conformance.conventions.cells import NOT_PROBED, LedgerCell, _at, _cell
from conformance.run.evaluate import Row


@dataclass(frozen=True)
class HeldCount:
    """What one row's program holds, as its records say."""

    elements: int  # weight elements (exact) or every float constant element (a bound)
    exact: bool  # True: framework parameters mapped into the program (ONNX accounting)
    record: str  # where the row records it, for the evidence
    missing: tuple[str, ...] = ()  # framework parameters the program lacks, with the note


def _graphs(row: Row) -> Mapping[str, Any]:
    return row.graphs or row.extras.get("graphs") or {}


def _runtime_constants(extras: Mapping[str, Any]) -> tuple[str, int] | None:
    """(extras key, float constant elements) of a runtime's own count, if recorded."""
    for key, value in extras.items():
        if not isinstance(value, Mapping):
            continue
        if isinstance(value.get("constant_elements"), int):
            return key, value["constant_elements"]
        by_dtype = value.get("constants")
        if isinstance(by_dtype, Mapping) and by_dtype and all(
                isinstance(n, int) for n in by_dtype.values()):
            return key, sum(by_dtype.values())
    return None


def converted(row: Row) -> bool:
    """The row's program records only a runtime's count of its float constants (a
    converted model, a lowered program): its tensors are not recorded one by one."""
    return _runtime_constants(row.extras) is not None


def held_count(row: Row) -> HeldCount | None:
    """The program's count from the row: the runtime's own count of the program it ran
    first (a converted model, a lowered program), else the ONNX graph it ran; None for a
    row that records neither (a framework object, a count-only row)."""
    runtime = _runtime_constants(row.extras)
    if runtime is not None:
        key, n = runtime
        return HeldCount(n, False, f"extras {key}: float constant elements of the program")
    graphs = _graphs(row)
    if not graphs:
        return None
    label, acc = next(iter(graphs.items()))  # the graph the output comes from
    if not isinstance(acc, Mapping) or not isinstance(acc.get("exported_weights"), int):
        return None
    missing = tuple(f"{name}: {how}" for name, how in (acc.get("mapping") or {}).items()
                    if isinstance(how, str) and how.startswith("missing"))
    return HeldCount(acc["exported_weights"], True,
                     f"graph '{label}': weights mapped into the ONNX graph", missing)


@dataclass(frozen=True)
class HeldTensor:
    """Where a framework parameter sits in an ONNX graph (its accounting's mapping)."""

    tensor: str  # the graph's initializer or constant
    shape: tuple[int, ...]
    how: str  # "as is", "transposed", "rearranged (...)"


def graph_tensors(row: Row) -> dict[str, HeldTensor] | None:
    """Framework parameter -> the graph tensor holding it, for a row whose program is an
    ONNX graph named by its source framework's parameters (an export); None where the
    runtime's own record comes first (a converted program: its tensors are not recorded)
    or where the row's weight_shapes already name the graph's tensors (a graph the suite
    builds around an op)."""
    if _runtime_constants(row.extras) is not None:
        return None
    graphs = _graphs(row)
    acc = next(iter(graphs.values()), None) if graphs else None
    if not isinstance(acc, Mapping):
        return None
    held = {name: HeldTensor(ways[0]["tensor"], tuple(ways[0]["shape"]), ways[0]["how"])
            for name, ways in (acc.get("mapping") or {}).items()
            if isinstance(ways, list) and ways and isinstance(ways[0], Mapping)}
    if not held or set(row.weight_shapes) & {h.tensor for h in held.values()}:
        return None
    return held


def suite_built(row: Row) -> bool:
    """The row's ONNX graph holds the suite's own canonical arrays (its accounting maps
    only wq, wk, ... bo): a graph the suite builds around an operator that takes projected
    tensors, so the operator itself holds no weights."""
    from conformance.oracle.canonical import CanonicalWeights

    if converted(row):
        return False
    graphs = _graphs(row)
    acc = next(iter(graphs.values()), None) if graphs else None
    names = set((acc.get("mapping") or {}) if isinstance(acc, Mapping) else ())
    return bool(names) and names <= set(CanonicalWeights.NAMES)


def bias_elements(case) -> int:
    """Elements of the q, k, v and output biases of `case` (0 without biases)."""
    a = case.attention
    if not a.bias:
        return 0
    return (a.num_heads * a.qk_head_dim + a.num_kv_heads * (a.qk_head_dim + a.v_head_dim)
            + a.output_features)


@dataclass(frozen=True)
class Reading:
    """One row's program against the formula: fewer (`short` elements at least), equal, or
    not settled (a bound at or above the formula)."""

    row: Row
    held: HeldCount
    short: int  # formula - held (> 0: the program lacks at least this many)

    @property
    def settled_equal(self) -> bool:
        return self.held.exact and self.short == 0

    @property
    def fewer(self) -> bool:
        return self.short > 0


def _zero_biases(reading: Reading, cases) -> bool:
    """The shortfall is within the case's biases, which are all zeros."""
    case = cases.get(reading.row.case)
    if case is None or getattr(case.weights, "bias_values", "") != "zeros":
        return False
    names_ok = all("bias" in m.split(":")[0] for m in reading.held.missing)
    return names_ok and reading.short <= bias_elements(case)


def _quote(r: Reading) -> str:
    f = r.row.parameters_formula
    if r.held.exact:
        text = f"{_at(r.row)}: {r.held.elements:,} vs formula {f:,}"
        return text + (f" ({'; '.join(r.held.missing)})" if r.held.missing else "")
    return (f"{_at(r.row)}: at most {r.held.elements:,} (float constants) vs formula {f:,}, "
            f"at least {r.short:,} elements not held")


def artifact_params(name: str, rows: list[Row], cases) -> LedgerCell | None:
    """The cell from the programs' own counts, or None where no row records a program."""
    readings = [Reading(r, h, r.parameters_formula - h.elements) for r in rows
                if r.outcome.ran and not suite_built(r) and (h := held_count(r)) is not None]
    if not readings:
        return None
    record = readings[0].held.record
    fewer = [r for r in readings if r.fewer]
    equal = [r for r in readings if r.settled_equal]
    open_ = [r for r in readings if not r.fewer and not r.settled_equal]
    unsettled = (f"; not settled in {len(open_)} case(s): float constants at or above the "
                 f"formula (e.g. {_at(open_[0].row)} {open_[0].held.elements:,})"
                 if open_ else "")
    if fewer:
        zero = all(_zero_biases(r, cases) for r in fewer)
        named = sorted({m.split(":")[0] for r in fewer for m in r.held.missing})
        value = ("zero biases dropped" + (f": {', '.join(named)}" if named else "")
                 if zero else "differs")
        return _cell(name, "parameter_formula", value,
                     f"the program holds fewer elements than the formula in {len(fewer)} of "
                     f"{len(readings)} case(s) ({record}): "
                     + "; ".join(_quote(r) for r in fewer[:3])
                     + (f"; equal in {len(equal)} case(s) (e.g. {_at(equal[0].row)})"
                        if equal else "") + unsettled)
    if equal:
        return _cell(name, "parameter_formula", "canonical",
                     f"the program holds the formula's count in all {len(equal)} case(s) "
                     f"it settles ({record}): " + ", ".join(
                         f"{_at(r.row)} {r.held.elements:,}" for r in equal[:3]) + unsettled)
    return _cell(name, "parameter_formula", NOT_PROBED,
                 f"the program's record counts every float constant together ({record}), "
                 f"at or above the formula in all {len(readings)} case(s) (e.g. "
                 f"{_quote(open_[0]).split(': at most')[0]} {open_[0].held.elements:,} vs "
                 f"formula {open_[0].row.parameters_formula:,}): no weight count can be read")
