"""Sweeps: R runs trained together equal the same runs alone; mixed structures are refused; resume is exact."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxcomm import checkpoint, driver, network, network_sweep, population, sweep, topology
from jaxcomm.models import MLP, StridedCNN

MODEL = MLP(hidden=(16,), num_classes=4)


def config(**kw) -> network.NetworkConfig:
    base = dict(num_nodes=4, num_neighbours=1, batch_size=8, inbox_capacity=4, num_steps=12, eval_every=4,
                backend="vmap", step_loop="scan", seed=0)
    return network.NetworkConfig(**(base | kw))


# Four runs differing in seed, p_c, p_b and graph (a named topology, and a graph by value).
RUNS = [config(seed=0), config(seed=1, consume_prob=0.9), config(seed=2, broadcast_prob=0.2, topology="full"),
        config(seed=3, consume_prob=0.3, broadcast_prob=0.8, learning_rate=3e-3)]
GRAPHS = [None, None, None, topology.exponential(4)]


def assert_same_run(got: dict, want: dict) -> None:
    assert [r["step"] for r in got["history"]] == [r["step"] for r in want["history"]]
    for a, b in zip(got["history"], want["history"], strict=True):
        assert a["counters"] == b["counters"]
        assert a["consumed_fraction"] == b["consumed_fraction"] and a["alive_fraction"] == b["alive_fraction"]
        np.testing.assert_allclose(a["loss"], b["loss"], rtol=1e-5)
        np.testing.assert_allclose(a["node_accuracies"], b["node_accuracies"], atol=1e-6)
        for w, value in b["collective_accuracy"].items():
            np.testing.assert_allclose(a["collective_accuracy"][w], value, atol=1e-6)
    for x, y in zip(jax.tree_util.tree_leaves(got["state"].nodes), jax.tree_util.tree_leaves(want["state"].nodes),
                    strict=True):
        np.testing.assert_allclose(np.asarray(x), np.asarray(y), rtol=1e-5, atol=1e-6)


@pytest.fixture(scope="module")
def alone(tiny_dataset):
    return [network.train_network(c, MODEL, tiny_dataset, graph=g, progress=False)
            for c, g in zip(RUNS, GRAPHS, strict=True)]


@pytest.mark.parametrize("mode", ["population", "sequential"])
def test_a_sweep_equals_its_runs_alone(tiny_dataset, alone, mode):
    results = network_sweep.train_networks(RUNS, MODEL, tiny_dataset, graph=GRAPHS, progress=False, mode=mode)
    assert len(results) == 4
    for got, want in zip(results, alone, strict=True):
        assert got["sweep"] == {"runs": 4, "mode": mode}
        assert got["network"].config == want["network"].config
        assert_same_run(got, want)
    # The runs really differ: the sweep did not return one run four times.
    assert len({r["final"]["counters"]["sent"] for r in results}) > 1


def test_donated_runs_and_sweeps_equal_plain_ones_bit_for_bit(tiny_dataset):
    # A network's first state holds one array twice (``up`` and ``alive``), which XLA refuses to donate twice:
    # the driver copies the first state before donating (it failed on a GPU before).
    state = network.system(network.make_network(RUNS[0], MODEL, image_shape=(8, 8, 1), num_classes=4),
                           lambda *a: {}).init(jax.random.PRNGKey(0))
    assert state.up is state.alive
    strip = lambda history: [{k: v for k, v in r.items() if k != "seconds"} for r in history]  # noqa: E731
    for donate in (True, None):  # None: the default, donated on every backend
        plain = network_sweep.train_networks(RUNS[:2], MODEL, tiny_dataset, progress=False, mode="population",
                                             donate=False)
        donated = network_sweep.train_networks(RUNS[:2], MODEL, tiny_dataset, progress=False, mode="population",
                                               donate=donate)
        for got, want in zip(donated, plain, strict=True):
            assert strip(got["history"]) == strip(want["history"])
            for x, y in zip(jax.tree_util.tree_leaves(got["state"]), jax.tree_util.tree_leaves(want["state"]),
                            strict=True):
                np.testing.assert_array_equal(np.asarray(x), np.asarray(y))
    alone = network.train_network(RUNS[0], MODEL, tiny_dataset, progress=False, donate=True)
    assert strip(alone["history"]) == strip(network.train_network(RUNS[0], MODEL, tiny_dataset, progress=False,
                                                                  donate=False)["history"])


def test_per_run_settings_reach_the_step_exactly(tiny_dataset):
    """Failure probability, soft-label temperature and consumed weight swept as data equal their runs alone."""
    runs = [config(seed=5, content="logits", temperature=t, consumed_weight=w, failure_prob=q, failure_steps=3.0)
            for t, w, q in [(1.0, 1.0, 0.1), (4.0, 0.5, 0.3)]]
    results = network_sweep.train_networks(runs, MODEL, tiny_dataset, progress=False, mode="population")
    for got, c in zip(results, runs, strict=True):
        assert_same_run(got, network.train_network(c, MODEL, tiny_dataset, progress=False))


def test_conv_nodes_sweep_run_by_run_on_cpu_and_equal_alone(tiny_dataset):
    cnn = StridedCNN(widths=(4,), num_classes=4)
    runs = [config(seed=s, backend="auto", step_loop="auto", num_steps=4, eval_every=2) for s in (0, 1)]
    results = network_sweep.train_networks(runs, cnn, tiny_dataset, progress=False)
    if jax.default_backend() == "cpu":
        assert results[0]["sweep"]["mode"] == "sequential"
    for got, c in zip(results, runs, strict=True):
        assert_same_run(got, network.train_network(c, cnn, tiny_dataset, progress=False))


def test_an_eager_sweep_runs_run_by_run_and_equals_its_runs_alone(tiny_dataset, alone):
    """The eager per-node loop swept run by run equals each run alone under vmap and scan."""
    eager = [c.replace(backend="loop", step_loop="eager") for c in RUNS[:2]]
    results = network_sweep.train_networks(eager, MODEL, tiny_dataset, graph=GRAPHS[:2], progress=False)
    for got, want in zip(results, alone[:2], strict=True):
        assert got["sweep"]["mode"] == "sequential" and got["network"].step_loop == "eager"
        assert_same_run(got, want)
    with pytest.raises(ValueError, match="sequential"):
        network_sweep.train_networks(eager, MODEL, tiny_dataset, graph=GRAPHS[:2], progress=False, mode="population")


@pytest.mark.parametrize(("change", "field"), [
    (dict(num_nodes=5), "num_nodes"), (dict(batch_size=4), "batch_size"), (dict(content="none"), "content"),
    (dict(inbox_capacity=2), "inbox_capacity"), (dict(num_steps=8), "num_steps"), (dict(eval_every=2), "eval_every"),
    (dict(failure_prob=0.1), "failures or none"), (dict(gossip_every=2), "gossip_every"),
])
def test_mixed_structures_are_refused_naming_the_field(tiny_dataset, change, field):
    with pytest.raises(ValueError, match=field):
        network_sweep.train_networks([config(), config(seed=1, **change)], MODEL, tiny_dataset, progress=False)


def test_graph_fields_may_differ_only_between_static_graphs(tiny_dataset):
    network_sweep.check_structure([config(topology="ring"), config(topology="full")])  # static: fine
    with pytest.raises(ValueError, match="topology"):
        network_sweep.check_structure([config(topology="time_varying"), config(topology="ring")])
    with pytest.raises(ValueError, match="one entry per run"):
        network_sweep.train_networks([config(), config(seed=1)], MODEL, tiny_dataset, graph=[None], progress=False)


@pytest.mark.parametrize("mode", ["population", "sequential"])
def test_an_interrupted_sweep_resumes_bit_identically(tiny_dataset, tmp_path, mode):
    runs = RUNS[:2]
    whole = network_sweep.train_networks(runs, MODEL, tiny_dataset, progress=False, mode=mode)
    accuracy = network.accuracy_evaluator(tiny_dataset.test)

    def interrupt_at_8(net, state, done):
        if done == 8:
            raise KeyboardInterrupt
        return accuracy(net, state, done)

    saves = []  # the harness records its wall time at every save, of every run of a sequential sweep too
    with pytest.raises(driver.Interrupted, match="after 4 steps"):
        network_sweep.train_networks(runs, MODEL, tiny_dataset, progress=False, mode=mode, evaluator=interrupt_at_8,
                                     checkpointer=checkpoint.Checkpointer(tmp_path, every=100,
                                                                  on_save=lambda: saves.append(1)))
    assert saves == [1]  # the one save on the interrupt (the first run's, run by run)
    resumed = network_sweep.train_networks(runs, MODEL, tiny_dataset, progress=False, mode=mode,
                                           checkpointer=checkpoint.Checkpointer(tmp_path, every=100, resume=True,
                                                                        on_save=lambda: saves.append(2)))
    assert resumed[0]["resumed_from"] == 4
    assert saves[1:] == [2] * (1 if mode == "population" else 2)  # at the end: the population, or each run
    for got, want in zip(resumed, whole, strict=True):
        for a, b in zip(got["history"], want["history"], strict=True):
            assert {k: v for k, v in a.items() if k != "seconds"} == {k: v for k, v in b.items() if k != "seconds"}
        for x, y in zip(jax.tree_util.tree_leaves(got["state"]), jax.tree_util.tree_leaves(want["state"]),
                        strict=True):
            np.testing.assert_array_equal(np.asarray(x), np.asarray(y))


def test_a_sweep_of_node_programs_with_its_own_evaluator_equals_its_runs_alone(tiny_dataset):
    """Research code's node (here the VAE program of the unsupervised chapter) and evaluator sweep too."""
    from jaxcomm import unsupervised
    from jaxcomm.models.vae import VAE

    program = unsupervised.vae_program(VAE(widths=(4,), latent=2, image_shape=(8, 8, 1)))
    runs = [config(seed=s, content="features", consume_prob=p, num_steps=4, eval_every=2)
            for s, p in [(0, 0.5), (1, 0.9)]]
    evaluator = lambda net, state, done: {"p_c": net.config.consume_prob,  # noqa: E731
                                          "params": float(sum(np.abs(np.asarray(x)).sum()
                                                              for x in jax.tree_util.tree_leaves(state.nodes.params)))}
    results = network_sweep.train_networks(runs, program, tiny_dataset, progress=False, evaluator=evaluator)
    for got, c in zip(results, runs, strict=True):
        want = network.train_network(c, program, tiny_dataset, progress=False, evaluator=evaluator)
        for a, b in zip(got["history"], want["history"], strict=True):
            assert a["counters"] == b["counters"] and a["p_c"] == b["p_c"] == c.consume_prob
            np.testing.assert_allclose(a["params"], b["params"], rtol=1e-5)


def doubling_program(divergence: float | None) -> network.NodeProgram:
    """A node whose loss is 2^k at its k-th step (from 0): past 100x the first step's at step 7, 1,000x at 10."""

    def train(state, images, targets, payload, consumed, key):
        return state._replace(params=2 * state.params), (state.params, jnp.zeros((images.shape[0], 1)))

    return network.NodeProgram(init=lambda key: population.NodeState(jnp.ones(()), {}, ()), train=train,
                               predict=lambda state, images: jnp.zeros((images.shape[0], 4)), payload_dim=1,
                               family="mlp", divergence=divergence)


@pytest.mark.parametrize("mode", ["population", "sequential", "alone"])
def test_a_run_watches_its_programs_divergence_unless_told(tiny_dataset, mode):
    quiet = lambda net, state, done: {}  # noqa: E731

    def train(program, **kw):
        runs = [config(seed=0), config(seed=1)]
        if mode == "alone":
            return network.train_network(runs[0], program, tiny_dataset, progress=False, evaluator=quiet, **kw)
        return network_sweep.train_networks(runs, program, tiny_dataset, progress=False, evaluator=quiet, mode=mode,
                                            **kw)

    with pytest.raises(driver.Diverged, match=r"above 100 .* at step 7"):
        train(doubling_program(100.0))
    unwatched = train(doubling_program(None))
    assert all(r["status"] == "complete" for r in (unwatched if mode != "alone" else [unwatched]))
    with pytest.raises(driver.Diverged, match=r"above 1000 .* at step 10"):
        train(doubling_program(None), divergence=1000.0)
    assert network.make_network(config(), doubling_program(None), image_shape=(8, 8, 1),
                                num_classes=4).divergence is None


def test_a_diverging_run_is_named_by_run_and_node(tiny_dataset):
    runs = [config(seed=0), config(seed=1, learning_rate=1e6)]
    with pytest.raises(driver.LossStop) as stop:
        network_sweep.train_networks(runs, MODEL, tiny_dataset, progress=False, mode="population", divergence=5.0)
    assert any("in the sweep: run 1" in note for note in stop.value.__notes__)


def test_auto_mode_runs_run_by_run_on_a_cpu_and_as_one_population_on_an_accelerator(monkeypatch):
    for backend, loop, family in [("vmap", "scan", "mlp"), ("patches", "dispatch", "conv"), ("vmap", "scan", None),
                                  ("unrolled", "dispatch", "conv")]:
        assert sweep.choose_mode(backend, "auto", loop, family) == "sequential"  # the CPU these tests run on
    monkeypatch.setattr(sweep.jax, "default_backend", lambda: "gpu")
    assert sweep.choose_mode("vmap", "auto", "scan", "mlp") == "population"
    assert sweep.choose_mode("unrolled", "auto", "dispatch", "conv") == "population"
    assert sweep.choose_mode("loop", "auto", "eager", "wide_mlp") == "sequential"  # one call per node: never vmapped
    assert sweep.choose_mode("unrolled", "auto", "scan") == "sequential"  # no family: the backend decides
    assert sweep.choose_mode("vmap", "auto", "scan") == "population"
    assert sweep.choose_mode("vmap", "sequential", "scan", "mlp") == "sequential"  # asked for: kept
    with pytest.raises(ValueError, match="eager"):
        sweep.choose_mode("loop", "population", "eager", "mlp")
