"""Standalone probe scripts, run by an old env's own Python (see run_probes.py).

They import nothing from `conformance` (the old env does not have it, nor its
dependencies): only NumPy, the library probed and their sibling files.
"""
