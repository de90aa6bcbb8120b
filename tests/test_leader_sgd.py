"""Leader SGD (jaxcomm.leader_sgd): the pull and the leader by hand, a pull of 0 is an isolated network bit for bit,
it trains and books its bytes, a sweep of two pulls equals each run alone, and at its own pace a straggler that is
not stepping does not change."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxcomm import clock, exchange, kit, leader_sgd, methods, network, pace, zoo
from jaxcomm.models import MLP

MODEL = MLP(hidden=(8,), num_classes=4)
PARAMS = 8 * 8 * 8 + 8 + 8 * 4 + 4  # the MLP on 8x8x1 images: 556 parameters
STRAGGLER = clock.Cluster(clock.Compute(1.0, speed=(1.0, 1.0, 1.0, 3.0)), clock.INSTANT)


def _config(**kw) -> kit.RunConfig:
    base = dict(num_nodes=4, batch_size=8, num_steps=6, eval_every=3, backend="vmap", step_loop="scan")
    return kit.RunConfig(**(base | kw))


def _leaves(tree) -> list[np.ndarray]:
    return [np.asarray(x) for x in jax.tree.leaves(tree)]


def test_the_pull_and_the_leader_by_hand():
    params = {"w": jnp.array([[0.0, 10.0], [4.0, 2.0], [8.0, -6.0]]), "b": jnp.array([1.0, 3.0, -1.0])}
    pulled = leader_sgd.pull_toward(params, jnp.int32(1), 0.25)  # x - 0.25 (x - x_1), node 1 the leader
    np.testing.assert_allclose(pulled["w"], [[1.0, 8.0], [4.0, 2.0], [7.0, -4.0]])
    np.testing.assert_allclose(pulled["b"], [1.5, 3.0, 0.0])
    for leaf, before in zip(_leaves(leader_sgd.pull_toward(params, jnp.int32(2), 0.0)), _leaves(params),
                            strict=True):
        np.testing.assert_array_equal(leaf, before)  # a pull of 0 changes nothing
    np.testing.assert_allclose(leader_sgd.pull_toward(params, jnp.int32(2), 1.0)["w"], [[8.0, -6.0]] * 3)

    loss_sum, steps = jnp.array([3.0, 2.0, 1.2, 0.0]), jnp.array([3, 2, 1, 0])  # means 1.0, 1.0, 1.2, none
    assert int(leader_sgd.leader_of(loss_sum, steps, jnp.ones(4, bool))) == 0  # equal means: the lowest index
    assert int(leader_sgd.leader_of(loss_sum, steps, jnp.array([False, True, True, True]))) == 1
    assert int(leader_sgd.leader_of(jnp.array([6.0, 2.0]), jnp.array([3, 2]), jnp.ones(2, bool))) == 1  # 2 > 1


def test_a_pull_of_zero_is_an_isolated_network_bit_for_bit(tiny_dataset):
    cfg = network.NetworkConfig(**{f: getattr(_config(), f) for f in kit.RUN_FIELDS})  # the network's too
    lsgd = methods.train(leader_sgd.leader_sgd(0.0, 2), cfg, MODEL, tiny_dataset, progress=False)
    isolated = methods.train(network.output_sharing(exchange.none()), cfg, MODEL, tiny_dataset, progress=False)
    for got, want in zip(_leaves(lsgd["state"].nodes), _leaves(isolated["state"].nodes), strict=True):
        np.testing.assert_array_equal(got, want)


def test_it_trains_books_its_bytes_and_a_sweep_of_two_pulls_equals_each_run_alone(tiny_dataset):
    cfg, method = _config(), leader_sgd.leader_sgd(0.5, 3)
    alone = [methods.train(method, cfg, MODEL, tiny_dataset, progress=False, hyper={"pull": p}) for p in (0.0, 0.5)]
    assert [r["step"] for r in alone[1]["history"]] == [3, 6]
    assert np.isfinite(alone[1]["final"]["loss"])
    # two refreshes of 6 steps: 4 losses to 3 nodes each (4 B) and the leader's 556 parameters to 3 nodes (4 B)
    assert alone[1]["bytes"]["total"] == 2 * (4 * 3 * 4 + 3 * 4 * PARAMS)
    assert alone[1]["bytes"]["by_kind"]["payload"] == 2 * 4 * 3 * 4 / (4 * 6)
    first = [_leaves(r["state"].nodes.params) for r in alone]
    assert any(not np.array_equal(a, b) for a, b in zip(*first, strict=True))  # the pull moved the nodes

    swept = methods.sweep(method, [cfg, cfg], MODEL, tiny_dataset, hyper=[{"pull": 0.0}, {"pull": 0.5}],
                          mode="population", progress=False)
    for got, want in zip(swept, alone, strict=True):
        assert got["bytes"] == want["bytes"]
        for a, b in zip(_leaves(got["state"].nodes), _leaves(want["state"].nodes), strict=True):
            np.testing.assert_array_equal(a, b)


def test_the_pull_after_a_refresh_by_hand(tiny_dataset):
    """One step of 2 nodes with ``every = 1``: the nodes after the local step, then pulled to the lower loss."""
    cfg, method = _config(num_nodes=2, num_steps=1, eval_every=1), leader_sgd.leader_sgd(0.5, 1)
    built, data = methods.build(method, cfg, MODEL, tiny_dataset), methods.shard_data(method, tiny_dataset, cfg)
    state, step = built.init(jax.random.PRNGKey(cfg.seed)), jax.jit(built.step)
    local, info = step(state, data._replace(settings=kit.settings(cfg, {"pull": 0.0})))  # the pull is data
    pulled, _ = step(state, data)
    leader = int(np.argmin(info.loss))
    for x, got in zip(_leaves(local.nodes.params), _leaves(pulled.nodes.params), strict=True):
        np.testing.assert_allclose(got, x - 0.5 * (x - x[leader]), rtol=1e-6, atol=1e-7)
    np.testing.assert_array_equal(np.asarray(pulled.extra[1]), [0, 0])  # the running losses start again


def test_at_its_own_pace_the_straggler_holds_where_it_is_not_due(tiny_dataset):
    method, ticks = leader_sgd.leader_sgd(0.5, 2), 9
    cfg = _config(num_steps=ticks, eval_every=ticks)
    built = methods.build(method, cfg, MODEL, tiny_dataset, cluster=STRAGGLER, own_pace=True)
    paced, timeline = methods.at_own_pace(built, STRAGGLER, True)
    assert paced.waits == pace.rounds_of(2)
    step, data = jax.jit(paced.step), methods.shard_data(method, tiny_dataset, paced.config, timeline=timeline)
    state, held, pulled_while_waiting = paced.init(jax.random.PRNGKey(cfg.seed)), 0, 0
    for t in range(ticks):
        before = _leaves((state.nodes, state.extra))
        state, _ = step(state, data)
        after = _leaves((state.nodes, state.extra))
        kept = timeline.due[t] | (timeline.closes[t] & timeline.members[t])
        for i in np.flatnonzero(~kept):
            held += i == 3
            for b, a in zip(before, after, strict=True):
                np.testing.assert_array_equal(a[i], b[i], err_msg=f"node {i}, tick {t}")
        for i in np.flatnonzero(~timeline.due[t] & kept):  # waiting at a refresh: pulled, not stepped
            pulled_while_waiting += 1
            assert any(not np.array_equal(b[i], a[i]) for b, a in zip(before, after, strict=True))
    assert held > 0 and pulled_while_waiting > 0
    steps = timeline.steps[ticks - 1]
    assert steps[3] < steps[:3].min()  # the straggler took fewer steps
    assert int(state.extra[1][3]) == steps[3] % 2  # the losses it has summed since its last refresh


def test_by_spec_and_refuses_what_is_not_a_pull():
    method = zoo.parse("leader_sgd:0.1:8")
    assert method.name == "lsgd_0.1_t8" and method.family == "leader" and method.hyper == {"pull": 0.1}
    with pytest.raises(ValueError, match="pull"):
        leader_sgd.leader_sgd(1.5)
    with pytest.raises(ValueError, match="every"):
        leader_sgd.leader_sgd(0.1, 0)
