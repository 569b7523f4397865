"""argument_order by position, owned by the ledger, for a system whose inputs are positional
(Keras layers: `layer(query, value, key)`): the runner is asked (its `answer`, RawCall
"positional") to pass a probe case's query, key and value arrays as the system's first
three positional arguments in that order, and the output is named by the reading it
matches: the oracle (the second slot is the key: query_key_value) or the oracle with key
and value swapped (the second slot is the value: query_value_key), every distance quoted.
A runner whose system names its inputs by keyword is asked through its translate and run
instead (sizes.argument_order_cell).
"""
from __future__ import annotations

from dataclasses import replace

from conformance.conventions.probes.probing import closest, output_with, probe_case
from conformance.contract.runner import RawCall
from conformance.conventions.axes import Convention
from conformance.conventions.probes.asked import documented, unmeasured
from conformance.conventions.probes.request import ask_raw
from conformance.oracle.canonical import case_data


def positional_order_cell(runner) -> Convention:
    case = probe_case("argument-order")
    what = (f"probe_case {case.id}, distinct key and value arrays passed positionally as "
            "(query, key, value)")
    data = case_data(case)
    got = ask_raw(runner, case, RawCall("positional"), data)
    if not got.answered:
        return unmeasured("argument_order", runner, what, got)
    swapped = replace(data, inputs=replace(data.inputs, key=data.inputs.value,
                                           value=data.inputs.key))
    return closest("argument_order", got.output,
                   {"query_key_value": output_with(case, None, data),
                    "query_value_key": output_with(case, None, swapped)},
                   f"{runner.name}, {what} ({got.call}); query_value_key: the second slot "
                   "is read as the value", **documented(runner, "argument_order"))


RAW_PROBES = {"argument_order": ("positional", positional_order_cell)}
