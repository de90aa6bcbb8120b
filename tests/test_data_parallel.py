"""Synchronous SGD over the network's shards, and gossip averaging over its graph."""

from __future__ import annotations

import math

import jax
import numpy as np
import optax
import pytest

from jaxcomm import compression, data_parallel, exchange, network, population, topology
from jaxcomm.models import MLP, to_unit_float

MODEL = MLP(hidden=(12,), num_classes=4)


def build(dataset, compression_method=None, compression_options=None, **overrides):
    config = network.NetworkConfig(num_nodes=4, batch_size=5, num_steps=4, eval_every=2, **overrides)
    compressor = None if compression_method is None else compression.make(compression_method,
                                                                            **(compression_options or {}))
    system = data_parallel.make_data_parallel(config, MODEL, image_shape=dataset.train.images.shape[1:],
                                              num_classes=4, compressor=compressor)
    return system, network.network_data(dataset, config)


@pytest.mark.parametrize("backend,lr_schedule", [("vmap", "constant"), ("loop", "constant"), ("vmap", "cosine")])
def test_sync_sgd_equals_one_model_on_the_concatenated_batch(tiny_dataset, backend, lr_schedule):
    system, data = build(tiny_dataset, backend=backend, step_loop="dispatch", lr_schedule=lr_schedule)
    state = system.init(jax.random.PRNGKey(0))
    params = population.node(state.nodes, 0).params
    optimizer = optax.adam(network.learning_rate(system.config))  # cosine over num_steps = 4: a new rate each step
    opt_state = optimizer.init(params)
    step = jax.jit(system.step)
    for _ in range(3):
        state, info = step(state, data)
        rows = np.asarray(info.indices).reshape(-1)  # [N x B]: every node's minibatch, concatenated
        images, labels = to_unit_float(data.images[rows]), jax.nn.one_hot(data.labels[rows], 4)

        def loss(p, images=images, labels=labels):
            logits, _ = MODEL.apply({"params": p}, images)
            return exchange.cross_entropy(logits, labels)

        updates, opt_state = optimizer.update(jax.grad(loss)(params), opt_state, params)
        params = optax.apply_updates(params, updates)
        jax.tree_util.tree_map(lambda a, b: np.testing.assert_allclose(a, b, rtol=2e-5, atol=2e-6),
                               population.node(state.nodes, 0).params, params)


def test_each_node_samples_only_its_own_shard(tiny_dataset):
    system, data = build(tiny_dataset, "top_k", {"fraction": 0.1})
    state, step = system.init(jax.random.PRNGKey(1)), jax.jit(system.step)
    for _ in range(3):
        state, info = step(state, data)
        for n in range(4):
            shard = set(np.asarray(data.shard_indices[n, : data.shard_sizes[n]]).tolist())
            assert set(np.asarray(info.indices[n]).tolist()) <= shard


def test_jit_equals_no_jit_and_the_seed_fixes_the_run(tiny_dataset):
    system, data = build(tiny_dataset, "qsgd", {"levels": 2, "feedback": False})
    run = lambda step, seed: step(step(system.init(jax.random.PRNGKey(seed)), data)[0], data)[0]
    a, b, c = run(jax.jit(system.step), 0), run(system.step, 0), run(jax.jit(system.step), 1)
    jax.tree_util.tree_map(lambda x, y: np.testing.assert_allclose(x, y, rtol=1e-5, atol=1e-6), a.nodes, b.nodes)
    assert not np.allclose(a.nodes.params["Dense_0"]["kernel"], c.nodes.params["Dense_0"]["kernel"])


def test_error_feedback_memory_is_per_node_and_keeps_what_was_not_sent(tiny_dataset):
    system, data = build(tiny_dataset, "top_k", {"fraction": 0.05, "per_layer": False})
    state = system.init(jax.random.PRNGKey(2))
    state, _ = jax.jit(system.step)(state, data)
    residual = state.extra.residual
    flat = jax.vmap(lambda tree: jax.flatten_util.ravel_pytree(tree)[0])(residual)  # [N, P]
    assert flat.shape == (4, system.num_params)
    kept = system.num_params - compression.num_kept(0.05, system.num_params)
    # each node sent k of its gradient's values and kept the others, whose count is P - k (some may be 0)
    assert np.all(np.sum(np.asarray(flat) != 0, axis=1) <= kept)
    assert len({tuple(np.asarray(row[:20])) for row in flat}) == 4  # different shards, different residuals


def test_bytes_per_node_step_by_hand(tiny_dataset):
    dense, _ = build(tiny_dataset)
    p = dense.num_params
    d_in = math.prod(tiny_dataset.train.images.shape[1:])
    assert p == d_in * 12 + 12 + 12 * 4 + 4
    assert dense.bytes_per_node_step() == pytest.approx(2 * 3 / 4 * 4 * p)
    topk, _ = build(tiny_dataset, "top_k", {"fraction": 0.1})  # per tensor: k = round(0.1 size), >= 1
    ks = [round(0.1 * d_in * 12), round(0.1 * 12), round(0.1 * 48), max(1, round(0.1 * 4))]
    assert topk.message_bytes == 8 * sum(ks) and topk.bytes_per_node_step() == 3 * 8 * sum(ks)
    signs, _ = build(tiny_dataset, "sign", {"per_layer": False})
    assert signs.message_bytes == math.ceil(p / 8) + 4


def test_mixing_matrix_by_hand():
    w = np.asarray(topology.mixing_matrix(topology.ring(4, 1)))  # node j hears node j - 1
    expected = 0.5 * (np.eye(4) + np.roll(np.eye(4), -1, axis=1))
    np.testing.assert_allclose(w, expected)
    w = np.asarray(topology.mixing_matrix(topology.full(3)))
    np.testing.assert_allclose(w, np.full((3, 3), 1 / 3))


def test_gossip_averages_parameters_with_in_neighbours_every_k_steps(tiny_dataset):
    def states(gossip_every):
        config = network.NetworkConfig(num_nodes=4, topology="ring", num_neighbours=1, content="none",
                                       batch_size=5, gossip_every=gossip_every)
        net = network.make_network(config, MODEL, image_shape=tiny_dataset.train.images.shape[1:], num_classes=4)
        data, step = network.network_data(tiny_dataset, config), jax.jit(net.step)
        state, out = net.init(jax.random.PRNGKey(0)), []
        for _ in range(3):
            state, _ = step(state, data)
            out.append(state)
        return out

    plain, gossip = states(0), states(2)
    same = lambda a, b: jax.tree_util.tree_map(lambda x, y: np.testing.assert_allclose(x, y, rtol=1e-6), a, b)
    same(gossip[0].nodes, plain[0].nodes)  # no averaging at step 1
    w = topology.mixing_matrix(topology.ring(4, 1))
    same(gossip[1].nodes.params, topology.mix(w, plain[1].nodes.params))  # averaged after step 2
    same(gossip[1].nodes.opt_state, plain[1].nodes.opt_state)  # optimiser states stay local
    kernel = np.asarray(gossip[1].nodes.params["Dense_0"]["kernel"])
    before = np.asarray(plain[1].nodes.params["Dense_0"]["kernel"])
    np.testing.assert_allclose(kernel[1], (before[1] + before[0]) / 2, rtol=1e-6)


def test_bad_configs_are_rejected_before_anything_compiles():
    for kwargs, field in [({"method": "topk"}, "compression"), ({"method": "top_k", "fraction": 1.5}, "fraction"),
                          ({"method": "qsgd", "levels": 0}, "levels"), ({"method": "sign", "feedback": "yes"},
                                                                        "feedback")]:
        with pytest.raises(ValueError, match=field):
            compression.make(**kwargs)
    with pytest.raises(ValueError, match="gossip_every"):
        network.NetworkConfig(gossip_every=-1)
