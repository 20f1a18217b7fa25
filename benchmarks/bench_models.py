"""Models for training benchmarks.

``sleep``: layers whose forward and backward *sleep* for a set time instead of computing, with a
parameter of a set size. Compute time and communication volume are then independent knobs,
and sleeping leaves the 2 cores to communication, so overlap is measured, not CPU contention.
``mlp``: real fully connected layers (compute competes with communication for the cores).
"""

from __future__ import annotations

import time

import torch


class _SleepOp(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, weight, forward_s, backward_s):
        ctx.backward_s = backward_s
        ctx.weight_shape = weight.shape
        time.sleep(forward_s)
        return x + 0 * weight.reshape(-1)[0]

    @staticmethod
    def backward(ctx, grad):
        time.sleep(ctx.backward_s)
        return grad, torch.full(ctx.weight_shape, 1e-3), None, None


class SleepLayer(torch.nn.Module):
    """A layer with ``params`` parameters that takes ``forward_s`` / ``backward_s`` seconds."""

    def __init__(self, params: int, forward_s: float, backward_s: float) -> None:
        super().__init__()
        self.weight = torch.nn.Parameter(torch.zeros(params))
        self.forward_s, self.backward_s = forward_s, backward_s
        self.slowdown = 1.0

    def forward(self, x):
        return _SleepOp.apply(x, self.weight, self.forward_s * self.slowdown, self.backward_s * self.slowdown)


class SleepNet(torch.nn.Module):
    """``layers`` SleepLayers; the whole model has ``layers * params_per_layer`` parameters."""

    def __init__(self, layers: int, params_per_layer: int, forward_s: float, backward_s: float) -> None:
        super().__init__()
        self.layers = torch.nn.ModuleList(
            SleepLayer(params_per_layer, forward_s / layers, backward_s / layers) for _ in range(layers))

    def set_slowdown(self, factor: float) -> None:
        """Makes every layer ``factor`` times slower (stragglers)."""
        for layer in self.layers:
            layer.slowdown = factor

    def forward(self, x):
        for layer in self.layers:
            x = layer(x)
        return x


def make_model(name: str, layers: int, width: int, forward_ms: float, backward_ms: float) -> torch.nn.Module:
    """``sleep``: SleepNet with ``width`` parameters per layer; ``mlp``: Linear(width, width) layers."""
    if name == "sleep":
        return SleepNet(layers, width, forward_ms / 1000, backward_ms / 1000)
    if name == "mlp":
        blocks = []
        for _ in range(layers):
            blocks += [torch.nn.Linear(width, width), torch.nn.ReLU()]
        return torch.nn.Sequential(*blocks)
    raise ValueError(f"unknown model {name!r} (sleep, mlp)")


# ---- a small causal transformer language model ------------------------------------------------


class SyntheticText:
    """Token streams of a fixed random "language": each token is followed by one of ``branching``
    successors (the same table on every rank, from ``seed``), drawn with fixed unequal weights. A
    model can learn it (the loss falls from ln(vocab) towards the table's entropy, ~1 nat for 4
    successors), so loss-against-tokens comparisons mean something; nothing is downloaded."""

    def __init__(self, vocab: int, branching: int = 4, seed: int = 1234) -> None:
        generator = torch.Generator().manual_seed(seed)
        self.vocab = vocab
        self.successors = torch.randint(0, vocab, (vocab, branching), generator=generator)
        self.weights = torch.softmax(torch.randn(branching, generator=generator), dim=0)

    def batch(self, batch_size: int, seq_len: int, generator: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
        """(inputs, targets) of shape (batch_size, seq_len): targets are the inputs shifted by one."""
        tokens = torch.empty(batch_size, seq_len + 1, dtype=torch.int64)
        tokens[:, 0] = torch.randint(0, self.vocab, (batch_size,), generator=generator)
        choices = torch.multinomial(self.weights, batch_size * seq_len, replacement=True,
                                    generator=generator).view(batch_size, seq_len)
        for t in range(seq_len):
            tokens[:, t + 1] = self.successors[tokens[:, t], choices[:, t]]
        return tokens[:, :-1], tokens[:, 1:]


class TinyLM(torch.nn.Module):
    """A GPT-style causal language model: token and learned position embeddings, ``layers``
    pre-norm transformer blocks (``heads`` heads, a 4x MLP), a final norm and an untied output
    head. The defaults have 6.9 M parameters (27 MB of float32 gradients)."""

    def __init__(self, vocab: int = 4096, d_model: int = 256, layers: int = 6, heads: int = 4,
                 seq_len: int = 64) -> None:
        super().__init__()
        self.embed = torch.nn.Embedding(vocab, d_model)
        self.position = torch.nn.Parameter(torch.zeros(seq_len, d_model))
        block = torch.nn.TransformerEncoderLayer(d_model, heads, 4 * d_model, dropout=0.0, batch_first=True,
                                                 norm_first=True)
        self.blocks = torch.nn.TransformerEncoder(block, layers, enable_nested_tensor=False)
        self.norm = torch.nn.LayerNorm(d_model)
        self.head = torch.nn.Linear(d_model, vocab, bias=False)
        mask = torch.triu(torch.full((seq_len, seq_len), float("-inf")), diagonal=1)
        self.register_buffer("causal_mask", mask, persistent=False)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        """Logits of shape (batch, seq, vocab) for the next token at every position."""
        seq = tokens.shape[1]
        x = self.embed(tokens) + self.position[:seq]
        x = self.blocks(x, mask=self.causal_mask[:seq, :seq], is_causal=True)
        return self.head(self.norm(x))


def lm_loss(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """Mean next-token cross-entropy (nats per token)."""
    return torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1))
