"""Research example (a): 8 nodes on the exponential graph and on a graph that changes every 50 steps,
exchanging a content of one's own (the top-3 logits), from library calls only, on the shipped MNIST sample.

The README's "Using the engine from research code" shows this code."""

from __future__ import annotations

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

from jaxcomm import data, exchange, network, speed, topology
from jaxcomm.models import MLP


def top3_logits() -> exchange.Exchange:
    """Send only the 3 largest logits of each sample (the others as -1e9); train on their softmax."""

    def keep_top3(logits):
        third = jnp.sort(logits, axis=-1)[:, -3:-2]
        return jnp.where(logits >= third, logits, -1e9)

    return exchange.Exchange(
        name="top3_logits",
        payload_dim=lambda num_classes, feature_dim: num_classes,
        outgoing=lambda logits, features, targets, received, consumed: keep_top3(logits),
        loss=lambda logits, features, received: exchange.cross_entropy(logits, jax.nn.softmax(received)),
        payload_bytes=lambda batch_size, dim: batch_size * 3 * (4 + 1))  # 3 float32 values + 3 uint8 class ids


def rotating_ring(key, step):
    """Node i sends to i + 1 + (step // 50) mod 7: a ring whose offset moves every 50 steps."""
    shift = 1 + (step // 50) % 7
    return jnp.roll(jnp.eye(8, dtype=bool), shift, axis=1)


def test_eight_nodes_on_two_graphs_exchanging_the_top3_logits():
    dataset = data.load_mnist_sample()
    config = network.NetworkConfig(num_nodes=8, consume_prob=0.5, broadcast_prob=0.5 / 3, num_steps=200,
                                   eval_every=100, seed=0)
    model = MLP(hidden=(64,), num_classes=dataset.num_classes)
    on_exponential = network.train_network(config, model, dataset, graph=topology.exponential(8),
                                           exchange=top3_logits(), progress=False)
    on_rotating = network.train_network(config.replace(broadcast_prob=0.5), model, dataset, graph=rotating_ring,
                                        exchange=top3_logits(), progress=False)
    isolated = network.train_network(config.replace(content="none"), model, dataset, progress=False)

    for out in (on_exponential, on_rotating):
        final = out["final"]
        counters = final["counters"]
        assert counters["received"] == counters["consumed"] + counters["dropped"] + counters["pending"]
        assert counters["consumed"] > 0 and final["consumed_fraction"] > 0
        # private shards: the 32 uint8 28 x 28 images + the top-3 payload + header
        assert out["network"].message_bytes == 32 * 784 + 32 * 15 + 8
        assert final["avg_accuracy"] > 60.0  # chance is 10 %
    # the exponential graph of 8 nodes: each broadcast reaches 3 nodes (i + 1, i + 2, i + 4)
    exp_counters = on_exponential["final"]["counters"]
    assert exp_counters["sent"] == exp_counters["received"]
    np.testing.assert_array_equal(np.asarray(on_exponential["state"].adj).sum(axis=1), 3)
    # the rotating ring at step 199 has offset 1 + 3 % 7 = 4
    np.testing.assert_array_equal(np.asarray(on_rotating["state"].adj), np.asarray(rotating_ring(None, 199)))
    assert isolated["final"]["counters"]["sent"] == 0


def test_a_users_exchange_sends_what_it_makes(tiny_dataset):
    cfg = network.NetworkConfig(num_nodes=5, batch_size=8, consume_prob=0.0, broadcast_prob=1.0, num_steps=1,
                                eval_every=1)
    result = network.train_network(cfg, MLP(hidden=(16,), num_classes=4), tiny_dataset, progress=False,
                                   exchange=top3_logits())
    payload = np.asarray(result["state"].inbox.messages.payload)  # [N, K, B, C]
    sent = payload[np.asarray(result["state"].inbox.count) > 0][:, :1]  # the first message of each non-empty inbox
    assert ((sent > -1e8).sum(axis=-1) == 3).all()  # three classes kept of four
    assert result["network"].message_bytes == 8 * 64 + 8 * 15 + 8  # 8 uint8 8 x 8 images + payload + header


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
