"""Reliability: checkpoint and resume, non-finite losses, failing nodes, bad configs (issue 8)."""

from __future__ import annotations

import dataclasses
import os
import signal

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from experiments import reliability
from experiments.reliability import report
from jaxcomm import decision, driver, exchange, network
from jaxcomm.checkpoint import Checkpointer, Checkpoints
from jaxcomm.models import MLP

MODEL = MLP(hidden=(12,), num_classes=4)


def noisy_step(state, scale):
    """A random walk driven by the state's own key: resuming must continue the same stream."""
    position, key = state
    key, sub = jax.random.split(key)
    return (position + scale * jax.random.normal(sub, position.shape), key), jnp.sum(position, axis=-1)


# --------------------------------------------------------------------------- checkpoints


def walk_system(step_loop: str, evaluate=None) -> driver.System:
    init = lambda key: (jnp.zeros((3, 2)), key)
    evaluate = evaluate or (lambda state, infos, done: {"sum": float(jnp.sum(state[0]))})
    return driver.System(init, noisy_step, evaluate, step_loop=step_loop)


@pytest.mark.parametrize("step_loop", ["scan", "dispatch"])
def test_sigterm_then_resume_equals_an_uninterrupted_run(tmp_path, step_loop):
    run = lambda system, **kw: driver.train(system, 1.0, num_steps=20, eval_every=4, key=jax.random.PRNGKey(0),
                                            progress=False, **kw)
    straight = run(walk_system(step_loop))
    plain = walk_system(step_loop).evaluate

    def kill_at_12(state, infos, done):
        if done == 12:
            os.kill(os.getpid(), signal.SIGTERM)  # a real signal through the real handler
        return plain(state, infos, done)

    with pytest.raises(driver.Interrupted) as stopped:
        run(walk_system(step_loop, kill_at_12), checkpointer=Checkpointer(tmp_path, every=100))
    # The signal only asks the run to stop: the chunk it came in (evaluation included) is kept and saved.
    assert stopped.value.steps_done == 12
    assert Checkpointer(tmp_path, every=4, resume=True).latest_step() == 12
    resumed = run(walk_system(step_loop), checkpointer=Checkpointer(tmp_path, every=4, resume=True))
    assert resumed["resumed_from"] == 12 and resumed["steps_done"] == 20
    assert [r["step"] for r in resumed["history"]] == [4, 8, 12, 16, 20]
    assert [r["sum"] for r in resumed["history"]] == [r["sum"] for r in straight["history"]]
    for a, b in zip(jax.tree_util.tree_leaves(straight["state"]), jax.tree_util.tree_leaves(resumed["state"]),
                    strict=True):
        np.testing.assert_array_equal(a, b)  # bit for bit


def test_a_finished_run_resumes_to_its_final_state_without_training(tmp_path):
    run = lambda system, **kw: driver.train(system, 1.0, num_steps=6, eval_every=3, key=jax.random.PRNGKey(1),
                                            progress=False, **kw)
    first = run(walk_system("scan"), checkpointer=Checkpointer(tmp_path, every=100))
    calls = []
    again = run(walk_system("scan", lambda *a: calls.append(a) or {}),
                checkpointer=Checkpointer(tmp_path, every=100, resume=True))
    assert calls == [] and again["resumed_from"] == 6 and again["history"] == first["history"]
    np.testing.assert_array_equal(first["state"][0], again["state"][0])


def test_checkpoint_of_another_config_is_refused(tmp_path):
    Checkpointer(tmp_path, every=1).save(3, {"a": np.zeros(2)}, {})
    with pytest.raises(ValueError, match="another configuration"):
        Checkpointer(tmp_path, every=1, resume=True).restore({"a": np.zeros(2), "b": np.zeros(1)})
    with pytest.raises(ValueError, match=r"float32\[3\]"):
        Checkpointer(tmp_path, every=1, resume=True).restore({"a": np.zeros(3, np.float32)})


def test_checkpoint_names_and_periods_are_checked(tmp_path):
    with pytest.raises(ValueError, match="every must be an integer >= 1"):
        Checkpointer(tmp_path, every=0)
    with pytest.raises(ValueError, match="run name"):
        Checkpoints(tmp_path, every=1).run("../escape")


def test_network_killed_by_sigterm_and_resumed_matches_the_uninterrupted_run():
    check = reliability.resume_check(60)
    assert check["interrupted_at"] == 20  # killed during the second evaluation: that chunk is finished and kept
    assert check["history_identical"] and check["state_identical"] and check["value"]


# --------------------------------------------------------------------------- non-finite losses


def test_non_finite_loss_names_node_and_step_and_keeps_the_last_good_checkpoint(tmp_path):
    def step(state, _):
        count, _key = state
        loss = jnp.where((count == 6) & (jnp.arange(4) == 2), jnp.nan, jnp.ones(4))
        return (count + 1, _key), loss

    system = driver.System(lambda key: (jnp.int32(0), jnp.zeros(2)), step, lambda *a: {}, losses=lambda infos: infos)
    with pytest.raises(driver.NonFiniteLoss, match="node 2 at step 6") as error:
        driver.train(system, None, num_steps=12, eval_every=4, key=jax.random.PRNGKey(0), progress=False,
                     checkpointer=Checkpointer(tmp_path, every=100))
    assert (error.value.step, error.value.node) == (6, 2) and np.isnan(error.value.value)
    step_saved, (state, _), _ = Checkpointer(tmp_path, every=1, resume=True).restore(
        ((jnp.int32(0), jnp.zeros(2)), None))
    assert step_saved == 4 and int(state[0]) == 4  # the state before the bad chunk


def test_first_bad():
    assert driver.first_bad(np.ones((3, 2))) is None
    assert driver.first_bad(np.array([1.0, np.inf, np.nan]))[:2] == (1, None)
    losses = np.ones((3, 4))
    losses[2, 1] = losses[1, 3] = np.nan
    assert driver.first_bad(losses)[:2] == (1, 3)
    losses[0, 2] = -7.0
    assert driver.first_bad(losses, bound=5.0)[:2] == (0, 2)  # the magnitude counts


@pytest.mark.parametrize("learning_rate", [1e38, 1e6])
def test_a_diverging_network_stops_with_the_node_and_step(tiny_dataset, learning_rate):
    """lr = 1e38 overflows to NaN; lr = 1e6 stays finite but its loss passes 100x its first step's."""
    config = network.NetworkConfig(num_nodes=3, num_neighbours=1, batch_size=5, learning_rate=learning_rate,
                                   num_steps=40, eval_every=10)
    with pytest.raises(driver.LossStop, match=r"node \d at step \d+"):
        network.train_network(config, MODEL, tiny_dataset, progress=False)


def test_only_watched_exchanges_stop_at_a_hundred_times_the_first_loss(tiny_dataset):
    """An exchange whose consumed loss is scaled past 100x the first step's stops the run when watched (a
    cross-entropy's scale), and runs to its end unwatched (the features' regression, whose scale is theirs)."""
    def loud(watched):
        base = exchange.true_labels()
        loss = lambda logits, features, received: 1e6 * (1.0 + base.loss(logits, features, received))  # noqa: E731
        return base._replace(name="loud", loss=loss, watched=watched)

    config = network.NetworkConfig(num_nodes=3, num_neighbours=2, batch_size=5, consume_prob=1.0,
                                   broadcast_prob=1.0, num_steps=12, eval_every=6)
    with pytest.raises(driver.Diverged):
        network.train_network(config, MODEL, tiny_dataset, exchange=loud(True), progress=False)
    out = network.train_network(config, MODEL, tiny_dataset, exchange=loud(False), progress=False)
    assert out["history"][-1]["step"] == 12
    assert not exchange.features().watched and exchange.true_labels().watched


# --------------------------------------------------------------------------- failing nodes


def build(dataset, **overrides):
    config = network.NetworkConfig(num_nodes=4, num_neighbours=3, batch_size=5, inbox_capacity=3, consume_prob=0.5,
                                   broadcast_prob=0.6, num_steps=6, eval_every=3, **overrides)
    net = network.make_network(config, MODEL, image_shape=dataset.train.images.shape[1:], num_classes=4)
    return net, network.network_data(dataset, config)


def test_a_scheduled_outage_freezes_the_node_and_cuts_it_off(tiny_dataset):
    net, data = build(tiny_dataset, failure_schedule=((1, 2, 7),))
    state, step = net.init(jax.random.PRNGKey(0)), jax.jit(net.step)
    for t in range(10):
        before = state
        state, info = step(state, data)
        down = 2 <= t < 7
        assert bool(info.alive[1]) == (not down) and bool(info.alive[np.array([0, 2, 3])].all())
        frozen = all(np.array_equal(a[1], b[1]) for a, b in zip(jax.tree_util.tree_leaves(before.nodes),
                                                                  jax.tree_util.tree_leaves(state.nodes),
                                                                  strict=True))
        assert frozen == down, t  # a down node neither trains nor changes its optimiser state
        if down:
            assert not bool(info.consumed[1]) and not bool(info.broadcast[1])
            c0, c1 = before.inbox.counters, state.inbox.counters
            assert int(c1.received[1]) == int(c0.received[1]) and int(c1.sent[1]) == int(c0.sent[1])
            assert int(c1.fallbacks[1]) == int(c0.fallbacks[1])


@pytest.mark.parametrize("policy", network.INBOX_ON_FAILURE)
def test_random_failures_keep_the_inbox_counters_adding_up(tiny_dataset, policy):
    net, data = build(tiny_dataset, failure_prob=0.3, failure_steps=3.0, inbox_on_failure=policy)
    state, step, alive = net.init(jax.random.PRNGKey(2)), jax.jit(net.step), []
    for _ in range(60):
        state, info = step(state, data)
        alive.append(np.asarray(info.alive))
    c = state.inbox.counters
    np.testing.assert_array_equal(c.received, c.consumed + c.dropped + state.inbox.count)
    down = 1 - np.mean(alive)
    assert 0.2 < down < 0.7  # stationary q D / (1 + q D) = 0.47, from 60 steps x 4 nodes
    if policy == "lose":
        assert int(np.sum(c.dropped)) > 0


def test_collective_decision_asks_only_reachable_nodes():
    probs = np.array([[[0.9, 0.1]], [[0.2, 0.8]], [[0.3, 0.7]]], np.float32)
    labels = np.array([0])
    everyone = network.evaluate(probs, labels)
    only_first = network.evaluate(probs, labels, reachable=np.array([True, False, False]))
    assert everyone["collective_accuracy"]["mean"] == 0.0 and only_first["collective_accuracy"]["mean"] == 100.0
    assert only_first["reachable"] == 1 and only_first["avg_accuracy"] == everyone["avg_accuracy"]
    expected = decision.collective_accuracy(probs, labels, weighting="vote", mask=np.array([True, False, True]))
    got = network.evaluate(probs, labels, reachable=np.array([True, False, True]))["collective_accuracy"]["vote"]
    assert got == pytest.approx(100 * float(expected))
    nobody = network.evaluate(probs, labels, reachable=np.zeros(3, bool))  # every node down: no average either
    assert nobody["avg_accuracy"] is None and set(nobody["collective_accuracy"].values()) == {None}
    assert nobody["reachable"] == 0 and nobody["node_accuracies"] == everyone["node_accuracies"]


# --------------------------------------------------------------------------- bad configs


CASES = reliability.bad_config_cases()


@pytest.mark.parametrize("rule, field, build_config", CASES, ids=[case[0] for case in CASES])
def test_bad_config_is_rejected_naming_the_field(rule, field, build_config):
    with pytest.raises(ValueError, match=field) as error:
        build_config()
    assert "must be" in str(error.value) and "got" in str(error.value)


def test_nodes_must_divide_over_devices_for_the_sharded_backend_when_built_not_when_configured(monkeypatch):
    def started():
        raise AssertionError("building a config started the JAX backend")

    monkeypatch.setattr(jax, "device_count", started)
    config = network.NetworkConfig(num_nodes=12, num_neighbours=1, backend="sharded")
    monkeypatch.setattr(jax, "device_count", lambda: 8)
    with pytest.raises(ValueError, match="num_nodes must be a multiple of the 8 devices"):
        network.make_network(config, MLP(hidden=(4,)), image_shape=(8, 8, 1), num_classes=4)
    config.replace(num_nodes=16).check_devices()


def test_every_rule_is_counted():
    counted = reliability.count_rejected(CASES)
    assert counted["value"] == counted["cases"] == len(CASES) and counted["failures"] == []
    assert reliability.count_rejected([("accepted", "x", lambda: None)])["failures"] == ["accepted: accepted"]


def test_the_failure_grid_reads_directions_from_intervals_over_seeds():
    def level(fraction, avgs10, avgs20):
        per_seed = {n: [{"seed": s, "avg_accuracy": a, "collective_accuracy": a + 5} for s, a in enumerate(avgs)]
                    for n, avgs in (("10", avgs10), ("20", avgs20))}
        return {"failure_fraction": fraction, "failure_prob": 0.0, "per_seed": per_seed,
                "alive_fraction": {"10": 1 - fraction, "20": 1 - fraction},
                **{key: {n: float(np.mean([p[key] for p in per_seed[n]])) for n in per_seed}
                   for key in ("avg_accuracy", "collective_accuracy")}}

    rows = {"failure_0": level(0.0, (50, 51, 52), (48, 48, 48)),
            "failure_30": level(0.3, (47, 49, 48), (47, 46, 48))}
    lines = reliability.paired_markdown(rows, ["10", "20"])
    # N=10: -3, -2, -4 -> mean -3, sd 1, half-width t(0.975, 2) / sqrt(3) = 2.48; t = 5.20 and with 2 degrees of
    # freedom p = 1 - t / sqrt(t^2 + 2) = 0.035, Holm over the table's 6 tests: 6 x 0.035 = 0.211, not read
    assert "| N=10: 30% down vs none | avg | -3.0 | [-5.5, -0.5] | 0.035 | 0.211 | no |" in lines
    # N=20: -1, -2, 0 -> mean -1 [-3.5, +1.5], t = 1.73, p = 0.225; its drop minus N=10's: 2, 0, 4 -> +2.0, sd 2
    assert "| N=20: 30% down vs none | avg | -1.0 | [-3.5, +1.5] | 0.225 | 0.902 | no |" in lines
    assert "| 30% down: N=20's change vs N=10's | avg | +2.0 | [-3.0, +7.0] | 0.225 | 0.902 | no |" in lines
    # the table shows the spread over seeds beside the means
    table = reliability.table_markdown({
        "rows": {"resume_identical": {"value": True, "interrupted_at": 1, "history_identical": True,
                                      "state_identical": True},
                 "bad_configs_rejected": {"value": 1, "cases": 1, "failures": []}, **rows},
        "config": dataclasses.asdict(reliability.ReliabilityConfig(seeds=3)),
        "command": "c", "preset": "cpu", "wall_seconds": 1.0, "device": "cpu", "git_commit": "x"})
    assert "| failure_0 | 0% | 0.00000 | 0.0%, 0.0% | 51.0 ± 1.0 | 56.0 ± 1.0 | 48.0 ± 0.0 | 53.0 ± 0.0 |" in table
    assert "## Paired comparisons (seeds 0, 1, 2" in table
    # one seed: no intervals
    one = {name: {**row, "per_seed": {n: v[:1] for n, v in row["per_seed"].items()}} for name, row in rows.items()}
    assert reliability.paired_markdown(one, ["10", "20"]) == []


def test_what_failures_cost_beyond_the_lost_steps_is_read_against_the_failure_free_curve():
    def curve(fraction, seed, alive, avgs):
        return {"nodes": 10, "failure_fraction": fraction, "seed": seed, "alive_fraction": alive,
                "steps": [100, 200], "avg_accuracy": avgs}

    curves = [curve(0.0, 0, 1.0, [40.0, 50.0]), curve(0.0, 1, 1.0, [30.0, 50.0]),
              curve(0.3, 0, 0.75, [35.0, 44.0]), curve(0.3, 1, 0.5, [25.0, 33.0])]
    # seed 0 trained 150 of 200 steps: the failure-free curve there is 45, so 44 - 45 = -1; seed 1 trained 100:
    # 33 - 30 = +3. Mean +1, sd 2.83, half-width 12.71 x 2.83 / sqrt(2) = 25.4; t = 0.5 on 1 degree: p = 0.705
    (cell,) = report.lost_steps(curves, 200)
    assert (cell["seeds"], cell["steps_trained"], cell["final"]) == ([0, 1], [150.0, 100.0], [44.0, 33.0])
    assert np.allclose(cell["reference"], [45.0, 30.0])
    lines = report.lost_steps_markdown(curves, 200)
    assert "| N=10, 30% down vs none at 125 of 200 steps | avg | +1.0 | [-24.4, +26.4] | 0.705 | 0.705 | no |" in lines
    assert report.lost_steps_markdown(curves[:3], 200) == []  # one seed: no interval
