"""A convolutional BiGAN (thesis §2.2.4.1): generator, encoder, and a discriminator on (x, z) pairs.

Three parts, all DCGAN-style (§2.2.2.2): the generator ``G(z)`` is the mirrored decoder of
:mod:`jaxcomm.models.vae` with BatchNorm and a ``tanh`` output; the encoder ``E(x)`` is the
chapter's strided CNN ending in a linear layer of ``latent`` units (deterministic, as in the
BiGAN paper); the discriminator ``D(x, z)`` reads the image with strided convolutions, the code
with a dense layer, and joins them in a dense layer before one logit. Real pairs are
``(x, E(x))``, fake pairs ``(G(z), z)`` (§2.2.4.1); see :func:`jaxcomm.unsupervised.bigan_losses`.

Images are in [-1, 1] (the ``tanh`` range of the generator).

References:
  Lacaille (2018), §2.2.4.1; Donahue et al. (2017), "Adversarial feature learning"; Dumoulin et
  al. (2017), ALI (dropout in the discriminator); Radford et al. (2016), DCGAN.
"""

from __future__ import annotations

from collections.abc import Sequence

import flax.linen as nn
import jax
import jax.numpy as jnp

from jaxcomm.models.vae import ConvDecoder, ConvEncoder


class PairDiscriminator(nn.Module):
    """``D(x, z)``: one logit per pair, "real" meaning ``(x, E(x))``.

    Attributes:
      widths: channels of the image branch's stride-2 convolutions.
      hidden: width of the code branch and of the joint dense layer.
      dropout: drop probability after every hidden layer (ALI's regulariser; uses the "dropout"
        rng in training).
      negative_slope: of the LeakyReLU.
      spectral_norm: divide every layer's kernel by its largest singular value (one power
        iteration per training call, its vector kept in "batch_stats"): D becomes 1-Lipschitz per
        layer and cannot win outright by sharpening (Miyato et al., 2018).
    """

    widths: Sequence[int] = (64, 128, 256)
    hidden: int = 512
    dropout: float = 0.2
    negative_slope: float = 0.2
    spectral_norm: bool = False

    @nn.compact
    def __call__(self, x: jax.Array, z: jax.Array, *, train: bool = False) -> jax.Array:
        """Args: x ``[B, H, W, C]`` in [-1, 1], z ``[B, Z]``. Returns logits ``[B]``."""
        act = lambda h: nn.Dropout(self.dropout, deterministic=not train)(nn.leaky_relu(h, self.negative_slope))

        def layer(module, h):
            return nn.SpectralNorm(module)(h, update_stats=train) if self.spectral_norm else module(h)

        h = x
        for width in self.widths:
            h = act(layer(nn.Conv(width, (4, 4), strides=(2, 2), padding="SAME"), h))
        code = act(layer(nn.Dense(self.hidden), z))
        joint = act(layer(nn.Dense(self.hidden), jnp.concatenate([h.reshape(h.shape[0], -1), code], axis=-1)))
        return layer(nn.Dense(1), joint)[:, 0]


class BiGAN(nn.Module):
    """Generator, encoder and pair discriminator under one parameter tree.

    Parameters live in three top-level groups, ``encoder``, ``generator`` and ``discriminator``,
    so each can have its own gradient and optimiser state.

    Attributes:
      widths: channels of the encoder's and the discriminator's convolutions (the generator
        mirrors them).
      latent: Z, the code's dimension (the prior is ``N(0, I)``).
      image_shape: ``(H, W, C)``.
      hidden: the discriminator's dense width.
      dropout: the discriminator's dropout.
      spectral_norm: spectrally normalise the discriminator's layers.
    """

    widths: Sequence[int] = (64, 128, 256)
    latent: int = 128
    image_shape: Sequence[int] = (32, 32, 3)
    hidden: int = 512
    dropout: float = 0.2
    spectral_norm: bool = False

    def setup(self):
        self.encoder = ConvEncoder(self.widths, self.latent)
        self.generator = ConvDecoder(self.widths, self.image_shape, norm="batch")
        self.discriminator = PairDiscriminator(self.widths, self.hidden, self.dropout,
                                               spectral_norm=self.spectral_norm)

    def encode(self, x: jax.Array) -> jax.Array:
        """``E(x)``: ``[B, H, W, C]`` in [-1, 1] -> ``[B, Z]``."""
        return self.encoder(x)

    def generate(self, z: jax.Array, *, train: bool = False) -> jax.Array:
        """``G(z)``: ``[B, Z]`` -> images ``[B, H, W, C]`` in [-1, 1]."""
        return jnp.tanh(self.generator(z, train=train))

    def discriminate(self, x: jax.Array, z: jax.Array, *, train: bool = False) -> jax.Array:
        """``D(x, z)``: logits ``[B]``."""
        return self.discriminator(x, z, train=train)

    def __call__(self, x: jax.Array, z: jax.Array, *, train: bool = False):
        """Every part once (used to initialise): ``(E(x), G(z), D(x, z))``."""
        return self.encode(x), self.generate(z, train=train), self.discriminate(x, z, train=train)
