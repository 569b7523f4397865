"""litert/common.py converts the other precision from the same SavedModel while Keras's
export runs (one SavedModel for both LiteRT runners): the sibling must be byte-for-byte
that precision's own `model.export(format="litert")`, and a sibling converted without its
precision's settings (the planted defect) must not be.  One subprocess (Keras's backend is
fixed per process) answers both tests: 3 SavedModels, 5 conversions."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent


@pytest.fixture(scope="module")
def checked() -> dict:
    for name in ("keras", "tensorflow", "ai_edge_litert"):
        pytest.importorskip(name)
    env = {**os.environ, "KERAS_BACKEND": "tensorflow", "TF_CPP_MIN_LOG_LEVEL": "3"}
    done = subprocess.run([sys.executable, str(HERE / "litert_siblings_check.py")],
                          capture_output=True, text=True, env=env, cwd=HERE.parent,
                          timeout=300)
    line = [x for x in done.stdout.splitlines() if x.startswith("RESULT ")]
    assert line, done.stderr[-2000:]
    return json.loads(line[-1][len("RESULT "):])


def test_the_sibling_is_that_precisions_own_export_byte_for_byte(checked):
    assert checked["precisions_differ"]  # else the equality below proves nothing
    assert checked["own_equal"] and checked["siblings"] == ["f16"]
    assert checked["sibling_equal"]


def test_a_sibling_without_its_precisions_settings_differs(checked):
    assert checked["planted_sibling_equal"] is False  # the f16 sibling came out as f32
