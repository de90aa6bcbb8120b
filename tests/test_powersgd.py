"""PowerSGD (jaxcomm.powersgd): full rank is uncompressed SGD, error feedback keeps what rank r misses, bytes."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from jaxcomm import data_parallel, network, powersgd
from jaxcomm.models import MLP

MODEL = MLP(hidden=(12,), num_classes=4)


def config(**kw) -> network.NetworkConfig:
    return network.NetworkConfig(**({"num_nodes": 4, "batch_size": 8, "num_steps": 12, "eval_every": 4,
                                     "backend": "vmap", "step_loop": "scan"} | kw))


def trained(dataset, compressor, steps: int = 6):
    dp = data_parallel.make_data_parallel(config(), MODEL, image_shape=(8, 8, 1), num_classes=4, compressor=compressor,
                                          optimizer=optax.sgd(0.1))
    step, state = jax.jit(dp.step), dp.init(jax.random.PRNGKey(0))
    data = network.network_data(dataset, config())
    for _ in range(steps):
        state, _ = step(state, data)
    return dp, state


def test_full_rank_is_uncompressed_sgd(tiny_dataset):
    # kernels [64, 12] and [12, 4]: rank 12 covers both; P^ is square and orthogonal, the update the exact mean
    _, dense = trained(tiny_dataset, None)
    dp, full = trained(tiny_dataset, powersgd.power_sgd(12))
    for got, want in zip(jax.tree.leaves(full.nodes.params), jax.tree.leaves(dense.nodes.params), strict=True):
        np.testing.assert_allclose(got, want, rtol=2e-4, atol=1e-5)
    for memory in jax.tree.leaves(full.extra[1]):
        np.testing.assert_allclose(memory, 0.0, atol=1e-5)
    assert dp.summed and not dp.dense


def test_rank_one_estimate_plus_the_mean_memory_is_the_mean_gradient():
    grads = {"w": jax.random.normal(jax.random.PRNGKey(1), (3, 5, 7)), "b": jnp.arange(6.0).reshape(3, 2)}
    compressor = powersgd.power_sgd(1)
    state = compressor.init({"w": grads["w"][0], "b": grads["b"][0]}, 3, jax.random.PRNGKey(2))
    estimate, (q, memory) = compressor.reduce(grads, state)
    assert q["w"].shape == (7, 1) and q["b"] is None
    np.testing.assert_allclose(estimate["b"], grads["b"].mean(0))  # vectors: uncompressed
    assert np.linalg.matrix_rank(np.asarray(estimate["w"])) == 1
    np.testing.assert_allclose(estimate["w"] + memory["w"].mean(0), grads["w"].mean(0), atol=1e-5)
    without = powersgd.power_sgd(1, feedback=False)
    _, (_, untouched) = without.reduce(grads, without.init({"w": grads["w"][0], "b": grads["b"][0]}, 3,
                                                           jax.random.PRNGKey(2)))
    np.testing.assert_array_equal(untouched["w"], 0.0)


def test_bytes_by_hand(tiny_dataset):
    # rank 1: kernel [64, 12] -> (12 + 64) x 1, kernel [12, 4] -> (4 + 12) x 1, biases 12 + 4: x 4 bytes
    dp = data_parallel.make_data_parallel(config(), MODEL, image_shape=(8, 8, 1), num_classes=4,
                                          compressor=powersgd.power_sgd(1))
    assert dp.message_bytes == 4 * (76 + 16 + 12 + 4) == 432
    assert dp.bytes_per_node_step() == pytest.approx(2 * 3 / 4 * 432)  # summed: a ring all-reduce
    # rank 4: the second kernel is capped at its rank 4
    assert powersgd.power_sgd(4).message_bytes({"k1": jnp.zeros((64, 12)), "k2": jnp.zeros((12, 4))}) == \
        4 * (76 * 4 + 16 * 4)
    with pytest.raises(ValueError, match="rank must be an integer >= 1"):
        powersgd.power_sgd(0)
