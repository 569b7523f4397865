"""What runs inside a drift env (run_probes.py): the ledger's own probes asked of the
suite's runners, with this repository's root on PYTHONPATH (the package read from source,
not installed: an old env keeps its own releases of everything else; the probe path needs
NumPy and PyYAML only).  cells.py turns a ledger cell into a drift cell.
"""
