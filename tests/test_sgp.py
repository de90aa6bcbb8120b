"""Stochastic Gradient Push and Overlap SGP (jaxcomm.sgp): the one-peer exponential graph by hand, push-sum reaching
the exact average with its weight conserved (in flight too), training through the kit, at its own pace, jitted."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.flatten_util import ravel_pytree

from jaxcomm import clock, kit, methods, sgp, topology
from jaxcomm.models import MLP

MODEL = MLP(hidden=(8,), num_classes=4)
STRAGGLER = clock.Cluster(clock.Compute(1.0, speed=(1.0, 1.0, 1.0, 3.0)), clock.INSTANT)
PARAMS = 8 * 8 * 8 + 8 + 8 * 4 + 4  # the MLP on 8x8x1 images: 556 parameters


def _edges(adj) -> list[list[int]]:
    return np.argwhere(np.asarray(adj)).tolist()


def test_one_peer_exponential_by_hand():
    graph = topology.one_peer_exponential(4)  # offsets 1, 2, 1, 2, ...
    assert _edges(graph(None, 0)) == [[0, 1], [1, 2], [2, 3], [3, 0]]
    assert _edges(graph(None, 1)) == [[0, 2], [1, 3], [2, 0], [3, 1]]
    assert _edges(graph(None, 2)) == _edges(graph(None, 0))
    five = topology.one_peer_exponential(5)  # ceil(log2 5) = 3 offsets: 1, 2, 4
    assert _edges(five(None, 2)) == [[0, 4], [1, 0], [2, 1], [3, 2], [4, 3]]
    assert _edges(five(None, 3)) == _edges(five(None, 0))
    assert not np.asarray(topology.one_peer_exponential(1)(None, 0)).any()
    assert _edges(topology.one_peer_exponential(2)(None, 7)) == [[0, 1], [1, 0]]
    traced = jax.jit(graph)(jax.random.PRNGKey(0), jnp.int32(5))  # a traced step, as a GraphFn
    assert _edges(traced) == _edges(graph(None, 1)) and topology.as_graph_fn(graph, 4)[1]
    union = sum(np.asarray(five(None, t), int) for t in range(3))
    np.testing.assert_array_equal(union.astype(bool), topology.exponential(5))  # the exponential graph's edges


def _mix(values: np.ndarray, ticks: int, *, delay: int = 0, due=None):
    """``push_sum`` on its own, the one-peer exponential graph, each node's peer from its own step count; returns
    every tick's ``(z, weight total with what is in flight, numerator total with it)``."""
    n, p = values.shape
    graph = topology.one_peer_exponential(n)
    x, w = jnp.asarray(values, jnp.float32), jnp.ones(n)
    inflight = (jnp.zeros((n, delay + 1, p)), jnp.zeros((n, delay + 1)))
    own = np.zeros(n, int)
    out = []
    for t in range(ticks):
        now = np.ones(n, bool) if due is None else due(t)
        own += now
        peers = jnp.asarray([int(np.argmax(np.asarray(graph(None, s - 1))[i])) for i, s in enumerate(own)])
        x, w, inflight = sgp.push_sum(x, w, inflight, peers, jnp.full(n, delay), jnp.asarray(now))
        out.append((np.asarray(x / w[:, None]), float(w.sum() + inflight[1].sum()),
                    np.asarray(x.sum(0) + inflight[0].sum((0, 1)))))
    return out


def test_push_sum_averages_exactly_in_log2_n_steps_and_conserves_the_weight():
    values = np.array([[0.0, 1.0], [4.0, -3.0], [8.0, 2.0], [12.0, 8.0]])
    steps = _mix(values, 4)
    np.testing.assert_allclose(steps[0][0][:, 0], [6.0, 2.0, 6.0, 10.0])  # by hand: (v_i + v_{i-1}) / 2
    for z, _, _ in steps[1:]:  # after log2 4 = 2 steps every node holds the average, exactly
        np.testing.assert_allclose(z, np.broadcast_to(values.mean(0), z.shape), rtol=0, atol=1e-6)
    for _, weight, numerator in steps:
        assert weight == pytest.approx(4.0, abs=1e-6)
        np.testing.assert_allclose(numerator, values.sum(0), atol=1e-5)


@pytest.mark.parametrize("delay", [1, 3])
def test_overlap_conserves_the_weight_in_flight_and_reaches_the_average(delay):
    values = np.random.default_rng(0).normal(size=(4, 3))
    steps = _mix(values, 40 * (delay + 1), delay=delay)
    for _, weight, numerator in steps:
        assert weight == pytest.approx(4.0, abs=1e-5)
        np.testing.assert_allclose(numerator, values.sum(0), atol=1e-5)
    assert np.abs(steps[0][0] - values.mean(0)).max() > 0.1
    np.testing.assert_allclose(steps[-1][0], np.broadcast_to(values.mean(0), (4, 3)), atol=1e-4)


def test_at_their_own_pace_mass_waits_for_its_receiver_and_is_conserved():
    values = np.random.default_rng(1).normal(size=(4, 2))
    slow = lambda t: np.array([True, True, True, t % 3 == 2])  # node 3 steps one tick in three
    steps = _mix(values, 90, delay=1, due=slow)
    for _, weight, numerator in steps:
        assert weight == pytest.approx(4.0, abs=1e-5)
        np.testing.assert_allclose(numerator, values.sum(0), atol=1e-5)
    np.testing.assert_allclose(steps[-1][0], np.broadcast_to(values.mean(0), (4, 2)), atol=1e-3)


def test_delays_from_the_cluster(tiny_dataset):
    lan = clock.Cluster(clock.Compute(1e-4), clock.LAN)  # 0.2 ms + 2228 B at 1 Gbit/s: 2.18 steps of 0.1 ms
    delays = sgp._delays(4, 2228.0, None, lan)
    np.testing.assert_array_equal(delays[~np.eye(4, dtype=bool)], 3)
    built = methods.build(sgp.osgp(None), _config(), MODEL, tiny_dataset, cluster=lan)  # the run's cluster, passed
    w, (x_flight, w_flight) = built.init(jax.random.PRNGKey(0)).extra
    assert x_flight.shape == (4, 4, PARAMS) and w_flight.shape == (4, 4) and (np.asarray(w) == 1).all()
    assert (sgp._delays(4, 2228.0, None, STRAGGLER) == 1).all() and (sgp._delays(4, 2228.0, 2, lan) == 2).all()
    assert (sgp._delays(4, 2228.0, 0, None) == 0).all()
    with pytest.raises(ValueError, match="overlap"):
        sgp.osgp(0)


def test_at_their_own_pace_each_sgp_step_waits_for_its_push_and_overlap_sgp_does_not(tiny_dataset):
    # 4 nodes of 1 s steps on a link of 0.25 s latency carrying 4 P + 4 bytes at 4 P + 4 bytes a second: SGP's push
    # takes 1.25 s after each step, so step k ends at k + 1.25 (k - 1) s; OSGP's overlaps and its steps end each second
    nbytes = 4.0 * PARAMS + 4
    slow = clock.Cluster(clock.Compute(1.0), clock.Link(nbytes, 0.25, "slow"))
    built = {m.name: methods.build(m, _config(), MODEL, tiny_dataset, cluster=slow) for m in (sgp.sgp(), sgp.osgp(1))}
    for name, gap in (("sgp", 1.25), ("osgp_1", 0.0)):
        b = built[name]
        _, timeline = methods.at_own_pace(b, slow, True)
        k = np.arange(1, 7)
        np.testing.assert_allclose(timeline.time, k + gap * (k - 1), rtol=1e-12)
        assert timeline.due.all()  # equal speeds: every node every tick, as in lockstep
        assert timeline.goodput(6) == pytest.approx(6 / (6 + 5 * gap))  # the waits on the link are not compute


def _config(**changes) -> kit.RunConfig:
    return kit.RunConfig(num_nodes=4, batch_size=8, num_steps=6, eval_every=3, backend="vmap",
                         step_loop="scan").replace(**changes)


@pytest.mark.parametrize("method", [sgp.sgp(), sgp.osgp(1)], ids=lambda m: m.name)
def test_trains_through_the_kit_and_books_one_model_and_weight_per_node_and_step(method, tiny_dataset):
    result = methods.train(method, _config(), MODEL, tiny_dataset, progress=False)
    final = result["final"]
    assert final["bytes"]["by_kind"]["parameters"] == pytest.approx(4.0 * PARAMS + 4)  # one peer, one copy
    assert np.isfinite(final["loss"]) and 0.0 <= final["avg_accuracy"] <= 100.0
    assert result["built"].traffic[0].blocking == (method.name == "sgp")
    w, (_, in_flight) = result["state"].extra
    assert float(w.sum() + in_flight.sum()) == pytest.approx(4.0, abs=1e-5)


def _numerators(state) -> tuple[np.ndarray, float]:
    """``(sum_i w_i z_i + what is in flight [P], sum_i w_i + what is in flight)``, in float64."""
    w, (x_flight, w_flight) = state.extra
    z = np.asarray(jax.vmap(lambda p: ravel_pytree(p)[0])(state.nodes.params), np.float64)
    w = np.asarray(w, np.float64)
    return (w[:, None] * z).sum(0) + np.asarray(x_flight, np.float64).sum((0, 1)), w.sum() + float(w_flight.sum())


@pytest.mark.parametrize("method", [sgp.sgp(), sgp.osgp(1)], ids=lambda m: m.name)
def test_at_their_own_pace_the_slow_node_is_held_and_push_sum_mass_is_conserved(method, tiny_dataset):
    # a learning rate too small to move float32 parameters: push-sum alone, through the kit's step
    config = method.config_for(_config(num_steps=24, eval_every=24, learning_rate=1e-30))
    built = methods.build(method, config, MODEL, tiny_dataset, cluster=STRAGGLER, own_pace=True)
    paced, timeline = methods.at_own_pace(built, STRAGGLER, True)
    step = jax.jit(paced.step)
    state = paced.init(jax.random.PRNGKey(config.seed))
    data = methods.shard_data(method, tiny_dataset, paced.config, timeline=timeline)
    start, _ = _numerators(state)
    z0 = np.asarray(jax.vmap(lambda p: ravel_pytree(p)[0])(state.nodes.params))
    held = 0
    for t in range(24):
        before = state
        state, _ = step(state, data)
        numerator, weight = _numerators(state)
        assert weight == pytest.approx(4.0, abs=1e-5), t
        np.testing.assert_allclose(numerator, start, atol=1e-4, err_msg=f"tick {t}")
        if not timeline.due[t][3]:  # the slow node, not due: its model and its weight as they were
            held += 1
            for a, b in zip(jax.tree.leaves(before.nodes), jax.tree.leaves(state.nodes), strict=True):
                np.testing.assert_array_equal(np.asarray(a)[3], np.asarray(b)[3])
            assert float(state.extra[0][3]) == float(before.extra[0][3])
    assert held >= 12 and timeline.due[:24, 3].sum() >= 6  # it stepped about one tick in three
    z = np.asarray(jax.vmap(lambda p: ravel_pytree(p)[0])(state.nodes.params))
    spread = lambda v: float(np.abs(v - z0.mean(0)).max())
    assert spread(z) < 0.5 * spread(z0)  # gossip pulls every node toward the initial average


def test_a_jitted_step_equals_the_step_run_op_by_op(tiny_dataset):
    method = sgp.osgp(1)
    built = methods.build(method, method.config_for(_config()), MODEL, tiny_dataset)
    data = methods.shard_data(method, tiny_dataset, built.config)
    state = built.init(jax.random.PRNGKey(0))
    eager, jitted = state, state
    for _ in range(2):  # the second step mixes in the first one's messages
        eager, _ = built.step(eager, data)
        jitted, _ = jax.jit(built.step)(jitted, data)
    for a, b in zip(jax.tree.leaves(eager), jax.tree.leaves(jitted), strict=True):
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-5, atol=1e-6)
