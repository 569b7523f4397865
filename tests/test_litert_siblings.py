"""litert/common.py converts the other precision from the same SavedModel while Keras's
export runs (one SavedModel for both LiteRT runners): each sibling must be byte-for-byte
that precision's own `model.export(format="litert")`, and a sibling converted without its
precision's settings (the planted defect) must not be."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent


def _check(plant: str = "") -> dict:
    for name in ("keras", "tensorflow", "ai_edge_litert"):
        pytest.importorskip(name) if name == "ai_edge_litert" else None
    env = {**os.environ, "KERAS_BACKEND": "tensorflow", "TF_CPP_MIN_LOG_LEVEL": "3"}
    done = subprocess.run([sys.executable, str(HERE / "litert_siblings_check.py"), plant],
                          capture_output=True, text=True, env=env, cwd=HERE.parent,
                          timeout=300)
    line = [x for x in done.stdout.splitlines() if x.startswith("RESULT ")]
    assert line, done.stderr[-2000:]
    return json.loads(line[-1][len("RESULT "):])


def test_each_sibling_is_that_precisions_own_export_byte_for_byte():
    r = _check()
    assert r["deterministic"] and r["precisions_differ"]  # else equality proves nothing
    assert r["f32"] == {"own_equal": True, "sibling": "f16", "sibling_equal": True}
    assert r["f16"] == {"own_equal": True, "sibling": "f32", "sibling_equal": True}


def test_a_sibling_without_its_precisions_settings_differs():
    r = _check("no_kwargs")
    assert r["f32"]["sibling_equal"] is False  # the f16 sibling came out as f32
