"""The whole network of the MATLAB Answers question, counted per system.

The question (cases/matlab_answers_digits.yaml) puts selfAttentionLayer in a
small digit CNN: 28x28x1 input; conv 3x3x32 "same" + batch norm + ReLU + max
pool 2; conv 3x3x64 "same" + batch norm + ReLU + max pool 2; flatten to 3136
(7x7x64); the attention layer; fully connected 10.  The attention layer acts on
the 3136 flattened features: one sequence position with 3136 channels (MATLAB's
flatten output is 3136 channels; a layer's learnables depend on the channel
count only, so any sequence length gives the same counts).

`totals(typed)` gives, per system, the learnables the same typed numbers build:
the attention layer's share (typed.meaning) plus the rest of the network,
counted from each system's documented learnables:
- MATLAB: convolution Weights + Bias, batch normalization Offset + Scale
  (TrainedMean and TrainedVariance are state, not learnables:
  https://www.mathworks.com/help/deeplearning/ref/nnet.cnn.layer.batchnormalizationlayer.html),
  fullyConnectedLayer Weights + Bias.
- PyTorch: the same 2C weight and bias per BatchNorm2d; running_mean and
  running_var are buffers, not parameters.
- Keras: the same trainable weights; BatchNormalization's moving_mean and
  moving_variance are non-trainable weights that count_params() includes, so
  Keras's total is the trainable count plus 2C per batch norm.
`build_torch` and `keras_counts` build the networks for real (no forward pass);
the tests check them against these counts, and the report shows the counts (it
stays deterministic and needs no framework).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

from conformance.case.typed_numbers import meaning

INPUT = (28, 28, 1)
CONVS = ((3, 1, 32), (3, 32, 64))  # (kernel, in channels, out channels), each + BN + ReLU + pool
FLAT = 7 * 7 * 64  # 3136 after two 2x2 pools
CLASSES = 10
SYSTEMS = ("matlab", "torch", "keras")  # built here (torch, keras) or documented (MATLAB)
HOW = {"matlab": "documented learnables (MATLAB cannot run here)",
       "torch": "sum(p.numel()); torch build checked in tests",
       "keras": "count_params(); Keras build checked in tests"}


def layer_counts() -> list[tuple[str, int, int]]:
    """(layer, learnables, state) of every layer but the attention layer."""
    rows = []
    for i, (k, cin, cout) in enumerate(CONVS, 1):
        rows.append((f"conv{i} {k}x{k}x{cin}x{cout} + bias", k * k * cin * cout + cout, 0))
        rows.append((f"batchnorm{i} scale + offset (mean, variance: state)", 2 * cout, 2 * cout))
    rows.append((f"fully connected {FLAT}x{CLASSES} + bias", FLAT * CLASSES + CLASSES, 0))
    return rows


@dataclass(frozen=True)
class NetworkCount:
    system: str
    call: str  # the attention layer as that system's user types it
    attention: int  # the attention layer's learnables
    rest: int  # every other layer's learnables
    state: int  # non-trainable state (batch norm moving mean and variance)
    how: str

    @property
    def trainable(self) -> int:
        return self.attention + self.rest

    @property
    def total(self) -> int:
        """What the system's own total reports: Keras's count_params() includes the
        state; MATLAB's Learnables and torch's parameters() do not."""
        return self.trainable + (self.state if self.system == "keras" else 0)


def totals(typed: Mapping[str, Any]) -> list[NetworkCount]:
    """The network's learnables in each of SYSTEMS, reading `typed` in its words;
    [] when the typed numbers do not act on the network's FLAT features."""
    rows = {m.system: m for m in meaning(typed)}
    if rows["matlab"].parameters is None or not _fits(typed):
        return []
    layers = layer_counts()
    rest, state = sum(n for _, n, _ in layers), sum(s for _, _, s in layers)
    return [NetworkCount(s, rows[s].call, rows[s].parameters, rest, state, HOW[s])
            for s in SYSTEMS if rows[s].parameters is not None]


def _fits(typed: Mapping[str, Any]) -> bool:
    from conformance.case.typed_numbers import derive

    return derive(typed)["query_features"] == FLAT


def build_torch(num_heads: int) -> int:
    """The network in PyTorch (nn.Sequential, nn.MultiheadAttention(embed_dim=3136,
    num_heads) on one position); sum of p.numel() over its parameters."""
    import torch
    from torch import nn

    class Attention(nn.Module):  # (B, 3136) -> one position -> (B, 3136)
        def __init__(self):
            super().__init__()
            self.mha = nn.MultiheadAttention(FLAT, num_heads, batch_first=True)

        def forward(self, x):
            x = x.unsqueeze(1)
            return self.mha(x, x, x, need_weights=False)[0].squeeze(1)

    layers: list[Any] = []
    for k, cin, cout in CONVS:
        layers += [nn.Conv2d(cin, cout, k, padding="same"), nn.BatchNorm2d(cout), nn.ReLU(),
                   nn.MaxPool2d(2)]
    with torch.device("meta"):  # shapes only: nothing allocated, no forward pass
        net = nn.Sequential(*layers, nn.Flatten(), Attention(), nn.Linear(FLAT, CLASSES))
    return sum(p.numel() for p in net.parameters())


def keras_counts(configs: list[tuple[int, int]]) -> list[dict]:
    """The network in Keras (functional model, MultiHeadAttention(num_heads, key_dim) on
    one position) for each (num_heads, key_dim): [{"trainable": ..., "total":
    count_params()}].  Run it where Keras's backend is set (a Keras worker:
    workers.call_in_worker): the backend is fixed per process."""
    import keras

    def count(heads, key_dim):
        inp = keras.Input((28, 28, 1))
        x = inp
        for filters in (32, 64):
            x = keras.layers.Conv2D(filters, 3, padding="same")(x)
            x = keras.layers.BatchNormalization()(x)
            x = keras.layers.ReLU()(x)
            x = keras.layers.MaxPooling2D(2)(x)
        x = keras.layers.Reshape((1, 3136))(keras.layers.Flatten()(x))
        x = keras.layers.MultiHeadAttention(num_heads=heads, key_dim=key_dim)(x, x)
        out = keras.layers.Dense(10)(keras.layers.Flatten()(x))
        model = keras.Model(inp, out)
        trainable = sum(int(w.numpy().size) for w in model.trainable_weights)
        return {"trainable": trainable, "total": model.count_params()}
    return [count(*pair) for pair in configs]
