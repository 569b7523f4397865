"""attention-conformance: one attention case, every framework, one float64 oracle.

Pipeline: case.py (load + validate) -> weights.py (seeded data) ->
runners/ (translate + run, on contract.py) -> reference.py + compare.py +
verdict.py (judge) -> matrix.py (one Row per case x runner) -> plugin.py /
report/ (pytest, reports/).
"""
__version__ = "0.1.0"
