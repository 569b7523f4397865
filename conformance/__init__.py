"""attention-conformance: one attention case, every framework, one float64 oracle.

Pipeline (one package a step): case/ (load + validate cases/*.yaml) -> oracle/ (seeded
canonical data, the float64 reference) -> runners/ (translate + run each system, on
contract/) -> run/ (rows, workers) -> compare/ (judge a row) -> conventions/ (the ledger:
its own probes in conventions/probes/, pinned cells) -> report/ (reports/), with plugin/
(pytest) and cli/ (python -m conformance) on top.
"""
__version__ = "0.1.0"
