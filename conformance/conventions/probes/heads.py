"""kv_head_mapping, owned by the ledger: which key/value head a query head reads when
there are fewer key/value heads than query heads.

The probe case (6 query heads over 3 key/value heads, distinct weights per head) is asked
of the runner (its translate and run: grouped heads passed as its system takes them), in
the first form it takes (needs.needed_forms), and the output named by the mapping it
matches: grouped (query head h reads kv head h // 2) or tiled (h % 3), every distance
quoted.
"""
from __future__ import annotations

from conformance.conventions.probes.probe_cells import kv_mapping_candidates
from conformance.conventions.probes.probing import closest
from conformance.conventions.axes import Convention
from conformance.conventions.probes.asked import documented, said, unmeasured
from conformance.conventions.probes.forms import first_taken
from conformance.conventions.probes.needs import needed_forms
from conformance.oracle.canonical import case_data


def kv_head_mapping_cell(runner, own: Convention | None = None) -> Convention:
    case, got, note = first_taken(runner, needed_forms(
        runner, "kv-head-mapping", attention={"num_heads": 6, "num_kv_heads": 3,
                                              "query_features": 12}))
    what = (f"probe_case {case.id}: 6 query heads, 3 key/value heads with distinct weights "
            f"(grouped: head h reads kv head h // 2; tiled: h % 3){note}")
    if not got.answered:
        return unmeasured("kv_head_mapping", runner, what, got)
    return closest("kv_head_mapping", got.output, kv_mapping_candidates(case, case_data(case)),
                   f"{runner.name}, {said(what, got)}", **documented(runner, "kv_head_mapping"))
