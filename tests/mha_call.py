"""The torch module the conversion tests start from: nn.MultiheadAttention(8, 2), seeded,
called as self-attention on a query and a boolean mask (the rows' call without weights).
Shared by test_same_graph.py, test_torchlib_once.py and test_cia_once.py; torch is passed
in, so importing this module imports no framework."""
from __future__ import annotations


def mha(torch, seed: int = 0, bump: bool = False):
    torch.manual_seed(seed)
    m = torch.nn.MultiheadAttention(8, 2, batch_first=True).eval()
    if bump:
        with torch.no_grad():
            m.in_proj_weight[0, 0] += 1e-3  # one weight of 192
    return m


def call(torch, m):
    """The module a converter starts from: `m` called on a query and a boolean mask."""
    class Call(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.m = m

        def forward(self, q, mask):
            return self.m(q, q, q, attn_mask=mask, need_weights=False)[0]

    return Call().eval()


def args(torch, t: int = 3):
    return torch.randn(1, t, 8), torch.zeros(t, t, dtype=torch.bool)
