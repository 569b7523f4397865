"""attention-conformance: one attention case, every framework, one float64 oracle.

Pipeline: case.py (load + validate) -> weights.py (seeded data) ->
runners/ (translate + run) -> reference.py + compare.py (judge) ->
matrix.py (one Row per case x runner) -> plugin.py / report.py (pytest, reports/).
"""
__version__ = "0.1.0"
