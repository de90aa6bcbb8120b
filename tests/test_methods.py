"""Methods as values: named streams pair them, one ledger books their bytes, one sweep trains any of them."""

from __future__ import annotations

import json

import jax
import numpy as np
import pytest

from jaxcomm import (
    bandwidth,
    codistillation,
    compression,
    data_parallel,
    driver,
    exchange,
    gossip,
    ledger,
    local_sgd,
    methods,
    network,
    powersgd,
    sparta,
    streams,
)
from jaxcomm.models import MLP

MODEL = MLP(hidden=(12,), num_classes=4)


def config(**kw) -> network.NetworkConfig:
    base = dict(num_nodes=4, num_neighbours=1, batch_size=5, num_steps=6, eval_every=3, backend="vmap",
                step_loop="scan", seed=0)
    return network.NetworkConfig(**(base | kw))


def indices_drawn(built, dataset, cfg, steps: int = 3, method=None) -> list[np.ndarray]:
    data = methods.shard_data(method, dataset, built.config) if method else network.network_data(dataset, cfg)
    state, step, out = built.init(jax.random.PRNGKey(cfg.seed)), jax.jit(built.step), []
    for _ in range(steps):
        state, info = step(state, data)
        out.append(np.asarray(info.indices))
    return out


def test_isolated_network_sync_sgd_and_local_sgd_draw_the_same_minibatches(tiny_dataset):
    cfg = config(augment=True, seed=3)
    drawn = {m.name: indices_drawn(methods.build(m, cfg, MODEL, tiny_dataset), tiny_dataset, cfg, method=m)
             for m in (network.output_sharing(exchange.none(), name="isolated"), data_parallel.sync_sgd(),
                       local_sgd.local_sgd(1), codistillation.codistillation(2), sparta.sparta(0.1))}
    for name, got in drawn.items():
        for a, b in zip(got, drawn["isolated"], strict=True):
            np.testing.assert_array_equal(a, b, err_msg=name)
    assert not np.array_equal(drawn["isolated"][0], drawn["isolated"][1])


def test_a_method_that_adds_a_draw_leaves_the_others_draws_unchanged(tiny_dataset):
    """random-k draws its coordinates from a named stream: the minibatches stay dense sync SGD's."""
    cfg = config()
    dense = indices_drawn(methods.build(data_parallel.sync_sgd(), cfg, MODEL, tiny_dataset), tiny_dataset, cfg)
    sparse = indices_drawn(methods.build(data_parallel.sync_sgd(compression.make("random_k", fraction=0.5)), cfg,
                                         MODEL, tiny_dataset), tiny_dataset, cfg)
    for a, b in zip(dense, sparse, strict=True):
        np.testing.assert_array_equal(a, b)
    assert streams.stream_id("compress") != streams.stream_id("sparta")


def test_a_message_booked_by_kind_adds_up_to_its_size():
    for ex in (exchange.none(), exchange.true_labels(), exchange.soft_labels(), exchange.features()):
        for data_model in ("private", "shared"):
            one = ledger.message(ex, 5, 7, sample_bytes=64, data_model=data_model)
            assert one.total == exchange.message_bytes(ex, 5, 7, sample_bytes=64, data_model=data_model)
    one = ledger.message(exchange.true_labels(), 5, 4, sample_bytes=64)
    assert one == ledger.Booking(inputs=320.0, payload=5.0, headers=8.0)
    record = ledger.record(ledger.messages(10, one), num_nodes=4, steps=5)
    assert record["total"] == 3330 and record["per_node_step"] == 3330 / 20
    assert record["by_kind"] == {"inputs": 160.0, "payload": 2.5, "parameters": 0.0, "indices": 0.0,
                                 "headers": 4.0, "coordinates": 0.0}
    stored = ledger.encoded(record, raw_per_input=64, stored_per_input=16)  # inputs a quarter of their raw size
    assert stored["by_kind"]["inputs"] == 40.0 and stored["per_node_step"] == 3330 / 20 - 120.0
    assert stored["total"] == 3330 - 120.0 * 20 and stored["encoding"] == "stored"


P = 8 * 8 * 12 + 12 + 12 * 4 + 4  # the MLP's parameters on 8 x 8 images


@pytest.mark.parametrize("name", ["true_labels", "gossip", "sync", "top_k", "powersgd", "diloco", "codistill",
                                  "sparta"])
def test_every_method_books_its_bytes_in_the_one_ledger(tiny_dataset, name):
    """Hand-computed bytes over 6 steps of 4 nodes (P parameters) against the final record's."""
    n, steps = 4, 6
    method = {"true_labels": network.output_sharing(exchange.true_labels()),
              "gossip": gossip.gossip_averaging(2, num_neighbours=1), "sync": data_parallel.sync_sgd(),
              "top_k": data_parallel.sync_sgd(compression.make("top_k", fraction=0.1, per_layer=False)),
              "powersgd": data_parallel.sync_sgd(powersgd.power_sgd(1)), "diloco": local_sgd.diloco(4),
              "codistill": codistillation.codistillation(4), "sparta": sparta.sparta(0.25)}[name]
    out = methods.train(method, config(), MODEL, tiny_dataset, progress=False)
    assert out["bytes"] == out["history"][-1]["bytes"]
    kind = out["bytes"]["by_kind"]
    per_step = out["bytes"]["total"] / (n * steps)
    assert out["bytes"]["per_node_step"] == pytest.approx(per_step)
    if name == "true_labels":  # every copy: 5 images of 64 bytes, 5 uint8 labels, an 8-byte header
        sent = out["final"]["counters"]["sent"]
        assert sent > 0 and out["bytes"]["total"] == sent * (5 * 64 + 5 + 8)
        assert kind["inputs"] == sent * 320 / 24 and kind["parameters"] == 0
    elif name == "gossip":  # a ring of one neighbour: 4 edges, rounds after steps 2, 4, 6
        assert out["bytes"]["total"] == 3 * 4 * 4 * P and kind["parameters"] == out["bytes"]["per_node_step"]
    elif name == "sync":
        assert out["bytes"]["total"] == pytest.approx(steps * n * 2 * 3 / 4 * 4 * P)
    elif name == "top_k":  # k values and their int32 indices, to the 3 others, every step
        k = compression.num_kept(0.1, P)
        assert out["bytes"]["total"] == pytest.approx(steps * n * 3 * 8 * k)
    elif name == "powersgd":  # rank-1 factors of each matrix and the dense vectors, all-reduced
        mb = out["built"].message_bytes
        assert mb == 4 * ((64 + 12) + 12 + (12 + 4) + 4)
        assert out["bytes"]["total"] == pytest.approx(steps * n * 2 * 3 / 4 * mb)
    elif name == "diloco":  # one round ended (step 4)
        assert out["bytes"]["total"] == pytest.approx(1 * n * 2 * 3 / 4 * 4 * P)
    elif name == "codistill":  # one refresh: every node's checkpoint to its 3 peers
        assert out["bytes"]["total"] == 1 * n * 3 * 4 * P
    elif name == "sparta":  # every step a quarter of the parameters along each of the 4 edges
        assert out["bytes"]["total"] == steps * 4 * round(0.25 * P) * 4
    if name in ("gossip", "sync", "top_k", "powersgd", "sparta"):  # whole rounds in 6 steps: the lockstep rate is exact
        assert out["built"].bytes_per_node_step() == pytest.approx(out["bytes"]["per_node_step"])
    assert P == bandwidth.model_num_params(MODEL, (8, 8, 1))


def assert_same(got: dict, want: dict) -> None:
    assert [r["step"] for r in got["history"]] == [r["step"] for r in want["history"]]
    for a, b in zip(got["history"], want["history"], strict=True):
        np.testing.assert_allclose(a["loss"], b["loss"], rtol=1e-5)
        np.testing.assert_allclose(a["node_accuracies"], b["node_accuracies"], atol=1e-6)
        assert a["bytes"] == b["bytes"]
    jax.tree_util.tree_map(lambda x, y: np.testing.assert_allclose(x, y, rtol=1e-5, atol=1e-6),
                           got["state"], want["state"])


METHODS = {"sync": lambda: data_parallel.sync_sgd(), "top_k": lambda: data_parallel.sync_sgd(
    compression.make("top_k", fraction=0.1)), "diloco": lambda: local_sgd.diloco(2),
           "codistill": lambda: codistillation.codistillation(2), "sparta": lambda: sparta.sparta(0.3),
           "gossip": lambda: gossip.gossip_averaging(2, num_neighbours=1),
           "true_labels": lambda: network.output_sharing(exchange.true_labels())}


# Every method as one population; run by run (the same generic path for every method) for two of them: DiLoCo
# under "auto" (run by run on the CPU), output sharing when asked; sync SGD as one population under "auto" (its own
# choice: one model per run; results/benchmark/sweep_arms/).
@pytest.mark.parametrize("name, mode, ran", [*((name, "population", "population") for name in sorted(METHODS)),
                                             ("diloco", "auto", "sequential"), ("sync", "auto", "population"),
                                             ("true_labels", "sequential", "sequential")])
def test_a_sweep_of_any_method_equals_its_runs_alone(tiny_dataset, name, mode, ran):
    method = METHODS[name]()
    runs = [config(seed=s, partition=p) for s, p in ((0, "iid"), (1, "dirichlet"))]
    swept = methods.sweep(method, runs, MODEL, tiny_dataset, progress=False, mode=mode)
    for got, cfg in zip(swept, runs, strict=True):
        assert got["sweep"] == {"runs": 2, "mode": ran}
        assert_same(got, methods.train(method, cfg, MODEL, tiny_dataset, progress=False))
    assert swept[0]["final"]["loss"] != swept[1]["final"]["loss"]


def test_a_sweep_refuses_runs_that_differ_in_structure(tiny_dataset):
    with pytest.raises(ValueError, match="batch_size"):
        methods.sweep(local_sgd.diloco(2), [config(), config(batch_size=4)], MODEL, tiny_dataset)


def test_sparta_at_zero_is_isolated_and_at_one_is_gossip_every_step(tiny_dataset):
    cfg = config(num_steps=4, eval_every=4)
    zero = methods.train(sparta.sparta(0.0), cfg, MODEL, tiny_dataset, progress=False)
    isolated = methods.train(network.output_sharing(exchange.none()), cfg, MODEL, tiny_dataset, progress=False)
    one = methods.train(sparta.sparta(1.0), cfg, MODEL, tiny_dataset, progress=False)
    gossiped = methods.train(gossip.gossip_averaging(1, num_neighbours=1), cfg, MODEL, tiny_dataset, progress=False)
    for a, b in ((zero, isolated), (one, gossiped)):
        jax.tree_util.tree_map(lambda x, y: np.testing.assert_allclose(x, y, rtol=1e-5, atol=1e-6),
                               a["state"].nodes.params, b["state"].nodes.params)
    assert one["bytes"]["total"] == gossiped["bytes"]["total"]  # every parameter on every edge, every step
    assert zero["bytes"]["total"] == 0


def test_sparta_on_a_ring_of_its_own_and_by_spec():
    from jaxcomm import zoo

    method = zoo.parse("sparta:0.005:2")
    assert method.name == "sparta_0.005_ring2" and method.family == "sparse_averaging"
    ring = method.config_for(config(topology="full"))
    assert (ring.topology, ring.num_neighbours) == ("ring", 2)
    assert zoo.parse("sparta:0.1").config_for(config(topology="full")).topology == "full"
    with pytest.raises(ValueError, match="fraction"):
        sparta.sparta(1.5)


def test_a_trained_run_loads_back_from_its_checkpoints_without_training(tiny_dataset, tmp_path):
    from jaxcomm.checkpoint import Checkpointer

    method = local_sgd.diloco(2)
    trained = methods.train(method, config(), MODEL, tiny_dataset, progress=False,
                            checkpointer=Checkpointer(tmp_path / "run", every=3))
    loaded = methods.load(method, config(num_steps=999), MODEL, tiny_dataset, str(tmp_path / "run"))
    assert loaded["resumed_from"] == loaded["steps_done"] == 6 and loaded["history"] == trained["history"]
    # under the lift it trained with, whatever the config leaves to the chooser (jaxcomm.checkpoint.LIFT_FILE)
    lift = json.loads((tmp_path / "run" / "lift.json").read_text())
    assert lift == {"backend": trained["built"].backend, "step_loop": trained["built"].step_loop}
    other = "loop" if lift["backend"] != "loop" else "vmap"
    (tmp_path / "run" / "lift.json").write_text(json.dumps({"backend": other, "step_loop": "scan"}))
    relifted = methods.load(method, config(num_steps=999, backend="auto", step_loop="auto"), MODEL, tiny_dataset,
                            str(tmp_path / "run"))
    assert (relifted["built"].backend, relifted["built"].step_loop) == (other, "scan")
    jax.tree_util.tree_map(np.testing.assert_array_equal, loaded["state"], trained["state"])
    with pytest.raises(FileNotFoundError, match="no checkpoint"):
        methods.load(method, config(), MODEL, tiny_dataset, str(tmp_path / "nothing"))


def test_sparta_reads_the_runs_own_graph_from_its_graph_stream(tiny_dataset):
    """Under a random topology two seeds get different graphs, each the network's of the same seed (issue 57)."""
    graphs = {}
    for seed in (0, 1):
        cfg = config(topology="random", num_neighbours=2, seed=seed)
        mine = methods.build(sparta.sparta(0.1), cfg, MODEL, tiny_dataset).init(jax.random.PRNGKey(seed))
        net = methods.build(network.output_sharing(), cfg, MODEL, tiny_dataset).init(jax.random.PRNGKey(seed))
        np.testing.assert_array_equal(mine.graph, net.adj)
        graphs[seed] = np.asarray(mine.graph)
    assert not np.array_equal(graphs[0], graphs[1]) and graphs[0].sum(1).tolist() == [2] * 4


def test_a_run_config_alone_trains_every_method(tiny_dataset):
    """The kit's RunConfig is what a method reads; output sharing takes it with its own defaults."""
    from jaxcomm import kit

    run = kit.RunConfig(num_nodes=4, num_neighbours=1, batch_size=5, num_steps=3, eval_every=3, backend="vmap",
                        step_loop="scan")
    for method in (sparta.sparta(0.5), local_sgd.diloco(2), network.output_sharing(exchange.true_labels())):
        out = methods.train(method, run, MODEL, tiny_dataset, progress=False)
        assert out["steps_done"] == 3 and out["final"]["bytes"]["total"] > 0, method.name
    assert network.NetworkConfig(**vars(run)).run == run
    with pytest.raises(TypeError, match="consume_prob"):
        kit.RunConfig(consume_prob=0.5)


def test_failures_and_augmentation_change_no_other_draw(tiny_dataset):
    """Draws by name: turning failures and augmentation on leaves every minibatch and the graph as they were."""
    plain = config(topology="random", num_neighbours=2, seed=5)
    drawn = {}
    for name, cfg in {"plain": plain, "failures": plain.replace(failure_prob=0.3), "augment": plain.replace(
            augment=True), "both": plain.replace(failure_schedule=((1, 0, 2),), augment=True)}.items():
        built = methods.build(network.output_sharing(exchange.none()), cfg, MODEL, tiny_dataset)
        state = built.init(jax.random.PRNGKey(cfg.seed))
        drawn[name] = (np.asarray(state.adj), indices_drawn(built, tiny_dataset, cfg))
    for name, (adj, indices) in drawn.items():
        np.testing.assert_array_equal(adj, drawn["plain"][0], err_msg=name)
        for a, b in zip(indices, drawn["plain"][1], strict=True):
            np.testing.assert_array_equal(a, b, err_msg=name)
    keys = streams.step_keys(jax.random.PRNGKey(0), failures=True, augment=True)
    assert len({tuple(np.asarray(k)) for k in keys}) == len(keys) == 7  # seven different keys


def test_a_sweep_varies_spartas_fraction_and_the_learning_rate_each_equal_to_its_run_alone(tiny_dataset):
    """Hyperparameters per run (issue 57 item 4): SPARTA's p over 0.001-0.05 and the nodes' learning rate as data
    of one compiled step; each run equals the run alone, and books its own bytes."""
    method = sparta.sparta(0.01)
    fractions = (0.001, 0.01, 0.05)
    runs = [config(seed=s, learning_rate=lr) for s, lr in ((0, 1e-3), (1, 3e-3), (2, 1e-2))]
    swept = methods.sweep(method, runs, MODEL, tiny_dataset, progress=False, mode="population",
                          hyper=[{"fraction": p} for p in fractions])
    for got, cfg, p in zip(swept, runs, fractions, strict=True):
        assert_same(got, methods.train(method, cfg, MODEL, tiny_dataset, progress=False, hyper={"fraction": p}))
        assert got["bytes"]["total"] == 6 * 4 * 4 * round(p * P)  # 6 steps, 4 edges, p x P float32 values
    with pytest.raises(ValueError, match="no hyperparameter 'fractoin'; did you mean 'fraction'"):
        methods.train(method, config(), MODEL, tiny_dataset, progress=False, hyper={"fractoin": 0.1})
    # synchronous SGD is on the kit: its learning rate is data of the one step too (issue 71)
    sync = data_parallel.sync_sgd()
    for got, cfg in zip(methods.sweep(sync, runs[:2], MODEL, tiny_dataset, progress=False), runs, strict=False):
        assert_same(got, methods.train(sync, cfg, MODEL, tiny_dataset, progress=False))
    own = methods.Method("own", lambda *args, **kwargs: object())  # a Built of its own: its rate may be a constant
    with pytest.raises(ValueError, match="must share learning_rate"):
        methods.sweep(own, runs[:2], MODEL, tiny_dataset, progress=False)


def test_gossip_on_the_kit_equals_an_isolated_network_that_gossips(tiny_dataset):
    """Gossip averaging written on the kit's nodes: the arithmetic and the bytes of the network's gossip_every."""
    cfg = config(num_steps=6, eval_every=3)
    kit_gossip = methods.train(gossip.gossip_averaging(2, num_neighbours=1), cfg, MODEL, tiny_dataset,
                               progress=False)
    net = methods.train(network.output_sharing(exchange.none()), cfg.replace(gossip_every=2), MODEL, tiny_dataset,
                        progress=False)
    jax.tree_util.tree_map(lambda x, y: np.testing.assert_allclose(x, y, rtol=1e-6, atol=1e-7),
                           kit_gossip["state"].nodes, net["state"].nodes)
    assert kit_gossip["bytes"]["total"] == net["bytes"]["total"] == 3 * 4 * 4 * P


def test_the_door_stops_on_each_runs_own_divergence_watch(tiny_dataset, monkeypatch):
    """Output sharing of features is not watched (eq. 2.2.3 sums squared feature differences, no progress score):
    methods.train and train_network give the driver None; a kit method the driver's 100; a number given is used."""
    watches, train = [], driver.train

    def recorded(*args, **kwargs):
        watches.append(kwargs["divergence"])
        return train(*args, **kwargs)

    monkeypatch.setattr(driver, "train", recorded)
    cfg = config(num_steps=2, eval_every=2)
    methods.train(network.output_sharing(exchange.features()), cfg, MODEL, tiny_dataset, progress=False)
    network.train_network(cfg, MODEL, tiny_dataset, exchange=exchange.features(), progress=False)
    methods.train(network.output_sharing(exchange.soft_labels()), cfg, MODEL, tiny_dataset, progress=False)
    methods.train(data_parallel.sync_sgd(), cfg, MODEL, tiny_dataset, progress=False)
    methods.train(data_parallel.sync_sgd(), cfg, MODEL, tiny_dataset, progress=False, divergence=7.0)
    assert watches == [None, None, driver.DIVERGENCE, driver.DIVERGENCE, 7.0]
    assert repr(methods.BUILTS_WATCH) == "BUILTS_WATCH"
