"""Local SGD / DiLoCo (jaxcomm.local_sgd): synchronous SGD at H = 1, rounds and bytes by hand."""

from __future__ import annotations

import jax
import numpy as np
import optax
import pytest

from jaxcomm import bandwidth, data_parallel, local_sgd, methods, network, population
from jaxcomm.models import MLP

MODEL = MLP(hidden=(12,), num_classes=4)


def config(**kw) -> network.NetworkConfig:
    return network.NetworkConfig(**({"num_nodes": 4, "batch_size": 8, "num_steps": 12, "eval_every": 4,
                                     "backend": "vmap", "step_loop": "scan", "learning_rate": 0.1} | kw))


def run(system_of, dataset, steps: int):
    system = system_of(config(), MODEL, image_shape=dataset.train.images.shape[1:], num_classes=4)
    step, state = jax.jit(system.step), system.init(jax.random.PRNGKey(0))
    data = network.network_data(dataset, config())
    for _ in range(steps):
        state, info = step(state, data)
    return system, state, info


def test_one_inner_sgd_step_then_averaging_is_synchronous_sgd(tiny_dataset):
    # H = 1, outer SGD at rate 1: theta - mean_i (theta - lr g_i) = theta - lr mean_i g_i, sync SGD's step
    sgd = optax.sgd(0.1)
    dp, sync, sync_info = run(lambda *a, **k: data_parallel.make_data_parallel(*a, **k, optimizer=sgd), tiny_dataset,
                              7)
    _, local, local_info = run(lambda *a, **k: local_sgd.make_local_sgd(
        *a, **k, sync_every=1, outer=local_sgd.local_sgd_outer(), inner=sgd), tiny_dataset, 7)
    np.testing.assert_array_equal(local_info.indices, sync_info.indices)  # the same minibatches
    for got, want in zip(jax.tree.leaves(local.extra.params), jax.tree.leaves(dp.models_of(sync).params),
                          strict=True):
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
    # after a round every node restarts from the global model
    for nodes, glob in zip(jax.tree.leaves(local.nodes.params), jax.tree.leaves(local.extra.params),
                           strict=True):
        np.testing.assert_array_equal(nodes, np.broadcast_to(glob, nodes.shape))


def test_between_rounds_nodes_drift_and_the_global_model_waits(tiny_dataset):
    make = lambda *a, **k: local_sgd.make_local_sgd(*a, **k, sync_every=3)  # noqa: E731
    system, state, info = run(make, tiny_dataset, 4)  # one round (3 steps) and one step of the next
    assert not bool(info.synced)
    params = jax.tree.leaves(state.nodes.params)[0]
    assert not np.allclose(params[0], params[1])  # nodes drifted apart on their own shards
    _, after_round, info = run(make, tiny_dataset, 3)
    assert bool(info.synced)
    np.testing.assert_array_equal(jax.tree.leaves(after_round.extra.params)[0],
                                  jax.tree.leaves(state.extra.params)[0])  # untouched by step 4
    # bytes: one all-reduce of the parameters every H steps
    assert system.bytes_per_node_step() == pytest.approx(bandwidth.allreduce_bytes(4, system.num_params) / 3)
    with pytest.raises(ValueError, match="sync_every must be an integer >= 1"):
        local_sgd.make_local_sgd(config(), MODEL, image_shape=(8, 8, 1), num_classes=4, sync_every=0)


def test_diloco_trains_under_the_driver(tiny_dataset):
    out = local_sgd.train_local_sgd(config(num_steps=40, eval_every=20), MODEL, tiny_dataset, sync_every=5,
                                    progress=False)
    assert [h["step"] for h in out["history"]] == [20, 40]
    assert out["final"]["avg_accuracy"] > 40  # 4 learnable classes


def test_the_eager_per_node_loop_trains_as_one_program(tiny_dataset, monkeypatch):
    # backend "loop" with the "eager" step loop (auto's pick for conv nodes on CPU) against vmap in one jitted
    # step: the same rounds. The eager loop holds node states apart within a chunk and regroups them only at a
    # round's end: apart once per chunk of 4 steps, and again after the syncs of steps 3 and 6.
    unstacks = []
    unstack = population.unstack
    monkeypatch.setattr(population, "unstack", lambda tree: unstacks.append(1) or unstack(tree))
    run = lambda backend, step_loop: local_sgd.train_local_sgd(  # noqa: E731
        config(num_steps=8, eval_every=4, backend=backend, step_loop=step_loop), MODEL, tiny_dataset,
        sync_every=3, progress=False)
    jitted = run("vmap", "dispatch")
    assert unstacks == []
    eager = run("loop", "eager")
    assert eager["system"].layout is network.NODES_APART and len(unstacks) == 2 + 2
    for a, b in zip(jax.tree.leaves(eager["state"]), jax.tree.leaves(jitted["state"]), strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)
    assert ([h["avg_accuracy"] for h in eager["history"]]
            == pytest.approx([h["avg_accuracy"] for h in jitted["history"]], abs=1e-4))


def test_an_inner_optimiser_trains_at_the_configs_learning_rate_and_sweeps_it(tiny_dataset):
    # FedAvg's plain-SGD clients: local_sgd(H, inner=optax.sgd) is handed the config's rate (and schedule), so it
    # equals the transformation at that rate bit for bit, and a sweep over the rate equals its runs alone
    cfg = config(num_steps=6, eval_every=6)
    given = methods.train(methods.Method("given", lambda c, m, **k: local_sgd.make_local_sgd(
        c, m, **k, sync_every=3, outer=local_sgd.local_sgd_outer(), inner=optax.sgd(0.1)), score="model"),
        cfg, MODEL, tiny_dataset, progress=False)
    method = local_sgd.local_sgd(3, inner=optax.sgd)
    alone = methods.train(method, cfg, MODEL, tiny_dataset, progress=False)
    for got, want in zip(jax.tree.leaves(alone["state"].extra), jax.tree.leaves(given["state"].extra), strict=True):
        np.testing.assert_array_equal(got, want)
    faster = methods.train(method, cfg.replace(learning_rate=0.3), MODEL, tiny_dataset, progress=False)
    swept = methods.sweep(method, [cfg, cfg.replace(learning_rate=0.3)], MODEL, tiny_dataset, progress=False)
    for run, want in zip(swept, (alone, faster), strict=True):
        for got, leaf in zip(jax.tree.leaves(run["state"].extra), jax.tree.leaves(want["state"].extra), strict=True):
            np.testing.assert_allclose(got, leaf, rtol=1e-6, atol=1e-7)
    assert not np.allclose(jax.tree.leaves(faster["state"].extra)[0], jax.tree.leaves(alone["state"].extra)[0])
    with pytest.raises(ValueError, match=r"inner must be a function of the learning rate \(optax.sgd"):
        local_sgd.local_sgd(3, inner=optax.sgd(0.05))
    with pytest.raises(ValueError, match="inner must be a function"):
        local_sgd.diloco(3, inner=optax.adam(1e-3))
