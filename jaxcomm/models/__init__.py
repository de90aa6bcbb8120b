"""Flax models of the thesis. Every classifier returns ``(logits, features)``.

``features`` is the top hidden layer, the representation nodes exchange in the
"features" setting (thesis eq. 2.2.3).
"""

import jax
import jax.numpy as jnp

from jaxcomm.models.bigan import BiGAN
from jaxcomm.models.cnn import StridedCNN
from jaxcomm.models.mlp import MLP
from jaxcomm.models.vae import VAE

__all__ = ["MLP", "StridedCNN", "VAE", "BiGAN", "to_unit_float"]


def to_unit_float(images: jax.Array) -> jax.Array:
    """uint8 images ``[..., H, W, C]`` -> float32 in [0, 1], right before a forward pass.

    Data stays on the device as uint8 (a quarter of float32's memory); each
    step converts only the minibatch it gathered.
    """
    return images.astype(jnp.float32) / 255.0
