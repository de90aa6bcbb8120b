"""FedBuff (jaxcomm.fedbuff): the server's buffer by hand, FedAvg in lockstep, no client waiting at its own pace."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.flatten_util import ravel_pytree

from jaxcomm import clock, fedbuff, federated, kit, methods, network, pace, population
from jaxcomm.models import MLP

MODEL = MLP(hidden=(12,), num_classes=4)


def config(**kw) -> network.NetworkConfig:
    return network.NetworkConfig(**({"num_nodes": 3, "batch_size": 8, "num_steps": 12, "eval_every": 6,
                                     "backend": "vmap", "step_loop": "scan", "learning_rate": 0.05} | kw))


def leaves(tree):
    return [np.asarray(x) for x in jax.tree.leaves(tree)]


def test_the_buffer_scales_each_report_by_its_staleness_and_steps_when_full_by_hand(tiny_dataset):
    pop = kit.nodes(config(), MODEL, image_shape=tiny_dataset.train.images.shape[1:], num_classes=4)
    comm = fedbuff.communicator(pop, 2, 2)
    state = pop.built_with(comm).init(jax.random.PRNGKey(0))
    flat = lambda tree: np.concatenate([np.ravel(x) for x in jax.tree.leaves(tree)])  # noqa: E731
    rng = np.random.default_rng(0)
    unravel = ravel_pytree(population.node(state.nodes.params, 0))[1]
    size = flat(population.node(state.nodes.params, 0)).size
    server, starts, clients = rng.normal(size=size), rng.normal(size=(3, size)), rng.normal(size=(3, size))
    def stacked(rows):  # [R, P] float vectors as stacked parameters
        return population.stack([unravel(jnp.asarray(r, jnp.float32)) for r in rows])

    extra = state.extra._replace(
        model=state.extra.model._replace(params=stacked([server])),
        starts=(stacked(starts), state.extra.starts[1]), version=jnp.array([2, 2, 0], jnp.int32),
        steps=jnp.array(2, jnp.int32))
    state = state._replace(nodes=state.nodes._replace(params=stacked(clients)), extra=extra)
    settings = kit.settings(config(), {"server_lr": 0.5})

    def tick(due, steps):
        return kit.Tick(jnp.asarray(due), jnp.zeros((), bool), jnp.zeros(3, bool), jnp.asarray(steps, jnp.int32))

    # client 0 alone reports (its 6th step): into the buffer, no server step (1 of 2); it restarts from the server
    ctx = kit.Context(tick([True, True, False], [6, 5, 2]), jax.random.PRNGKey(1), jnp.array(5), settings)
    one = comm.communicate(state, ctx)
    np.testing.assert_allclose(flat(one.extra.buffer[0]), clients[0] - starts[0], rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(flat(one.extra.model.params), server, rtol=1e-6)
    assert int(one.extra.count) == 1 and int(one.extra.steps) == 2
    np.testing.assert_allclose(flat(population.node(one.nodes.params, 0)), server, rtol=1e-6)
    np.testing.assert_allclose(flat(population.node(one.nodes.params, 1)), clients[1], rtol=1e-6)
    np.testing.assert_array_equal(one.extra.version, [2, 2, 0])
    # then client 1 (fresh) and client 2 (two server steps stale: 1 / sqrt(3)) report: 3 >= 2, the server steps
    ctx = kit.Context(tick([False, True, True], [6, 6, 2]), jax.random.PRNGKey(2), jnp.array(6), settings)
    two = comm.communicate(one, ctx)
    summed = (clients[0] - starts[0]) + (clients[1] - starts[1]) + (clients[2] - starts[2]) / np.sqrt(3.0)
    np.testing.assert_allclose(flat(two.extra.model.params), server + 0.5 * summed / 3, rtol=1e-5, atol=1e-6)
    assert int(two.extra.count) == 0 and int(two.extra.steps) == 3
    np.testing.assert_array_equal(two.extra.version, [2, 3, 3])
    assert not np.any(flat(two.extra.buffer[0]))
    for i in (1, 2):
        np.testing.assert_allclose(flat(population.node(two.nodes.params, i)), flat(two.extra.model.params),
                                   rtol=1e-6)


@pytest.mark.parametrize("buffer_size", [1, 3])
def test_in_lockstep_every_client_reports_together_and_fedbuff_is_fedavg(tiny_dataset, buffer_size):
    ours = methods.train(fedbuff.fedbuff(3, buffer_size), config(num_steps=9, eval_every=9), MODEL, tiny_dataset,
                         progress=False)
    theirs = methods.train(federated.fedavg(3, weighting="uniform"), config(num_steps=9, eval_every=9), MODEL,
                           tiny_dataset, progress=False)
    for a, b in zip(leaves(ours["state"].extra.model.params), leaves(theirs["state"].extra.model.params),
                    strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)  # x + mean(y - x) against x - (x - mean y)
    assert int(ours["state"].extra.steps) == 3
    assert ours["history"][-1]["bytes"]["total"] == pytest.approx(theirs["history"][-1]["bytes"]["total"])


def test_at_its_own_pace_no_client_waits_and_each_books_its_own_reports(tiny_dataset):
    jittery = clock.Cluster(clock.Compute(1.0, speed=(1.0, 1.0, 3.0), jitter=0.2))
    result = methods.train(fedbuff.fedbuff(2, 2), config(num_steps=24), MODEL, tiny_dataset, progress=False,
                           cluster=jittery, own_pace=True)
    last = result["history"][-1]
    steps = np.asarray(last["pace"]["node_steps"])
    assert steps[2] < steps.min(initial=99, where=[True, True, False])  # the straggler took fewer steps
    free = pace.of_run(jittery, 3, 24, seed=0, waits=pace.NOTHING)  # nobody waits: the wait-free timeline's ticks
    np.testing.assert_array_equal(result["timeline"].time, free.time)
    assert last["pace"]["goodput"] == pytest.approx(free.goodput(24))
    params = sum(np.size(x) for x in leaves(population.node(result["state"].nodes.params, 0)))
    assert last["bytes"]["total"] == pytest.approx(float(np.sum(steps // 2)) * 4.0 * params)  # an upload per 2 steps
    assert int(result["state"].extra.steps) >= 1 and np.isfinite(last["loss"])


def test_a_sweep_over_the_server_rate_equals_its_runs_alone(tiny_dataset):
    method, cfg = fedbuff.fedbuff(2, 3), config(num_steps=6, eval_every=6)
    swept = methods.sweep(method, [cfg, cfg], MODEL, tiny_dataset, hyper=[{"server_lr": 1.0}, {"server_lr": 0.3}],
                          progress=False)
    alone = methods.train(method, cfg, MODEL, tiny_dataset, hyper={"server_lr": 0.3}, progress=False)
    for a, b in zip(leaves(swept[1]["state"].extra.model.params), leaves(alone["state"].extra.model.params),
                    strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-7)


def test_its_arguments_are_checked_naming_the_field():
    with pytest.raises(ValueError, match="buffer_size"):
        fedbuff.fedbuff(2, 0)
    with pytest.raises(ValueError, match="server_lr"):
        fedbuff.fedbuff(2, 2, server_lr=0.0)


def test_the_zoo_spec_is_the_factory():
    from jaxcomm import zoo

    assert zoo.parse("fedbuff:2:3").name == "fedbuff_h2_z3"
