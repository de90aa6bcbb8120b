"""Cohorts of the clients that are on (jaxcomm.federated ``available``, jaxcomm.pace.on_through).

The on/off table against hand-written windows and against the timeline's own off windows; a table of every client on
is FedAvg bit for bit; a round with one client on is that client's model, a round with none leaves the server as it
was; off slots are marked -1; errors name the field before anything compiles.
"""

from __future__ import annotations

import jax
import numpy as np
import optax
import pytest
from test_federated import MODEL, config, glob, leaves, run

from jaxcomm import clock, federated, ledger, methods, pace
from jaxcomm.models import MLP


def test_on_through_hand_windows():
    off = clock.Availability(windows={0: ((1.0, 2.0),), 2: ((0.5, 0.6), (3.0, 4.0))})
    got = pace.on_through(off, 3, [0.0, 1.0, 2.0, 3.0], [1.0, 2.0, 3.0, 4.0])
    want = np.array([[1, 1, 0], [0, 1, 1], [1, 1, 1], [1, 1, 0]], bool)  # a window meets [s, e) iff b > s and a < e
    np.testing.assert_array_equal(got, want)
    np.testing.assert_array_equal(pace.on_through(None, 3, [0.0, 5.0]), np.ones((2, 3), bool))
    np.testing.assert_array_equal(pace.on_through(off, 3, [0.5, 3.5], [0.5, 3.5]), [[1, 1, 0], [1, 1, 0]])  # instants


def test_on_through_reads_the_off_windows_the_timeline_meets():
    churn = clock.Availability(mean_up=3.0, mean_down=1.0)
    starts = np.arange(30) * 0.7
    got = pace.on_through(churn, 50, starts, starts + 0.7, seed=5)
    reference = pace._Availability(churn, 50, 5)  # the timeline's own windows, window by window
    want = np.array([[reference.first_off(n, s, s + 0.7) is None for n in range(50)] for s in starts])
    np.testing.assert_array_equal(got, want)
    assert 0.5 < got.mean() < 0.9  # on about 3/4 of the time, less the rounds a short window cuts
    np.testing.assert_array_equal(federated.available_clients(churn, 50, 30, 0.7, seed=5), got)


@pytest.mark.parametrize("weighting", ["samples", "uniform"])
def test_every_client_on_is_fedavg(weighting, tiny_dataset):
    cfg = config()
    _, _, plain, plain_infos = run(federated.fedavg(3, cohort=2, weighting=weighting), cfg, tiny_dataset, 9)
    always = np.ones((4, 4), bool)
    _, _, on, on_infos = run(federated.fedavg(3, cohort=2, weighting=weighting, available=always), cfg, tiny_dataset,
                             9)
    for a, b in zip(plain_infos, on_infos, strict=True):
        np.testing.assert_array_equal(a.cohort, b.cohort)  # the same draws
    for got, want in zip(glob(on[-1]), glob(plain[-1]), strict=True):
        if weighting == "samples":  # the same weights, bit for bit
            np.testing.assert_array_equal(got, want)
        else:  # 1/K weights against jnp.mean: rounding
            np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-7)


def test_a_round_of_one_client_on_is_its_model_and_a_round_of_none_leaves_the_server(tiny_dataset):
    # M = 4 clients, K = 2 slots, H = 2: round 0 only client 3 on, round 1 clients 0-2, round 2 none
    table = np.array([[0, 0, 0, 1], [1, 1, 1, 0], [0, 0, 0, 0]], bool)
    cfg = config(num_steps=6)
    momentum = optax.sgd(1.0, momentum=0.9)  # a server state that a round of nobody would move
    _, _, fed, infos = run(federated.fedavg(2, cohort=2, server_optimizer=momentum, available=table), cfg,
                           tiny_dataset, 6)
    cohorts = [np.asarray(i.cohort) for i in infos]
    assert sorted(cohorts[0]) == [-1, 3] and (cohorts[0] == cohorts[1]).all()  # one slot off, marked -1
    assert set(cohorts[2]) <= {0, 1, 2} and len(set(cohorts[2])) == 2  # two of the three on
    assert (cohorts[4] == -1).all() and (cohorts[5] == -1).all()  # nobody on
    # round 0's global model is client 3's: the same run without a close trains the same slots
    _, _, drift, _ = run(federated.fedavg(100, cohort=2, available=table), cfg, tiny_dataset, 2)
    slot = int(np.flatnonzero(cohorts[0] == 3)[0])
    for got, want in zip(glob(fed[2]), leaves(drift[2].nodes.params), strict=True):
        np.testing.assert_allclose(got, want[slot], rtol=1e-6, atol=1e-7)  # x - (x - y_3): y_3, to rounding
    for got, want in zip(leaves(fed[6].extra.model), leaves(fed[4].extra.model), strict=True):
        np.testing.assert_array_equal(got, want)  # the global model and the server's momentum, as they were


def test_errors_name_the_field_before_anything_compiles(tiny_dataset):
    with pytest.raises(ValueError, match="available"):
        federated.fedavg(2, available=np.ones(4, bool))  # not [rounds, clients]
    with pytest.raises(ValueError, match="available"):  # SCAFFOLD's close would average absent slots
        federated.Algorithm(2, close=lambda *a: a, available=np.ones((3, 4), bool))
    few_rounds = federated.fedavg(2, cohort=2, available=np.ones((2, 4), bool))  # 12 steps need 6 rounds
    with pytest.raises(ValueError, match=r"available.*rounds >= 6"):
        methods.build(few_rounds, config(), MLP(hidden=(12,), num_classes=4), tiny_dataset)
    with pytest.raises(ValueError, match="round_seconds"):
        federated.available_clients(None, 4, 3, 0.0)
    with pytest.raises(ValueError, match="starts"):
        pace.on_through(None, 4, [1.0, 0.5])


def test_the_ledger_books_the_uploads_of_the_clients_that_were_on(tiny_dataset):
    """Rounds of 1, 2 and 0 clients on among K = 2 slots: 3 uploads of 4 P bytes, where every client on books 6; in
    lockstep and at its own pace (equal speeds: every round closes with its K members); a round past the table's end
    takes its last row."""
    table = np.array([[0, 0, 0, 1], [1, 1, 1, 0], [0, 0, 0, 0]], bool)
    cfg = config(num_steps=6, eval_every=6)
    on = methods.build(federated.fedavg(2, cohort=2, available=table), cfg, MODEL, tiny_dataset)
    every = methods.build(federated.fedavg(2, cohort=2), cfg, MODEL, tiny_dataset)
    upload = on.traffic[0].nbytes  # one client's upload: 4 P bytes
    assert on.traffic[0].takers == (1, 2, 0) and every.traffic[0].takers == ()
    state = on.init(jax.random.PRNGKey(0))  # in lockstep the booking reads the steps done only
    for steps, uploads in ((2, 1), (4, 3), (6, 3)):
        assert on.booking(state, steps).parameters == uploads * upload
        assert every.booking(state, steps).parameters == 2 * (steps // 2) * upload
    assert on.traffic[0].taking_part(2, 5) == [1, 2, 0, 0, 0]
    paced = methods.train(federated.fedavg(2, cohort=2, available=table), cfg, MODEL, tiny_dataset, progress=False,
                          cluster=clock.Cluster(clock.Compute(1.0), clock.INSTANT), own_pace=True)
    assert paced["bytes"]["total"] == 3 * upload  # its only kind


def test_the_lockstep_clock_times_each_round_for_the_clients_that_were_on():
    """One 'server' round of k clients on a 100 B/s server link (latency 1 s, instant access links): each way
    1 + k x nbytes / 100 s; rounds of 1, 2 and 0 clients on among 2 slots take 2 (1 + b), 2 (1 + 2 b) and 0 s,
    b = nbytes / 100, beside the 2 x 0.5 s of compute of each round's two steps."""
    cluster = clock.Cluster(clock.Compute(0.5), clock.Link(100.0, 1.0))
    server = lambda takers=(): ledger.Round("server", 50.0, every=2, takers=takers)  # b = 0.5 s a client
    on, every = server((1, 2, 0)), server()
    for steps, want in ((2, 2 * 1.5), (4, 2 * 1.5 + 2 * 2.0), (6, 2 * 1.5 + 2 * 2.0)):
        got = clock.seconds(cluster, (on,), 2, steps)
        assert got["seconds"] == pytest.approx(0.5 * steps + want) and got["compute"] == pytest.approx(0.5 * steps)
        assert clock.seconds(cluster, (every,), 2, steps)["seconds"] == pytest.approx(0.5 * steps + steps // 2 * 4.0)
