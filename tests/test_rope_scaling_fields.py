"""attention.rope.scaling as the loader reads it (case/features.py): each type's fields and
transformers' defaults, the errors that name the field and the fix, the feature a runner
declares, the cache key, the shipped cases and the published schema."""
from __future__ import annotations

import json

import pytest
import yaml

from conformance.case.loader import CaseError, load_file, parse_case
from conformance.case.model import Rope
from conformance.paths import ROOT


def make(scaling, rope_extra=None, head_dim=16):
    rope = {"style": "half_split", "scaling": scaling, **(rope_extra or {})}
    raw = {"id": "scaled", "attention": {"num_heads": 2, "query_features": 2 * head_dim,
                                         "rope": rope},
           "inputs": {"batch": 1, "query_len": 4, "self_attention": True,
                      "position_offset": 16384}}
    return parse_case(raw, "<test>")


def refused(scaling, rope_extra=None) -> str:
    with pytest.raises(CaseError) as err:
        make(scaling, rope_extra)
    return str(err.value)


YARN = {"type": "yarn", "factor": 4, "original_max_positions": 4096}


def test_each_type_reads_with_transformers_defaults():
    y = make(YARN).attention.rope.scaling
    assert (y.kind, y.factor, y.original_max_positions) == ("yarn", 4.0, 4096)
    assert (y.beta_fast, y.beta_slow, y.truncate, y.magnitude) == (32.0, 1.0, True, "cos_sin")
    assert y.mscale is None and y.attention_factor is None
    l3 = make({"type": "llama3", "factor": 8, "original_max_positions": 8192}).attention.rope
    assert (l3.scaling.low_freq_factor, l3.scaling.high_freq_factor) == (1.0, 4.0)
    lin = make({"type": "linear", "factor": 8}).attention.rope.scaling
    assert lin.original_max_positions is None and lin.low_freq_factor is None
    lr = make({"type": "longrope", "factor": 16, "original_max_positions": 4096,
               "short_factor": [1] * 8, "long_factor": list(range(1, 9))}).attention.rope
    assert lr.scaling.long_factor == tuple(float(x) for x in range(1, 9))
    assert lr.scaling.magnitude == "cos_sin"


def test_the_feature_and_the_cache_key_follow_the_field():
    scaled = make({"type": "linear", "factor": 8})
    plain = parse_case({"id": "plain", "attention": {"num_heads": 2, "query_features": 32,
                                                     "rope": {"style": "half_split"}},
                        "inputs": {"batch": 1, "query_len": 4, "self_attention": True,
                                   "position_offset": 16384}}, "<test>")
    assert "rope_scaling" in scaled.features and "rope_scaling" not in plain.features
    assert scaled.fingerprint() != plain.fingerprint()
    assert scaled.fingerprint() != make({"type": "linear", "factor": 4}).fingerprint()
    # an unscaled Rope prints as it always has, so older cache keys hold
    assert "scaling" not in repr(Rope("half_split", 16, 10000.0))


@pytest.mark.parametrize("scaling, rope_extra, field, words", [
    ({"type": "ntk", "factor": 2}, None, "attention.rope.scaling.type", "linear"),
    ([1, 2], None, "attention.rope.scaling", "mapping"),
    ({"type": "linear", "factor": 8, "beta_fast": 32}, None,
     "attention.rope.scaling.beta_fast", "unknown field"),
    ({"type": "linear", "factor": 0.5}, None, "attention.rope.scaling.factor", ">= 1"),
    ({"type": "yarn", "factor": 4}, None,
     "attention.rope.scaling.original_max_positions", "required"),
    ({**YARN, "beta_fast": 1, "beta_slow": 32}, None, "attention.rope.scaling.beta_fast",
     "exceed beta_slow"),
    ({**YARN, "magnitude": "softmax_scale", "mscale": 0.707, "mscale_all_dim": 1}, None,
     "attention.rope.scaling.mscale", "equal to mscale_all_dim"),
    ({**YARN, "magnitude": "both"}, None, "attention.rope.scaling.magnitude", "cos_sin"),
    ({"type": "llama3", "factor": 8, "original_max_positions": 8192, "low_freq_factor": 4,
      "high_freq_factor": 1}, None, "attention.rope.scaling.high_freq_factor",
     "at least low_freq_factor"),
    ({"type": "longrope", "factor": 16, "original_max_positions": 4096,
      "short_factor": [1] * 7, "long_factor": [1] * 8}, None,
     "attention.rope.scaling.short_factor", "rotary_dim / 2 = 8"),
    ({"type": "longrope", "factor": 16, "original_max_positions": 4096,
      "short_factor": [1] * 8, "long_factor": [1] * 7 + [0]}, None,
     "attention.rope.scaling.long_factor[7]", "finite number"),
    ({"type": "dynamic", "factor": 2, "original_max_positions": 4096}, {"rotary_dim": 2},
     "attention.rope.rotary_dim", "rotary_dim >= 4"),
    ({"type": "linear", "factor": 8, "attention_factor": 2}, None,
     "attention.rope.scaling.attention_factor", "unknown field"),
])
def test_a_bad_scaling_names_its_field_and_the_fix(scaling, rope_extra, field, words):
    message = refused(scaling, rope_extra)
    assert field in message and words in message, message


def test_llama4_scouts_equal_band_factors_are_read():
    s = make({"type": "llama3", "factor": 16, "original_max_positions": 8192,
              "low_freq_factor": 1, "high_freq_factor": 1}).attention.rope.scaling
    assert s.low_freq_factor == s.high_freq_factor == 1.0


def test_every_shipped_scaling_case_loads_with_the_feature():
    files = sorted((ROOT / "cases").glob("rope_scaling_*.yaml"))
    cases = [c for f in files for c in load_file(f)]
    kinds = {c.attention.rope.scaling.kind for c in cases}
    assert kinds == {"linear", "dynamic", "yarn", "longrope", "llama3"}
    assert all("rope_scaling" in c.features for c in cases)
    assert max(max(c.inputs.position_offset, c.inputs.key_position_offset)
               for c in cases) >= 32768
    partial = [c for c in cases if c.attention.rope.scaling.kind == "yarn"
               and c.attention.rope.rotary_dim < c.attention.qk_head_dim]
    assert {c.attention.rope.scaling.magnitude for c in partial} == {"cos_sin", "softmax_scale"}


def test_the_schema_takes_each_type_and_refuses_a_foreign_field():
    jsonschema = pytest.importorskip("jsonschema", reason="jsonschema not installed (dev extra)")
    schema = json.loads((ROOT / "conformance" / "case" / "case.schema.json").read_text())
    validator = jsonschema.Draft202012Validator(schema)

    def doc(scaling):
        return {"id": "s", "attention": {"num_heads": 2, "query_features": 32, "rope": {
            "style": "half_split", "scaling": scaling}}}

    for path in sorted((ROOT / "cases").glob("rope_scaling_*.yaml")):
        assert not list(validator.iter_errors(yaml.safe_load(path.read_text()))), path.name
    assert not list(validator.iter_errors(doc({"type": "linear", "factor": 8})))
    assert list(validator.iter_errors(doc({"type": "linear", "factor": 8, "beta_fast": 32})))
    assert list(validator.iter_errors(doc({"type": "yarn", "factor": 4})))
