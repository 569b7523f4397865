"""The published JSON Schema matches the loader and accepts every shipped case."""
from __future__ import annotations

import json

import pytest
import yaml

from conformance.case import loader as case_module
from conformance.paths import ROOT

SCHEMA = json.loads((ROOT / "conformance" / "case" / "case.schema.json").read_text())


def test_schema_fields_match_loader():
    props = SCHEMA["$defs"]["case"]["properties"]
    assert set(props) == case_module._TOP
    for section, fields in case_module._SECTIONS.items():
        assert set(props[section]["properties"]) == fields, section


def test_shipped_cases_validate_against_schema():
    jsonschema = pytest.importorskip("jsonschema", reason="jsonschema not installed (dev extra)")
    jsonschema.Draft202012Validator.check_schema(SCHEMA)
    validator = jsonschema.Draft202012Validator(SCHEMA)
    for path in sorted((ROOT / "cases").glob("*.yaml")):
        errors = list(validator.iter_errors(yaml.safe_load(path.read_text())))
        assert not errors, f"{path.name}: {errors[0].message}"


def test_schema_rejects_unknown_field():
    jsonschema = pytest.importorskip("jsonschema", reason="jsonschema not installed (dev extra)")
    bad = {"id": "x", "attention": {"num_heads": 1, "query_features": 2}, "dropout": 0.1}
    assert list(jsonschema.Draft202012Validator(SCHEMA).iter_errors(bad))


@pytest.mark.parametrize("bad", [
    {"id": "tiny\n", "attention": {"num_heads": 1, "query_features": 2}},
    {"id": "x", "attention": {"num_heads": 1, "query_features": 2},
     "expect": {"tolerance": {"float32": {"rtol": float("inf"), "atol": 0}}}},
    {"id": "x", "attention": {"num_heads": 1, "query_features": 2**63}},
    {"id": "x", "attention": {"num_heads": 1, "query_features": 2}, "inputs": {"seed": None}},
])
def test_schema_and_loader_refuse_the_same_hostile_values(bad):
    """The schema follows the loader on what issue #13 found accepted."""
    jsonschema = pytest.importorskip("jsonschema", reason="jsonschema not installed (dev extra)")
    assert list(jsonschema.Draft202012Validator(SCHEMA).iter_errors(bad))
    with pytest.raises(case_module.CaseError):
        case_module.parse_case(bad, "<schema test>")
