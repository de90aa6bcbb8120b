"""LGC's autoencoder of gradient values (:mod:`jaxcomm.lgc`): a lightweight 1-D convolutional encoder and decoder.

Abrahamyan, Chen, Bekoulis, Deligiannis, "Learned Gradient Compression for Distributed Deep Learning" (IEEE TNNLS
2021): the widths and the layout are the public re-implementation's, as :mod:`jaxcomm.lgc` says.
"""

from __future__ import annotations

import flax.linen as nn
import jax
import jax.numpy as jnp


class Encoder(nn.Module):
    """LGC's encoder: values ``[k]`` -> code ``[ceil(k / 16), channels]``.

    Attributes:
      widths: of the four convolutions (kernel 3, stride 2, leaky ReLU).
      channels: of the code (a 1x1 convolution).
    """

    widths: tuple[int, ...]
    channels: int

    @nn.compact
    def __call__(self, values: jax.Array) -> jax.Array:
        h = values[:, None]
        for width in self.widths:
            h = nn.leaky_relu(nn.Conv(width, (3,), strides=(2,))(h))
        return nn.Conv(self.channels, (1,))(h)


class Decoder(nn.Module):
    """LGC's decoder: code ``[L, channels]`` (and a side input ``[k]``, the innovation) -> values ``[k]``.

    Attributes:
      widths: of the four transposed convolutions (kernel 3, stride 2, leaky ReLU), then a 1x1 convolution.
      length: k.
    """

    widths: tuple[int, ...]
    length: int

    @nn.compact
    def __call__(self, code: jax.Array, side: jax.Array | None = None) -> jax.Array:
        h = code
        for width in self.widths:
            h = nn.leaky_relu(nn.ConvTranspose(width, (3,), strides=(2,))(h))
        h = h[: self.length] if side is None else jnp.concatenate([h[: self.length], side[:, None]], axis=-1)
        return nn.Conv(1, (1,))(h)[:, 0]
