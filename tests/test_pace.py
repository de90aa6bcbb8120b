"""Nodes at their own pace (jaxcomm.pace): timelines by hand, the masked step, lockstep bit for bit, quorum rounds."""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxcomm import clock, data_parallel, gossip, kit, local_sgd, methods, network, pace, population, streams
from jaxcomm.models import MLP

MODEL = MLP(hidden=(12,), num_classes=4)


def cluster(*speed, jitter=0.0, availability=None) -> clock.Cluster:
    return clock.Cluster(clock.Compute(1.0, speed=tuple(float(s) for s in speed), jitter=jitter),
                         availability=availability)


# ----------------------------------------------------------------------------------------- timelines by hand


def test_two_nodes_one_twice_as_fast_by_hand():
    tl = pace.timeline(cluster(1, 2), 2, 6)
    np.testing.assert_array_equal(tl.time, [1, 2, 3, 4, 5, 6])
    np.testing.assert_array_equal(tl.due, [[1, 0], [1, 1], [1, 0], [1, 1], [1, 0], [1, 1]])
    np.testing.assert_array_equal(tl.steps[-1], [6, 3])  # the fast node took twice the steps
    np.testing.assert_array_equal(tl.node_time[2], [3, 2])  # each node's last step end by tick 2
    assert tl.due_share() == 0.75 and tl.goodput(6) == 1.0 and not tl.closes.any()
    # at 3 s, node 1's second step is half done: 5 of 6 node-seconds are in completed steps
    assert tl.record(3) == {"seconds": 3.0, "node_steps": [3, 1], "node_seconds": [3.0, 2.0], "goodput": 5 / 6,
                            "lost": 0.0}


def test_synchronous_rounds_wait_for_the_slowest_and_count_the_wait_against_goodput():
    tl = pace.timeline(cluster(1, 2), 2, 4, waits=pace.rounds_of(1), round_seconds=0.5)
    # node 0 ends its step at 1 and waits; node 1 at 2: the round closes after its transfer at 2.5, both restart
    np.testing.assert_array_equal(tl.time, [1, 2.5, 3.5, 5.0])
    np.testing.assert_array_equal(tl.due, [[1, 0], [0, 1], [1, 0], [0, 1]])
    np.testing.assert_array_equal(tl.closes, [0, 1, 0, 1])
    np.testing.assert_array_equal(tl.members[1], [1, 1])
    # useful: 2 rounds of (1 + 2) node-seconds over 2 nodes x 5 s
    assert tl.goodput(4) == pytest.approx(6 / 10)
    # a member's age: seconds since the global model it started from was made (0 s, then the close at 2.5 s)
    assert [s[1:] for s in tl.staleness] == [(2.5, 0), (2.5, 0)]


def test_a_quorum_round_leaves_the_straggler_behind_and_merges_it_late():
    # 3 nodes of speeds 1, 1, 3; rounds of H = 2 steps; a quorum of 2, no grace
    tl = pace.timeline(cluster(1, 1, 3), 3, 6, waits=pace.Waits(2, 2, 0.0))
    np.testing.assert_array_equal(tl.time, [1, 2, 3, 4, 5, 6])
    np.testing.assert_array_equal(tl.closes, [0, 1, 0, 1, 0, 1])
    np.testing.assert_array_equal(tl.members[[1, 3, 5]], [[1, 1, 0], [1, 1, 0], [1, 1, 1]])
    # the straggler reports at 6 from the global model of time 0, two rounds old
    assert tl.staleness[-1] == (5, 6.0, 2)
    record = tl.record(6)  # ages 2, 2 and 6 s
    assert record["rounds"] == 3 and record["max_rounds_missed"] == 2
    assert record["mean_round_age_seconds"] == pytest.approx(10 / 3)
    # a grace window of 1.5 s after the quorum does not reach the straggler's report at 6 either
    graced = pace.timeline(cluster(1, 1, 3), 3, 3, waits=pace.Waits(2, 2, 1.5))
    # the round waits past the straggler's first step (at 3, not a report) and closes at 3.5 after that tick
    np.testing.assert_array_equal(graced.closes, [0, 0, 1])
    assert graced.time[-1] == 3.5 and graced.members[-1].tolist() == [True, True, False]


def test_a_node_that_goes_off_loses_its_step_and_starts_again_when_back():
    off = clock.Availability(windows={0: ((1.5, 3.0),)})
    tl = pace.timeline(cluster(1, 1, availability=off), 2, 5)
    np.testing.assert_array_equal(tl.due, [[1, 1], [0, 1], [0, 1], [1, 1], [1, 1]])
    np.testing.assert_array_equal(tl.time, [1, 2, 3, 4, 5])
    assert tl.lost[-1] == 0.5  # node 0's second step ran from 1 to 1.5
    assert tl.goodput(5) == pytest.approx((3 + 5) / 10)


def test_an_on_off_process_is_seeded_and_conserves_node_seconds():
    on_off = clock.Availability(mean_up=5.0, mean_down=2.0)
    a = pace.timeline(cluster(1, 1, 1, jitter=0.2, availability=on_off), 3, 200, seed=3)
    b = pace.timeline(cluster(1, 1, 1, jitter=0.2, availability=on_off), 3, 200, seed=3)
    np.testing.assert_array_equal(a.time, b.time)
    assert a.lost[-1] > 0 and 0 < a.goodput(200) < 1
    # every node-second is a completed step, a lost one, time off or the step in progress
    assert a.useful[-1] + a.lost[-1] <= 3 * a.time[-1]


def test_jitter_draws_are_each_nodes_own():
    few = pace.timeline(cluster(1, 1, jitter=0.2), 2, 50, seed=1)
    more = pace.timeline(cluster(1, 1, 1, 1, jitter=0.2), 4, 200, seed=1)
    # node 0's step ends are the same whatever the other nodes do
    ends = lambda tl: np.unique(tl.node_time[:, 0][tl.node_time[:, 0] > 0])  # noqa: E731
    np.testing.assert_allclose(ends(few)[:20], ends(more)[:20])
    durations = np.diff(ends(more))
    assert durations.std() / durations.mean() == pytest.approx(0.2, abs=0.08)


def test_resolution_groups_step_ends_and_keeps_each_nodes_own_time():
    exact = pace.timeline(cluster(1, 1, 1, 1, jitter=0.2), 4, 400, seed=2)
    grouped = pace.timeline(cluster(1, 1, 1, 1, jitter=0.2), 4, 400, seed=2, resolution=0.75)
    assert grouped.due_share() > 3 * exact.due_share()
    # grouping changes which tick takes a step, not when it ends: the same step ends per node
    k = int(grouped.steps[-1].min())
    for i in range(4):
        k = int(exact.steps[-1].min())  # the exact timeline took fewer steps in its 400 ticks
        ends = [np.unique(tl.node_time[:, i][tl.node_time[:, i] > 0])[:k] for tl in (grouped, exact)]
        np.testing.assert_allclose(*ends)


def test_equal_speeds_without_jitter_are_lockstep():
    tl = pace.timeline(cluster(1, 1, 1), 3, 5, waits=pace.rounds_of(2), resolution=0.5)
    assert tl.due.all() and tl.closes.tolist() == [0, 1, 0, 1, 0]
    rows = pace.lockstep(3, 5, pace.rounds_of(2))
    np.testing.assert_array_equal(tl.closes, rows.closes)
    np.testing.assert_array_equal(tl.members, rows.members)


def test_traces_and_profiles():
    traced = clock.Cluster(clock.Compute(1.0, trace=((1.0, 3.0), (2.0, 2.0))))
    tl = pace.timeline(traced, 2, 4)
    np.testing.assert_array_equal(tl.time, [1, 2, 4, 5])  # node 0: 1, 4, 5; node 1: 2, 4
    np.testing.assert_array_equal(tl.due, [[1, 0], [0, 1], [1, 1], [1, 0]])
    compute = clock.profiled(1e12, ["h100_sxm", "t4"], utilisation=0.5)
    np.testing.assert_allclose(compute.step_seconds(2), [1e12 / (0.5 * 989.4e12), 1e12 / (0.5 * 65e12)])
    assert "datasheet" in clock.PROFILES["a100"].source


def test_bad_values_are_named():
    with pytest.raises(ValueError, match="quorum"):
        pace.timeline(cluster(1, 1), 2, 3, waits=pace.Waits(1, 3))
    with pytest.raises(ValueError, match="resolution"):
        pace.timeline(cluster(1, 1), 2, 3, resolution=-1)


# ----------------------------------------------------------------------------------------- the masked step


def isolated() -> methods.Method:
    """Isolated nodes on the kit: research code's simplest method, which waits for nothing."""

    def build(config, model, *, image_shape, num_classes):
        pop = kit.nodes(config, model, image_shape=image_shape, num_classes=num_classes)
        return pop.built(pop.local_step)

    return methods.Method("isolated", build, per_run=methods.KIT_PER_RUN)


def config(**kw) -> network.NetworkConfig:
    return network.NetworkConfig(**({"num_nodes": 3, "batch_size": 8, "num_steps": 8, "eval_every": 4,
                                     "backend": "vmap", "step_loop": "scan", "learning_rate": 0.05} | kw))


def leaves(tree):
    return [np.asarray(x) for x in jax.tree.leaves(tree)]


@pytest.mark.parametrize("method", [isolated(), local_sgd.diloco(3)], ids=["isolated", "diloco"])
def test_equal_speeds_train_bit_for_bit_as_lockstep(tiny_dataset, method):
    equal = cluster(1, 1, 1)
    plain = methods.train(method, config(), MODEL, tiny_dataset, progress=False)
    paced = methods.train(method, config(), MODEL, tiny_dataset, progress=False, cluster=equal, own_pace=True)
    for a, b in zip(leaves(plain["state"].nodes), leaves(paced["state"].nodes), strict=True):
        np.testing.assert_array_equal(a, b)
    for a, b in zip(plain["history"], paced["history"], strict=True):
        assert a["node_accuracies"] == b["node_accuracies"] and a["loss"] == b["loss"]
    assert paced["history"][-1]["pace"]["node_steps"] == [8, 8, 8]
    # 8 steps of 1 s, and DiLoCo's two round ends (steps 3 and 6) wait for their all-reduce on the LAN
    transfers = sum(2 * clock.round_seconds(r, equal, 3) for r in paced["built"].traffic)
    assert paced["history"][-1]["clock"]["seconds"] == pytest.approx(8.0 + transfers)


def test_a_node_not_due_holds_and_a_due_one_takes_the_lockstep_step(tiny_dataset):
    built = methods.build(isolated(), config(), MODEL, tiny_dataset)
    paced, timeline = methods.at_own_pace(built, cluster(1, 2, 3), True)
    data = methods.shard_data(isolated(), tiny_dataset, config(), timeline=timeline)
    step = jax.jit(paced.step)
    state = paced.init(jax.random.PRNGKey(0))
    for t in range(6):
        lockstep, _ = step(state, data._replace(pace=None))  # every node's step from the same state and keys
        after, _ = step(state, data)
        want = population.where(timeline.due[t], lockstep.nodes, state.nodes)
        for a, b in zip(leaves(after.nodes), leaves(want), strict=True):
            np.testing.assert_array_equal(a, b)
        state = after
    # each node's optimiser counted its own steps: the timeline's
    np.testing.assert_array_equal(state.nodes.opt_state[0].count, timeline.steps[5])


def test_a_quorum_round_merges_its_members_by_hand(tiny_dataset):
    def two_ticks(method):
        built = methods.build(method, config(), MODEL, tiny_dataset)
        paced, timeline = methods.at_own_pace(built, cluster(1, 1, 3), True)
        step, state = jax.jit(paced.step), paced.init(jax.random.PRNGKey(0))
        start = leaves(state.extra[0].params)
        data = methods.shard_data(method, tiny_dataset, config(), timeline=timeline)
        for _ in range(2):
            state, info = step(state, data)
        return start, state, info, timeline

    # outer SGD at rate 1, so the global model becomes the members' mean; rounds of 2 steps, a quorum of 2
    start, state, info, timeline = two_ticks(local_sgd.local_sgd(2, quorum=2))
    assert bool(info.synced) and timeline.members[1].tolist() == [True, True, False]
    _, unmerged, _, _ = two_ticks(local_sgd.local_sgd(100, quorum=2))  # the same two ticks without a round
    for g0, glob, nodes, pre in zip(start, leaves(state.extra[0].params), leaves(state.nodes.params),
                                    leaves(unmerged.nodes.params), strict=True):
        np.testing.assert_allclose(glob[0], g0[0] - ((g0[0] - pre[0]) + (g0[0] - pre[1])) / 2, rtol=1e-5,
                                   atol=1e-6)
        np.testing.assert_array_equal(nodes[0], glob[0])
        np.testing.assert_array_equal(nodes[1], glob[0])
        np.testing.assert_array_equal(nodes[2], pre[2])  # the straggler goes on with its own round
    # the members' starts are the new global model; the straggler's is still the first
    for g0, glob, starts in zip(start, leaves(state.extra[0].params), leaves(state.extra[1]), strict=True):
        np.testing.assert_array_equal(starts[:2], np.broadcast_to(glob[0], starts[:2].shape))
        np.testing.assert_array_equal(starts[2], g0[0])


def test_a_sweep_at_its_own_pace_equals_its_runs_alone(tiny_dataset):
    method, jittery = isolated(), cluster(1, 1, 2, jitter=0.2)
    configs = [config(seed=s) for s in (0, 1)]
    swept = methods.sweep(method, configs, MODEL, tiny_dataset, progress=False, cluster=jittery, own_pace=True,
                          mode="population")
    for c, got in zip(configs, swept, strict=True):
        alone = methods.train(method, c, MODEL, tiny_dataset, progress=False, cluster=jittery, own_pace=True)
        assert got["history"][-1]["pace"] == alone["history"][-1]["pace"]
        for a, b in zip(leaves(got["state"].nodes), leaves(alone["state"].nodes), strict=True):
            np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-6)
    assert swept[0]["history"][-1]["clock"]["seconds"] != swept[1]["history"][-1]["clock"]["seconds"]


def test_synchronous_sgd_at_its_own_pace_trains_as_ever_and_waits_for_the_slowest(tiny_dataset):
    slow = clock.Cluster(clock.Compute(1.0, speed=(1.0, 1.0, 2.0)), clock.LAN)
    plain = methods.train(data_parallel.sync_sgd(), config(), MODEL, tiny_dataset, progress=False)
    paced = methods.train(data_parallel.sync_sgd(), config(), MODEL, tiny_dataset, progress=False, cluster=slow,
                          own_pace=True)
    for a, b in zip(leaves(plain["state"].nodes), leaves(paced["state"].nodes), strict=True):
        np.testing.assert_array_equal(a, b)
    # every step waits for the slowest node (2 s) and the all-reduce: the lockstep clock's figure
    allreduce = clock.round_seconds(paced["built"].traffic[0], slow, 3)
    assert paced["history"][-1]["clock"]["seconds"] == pytest.approx(8 * (2.0 + allreduce))
    assert paced["history"][-1]["clock"]["seconds"] == pytest.approx(
        clock.reading(slow, paced["built"], paced["state"], 8)["seconds"])
    assert paced["history"][-1]["pace"]["goodput"] == pytest.approx(4 / (3 * (2.0 + allreduce)))


def test_own_pace_is_refused_before_anything_compiles(tiny_dataset):
    with pytest.raises(ValueError, match="own_pace needs a cluster"):
        methods.train(isolated(), config(), MODEL, tiny_dataset, progress=False, own_pace=True)
    with pytest.raises(TypeError, match="cannot train at its own pace"):
        methods.train(gossip.gossip_averaging(2)._replace(build=lambda *a, **k: object()), config(), MODEL,
                      tiny_dataset, progress=False, cluster=cluster(1, 1, 1), own_pace=True)
    with pytest.raises(ValueError, match="gossip_every"):
        methods.train(network.output_sharing(), sharing_config(gossip_every=2), MODEL, tiny_dataset, progress=False,
                      cluster=cluster(1, 1, 1), own_pace=True)


def test_time_to_target_reads_the_timeline(tiny_dataset):
    result = methods.train(isolated(), config(), MODEL, tiny_dataset, progress=False, cluster=cluster(1, 2, 4),
                           own_pace=True)
    first = result["history"][0]
    assert first["clock"]["seconds"] == result["timeline"].time[3]
    reached = clock.seconds_to_target(result["history"], -math.inf, lambda r: r["avg_accuracy"])
    assert reached == first["clock"]["seconds"]


# ----------------------------------------------------------------------------------------- output sharing


def sharing_config(**kw) -> network.NetworkConfig:
    return config(**({"content": "true_labels", "consume_prob": 0.5, "broadcast_prob": 0.5, "num_steps": 12,
                      "eval_every": 6} | kw))


def test_output_sharing_at_equal_speeds_trains_bit_for_bit_as_lockstep(tiny_dataset):
    method = network.output_sharing()
    plain = methods.train(method, sharing_config(), MODEL, tiny_dataset, progress=False)
    paced = methods.train(method, sharing_config(), MODEL, tiny_dataset, progress=False,
                          cluster=clock.Cluster(clock.Compute(1.0), clock.INSTANT), own_pace=True)
    for a, b in zip(leaves(plain["state"].nodes), leaves(paced["state"].nodes), strict=True):
        np.testing.assert_array_equal(a, b)
    counters = paced["history"][-1]["counters"]
    assert plain["history"][-1]["counters"] == {k: counters[k] for k in plain["history"][-1]["counters"]}


def test_output_sharing_at_its_own_pace_steps_sends_and_reads_only_when_due(tiny_dataset):
    slow = clock.Cluster(clock.Compute(1.0, speed=(1.0, 1.0, 3.0)), clock.WAN)
    method = network.output_sharing()
    built = methods.build(method, sharing_config(), MODEL, tiny_dataset, cluster=slow, own_pace=True)
    paced, timeline = methods.at_own_pace(built, slow, True)
    step = jax.jit(paced.step)
    state = paced.init(jax.random.PRNGKey(0))
    data = network.network_data(tiny_dataset, sharing_config())._replace(pace=timeline.rows())
    for t in range(12):
        before = state
        state, info = step(state, data)
        due = timeline.due[t]
        assert not np.any(np.asarray(info.broadcast) & ~due) and not np.any(np.asarray(info.consumed) & ~due)
        for a, b in zip(leaves(state.nodes), leaves(before.nodes), strict=True):
            np.testing.assert_array_equal(a[~due], b[~due])  # the nodes not due hold
    counters = network.counter_totals(state)
    assert counters["sent"] == counters["received"] + counters["in_flight"]  # conserved
    # on the WAN (40 ms, a message of 8 images) every message read had arrived before its reader's step began
    assert counters["mean_age_seconds"] > 0.04


def test_a_message_is_read_once_it_arrived_before_the_readers_step_began_by_hand(tiny_dataset):
    # nodes 0 -> 1 -> 0 of speeds 1 and 2 s, instant links, every step a broadcast and a read
    two = sharing_config(num_nodes=2, num_neighbours=1, consume_prob=1.0, broadcast_prob=1.0, num_steps=4)
    result = methods.train(network.output_sharing(), two, MODEL, tiny_dataset, progress=False,
                           cluster=clock.Cluster(clock.Compute(1.0, speed=(1.0, 2.0)), clock.INSTANT), own_pace=True)
    # ticks at 1, 2, 3, 4 s. Node 1's step 0-2 s began before node 0's first message (sent at 1 s): not read.
    # Node 0's step 2-3 s reads node 1's message of 2 s (age 0 s, 1 of its steps); node 1's step 2-4 s reads node
    # 0's message of 1 s (age 1 s, 2 of its steps); the other 4 wishes find nothing that has arrived.
    counters = result["history"][-1]["counters"]
    assert counters["consumed"] == 2 and counters["fallbacks"] == 4
    assert counters["mean_age_seconds"] == pytest.approx(0.5)
    assert counters["mean_age_receiver_steps"] == pytest.approx(1.5)



def test_gossip_at_equal_speeds_averages_as_lockstep_and_at_its_own_pace_on_its_own_steps(tiny_dataset):
    method = gossip.gossip_averaging(2, num_neighbours=1)
    plain = methods.train(method, config(), MODEL, tiny_dataset, progress=False)
    paced = methods.train(method, config(), MODEL, tiny_dataset, progress=False,
                          cluster=clock.Cluster(clock.Compute(1.0), clock.INSTANT), own_pace=True)
    for a, b in zip(leaves(plain["state"].nodes.params), leaves(paced["state"].nodes.params), strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)  # the same average, summed in another order
    # speeds 1, 1, 2 on a ring 0 -> 1 -> 2 -> 0: node 0 averages with the last copy node 2 sent
    built = methods.build(method, config(), MODEL, tiny_dataset, own_pace=True)
    paced, timeline = methods.at_own_pace(built, cluster(1, 1, 2), True)
    step, state = jax.jit(paced.step), paced.init(jax.random.PRNGKey(0))
    data = methods.shard_data(method, tiny_dataset, config(), timeline=timeline)
    first = state
    for _ in range(2):  # tick 0: nodes 0, 1 step; tick 1 (2 s): every node, nodes 0 and 1 at their 2nd step
        before = state
        state, _ = step(state, data)
    np.testing.assert_array_equal(timeline.steps[1], [2, 2, 1])
    local_only = methods.build(isolated(), config(), MODEL, tiny_dataset)  # the same local step, no averaging
    lone, _ = jax.jit(local_only.step)(before._replace(extra=None), data._replace(pace=None))
    for got, local, initial in zip(leaves(state.nodes.params), leaves(lone.nodes.params),
                                   leaves(first.nodes.params), strict=True):
        # node 0 gossips at its 2nd step with node 2's copy: node 2's initial values (it has sent nothing yet)
        np.testing.assert_allclose(got[0], (local[0] + initial[2]) / 2, rtol=1e-5, atol=1e-6)
        # node 2 took its first step: not its gossip step
        np.testing.assert_array_equal(got[2], local[2])


def test_random_peer_gossip_averages_with_one_random_peer_by_hand(tiny_dataset):
    method = gossip.random_peer_gossip(1)
    built = methods.build(method, config(), MODEL, tiny_dataset)
    data = methods.shard_data(method, tiny_dataset, config())
    state = built.init(jax.random.PRNGKey(0))
    after, _ = jax.jit(built.step)(state, data)
    local, _ = jax.jit(methods.build(isolated(), config(), MODEL, tiny_dataset).step)(state, data)
    draw = jax.random.randint(streams.named(state.key, "random_peer"), (3,), 1, 3)
    peers = (np.arange(3) + np.asarray(draw)) % 3
    assert (peers != np.arange(3)).all()
    for got, own in zip(leaves(after.nodes.params), leaves(local.nodes.params), strict=True):
        np.testing.assert_allclose(got, (own + own[peers]) / 2, rtol=1e-6, atol=1e-7)
    # at its own pace a node averages at its own steps only: the straggler (3 s) has not by tick 0
    paced, timeline = methods.at_own_pace(built, cluster(1, 1, 3), True)
    ticked, _ = jax.jit(paced.step)(paced.init(jax.random.PRNGKey(0)), data._replace(pace=timeline.rows()))
    for got, initial in zip(leaves(ticked.nodes.params), leaves(state.nodes.params), strict=True):
        np.testing.assert_array_equal(got[2], initial[2])


@pytest.mark.parametrize("method", [network.output_sharing(), local_sgd.diloco(2, quorum=2)], ids=["outputs", "quorum"])
def test_nodes_held_apart_step_at_their_own_pace_as_stacked_ones(tiny_dataset, method):
    slow = clock.Cluster(clock.Compute(1.0, speed=(1.0, 1.0, 3.0), jitter=0.2), clock.LAN)
    runs = [methods.train(method, sharing_config(backend=backend, step_loop=loop), MODEL, tiny_dataset,
                          progress=False, cluster=slow, own_pace=True)
            for backend, loop in (("vmap", "scan"), ("loop", "eager"), ("unrolled", "dispatch"))]
    assert runs[1]["built"].layout is not None  # the eager loop held the node states apart
    for run in runs[1:]:
        for a, b in zip(leaves(runs[0]["state"].nodes), leaves(run["state"].nodes), strict=True):
            np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)


def test_a_step_in_passes_of_the_due_nodes_equals_the_masked_step(tiny_dataset):
    # four nodes, one twice and one three times slower: ticks where 1 to 4 nodes are due, stepped two at a time
    slow = clock.Cluster(clock.Compute(1.0, speed=(1.0, 1.0, 2.0, 3.0), jitter=0.2), clock.LAN)
    runs = {capacity: methods.train(network.output_sharing(), sharing_config(num_nodes=4), MODEL, tiny_dataset,
                                    progress=False, cluster=slow, own_pace=pace.OwnPace(capacity=capacity))
            for capacity in (4, 2, 1)}
    assert len(set(map(int, runs[4]["timeline"].due.sum(1)))) >= 3  # ticks of several sizes
    for capacity in (2, 1):
        for a, b in zip(leaves(runs[4]["state"].nodes), leaves(runs[capacity]["state"].nodes), strict=True):
            np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)
        assert runs[capacity]["history"][-1]["counters"] == runs[4]["history"][-1]["counters"]
        assert runs[capacity]["history"][-1]["loss"] == pytest.approx(runs[4]["history"][-1]["loss"], rel=1e-5)


def test_a_held_lift_computes_only_the_due_nodes_by_hand():
    calls = []

    def step(state, x):  # one node: state + x, aux 2x; counts the steps computed
        jax.debug.callback(lambda: calls.append(1))
        return state + x, 2 * x

    state, x = jnp.arange(4.0), jnp.array([10.0, 20.0, 30.0, 40.0])
    due = jnp.array([True, False, True, False])
    want = (np.array([10.0, 1.0, 32.0, 3.0]), np.array([20.0, 0.0, 60.0, 0.0]))
    for backend, capacity in (("vmap", None), ("vmap", 1), ("vmap", 3)):
        got = population.lift_held(step, backend=backend, capacity=capacity)(due, state, x)
        for g, w in zip(got, want, strict=True):
            np.testing.assert_array_equal(g, w)
    apart = population.unstack(state)
    calls.clear()
    got = population.state_and_aux(population.lift_held(step, backend="loop")(due, apart, x))
    assert len(calls) == 2  # the two due nodes' compiled calls, no other
    np.testing.assert_array_equal(population.restack(got[0]), want[0])
    np.testing.assert_array_equal(got[1], want[1])
    jitted = jax.jit(lambda d, s, v: population.state_and_aux(population.lift_held(step, backend="unrolled")(d, s, v)))
    got = jitted(due, apart, x)  # jitted ("unrolled"): every node computed, the due ones kept
    np.testing.assert_array_equal(population.restack(got[0]), want[0])
    np.testing.assert_array_equal(got[1], want[1])


def test_copies_sent_together_share_a_bottleneck_by_hand(tiny_dataset):
    # two nodes of 1 s steps send each other a copy every step; instant links, but a shared bottleneck on which
    # one message takes 0.6 s: the 2 copies of a tick take 1.2 s, so what is sent at 1 s arrives at 2.2 s and is
    # first read by the steps that begin at 3 s (age 2 s)
    two = sharing_config(num_nodes=2, num_neighbours=1, consume_prob=1.0, broadcast_prob=1.0, num_steps=4)
    built = methods.build(network.output_sharing(), two, MODEL, tiny_dataset,
                          cluster=clock.Cluster(clock.Compute(1.0), clock.INSTANT), own_pace=True)
    bottleneck = clock.Link(built.message_bytes / 0.6, 0.0, "shared")
    shared = clock.Cluster(clock.Compute(1.0), clock.INSTANT, bottleneck=bottleneck)
    result = methods.train(network.output_sharing(), two, MODEL, tiny_dataset, progress=False, cluster=shared,
                           own_pace=True)
    counters = result["history"][-1]["counters"]
    assert counters["consumed"] == 2 and counters["fallbacks"] == 6
    assert counters["mean_age_seconds"] == pytest.approx(2.0)
    np.testing.assert_array_equal(result["state"].copies_per_tick, [2, 2, 2, 2])
