"""Messages and graphs as values: the built-in exchanges reproduce the runs of the string switches they
replaced, a graph by value equals the same graph by name, and research code's own contents and graphs train."""

from __future__ import annotations

import json
import pathlib

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxcomm import exchange, network, topology
from jaxcomm.models import MLP

GOLDEN = json.loads((pathlib.Path(__file__).parent / "golden" / "network_draws_by_name.json").read_text())
MODEL = MLP(hidden=(16,), num_classes=4)


def config(**kw) -> network.NetworkConfig:
    base = dict(num_nodes=5, num_neighbours=2, batch_size=8, inbox_capacity=4, num_steps=12, eval_every=4,
                backend="vmap", step_loop="scan", seed=3)
    return network.NetworkConfig(**(base | kw))


def params_sum(result) -> float:
    return float(sum(np.abs(np.asarray(leaf, np.float64)).sum()
                     for leaf in jax.tree_util.tree_leaves(result["state"].nodes.params)))


@pytest.mark.parametrize("case", sorted(GOLDEN))
def test_built_in_contents_reproduce_the_runs_before_exchanges_were_values(tiny_dataset, case):
    """Counters exactly, losses and accuracies to float precision, pinned (tests/golden/network_draws_by_name.json,
    written by tests/golden/write_network_golden.py when the draws became named streams; before, from the
    string-switch step at 8d7693f)."""
    golden = GOLDEN[case]
    kw = {k: tuple(tuple(o) for o in v) if k == "failure_schedule" else v for k, v in golden["config"].items()}
    result = network.train_network(config(**kw), MODEL, tiny_dataset, progress=False)
    assert len(result["history"]) == len(golden["history"])
    for got, want in zip(result["history"], golden["history"], strict=True):
        assert got["step"] == want["step"] and got["counters"] == want["counters"]
        for key in ("loss", "consumed_fraction", "alive_fraction", "avg_accuracy"):
            np.testing.assert_allclose(got[key], want[key], rtol=1e-5, err_msg=f"{case} step {got['step']} {key}")
    np.testing.assert_allclose(params_sum(result), golden["param_sum"], rtol=1e-5)


def test_named_exchange_equals_the_same_exchange_by_value(tiny_dataset):
    by_name = network.train_network(config(content="logits", temperature=2.0), MODEL, tiny_dataset, progress=False)
    by_value = network.train_network(config(content="true_labels"), MODEL, tiny_dataset, progress=False,
                                     exchange=exchange.soft_labels(2.0))
    assert by_value["final"]["counters"] == by_name["final"]["counters"]
    np.testing.assert_array_equal(params_sum(by_value), params_sum(by_name))


@pytest.mark.parametrize("name", ["ring", "exponential"])
def test_a_graph_by_value_equals_the_same_graph_by_name(tiny_dataset, name):
    adj = {"ring": topology.ring(5, 2), "exponential": topology.exponential(5)}[name]
    by_name = network.train_network(config(topology=name), MODEL, tiny_dataset, progress=False)
    by_value = network.train_network(config(topology="random"), MODEL, tiny_dataset, progress=False, graph=adj)
    assert by_value["final"]["counters"] == by_name["final"]["counters"]
    np.testing.assert_array_equal(params_sum(by_value), params_sum(by_name))
    np.testing.assert_array_equal(np.asarray(by_value["state"].adj), adj)


def test_a_graph_function_equals_the_named_time_varying_graph(tiny_dataset):
    by_name = network.train_network(config(topology="time_varying", redraw_every=4), MODEL, tiny_dataset,
                                    progress=False)
    fn = lambda key, step: topology.graph_at(key, step, num_nodes=5, num_neighbours=2, every=4)
    by_value = network.train_network(config(), MODEL, tiny_dataset, progress=False, graph=fn)
    assert by_value["final"]["counters"] == by_name["final"]["counters"]
    np.testing.assert_array_equal(params_sum(by_value), params_sum(by_name))


def test_a_graph_function_is_evaluated_at_every_step(tiny_dataset):
    """Node 0 sends to node 1 on even steps only: node 1 receives exactly node 0's even-step broadcasts."""
    only = jnp.zeros((5, 5), bool).at[0, 1].set(True)
    graph = lambda key, step: jnp.where(step % 2 == 0, only, jnp.zeros((5, 5), bool))
    cfg = config(broadcast_prob=1.0, consume_prob=0.0, inbox_capacity=16, num_steps=6, eval_every=6)
    result = network.train_network(cfg, MODEL, tiny_dataset, progress=False, graph=graph)
    # every node broadcasts every step, but copies go only where the graph of that step has an edge
    assert result["final"]["counters"]["sent"] == result["final"]["counters"]["received"] == 3  # steps 0, 2, 4
    assert int(result["state"].inbox.count[1]) == 3 and int(result["state"].inbox.count.sum()) == 3


@pytest.mark.parametrize("graph,message", [
    (np.ones((4, 4), bool), "shape"),
    (np.eye(5, dtype=bool), "self-loop"),
    (lambda key, step: jnp.zeros((3, 3), bool), "shape"),
    (lambda key, step: jnp.eye(5, dtype=bool), "self-loop"),
])
def test_bad_graphs_are_refused_before_training(tiny_dataset, graph, message):
    with pytest.raises(ValueError, match=message):
        network.make_network(config(), MODEL, image_shape=(8, 8, 1), num_classes=4, graph=graph)


def test_message_bytes_by_hand():
    # private shards (the thesis): the 32 uint8 CIFAR-10 images travel, 32 x 3,072 = 98,304 B
    private = lambda ex, dim: exchange.message_bytes(ex, 32, dim, sample_bytes=3072)  # noqa: E731
    assert private(exchange.none(), 10) == 0
    assert private(exchange.true_labels(), 10) == 98_304 + 32 + 8  # images + uint8 ids + header
    assert private(exchange.soft_labels(2.0), 10) == 98_304 + 32 * 10 * 4 + 8
    assert private(exchange.features(), 64) == 98_304 + 32 * 64 * 4 + 8
    # shared data: int32 indices instead of the images
    shared = lambda ex, dim: exchange.message_bytes(ex, 32, dim, sample_bytes=3072, data_model="shared")  # noqa: E731
    assert shared(exchange.none(), 10) == 0
    assert shared(exchange.true_labels(), 10) == 32 * 4 + 32 + 8
    assert shared(exchange.soft_labels(2.0), 10) == 32 * 4 + 32 * 10 * 4 + 8
    assert shared(exchange.features(), 64) == 32 * 4 + 32 * 64 * 4 + 8
    with pytest.raises(ValueError, match="data_model must be one of"):
        exchange.message_bytes(exchange.true_labels(), 32, 10, sample_bytes=1, data_model="public")


def test_every_record_counts_the_bytes_sent_under_the_data_model(tiny_dataset):
    # tiny images are 8 x 8 x 1 uint8: a true-label message of B = 8 costs 8 x 64 + 8 + 8 = 528 B private,
    # 8 x 4 + 8 + 8 = 48 B shared; training is the same under both
    private = network.train_network(config(content="true_labels"), MODEL, tiny_dataset, progress=False)
    shared = network.train_network(config(content="true_labels", data_model="shared"), MODEL, tiny_dataset,
                                   progress=False)
    b = private["network"].config.batch_size
    assert private["network"].message_bytes == b * 64 + b + 8 and shared["network"].message_bytes == b * 4 + b + 8
    for record_p, record_s in zip(private["history"], shared["history"], strict=True):
        assert record_p["counters"] == record_s["counters"] and record_p["loss"] == record_s["loss"]
        assert record_p["bytes_sent"] == record_p["counters"]["sent"] * (b * 64 + b + 8)
        assert record_s["bytes_sent"] == record_s["counters"]["sent"] * (b * 4 + b + 8)
    assert private["final"]["bytes_sent"] > 0


def test_consumed_losses_by_hand():
    logits = jnp.array([[1.0, 2.0]])
    np.testing.assert_allclose(exchange.cross_entropy(logits, jnp.array([[0.0, 1.0]])), 0.313262, rtol=1e-5)
    # soft labels at tau = 2 of received logits (1, 3): softmax(0.5, 1.5) = (0.268941, 0.731059)
    expected = -(0.268941 * np.log(0.268941) + 0.731059 * np.log(0.731059))  # logits equal -> their own CE
    received = jnp.array([[1.0, 3.0]])
    loss = exchange.soft_labels(2.0).loss(jnp.array([[0.5, 1.5]]), None, received)
    np.testing.assert_allclose(loss, expected, rtol=1e-5)
    loss = exchange.features().loss(None, jnp.array([[1.0, 2.0]]), jnp.array([[0.0, 4.0]]))
    np.testing.assert_allclose(loss, 0.5 * (1.0 + 4.0), rtol=1e-6)
    targets, received_labels = jnp.eye(2)[None, 0], jnp.eye(2)[None, 1]
    forward = exchange.true_labels().outgoing
    np.testing.assert_array_equal(forward(None, None, targets, received_labels, jnp.bool_(True)), received_labels)
    np.testing.assert_array_equal(forward(None, None, targets, received_labels, jnp.bool_(False)), targets)


def test_every_node_down_at_an_evaluation_is_recorded_and_training_goes_on(tiny_dataset):
    """All four nodes down for steps 150..249: the evaluation at step 200 has no collective decision."""
    cfg = network.NetworkConfig(num_nodes=4, topology="full", batch_size=8, num_steps=300, eval_every=100,
                                failure_schedule=tuple((i, 150, 250) for i in range(4)), backend="vmap",
                                step_loop="scan")
    result = network.train_network(cfg, MODEL, tiny_dataset, progress=False)
    assert [r["step"] for r in result["history"]] == [100, 200, 300] and result["status"] == "complete"
    down = result["history"][1]
    assert down["reachable"] == 0 and down["alive_fraction"] < 1.0
    assert all(value is None for value in down["collective_accuracy"].values())
    assert result["final"]["reachable"] == 4 and result["final"]["collective_accuracy"]["negentropy"] > 0
    assert result["unreachable_evaluations"] == 1


@pytest.mark.parametrize("failure_prob", [0.3, 0.5])
def test_random_failures_never_crash_an_evaluation(tiny_dataset, failure_prob):
    cfg = network.NetworkConfig(num_nodes=3, topology="full", batch_size=8, num_steps=60, eval_every=2,
                                failure_prob=failure_prob, failure_steps=20.0, backend="vmap", step_loop="scan")
    result = network.train_network(cfg, MODEL, tiny_dataset, progress=False)
    assert len(result["history"]) == 30
    reachable = [r["reachable"] for r in result["history"]]
    assert result["unreachable_evaluations"] == reachable.count(0)
    for record in result["history"]:
        assert (record["collective_accuracy"]["negentropy"] is None) == (record["reachable"] == 0)


def test_two_nodes_with_defaults():
    cfg = network.NetworkConfig(num_nodes=2)
    assert cfg.num_neighbours == 1
    assert network.NetworkConfig(num_nodes=1).num_neighbours == 0
    assert network.NetworkConfig().num_neighbours == 2
