"""Version drift: which release of a library changed which attention convention.

Builds one isolated env per (library, version) with uv, runs the standalone probes of
probes/ in it (one process per env) and compares the cells across versions; `--bisect`
walks the registry's releases between two versions that differ.  Not the freshness
check of report/drift.py (that compares reports with their committed versions).
"""
