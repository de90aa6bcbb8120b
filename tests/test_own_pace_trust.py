"""Bytes at their own pace come from what happened (issue 72 item 1): a method that meets in rounds books the rounds
that closed, with their members; a method that waits for nothing books every period of each node's own steps; "per
node step" divides by the nodes' own steps and ``per_node_tick`` by ticks."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import jax
import numpy as np
import pytest

from jaxcomm import clock, gossip, kit, ledger, local_sgd, methods
from jaxcomm.models import MLP

MODEL = MLP(hidden=(8,), num_classes=4)
STRAGGLER = clock.Cluster(clock.Compute(1.0, speed=(1.0, 1.0, 3.0)), clock.INSTANT)
TICKS = 12


def _fedbuff(local_steps: int, buffer: int):
    spec = importlib.util.spec_from_file_location("_fedbuff", Path(__file__).parent / "test_research_async.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.fedbuff(local_steps, buffer)


def _run(method, dataset):
    config = kit.RunConfig(num_nodes=3, batch_size=8, num_steps=TICKS, eval_every=TICKS, backend="vmap",
                           step_loop="scan", learning_rate=0.05)
    return methods.train(method, config, MODEL, dataset, progress=False, cluster=STRAGGLER, own_pace=True)


@pytest.mark.parametrize("name, method, every", [
    ("diloco", lambda: local_sgd.diloco(2), 2), ("diloco_quorum", lambda: local_sgd.diloco(2, quorum=2), 2),
    ("fedbuff", lambda: _fedbuff(2, 2), 2)])
def test_a_method_in_rounds_books_the_rounds_that_closed_with_their_members(name, method, every, tiny_dataset):
    out = _run(method(), tiny_dataset)
    timeline, record = out["timeline"], out["final"]["bytes"]
    (round_,) = out["built"].traffic
    members = timeline.members[timeline.closes].sum(axis=1)  # [R]: each closed round's members
    # the straggler holds synchronous rounds back, and a quorum closes rounds without it: either way fewer bytes
    # than a round of every node every H ticks
    assert 0 < len(members) <= TICKS // every and (len(members) < TICKS // every or members.min() < 3)
    per_member = {"allreduce": lambda k: 2 * (k - 1), "allgather": lambda k: k * (k - 1)}[round_.pattern]
    assert record["total"] == pytest.approx(sum(per_member(int(k)) * round_.nbytes for k in members))
    node_steps = int(timeline.steps[-1].sum())
    assert record["per_node_step"] == pytest.approx(record["total"] / node_steps)
    assert record["per_node_tick"] == pytest.approx(record["total"] / (3 * TICKS))
    assert record["total"] < ledger.book(out["built"].traffic, 3, TICKS).total


def test_a_method_that_waits_for_nothing_books_each_nodes_own_periods(tiny_dataset):
    out = _run(gossip.random_peer_gossip(2), tiny_dataset)
    (round_,) = out["built"].traffic
    steps = out["timeline"].steps[-1]  # [3] each node's own steps: the straggler took a third of the others'
    assert steps[2] < steps[0]
    want = sum(int(s) // 2 for s in steps) * round_.sent_per_round(3) / 3
    assert out["final"]["bytes"]["total"] == pytest.approx(want)
    lockstep = ledger.book(out["built"].traffic, 3, TICKS).total
    assert out["final"]["bytes"]["total"] < lockstep  # booking every tick for every node would overcount


def test_lockstep_records_keep_their_shape(tiny_dataset):
    config = kit.RunConfig(num_nodes=3, batch_size=8, num_steps=4, eval_every=4, backend="vmap", step_loop="scan")
    record = methods.train(local_sgd.diloco(2), config, MODEL, tiny_dataset, progress=False)["final"]["bytes"]
    assert "per_node_tick" not in record and record["per_node_step"] == pytest.approx(record["total"] / 12)
    assert np.isfinite(record["total"])


def test_a_horizon_in_virtual_seconds_takes_every_tick_at_or_before_it(tiny_dataset):
    config = kit.RunConfig(num_nodes=3, batch_size=8, num_steps=5, eval_every=4, backend="vmap", step_loop="scan")
    for method in (local_sgd.diloco(2, quorum=2), gossip.random_peer_gossip(2)):
        out = methods.train(method, config, MODEL, tiny_dataset, progress=False, cluster=STRAGGLER, own_pace=True,
                            until_seconds=7.5)
        times = out["timeline"].time
        assert out["steps_done"] == len(times) and times[-1] <= 7.5  # never past the horizon
        longer = methods.ticks_until(out["built"], STRAGGLER, True, 7.5 + 1e-9)
        assert longer == out["steps_done"]  # the next tick is after it
        seconds = [r["clock"]["seconds"] for r in out["history"]]
        assert seconds == sorted(seconds) and seconds[-1] <= 7.5
    with pytest.raises(ValueError, match="until_seconds"):
        methods.train(local_sgd.diloco(2), config, MODEL, tiny_dataset, progress=False, until_seconds=3.0)
    with pytest.raises(ValueError, match="until_seconds"):
        methods.train(local_sgd.diloco(2), config, MODEL, tiny_dataset, progress=False, cluster=STRAGGLER,
                      own_pace=True, until_seconds=-1.0)


def test_a_run_at_its_own_pace_loads_back_with_its_cluster(tiny_dataset, tmp_path):
    from jaxcomm.checkpoint import Checkpointer  # noqa: PLC0415

    config = kit.RunConfig(num_nodes=3, batch_size=8, num_steps=6, eval_every=3, backend="vmap", step_loop="scan")
    method = local_sgd.diloco(2, quorum=2)
    trained = methods.train(method, config, MODEL, tiny_dataset, progress=False, cluster=STRAGGLER, own_pace=True,
                            checkpointer=Checkpointer(str(tmp_path / "run"), every=3))
    loaded = methods.load(method, config, MODEL, tiny_dataset, str(tmp_path / "run"), cluster=STRAGGLER,
                          own_pace=True)
    for a, b in zip(jax.tree.leaves(trained["state"]), jax.tree.leaves(loaded["state"]), strict=True):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
    plain = methods.load(method, config, MODEL, tiny_dataset, str(tmp_path / "run"))  # the rows are not state
    for a, b in zip(jax.tree.leaves(trained["state"].nodes), jax.tree.leaves(plain["state"].nodes), strict=True):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
    assert trained["state"].pace is not None and plain["state"].pace is None


def test_seconds_you_can_see_in_the_bar_and_a_plot(tiny_dataset, tmp_path):
    from jaxcomm import classifier  # noqa: PLC0415
    from jaxcomm.harness import report  # noqa: PLC0415

    assert classifier.progress_postfix({"avg_accuracy": 50.0, "pace": {"seconds": 1.5}}) == {"virtual": "1.5s",
                                                                                             "avg": "50.0"}
    config = kit.RunConfig(num_nodes=3, batch_size=8, num_steps=6, eval_every=3, backend="vmap", step_loop="scan")
    runs = {m.name: methods.train(m, config, MODEL, tiny_dataset, progress=False, cluster=STRAGGLER, own_pace=True)
            for m in (local_sgd.diloco(2), gossip.random_peer_gossip(2))}
    drawn = report.plot_accuracy_in_seconds({n: r["history"] for n, r in runs.items()}, tmp_path / "seconds.png")
    assert (tmp_path / "seconds.png").stat().st_size > 0
    for name, run in runs.items():
        assert drawn[name]["seconds"] == [r["pace"]["seconds"] for r in run["history"]]
        assert drawn[name]["node_average"] == [r["avg_accuracy"] for r in run["history"]]


@pytest.mark.parametrize("latency", [0.3, 1e3], ids=["slow", "never_arrives"])
def test_messages_in_flight_at_their_own_pace_are_counted_as_such(latency, tiny_dataset):
    # at its own pace a message lands in its reader's inbox when sent but is read only once it has arrived: the
    # counters keep sent = received + in flight, and received = consumed + pending + dropped, whatever the link
    from jaxcomm import exchange, network  # noqa: PLC0415

    link = clock.Link(float("inf"), latency, "slow")
    cluster = clock.Cluster(clock.Compute(0.1, speed=(1.0, 1.0, 3.0)), link)
    config = network.NetworkConfig(num_nodes=3, num_neighbours=2, topology="full", batch_size=8, num_steps=TICKS,
                                   eval_every=TICKS, backend="vmap", step_loop="scan", content="true_labels")
    out = methods.train(network.output_sharing(exchange.true_labels()), config, MODEL, tiny_dataset,
                        progress=False, cluster=cluster, own_pace=True)
    c = out["final"]["counters"]
    assert c["sent"] > 0 and c["sent"] == c["received"] + c["in_flight"]
    assert c["received"] == c["consumed"] + c["pending"] + c["dropped"]
    if latency == 1e3:  # nothing arrives within the run: every copy that was not dropped is still on its way
        assert c["consumed"] == 0 and c["in_flight"] == c["sent"] - c["dropped"]
    else:
        assert 0 < c["in_flight"] < c["sent"]


def test_a_sweep_to_a_horizon_in_seconds_is_its_runs_alone(tiny_dataset):
    # jittered steps: seeds 0 and 2 reach 6 s after 6 and 4 ticks, each run as train() trains it
    jittered = clock.Cluster(clock.Compute(1.0, speed=(1.0, 1.0, 3.0), jitter=0.3), clock.INSTANT)
    config = kit.RunConfig(num_nodes=3, batch_size=8, num_steps=5, eval_every=4, backend="vmap", step_loop="scan")
    configs = [config, config.replace(seed=2)]
    method = local_sgd.diloco(2, quorum=2)
    swept = methods.sweep(method, configs, MODEL, tiny_dataset, progress=False, cluster=jittered, own_pace=True,
                          until_seconds=6.0)
    assert len({run["steps_done"] for run in swept}) == 2  # two horizons in ticks
    for run, c in zip(swept, configs, strict=True):
        alone = methods.train(method, c, MODEL, tiny_dataset, progress=False, cluster=jittered, own_pace=True,
                              until_seconds=6.0)
        assert run["steps_done"] == alone["steps_done"] and run["timeline"].time[-1] <= 6.0
        assert run["sweep"] == {"runs": 2, "mode": "sequential"}
        for a, b in zip(jax.tree.leaves(run["state"].extra), jax.tree.leaves(alone["state"].extra), strict=True):
            np.testing.assert_array_equal(a, b)
