"""The strided convolutional classifier of thesis ch. 2 (DCGAN-style, no pooling)."""

from __future__ import annotations

from collections.abc import Sequence

import flax.linen as nn
import jax

NORMS = ("none", "batch", "layer")


class StridedCNN(nn.Module):
    """Convolutions of stride 2 with LeakyReLU, then a linear classifier (§2.2.2.2).

    Follows the DCGAN discriminator's recommendations the thesis cites: strided
    convolutions instead of pooling, LeakyReLU. With the default widths
    (64, 128, 256) and 4x4 kernels on 32x32x3 images it has about 700k parameters.

    Attributes:
      widths: output channels of each stride-2 convolution.
      num_classes: output logits C.
      kernel_size: side of the square kernels.
      hidden: width of an optional dense layer before the logits; its output is
        then the exchanged "features", else the flattened last convolution is.
      negative_slope: of the LeakyReLU.
      norm: normalisation after each convolution but the first (DCGAN puts none
        on the discriminator's input layer): "none" (the default, the plain
        network), "batch" (BatchNorm; its running statistics are the node's
        ``batch_stats`` model state, used at test time) or "layer" (LayerNorm,
        stateless).
      dropout: drop probability before the classifier (0 disables it; uses the
        "dropout" rng in training).
    """

    widths: Sequence[int] = (64, 128, 256)
    num_classes: int = 10
    kernel_size: int = 4
    hidden: int | None = None
    negative_slope: float = 0.2
    norm: str = "none"
    dropout: float = 0.0

    @nn.compact
    def __call__(self, x: jax.Array, *, train: bool = False) -> tuple[jax.Array, jax.Array]:
        """Args: x ``[B, H, W, C]`` float images. Returns logits ``[B, C]``, features ``[B, F]``."""
        if self.norm not in NORMS:
            raise ValueError(f"norm must be one of {NORMS}, got {self.norm!r}")
        h = x
        for i, width in enumerate(self.widths):
            h = nn.Conv(width, (self.kernel_size, self.kernel_size), strides=(2, 2), padding="SAME",
                        use_bias=self.norm == "none" or i == 0)(h)
            if i > 0 and self.norm == "batch":
                h = nn.BatchNorm(use_running_average=not train, momentum=0.9)(h)
            elif i > 0 and self.norm == "layer":
                h = nn.LayerNorm()(h)
            h = nn.leaky_relu(h, self.negative_slope)
        h = h.reshape(h.shape[0], -1)
        if self.hidden is not None:
            h = nn.leaky_relu(nn.Dense(self.hidden)(h), self.negative_slope)
        if self.dropout > 0:
            h = nn.Dropout(self.dropout, deterministic=not train)(h)
        return nn.Dense(self.num_classes)(h), h
