"""Building cases in tests without files, and planted systems shared by several tests."""
from __future__ import annotations

from conformance.case.loader import parse_case


def make_case(**sections):
    """parse_case from keyword sections, e.g. make_case(attention={...}, mask={...})."""
    raw = {"id": sections.pop("id", "t"), **sections}
    raw.setdefault("attention", {"num_heads": 2, "query_features": 8})
    return parse_case(raw, "<test>")


# module -> the pyproject extra that installs it
EXTRA = {"torch": "torch", "flax": "flax", "jax": "flax", "onnx": "onnx",
         "onnxruntime": "onnx", "matplotlib": "dev"}


def require(*modules: str, reason: str = "") -> None:
    """Skip the calling test module when a module is not installed, without importing it:
    pytest.importorskip imports it at collection (torch and jax cost about 3 s each, in a
    process whose runners run in workers and never need them)."""
    import importlib.util

    import pytest

    missing = [m for m in modules if importlib.util.find_spec(m) is None]
    if missing:
        extras = sorted({EXTRA.get(m, m) for m in missing})
        pytest.skip(reason or f"{', '.join(missing)} not installed (pip install -e "
                              f"'.[{','.join(extras)}]')", allow_module_level=True)



def planted_export_probe(runner, change):
    """An ExportProbe of `runner` whose probe module (nn.MultiheadAttention, wrapped as the
    runner's user would call it) has its masks and outputs edited by `change(stage, mha,
    x)`, stage "masks" (x: the mask inputs by name) or "outputs" (x: what mha returned)."""
    from conformance.runners._export.export_probe import ExportProbe
    from conformance.runners._export.torch_onnx import wrap_module

    def wrap(torch, mha, self_attention, mask_names, kwargs):
        class Planted(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.mha = mha

            def forward(self, *qkv, **named):
                masks = change("masks", mha, {n: named.pop(n) for n in mask_names})
                return change("outputs", mha, self.mha(*qkv, **masks, **named))

        return wrap_module(torch, Planted(), self_attention, mask_names, kwargs)

    return ExportProbe(runner, wrap)
