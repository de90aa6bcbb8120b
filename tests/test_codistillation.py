"""Codistillation (jaxcomm.codistillation): isolated nodes at weight 0, stale copies, bytes by hand."""

from __future__ import annotations

import jax
import numpy as np
import pytest

from jaxcomm import bandwidth, codistillation, network
from jaxcomm.models import MLP
from jaxcomm.models.cnn import StridedCNN

MODEL = MLP(hidden=(12,), num_classes=4)


def config(**kw) -> network.NetworkConfig:
    return network.NetworkConfig(**({"num_nodes": 3, "batch_size": 8, "num_steps": 12, "eval_every": 4,
                                     "backend": "vmap", "step_loop": "scan", "learning_rate": 3e-3} | kw))


def steps(system, dataset, count: int, cfg=None):
    step, state = jax.jit(system.step), system.init(jax.random.PRNGKey(0))
    data = network.network_data(dataset, cfg or config())
    for _ in range(count):
        state, info = step(state, data)
    return state, info


def test_weight_zero_is_an_isolated_network(tiny_dataset):
    cd = codistillation.make_codistillation(config(), MODEL, image_shape=(8, 8, 1), num_classes=4, refresh_every=2,
                                            weight=0.0)
    isolated = network.make_network(config(content="none", consume_prob=0.0, broadcast_prob=0.0), MODEL,
                                    image_shape=(8, 8, 1), num_classes=4)
    got, got_info = steps(cd, tiny_dataset, 5)
    want, want_info = steps(isolated, tiny_dataset, 5)
    np.testing.assert_array_equal(got_info.indices, want_info.indices)  # the same minibatches
    np.testing.assert_allclose(got_info.loss, want_info.loss, rtol=1e-6)
    for a, b in zip(jax.tree.leaves(got.nodes.params), jax.tree.leaves(want.nodes.params), strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-7)


def test_peers_are_stale_between_refreshes_and_distillation_pulls(tiny_dataset):
    make = lambda weight: codistillation.make_codistillation(  # noqa: E731
        config(), MODEL, image_shape=(8, 8, 1), num_classes=4, refresh_every=3, weight=weight)
    state, info = steps(make(1.0), tiny_dataset, 4)  # refreshed after step 3, not after step 4
    assert not bool(info.refreshed)
    after_three, info = steps(make(1.0), tiny_dataset, 3)
    assert bool(info.refreshed)
    for stale, nodes in zip(jax.tree.leaves(state.extra[0]), jax.tree.leaves(after_three.nodes.params), strict=True):
        np.testing.assert_array_equal(stale, nodes)
    alone, _ = steps(make(0.0), tiny_dataset, 4)
    assert not np.allclose(jax.tree.leaves(state.nodes.params)[0], jax.tree.leaves(alone.nodes.params)[0])


def test_bytes_by_hand_and_training_under_the_driver(tiny_dataset):
    cnn = StridedCNN(widths=(4, 8), num_classes=4, hidden=8, norm="batch")
    cd = codistillation.make_codistillation(config(), cnn, image_shape=(8, 8, 1), num_classes=4, refresh_every=50)
    stats = 2 * 8  # BatchNorm mean and variance after the second convolution (8 channels)
    assert cd.checkpoint_bytes == 4 * (bandwidth.model_num_params(cnn, (8, 8, 1)) + stats)
    assert cd.bytes_per_node_step() == pytest.approx(2 * cd.checkpoint_bytes / 50)
    out = codistillation.train_codistillation(config(num_steps=40, eval_every=20), MODEL, tiny_dataset,
                                              refresh_every=5, progress=False)
    assert [h["step"] for h in out["history"]] == [20, 40] and out["final"]["avg_accuracy"] > 40
    with pytest.raises(ValueError, match="refresh_every must be an integer >= 1"):
        codistillation.make_codistillation(config(), MODEL, image_shape=(8, 8, 1), num_classes=4, refresh_every=0)
    with pytest.raises(ValueError, match="num_nodes must be at least 2"):
        codistillation.make_codistillation(config(num_nodes=1, num_neighbours=0), MODEL, image_shape=(8, 8, 1),
                                           num_classes=4, refresh_every=1)


def test_the_eager_per_node_loop_trains_as_one_program(tiny_dataset):
    # backend "loop" with the "eager" step loop (auto's pick for conv nodes past 64 on CPU) against vmap in one
    # jitted step: the same run.
    run = lambda backend, step_loop: codistillation.train_codistillation(  # noqa: E731
        config(num_steps=8, eval_every=4, backend=backend, step_loop=step_loop), MODEL, tiny_dataset,
        refresh_every=3, progress=False)
    eager, jitted = run("loop", "eager"), run("vmap", "dispatch")
    assert eager["system"].step_loop == "eager"
    for a, b in zip(jax.tree.leaves(eager["state"].nodes), jax.tree.leaves(jitted["state"].nodes), strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)
    assert ([h["avg_accuracy"] for h in eager["history"]]
            == pytest.approx([h["avg_accuracy"] for h in jitted["history"]], abs=1e-4))
