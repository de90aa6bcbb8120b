"""Research example: a user's own classifier (a residual CNN) trains in a network with no edit of jaxcomm.

The README's graph and exchange example is checked in tests/test_readme.py."""

from __future__ import annotations

import flax.linen as nn
import jax.numpy as jnp
import numpy as np

from jaxcomm import network, speed


class ResidualCNN(nn.Module):
    """A research user's own classifier: one conv, a residual block, (logits, features)."""

    num_classes: int = 10

    @nn.compact
    def __call__(self, x, train: bool = False):
        h = nn.relu(nn.Conv(8, (3, 3))(x))
        h = h + nn.relu(nn.Conv(8, (3, 3))(h))
        features = jnp.mean(h, axis=(1, 2))
        return nn.Dense(self.num_classes)(features), features


def test_a_users_own_cnn_trains_and_gets_the_measured_choice_for_convolutions(tiny_dataset):
    """No edit of jaxcomm: the backend choice reads what the model computes (convolutions)."""
    config = network.NetworkConfig(num_nodes=3, batch_size=8, num_steps=4, eval_every=2)
    out = network.train_network(config, ResidualCNN(num_classes=4), tiny_dataset, progress=False)
    net = out["network"]
    assert net.family == "conv"
    assert (net.backend, net.step_loop) == speed.choose("conv", 3, batch_size=8)
    assert [r["step"] for r in out["history"]] == [2, 4] and np.isfinite(out["final"]["loss"])
