"""What the documented models share (marian.py, matlab.py): systems that
cannot run here, modelled from their cited documentation or source (Observation.executed
= False).  A model is its module's functions: `limitation(case)` (the reason a case is not
expressible, or None) and `call(case)` (the native call's text and the plan), given as
class keywords with the note every row carries:

    class MarianCppModel(DocumentedModel, limitation=limitation, call=marian_options,
                         note=MODEL_NOTE): ...

Its ledger cells are data, each with its citation: the `cited:` section of its
expectations file (conventions/expectations.py), which the ledger reads.

A model's framework (its pytest marker) and its typed-numbers vocabulary are the first
word of its name.
"""
from __future__ import annotations

from typing import Callable

import numpy as np

from conformance.contract.runner import NotExpressible, Observation, Runner, Translation


class DocumentedModel(Runner):
    requires = ()  # a model in NumPy: runs everywhere
    executed = False
    seconds = 0.02

    def __init_subclass__(cls, *, limitation: Callable, call: Callable, note: str, **kw):
        super().__init_subclass__(**kw)
        cls._limitation, cls._call = staticmethod(limitation), staticmethod(call)
        cls.note = note
        cls.framework = cls.framework or cls.name.split(".")[0]
        cls.typed_system = cls.typed_system or cls.framework  # its vocabulary: matlab, marian

    def translate(self, case):
        reason = self._limitation(case)
        if reason:
            return NotExpressible(reason)
        call, plan = self._call(case)
        return Translation(call, plan)

    def observe(self, params: dict[str, np.ndarray], notes: list[str], **kw) -> Observation:
        """The row of a model: parameters and weight shapes from the model's own layout
        `params`, executed=False, the model's note first."""
        return Observation(parameters=int(sum(a.size for a in params.values())),
                           weight_shapes={n: a.shape for n, a in params.items()},
                           executed=False, notes=[self.note, *notes], **kw)
