"""A lifted population equals N independent single-node runs, for every backend."""

from __future__ import annotations

import functools

import chex
import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from jaxcomm import population
from jaxcomm.models import MLP

N, B, STEPS = 3, 8, 4
MODEL = MLP(hidden=(16, 8), num_classes=5, dropout=0.2)
OPTIMIZER = optax.adam(1e-2)


def init_node(key):
    params = MODEL.init(key, jnp.zeros((1, 6, 6, 1)))["params"]
    return population.NodeState(params, {}, OPTIMIZER.init(params))


def loss_fn(params, model_state, x, y, key):
    logits, _ = MODEL.apply({"params": params}, x, train=True, rngs={"dropout": key})
    return optax.softmax_cross_entropy_with_integer_labels(logits, y).mean(), (model_state, logits)


TRAIN_STEP = population.make_train_step(loss_fn, OPTIMIZER)


def batches():
    rng = np.random.default_rng(0)
    x = jnp.asarray(rng.normal(size=(STEPS, N, B, 6, 6, 1)), jnp.float32)
    y = jnp.asarray(rng.integers(0, 5, (STEPS, N, B)), jnp.int32)
    keys = jax.random.split(jax.random.PRNGKey(1), STEPS * N).reshape(STEPS, N, -1)
    return x, y, keys


@functools.lru_cache(maxsize=1)
def independent_runs():
    """The reference: each node trained alone, one after another, no lifting at all (one node's step, compiled once
    instead of run op by op: the same arithmetic to float32 rounding, which the comparisons allow)."""
    x, y, keys = batches()
    train_step = jax.jit(TRAIN_STEP)
    finals, losses = [], []
    for i, key in enumerate(jax.random.split(jax.random.PRNGKey(0), N)):
        state, node_losses = init_node(key), []
        for t in range(STEPS):
            state, (loss, _) = train_step(state, x[t, i], y[t, i], keys[t, i])
            node_losses.append(loss)
        finals.append(state)
        losses.append(node_losses)
    return population.stack(finals), jnp.asarray(losses).T  # [STEPS, N]


@pytest.mark.parametrize("backend,jit", [(b, j) for b in population.BACKENDS for j in (False, True)])
def test_lifted_steps_equal_independent_runs(backend, jit):
    x, y, keys = batches()
    state = population.init_population(init_node, jax.random.PRNGKey(0), N, backend=backend)
    step = population.lift(TRAIN_STEP, backend=backend)
    step = jax.jit(step) if jit else step
    losses = []
    for t in range(STEPS):
        state, (loss, logits) = step(state, x[t], y[t], keys[t])
        chex.assert_shape(logits, (N, B, 5))
        losses.append(loss)
    expected_state, expected_losses = independent_runs()
    chex.assert_trees_all_close(state, expected_state, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(jnp.stack(losses), expected_losses, rtol=1e-5, atol=1e-6)
    chex.assert_tree_all_finite(state)


def test_lift_train_updates_an_unrolled_population_at_once():
    """Under "unrolled", lift_train runs the gradients node by node and Adam once over the stack: vmap's update
    (bit for bit, for these MLP nodes whose unrolled gradients are vmap's too), the whole unrolled step's values
    to float32 rounding (the same arithmetic compiled for other shapes: an ulp apart); other backends are lift's."""
    x, y, keys = batches()
    state = population.init_population(init_node, jax.random.PRNGKey(0), N)
    lifted = {name: jax.jit(lift(TRAIN_STEP, backend=backend)) for name, lift, backend in [
        ("halves", population.lift_train, "unrolled"), ("whole", population.lift, "unrolled"),
        ("vmap", population.lift, "vmap"), ("vmap_train", population.lift_train, "vmap")]}
    states = dict.fromkeys(lifted, state)
    for t in range(STEPS):
        outs = {name: step(states[name], x[t], y[t], keys[t]) for name, step in lifted.items()}
        states = {name: out[0] for name, out in outs.items()}
        chex.assert_trees_all_equal(outs["halves"], outs["vmap"], outs["vmap_train"])
        chex.assert_trees_all_close(outs["halves"], outs["whole"], rtol=1e-5, atol=1e-6)  # as every lift


def test_lift_train_updates_nodes_held_apart_each_where_it_lies():
    """Given node states :class:`Unstacked` (the "dispatch" loop under "unrolled"), lift_train runs each node's whole
    step on its own buffers and keeps them apart: the stacked population's values, step after step."""
    x, y, keys = batches()
    state = population.init_population(init_node, jax.random.PRNGKey(0), N)
    step = jax.jit(population.lift_train(TRAIN_STEP, backend="unrolled"))
    stacked, apart = state, population.unstack(state)
    for t in range(STEPS):
        stacked, (loss, _) = step(stacked, x[t], y[t], keys[t])
        apart, aux = population.state_and_aux(step(apart, x[t], y[t], keys[t]))
        assert isinstance(apart, population.Unstacked)
        chex.assert_trees_all_close(population.restack(apart), stacked, rtol=1e-5, atol=1e-6)
        chex.assert_trees_all_close(aux[0], loss, rtol=1e-5, atol=1e-6)


def test_lift_train_lifts_a_plain_step_whole():
    """A step without gradients/update halves (a research program's own function) is lifted as lift lifts it."""
    x, y, keys = batches()
    state = population.init_population(init_node, jax.random.PRNGKey(0), N)
    plain = lambda *args: TRAIN_STEP(*args)  # noqa: E731
    got = jax.jit(population.lift_train(plain, backend="unrolled"))(state, x[0], y[0], keys[0])
    chex.assert_trees_all_equal(got, jax.jit(population.lift(TRAIN_STEP, backend="unrolled"))(state, x[0], y[0],
                                                                                              keys[0]))


def test_init_population_leading_axis_and_distinct_nodes():
    state = population.init_population(init_node, jax.random.PRNGKey(0), N)
    assert population.num_nodes(state) == N
    kernels = state.params["Dense_0"]["kernel"]
    chex.assert_shape(kernels, (N, 36, 16))
    assert not np.allclose(kernels[0], kernels[1])  # split keys: different nodes


def test_lift_with_shared_argument():
    """in_axes=None broadcasts one argument to every node, identically in both backends."""
    fn = lambda w, x: jnp.tanh(x @ w)
    w = jnp.arange(N * 6, dtype=jnp.float32).reshape(N, 3, 2) / 10
    x = jnp.ones((4, 3))
    out = {b: population.lift(fn, backend=b, in_axes=(0, None))(w, x) for b in population.BACKENDS}
    chex.assert_shape(out["vmap"], (N, 4, 2))
    for backend in population.BACKENDS:
        np.testing.assert_allclose(out[backend], out["loop"], rtol=1e-6, err_msg=backend)
    np.testing.assert_allclose(out["loop"][1], jnp.tanh(x @ w[1]), rtol=1e-6)


def test_map_batches_and_sharded_divisibility():
    fn = lambda w: jnp.sum(w**2)
    w = jnp.arange(12.0).reshape(6, 2)
    for batch_size in (None, 2, 4):  # 4 does not divide 6: lax.map handles the remainder
        np.testing.assert_allclose(population.lift(fn, backend="map", map_batch_size=batch_size)(w),
                                   jnp.sum(w**2, axis=1))
    mesh = population.node_mesh()
    if mesh.size > 1:
        with pytest.raises(ValueError, match="num_nodes divisible by"):
            population.lift(fn, backend="sharded")(jnp.ones((mesh.size + 1, 2)))


def test_bad_backend_and_axes():
    with pytest.raises(ValueError, match="backend must be one of"):
        population.lift(lambda x: x, backend="pmap")
    with pytest.raises(ValueError, match="in_axes entries must be 0 or None"):
        population.lift(lambda x: x, backend="loop", in_axes=1)(jnp.ones((2, 2)))
    with pytest.raises(ValueError, match="num_nodes must be >= 1"):
        population.init_population(init_node, jax.random.PRNGKey(0), 0)


def test_where_selects_whole_nodes():
    new = {"w": jnp.ones((3, 2, 2)), "b": jnp.ones((3,))}
    old = {"w": jnp.zeros((3, 2, 2)), "b": jnp.zeros((3,))}
    out = population.where(np.array([True, False, True]), new, old)
    np.testing.assert_array_equal(out["b"], [1.0, 0.0, 1.0])
    np.testing.assert_array_equal(out["w"][:, 0, 0], [1.0, 0.0, 1.0])
    assert out["w"][1].sum() == 0 and out["w"][0].sum() == 4


def test_unstacked_nodes_round_trip_and_loop_updates_them_where_they_lie():
    stacked = {"w": jnp.arange(12.0).reshape(3, 2, 2), "b": jnp.arange(3)}
    apart = population.unstack(stacked)
    assert isinstance(apart, population.Unstacked) and len(apart.trees) == 3
    np.testing.assert_array_equal(apart.trees[1]["w"], [[4.0, 5.0], [6.0, 7.0]])
    assert population.unstack(apart) is apart and population.restack(stacked) is stacked
    back = population.restack(apart)
    for name in stacked:
        np.testing.assert_array_equal(back[name], stacked[name])

    def step(node, x, scale):  # one node: (new state, aux)
        return {"w": node["w"] * scale + x, "b": node["b"] + 1}, node["w"].sum() + x

    xs = jnp.array([1.0, 2.0, 3.0])
    lifted = population.lift(step, backend="loop", in_axes=(0, 0, None))
    out = lifted(apart, xs, 2.0)
    assert isinstance(out, population.Unstacked)
    nodes, aux = population.state_and_aux(out)
    assert isinstance(nodes, population.Unstacked)  # states stay apart, the auxiliaries are stacked
    want_nodes, want_aux = population.lift(step, backend="vmap", in_axes=(0, 0, None))(stacked, xs, 2.0)
    np.testing.assert_array_equal(aux, want_aux)
    for name in stacked:
        np.testing.assert_array_equal(population.restack(nodes)[name], want_nodes[name])
    assert population.state_and_aux((want_nodes, want_aux))[1] is want_aux  # a stacked pair as it is
    # "unrolled" in a jitted step (the "dispatch" loop's): the same, node by node, no slice or stack of the states
    unrolled = jax.jit(lambda nodes, xs: population.state_and_aux(
        population.lift(step, backend="unrolled", in_axes=(0, 0, None))(nodes, xs, 2.0)))
    nodes, aux = unrolled(apart, xs)
    assert isinstance(nodes, population.Unstacked) and len(nodes.trees) == 3
    np.testing.assert_array_equal(aux, want_aux)
    for name in stacked:
        np.testing.assert_array_equal(population.restack(nodes)[name], want_nodes[name])


def test_in_a_sweep_a_round_runs_only_on_the_steps_some_run_is_due_and_only_for_the_runs_due():
    """Vmapped over a sweep's runs (the named runs axis), a per-run ``due`` would make ``lax.cond`` run both
    branches every step; the round runs on the steps some run is due, and changes only the runs that are."""
    rounds = []

    def double(nodes):
        jax.debug.callback(lambda: rounds.append(1))  # once per executed round, whatever the runs
        return (nodes * 2.0,)

    def step(count, nodes):  # a run: a counter and its nodes; a round every 5 steps, offset per run
        return count + 1, population.when_due((count + 1) % 5 == 0, double, nodes)[0]

    runs = jax.jit(jax.vmap(step, axis_name=population.RUNS_AXIS))
    counts, nodes = jnp.array([0, 0, 2]), jnp.ones((3, 2))
    for _ in range(10):
        counts, nodes = runs(counts, nodes)
    jax.effects_barrier()
    # runs 0 and 1 are due at steps 5 and 10, run 2 at steps 3 and 8: rounds executed on 4 steps, not 10
    assert len(rounds) == 4
    np.testing.assert_array_equal(nodes, [[4.0, 4.0]] * 3)  # each run doubled twice, on its own steps
    alone = jax.jit(step)
    count, node = jnp.int32(2), jnp.ones(2)
    for _ in range(10):
        count, node = alone(count, node)
    np.testing.assert_array_equal(node, nodes[2])  # a run in the sweep equals the run alone


def test_when_due_applies_a_population_operation_only_when_due_in_either_layout():
    stacked = {"w": jnp.arange(6.0).reshape(3, 2)}
    calls = []

    def average(nodes, count):  # every node's w becomes the nodes' mean; a counter rides along
        calls.append(1)
        return {"w": jnp.broadcast_to(nodes["w"].mean(axis=0), nodes["w"].shape)}, count + 1

    for due in (True, False, jnp.array(True), jnp.array(False)):
        nodes, count = population.when_due(due, average, stacked, jnp.int32(0))  # stacked: a cond
        np.testing.assert_array_equal(nodes["w"], [[2.0, 3.0]] * 3 if due else stacked["w"])
        assert count == int(bool(due))
        calls.clear()
        apart, count = population.when_due(due, average, population.unstack(stacked), jnp.int32(0))
        assert isinstance(apart, population.Unstacked) and count == int(bool(due))
        assert len(calls) == int(bool(due))  # eager: regrouped and called only when due
        np.testing.assert_array_equal(population.restack(apart)["w"], nodes["w"])
    traced = jax.jit(lambda step, nodes: population.when_due(step % 2 == 1, average, nodes, jnp.int32(0)))
    np.testing.assert_array_equal(traced(jnp.int32(1), stacked)[0]["w"], [[2.0, 3.0]] * 3)
    np.testing.assert_array_equal(traced(jnp.int32(2), stacked)[0]["w"], stacked["w"])
    for step, want in ((1, [[2.0, 3.0]] * 3), (2, stacked["w"])):  # apart in a jitted step: a cond, kept apart
        apart, count = traced(jnp.int32(step), population.unstack(stacked))
        assert isinstance(apart, population.Unstacked) and int(count) == step % 2
        np.testing.assert_array_equal(population.restack(apart)["w"], want)


def test_held_apart_names_the_pairs_whose_chunks_hold_node_states_apart():
    assert population.held_apart("unrolled", "dispatch") and population.held_apart("loop", "eager")
    assert not population.held_apart("unrolled", "scan")  # a scan keeps them stacked
    assert not population.held_apart("vmap", "dispatch") and not population.held_apart("patches", "dispatch")
