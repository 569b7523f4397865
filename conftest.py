"""The matrix lives in the conformance plugin; this file only loads it."""
pytest_plugins = ["conformance.plugin"]
