"""The native calls an HF attention module answers with an Observation, for the ledger's
probes of mixed_dtype, unbatched_input and weights_dropout (conventions/probes/
native_inputs.py judges): hidden_states cast to another dtype, one item without its batch
axis, attention dropout in train() with the attn_weights the module returns.  Nothing is
read against an oracle here.  torch arrives as an argument.
"""
from __future__ import annotations

from conformance.contract.runner import Observation, to_numpy


def built(runner, torch, case, data, rate: float):
    """(the config call, its module on the canonical weights with attention dropout `rate`,
    the case's query as hidden_states in the case's dtype): what every raw call starts
    from (common.HFRunner.answer too)."""
    call, plan = runner.config_call(case)
    module = runner.module_for(torch, case, {**plan, "attn_implementation":
                                             runner.attn_implementation, "dropout": rate},
                               data.weights)
    return call, module, torch.tensor(data.inputs.query, dtype=getattr(torch, case.inputs.dtype))


def native_call(runner, torch, case, data, raw):
    """The module of the case's config call on its canonical weights: hidden_states cast to
    raw.value into the module built in the case's dtype (the output's own dtype with it);
    item 0's (T, E) hidden_states; attention dropout raw.value['rate'] in the config,
    train(), torch.manual_seed(0), and the attn_weights the module returns (None under an
    attention function that computes none).  -> (Observation, the call)."""
    reason = runner.raw_limits(case)
    if raw.argument not in runner.answers or reason:
        raise NotImplementedError(f"{runner.name} passes no raw {raw.argument} on {case.id}"
                                  + (f": {reason}" if reason else ""))
    rate = raw.value["rate"] if raw.argument == "dropout_weights" else 0.0
    call, module, x = built(runner, torch, case, data, rate)
    if raw.argument == "input_dtype":
        x, said = x.to(getattr(torch, raw.value)), f"hidden_states as {raw.value}"
    elif raw.argument == "unbatched":
        x, said = x[0], f"hidden_states[0] {tuple(x[0].shape)}, no batch axis"
    else:
        module.train()
        said = f"hidden_states) with attention dropout {rate} in the config, train() (seed 0"
    torch.manual_seed(0)
    with torch.no_grad():
        out, w = runner.forward(module, x, None)
    return Observation(output=to_numpy(out), native_dtype=str(out.dtype)[6:],
                       attention_weights=None if w is None else to_numpy(w),
                       weights_returned="none" if w is None else "per_head"), (
        f"{call} ({runner.attn_implementation}): forward({said})")
