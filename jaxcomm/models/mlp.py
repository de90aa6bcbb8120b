"""A ReLU multilayer perceptron classifier (thesis §3.2.2.2, and the demo)."""

from __future__ import annotations

from collections.abc import Sequence

import flax.linen as nn
import jax


class MLP(nn.Module):
    """ReLU MLP on flattened images, with optional dropout after each hidden layer.

    Attributes:
      hidden: widths of the hidden layers, e.g. ``(32, 32)`` for the thesis'
        784-32-32-10 student or ``(1200, 1200)`` for its teacher.
      num_classes: output logits C.
      dropout: drop probability after each hidden layer (0 disables it).
    """

    hidden: Sequence[int] = (32, 32)
    num_classes: int = 10
    dropout: float = 0.0

    @nn.compact
    def __call__(self, x: jax.Array, *, train: bool = False) -> tuple[jax.Array, jax.Array]:
        """Args: x ``[B, ...]`` float images. Returns logits ``[B, C]``, features ``[B, hidden[-1]]``."""
        h = x.reshape(x.shape[0], -1)
        for width in self.hidden:
            h = nn.relu(nn.Dense(width)(h))
            if self.dropout > 0:
                h = nn.Dropout(self.dropout, deterministic=not train)(h)
        return nn.Dense(self.num_classes)(h), h

