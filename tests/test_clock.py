"""The virtual clock: a cluster as a value, every method's traffic in seconds, messages in flight."""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxcomm import (
    clock,
    codistillation,
    compression,
    data_parallel,
    exchange,
    gossip,
    inbox,
    ledger,
    local_sgd,
    methods,
    network,
    powersgd,
    sparta,
)
from jaxcomm.models import MLP

MODEL = MLP(hidden=(12,), num_classes=4)
P = 8 * 8 * 12 + 12 + 12 * 4 + 4  # the MLP's parameters on 8 x 8 images
# 1 MB/s and 10 ms: transfers of a few kB take milliseconds; a step takes 0.1 s
LINK = clock.Link(1e6, 0.01, "test")
CLUSTER = clock.Cluster(clock.Compute(0.1), LINK)


def config(**kw) -> network.NetworkConfig:
    base = dict(num_nodes=4, num_neighbours=1, batch_size=5, num_steps=6, eval_every=3, backend="vmap",
                step_loop="scan", seed=0)
    return network.NetworkConfig(**(base | kw))


@pytest.mark.parametrize("name", ["sync", "top_k", "powersgd", "diloco", "codistill", "sparta", "gossip",
                                  "true_labels"])
def test_every_method_reads_hand_computed_virtual_seconds(tiny_dataset, name):
    """4 nodes, 6 steps of 0.1 s, a 1 MB/s link with 10 ms latency."""
    steps, step = 6, 0.1
    method = {"sync": data_parallel.sync_sgd(),
              "top_k": data_parallel.sync_sgd(compression.make("top_k", fraction=0.1, per_layer=False)),
              "powersgd": data_parallel.sync_sgd(powersgd.power_sgd(1)), "diloco": local_sgd.diloco(4),
              "codistill": codistillation.codistillation(2), "sparta": sparta.sparta(0.25),
              "gossip": gossip.gossip_averaging(2, num_neighbours=1),
              "true_labels": network.output_sharing(exchange.true_labels())}[name]
    out = methods.train(method, config(), MODEL, tiny_dataset, progress=False, cluster=CLUSTER)
    clocks = [r["clock"] for r in out["history"]]
    assert [c["cluster"] for c in clocks] == ["test", "test"]
    got = clocks[-1]["seconds"]
    if name == "sync":  # every step: 2 (N-1) = 6 hops of 10 ms + a quarter of 4P bytes
        assert got == pytest.approx(steps * (step + 6 * (0.01 + P / 1e6)))
    elif name == "top_k":  # every step an all-gather: 3 hops of 10 ms + k values and indices
        k = compression.num_kept(0.1, P)
        assert got == pytest.approx(steps * (step + 3 * (0.01 + 8 * k / 1e6)))
    elif name == "powersgd":  # two all-reduces (P, then Q) of the factors each step
        mb = out["built"].message_bytes
        assert got == pytest.approx(steps * (step + 6 * (2 * 0.01 + mb / 4 / 1e6)))
    elif name == "diloco":  # one round (after step 4): one all-reduce of the parameters
        assert got == pytest.approx(steps * step + 6 * (0.01 + P / 1e6))
    elif name == "codistill":  # 3 refreshes in the background, each 3 hops of a 4P checkpoint: within 2 steps
        assert 3 * (0.01 + 4 * P / 1e6) < 2 * step and got == pytest.approx(steps * step)
    elif name == "sparta":  # every step, a quarter of the parameters to the one neighbour
        assert got == pytest.approx(steps * (step + 0.01 + 4 * round(0.25 * P) / 1e6))
    elif name == "gossip":  # after steps 2, 4, 6: the model to the one neighbour
        assert got == pytest.approx(steps * step + 3 * (0.01 + 4 * P / 1e6))
    elif name == "true_labels":  # asynchronous: the median node's compute (its uplink keeps up)
        assert got == pytest.approx(steps * step) and clocks[-1]["communication"] == 0
    assert clocks[0]["seconds"] < got
    assert clocks[-1]["compute"] == pytest.approx(steps * step)


def test_a_straggler_slows_exactly_the_methods_that_wait_for_it(tiny_dataset):
    slow = CLUSTER._replace(compute=clock.Compute(0.1, speed=(1.0, 3.0, 1.0, 1.0)))
    for method, waits in ((data_parallel.sync_sgd(), True), (local_sgd.diloco(3), True),
                          (network.output_sharing(exchange.true_labels()), False)):
        built = methods.build(method, config(), MODEL, tiny_dataset)
        state = built.init(jax.random.PRNGKey(0))
        fast = clock.reading(CLUSTER, built, state, 6)
        late = clock.reading(slow, built, state, 6)
        assert late["compute"] == pytest.approx(6 * (0.3 if waits else 0.1)), method.name
        assert late["seconds"] - late["compute"] == pytest.approx(fast["seconds"] - fast["compute"])


def test_a_background_round_costs_what_it_takes_beyond_its_steps():
    r = ledger.Round("allgather", 20_000.0, every=2, blocking=False)  # 3 hops of 0.01 + 0.02 s = 0.09 s
    assert clock.seconds(CLUSTER, (r,), 4, 6)["seconds"] == pytest.approx(0.6)
    slow = CLUSTER._replace(link=clock.Link(1e5, 0.01))  # 3 hops of 0.01 + 0.2 s = 0.63 s > 2 steps
    assert clock.seconds(slow, (r,), 4, 6)["seconds"] == pytest.approx(0.6 + 3 * (0.63 - 0.2))


def test_a_slow_uplink_holds_back_the_asynchronous_node_it_belongs_to():
    traffic = ()
    cluster = clock.Cluster(clock.Compute(0.1), clock.Link(1000.0, 0.0))
    reading = clock.seconds(cluster, traffic, 3, 10, uplink_bytes=np.array([500.0, 5000.0, 3000.0]))
    assert reading["seconds"] == pytest.approx(3.0)  # the median node: 3000 B at 1 kB/s
    assert reading["compute"] == pytest.approx(1.0)


def test_a_ring_allreduce_takes_the_slowest_link_of_the_ring():
    edges = {(2, 3): clock.Link(1e5, 0.05)}
    cluster = clock.Cluster(clock.Compute(0.1), LINK, edges=edges)
    r = ledger.Round("allreduce", 4000.0)
    assert clock.round_seconds(r, cluster, 4) == pytest.approx(6 * (0.05 + 1000 / 1e5))
    assert clock.round_seconds(r, cluster, 1) == 0.0
    assert clock.round_seconds(r, clock.Cluster(clock.Compute(0.1), clock.INSTANT), 4) == 0.0


def test_stragglers_and_flops_make_compute():
    speed = clock.stragglers(10, count=2, slowdown=4.0, seed=1)
    assert sorted(speed) == [1.0] * 8 + [4.0] * 2 and speed == clock.stragglers(10, count=2, slowdown=4.0, seed=1)
    assert clock.from_flops(2e9, 1e12, utilisation=0.5).seconds_per_step == pytest.approx(4e-3)
    with pytest.raises(ValueError, match="3 factors for 4 nodes"):
        clock.Compute(0.1, speed=(1.0, 1.0, 1.0)).step_seconds(4)
    assert set(clock.LINKS) == {"instant", "datacenter", "lan_1g", "wan_100m"}
    assert all(link.source for link in clock.LINKS.values())


def test_delivery_steps_count_the_receivers_steps():
    adj = np.array([[0, 1, 1], [1, 0, 0], [0, 0, 0]], bool)
    cluster = clock.Cluster(clock.Compute(0.1, speed=(1.0, 1.0, 2.0)), clock.Link(1e4, 0.02))
    # node 0 sends 2 copies of 1 kB: 0.02 + 0.2 s; node 1 one copy: 0.12 s
    seconds = clock.delivery_seconds(cluster, adj, 1000.0)
    np.testing.assert_allclose(seconds, [[0, 0.22, 0.22], [0.12, 0, 0], [0, 0, 0]])
    np.testing.assert_array_equal(clock.delivery_steps(cluster, adj, 1000.0), [[0, 3, 2], [2, 0, 0], [0, 0, 0]])
    instant = clock.Cluster(clock.Compute(0.1), clock.INSTANT)
    assert not clock.delivery_steps(instant, adj, 1000.0).any()


def _message(n: int, step: int) -> inbox.Message:
    return inbox.Message(jnp.full((n, 1), step, jnp.int32), jnp.zeros((n, 1, 1)), jnp.arange(n, dtype=jnp.int32),
                         jnp.full((n,), step, jnp.int32))


def test_a_message_in_flight_arrives_after_its_edges_delay_in_sender_order():
    """Reference: a copy sent at step s along (i, j) lands in j's inbox at step s + delays[i, j]."""
    n, steps = 3, 7
    delays = np.array([[0, 2, 1], [0, 0, 3], [1, 0, 0]], np.int32)
    rng = np.random.default_rng(0)
    box = inbox.init(n, 50, 1, 1)
    transit = inbox.transit_init(delays, 1, 1)
    expected = [[] for _ in range(n)]
    schedule = {}
    for t in range(steps):
        active = rng.random((n, n)) < 0.6
        np.fill_diagonal(active, False)
        for i, j in zip(*np.nonzero(active), strict=True):
            schedule.setdefault(t + delays[i, j], []).append((i, j, t))
        for i, j, s in sorted(schedule.get(t, [])):  # arrivals this step, in sender order
            expected[j].append((i, s))
        box, transit = inbox.send(box, transit, _message(n, t), jnp.asarray(active), jnp.int32(t), delays)
        c = box.counters
        assert int(c.sent.sum()) == int(c.received.sum()) + int(transit.in_flight.sum())
    for j in range(n):
        got = [(int(box.messages.sender[j, k]), int(box.messages.sent_step[j, k])) for k in range(int(box.count[j]))]
        assert got == expected[j]
        assert [int(box.messages.indices[j, k, 0]) for k in range(int(box.count[j]))] == [s for _, s in expected[j]]
    pending = sum(1 for arrive, copies in schedule.items() if arrive >= steps for _ in copies)
    assert int(transit.in_flight.sum()) == pending > 0


def test_with_no_delay_sending_is_pushing(tiny_dataset):
    """Bit for bit: a network built for an instant cluster trains exactly as one built for none."""
    cfg = config(content="true_labels", num_steps=8, eval_every=4, consume_prob=0.7, broadcast_prob=0.8)
    today = network.train_network(cfg, MODEL, tiny_dataset, progress=False)
    instant = methods.train(network.output_sharing(), cfg, MODEL, tiny_dataset, progress=False,
                            cluster=clock.Cluster(clock.Compute(0.1), clock.INSTANT))
    assert not instant["built"].delays.any()
    jax.tree_util.tree_map(np.testing.assert_array_equal, instant["state"].nodes, today["state"].nodes)
    jax.tree_util.tree_map(np.testing.assert_array_equal, instant["state"].inbox, today["state"].inbox)
    counters = instant["final"]["counters"]
    assert {k: v for k, v in counters.items() if k not in ("in_flight", "mean_age")} == today["final"]["counters"]
    assert counters["in_flight"] == 0


def test_a_slower_link_delivers_later_and_messages_age(tiny_dataset):
    # every node sends one message and consumes one every step: with no delay each is read at the next step
    cfg = config(content="true_labels", num_steps=16, eval_every=16, consume_prob=1.0, broadcast_prob=1.0)
    ages, in_flight = {}, {}
    for name, bandwidth in (("fast", math.inf), ("slow", 320.0)):  # slow: a 333-byte message takes 1.04 s
        cluster = clock.Cluster(clock.Compute(0.1), clock.Link(bandwidth, 0.0, name))
        out = methods.train(network.output_sharing(), cfg, MODEL, tiny_dataset, progress=False, cluster=cluster)
        c = out["final"]["counters"]
        assert c["sent"] == c["received"] + c["in_flight"]
        assert c["received"] == c["consumed"] + c["dropped"] + c["pending"]
        ages[name], in_flight[name] = c["mean_age"], c["in_flight"]
        if name == "slow":
            assert (out["built"].delays[~np.eye(4, dtype=bool)] == 11).all()
    assert in_flight["fast"] == 0 and in_flight["slow"] == 4 * 11  # sent at steps 5-15, still on the way
    assert ages == {"fast": 1.0, "slow": 12.0}  # 11 more steps on the way


def test_a_sweep_with_messages_in_flight_equals_its_runs_alone(tiny_dataset):
    cluster = clock.Cluster(clock.Compute(0.1), clock.Link(3000.0, 0.0))
    method = network.output_sharing(exchange.true_labels())
    runs = [config(seed=s, num_steps=8, eval_every=4) for s in (0, 1)]
    swept = methods.sweep(method, runs, MODEL, tiny_dataset, progress=False, mode="population", cluster=cluster)
    for got, cfg in zip(swept, runs, strict=True):
        alone = methods.train(method, cfg, MODEL, tiny_dataset, progress=False, cluster=cluster)
        assert got["final"]["counters"] == alone["final"]["counters"]
        assert got["final"]["clock"] == alone["final"]["clock"]
        jax.tree_util.tree_map(lambda x, y: np.testing.assert_allclose(x, y, rtol=1e-5, atol=1e-6),
                               got["state"].nodes.params, alone["state"].nodes.params)
    assert swept[0]["built"].delays.max() > 0


def test_a_method_without_traffic_is_refused_by_name():
    class Mine:
        config = config()

    with pytest.raises(TypeError, match="Mine states no traffic"):
        clock.reading(CLUSTER, Mine(), None, 3)


def test_a_synchronous_run_retimed_from_its_ledger_reads_as_a_run_under_the_cluster(tiny_dataset):
    for method in (data_parallel.sync_sgd(), local_sgd.diloco(2)):
        plain = methods.train(method, config(), MODEL, tiny_dataset, progress=False)
        timed = methods.train(method, config(), MODEL, tiny_dataset, progress=False, cluster=CLUSTER)
        assert clock.retime(plain, CLUSTER) == [r["clock"] for r in timed["history"]]
        assert clock.seconds_to_target(timed["history"], -1.0, lambda r: r["avg_accuracy"]) == pytest.approx(
            3 * 0.1 + (3 * 6 * (0.01 + P / 1e6) if method.name.startswith("sync") else 6 * (0.01 + P / 1e6)))


def test_messages_in_flight_resume_from_a_checkpoint_bit_for_bit(tiny_dataset, tmp_path, monkeypatch):
    from jaxcomm import driver
    from jaxcomm.checkpoint import Checkpointer

    cluster = clock.Cluster(clock.Compute(0.1), clock.Link(1000.0, 0.0))  # a 333-byte message: 4 steps in flight
    method = network.output_sharing(exchange.true_labels())
    cfg = config(num_steps=12, eval_every=4, broadcast_prob=1.0)
    whole = methods.train(method, cfg, MODEL, tiny_dataset, progress=False, cluster=cluster)
    reading = clock.reading

    def interrupt_at_8(cluster, built, state, steps_done):  # Ctrl-C during the evaluation after step 8
        if steps_done == 8:
            raise KeyboardInterrupt
        return reading(cluster, built, state, steps_done)

    monkeypatch.setattr(clock, "reading", interrupt_at_8)
    with pytest.raises(driver.Interrupted, match="after 4 steps"):
        methods.train(method, cfg, MODEL, tiny_dataset, progress=False, cluster=cluster,
                      checkpointer=Checkpointer(tmp_path / "run", every=4))
    monkeypatch.setattr(clock, "reading", reading)
    resumed = methods.train(method, cfg, MODEL, tiny_dataset, progress=False, cluster=cluster,
                            checkpointer=Checkpointer(tmp_path / "run", every=4, resume=True))
    assert resumed["resumed_from"] == 4 and whole["built"].delays.max() == 4
    assert resumed["final"]["counters"] == whole["final"]["counters"] and whole["final"]["counters"]["in_flight"]
    jax.tree_util.tree_map(np.testing.assert_array_equal, resumed["state"], whole["state"])


def test_two_tier_links_and_asymmetric_access_links():
    cluster = clock.two_tier(clock.Compute(0.1), 4, regions=2)
    assert cluster.link_between(0, 1) == clock.LAN and cluster.link_between(1, 2) == clock.WAN
    assert cluster.label == "lan_1g_x2_wan_100m"
    # a ring all-reduce crosses the WAN: its hops run at the WAN's rate
    r = ledger.Round("allreduce", 4e6)
    assert clock.round_seconds(r, cluster, 4) == pytest.approx(2 * 3 * (clock.WAN.latency + 1e6 / clock.WAN.bandwidth))
    # a node whose uplink is 10 Mbit/s sends at that rate whatever its link; another receives at its downlink's
    capped = clock.Cluster(clock.Compute(0.1), clock.LAN, uplinks=(1.25e6, 1e12), downlinks=(1e12, 2.5e6))
    assert capped.link_between(0, 1).bandwidth == 1.25e6 and capped.link_between(1, 0).bandwidth == clock.LAN.bandwidth
    assert capped.link_between(1, 1).bandwidth == 2.5e6
