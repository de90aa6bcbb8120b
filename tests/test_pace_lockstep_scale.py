"""Synchronous SGD's own pace that scales (jaxcomm.pace.of_run with LOCKSTEP): its collapsed timeline in closed
form, bit for bit the event-ordered one, and T rounds' worth of work, not T x N ticks."""

from __future__ import annotations

import math
import time

import numpy as np
import pytest

from jaxcomm import clock, ledger, pace, streams

ALLREDUCE = (ledger.Round("allreduce", 4e6),)  # a blocking round every step: round_seconds > 0 on the LAN
TRACE = ((1.0, 3.0, 0.5), (2.0, 2.0, 0.25), (0.3, 0.3, 0.7), (1.0, 1.0, 1.0))


def cluster(compute: clock.Compute, availability: clock.Availability | None = None) -> clock.Cluster:
    return clock.Cluster(compute, availability=availability)


CLUSTERS = {
    "equal": cluster(clock.Compute(1.0)),
    "one_3x_slower": cluster(clock.Compute(0.37, speed=(1.0, 3.0, 1.0, 1.0))),
    "jitter": cluster(clock.Compute(0.37, speed=(1.0, 3.0, 1.0, 1.3), jitter=0.2)),
    "trace": cluster(clock.Compute(1.0, trace=TRACE)),
    "trace_jitter": cluster(clock.Compute(1.0, trace=TRACE, jitter=0.3)),
    "never_off": cluster(clock.Compute(1.0, jitter=0.2), clock.Availability(windows={1: ()})),
    "on_off": cluster(clock.Compute(1.0, jitter=0.2), clock.Availability(mean_up=5.0, mean_down=2.0)),
    "windows": cluster(clock.Compute(1.0, speed=(1.0, 3.0, 1.0, 1.0)),
                       clock.Availability(windows={0: ((1.5, 3.0), (7.0, 7.2)), 2: ((0.5, 4.0),)})),
}
ALWAYS_ON = {"equal", "one_3x_slower", "jitter", "trace", "trace_jitter", "never_off"}


def reference(c: clock.Cluster, n: int, t: int, *, seed: int, traffic, own_pace) -> pace.Timeline:
    """What of_run gave before: T x N ticks simulated event by event, collapsed to one tick per round."""
    settings = pace.own_pace_of(own_pace)
    round_seconds = sum(clock.round_seconds(r, c, n) for r in traffic if r.blocking)
    return pace.timeline(c, n, t * n, seed=seed, waits=pace.LOCKSTEP, resolution=settings.resolution_for(c.compute, n),
                         round_seconds=round_seconds).collapsed(t)


def assert_identical(got: pace.Timeline, want: pace.Timeline) -> None:
    for name in pace.Timeline._fields:
        a, b = getattr(got, name), getattr(want, name)
        if isinstance(b, np.ndarray):
            assert a.dtype == b.dtype and a.shape == b.shape, name
            assert np.array_equal(a, b), name
        elif name == "staleness":  # (round, seconds, rounds) per round, with their Python types
            assert a == b and [tuple(map(type, x)) for x in a] == [tuple(map(type, x)) for x in b], name
        else:
            assert a == b and type(a) is type(b), name


def assert_stopped_at_the_last_round(c, n, t, ticks, *, seed, traffic, resolution) -> None:
    """The event loop took ``ticks`` ticks: exactly those up to the T-th round's close."""
    tl = pace.timeline(c, n, ticks, seed=seed, waits=pace.LOCKSTEP, resolution=resolution,
                       round_seconds=sum(clock.round_seconds(r, c, n) for r in traffic))
    assert tl.closes.sum() == t and tl.closes[-1]


class Counts:
    """Counts the event loop's ticks (``_Nodes.take``) and the jitter draws (lognormal factors)."""

    def __init__(self, monkeypatch):
        self.ticks = self.draws = 0
        take, default_rng = pace._Nodes.take, np.random.default_rng
        counts = self

        class Counted:  # a Generator that counts its lognormal draws (Generator's methods cannot be patched)
            def __init__(self, rng):
                self.rng = rng

            def lognormal(self, mean, sigma, size):
                counts.draws += size
                return self.rng.lognormal(mean, sigma, size)

            def __getattr__(self, name):
                return getattr(self.rng, name)

        def counted_take(nodes, *args, **kw):
            counts.ticks += 1
            return take(nodes, *args, **kw)

        monkeypatch.setattr(pace._Nodes, "take", counted_take)
        monkeypatch.setattr(np.random, "default_rng", lambda seed=None: Counted(default_rng(seed)))


def test_a_nodes_lognormal_draws_do_not_depend_on_how_they_are_drawn_in_blocks():
    seed = (streams.stream_id("pace/jitter"), 5, 3)
    once = np.random.default_rng(seed).lognormal(-0.02, 0.2, 2000)
    for blocks in ((64, 64, 128, 256, 512, 1024), (1, 2000 * 4 + 16), (7, 993, 1000)):
        rng = np.random.default_rng(seed)
        np.testing.assert_array_equal(np.concatenate([rng.lognormal(-0.02, 0.2, b) for b in blocks])[:2000], once)
    # _Durations: the k-th call of next() is the k-th column of first(), drawn in doubling blocks or at once
    compute = clock.Compute(0.5, speed=(1.0, 3.0, 1.2), jitter=0.2)
    stepped, at_once = pace._Durations(compute, 3, 11), pace._Durations(compute, 3, 11)
    by_step = np.array([[stepped.next(i) for i in range(3)] for _ in range(300)]).T
    np.testing.assert_array_equal(by_step, at_once.first(300))
    assert all(len(d) == 512 for d in stepped.drawn)  # 64, 128, 256, 512: what was used, less than twice over


@pytest.mark.parametrize("resolution", [None, 0.0, 0.3], ids=["default", "exact", "coarse"])
@pytest.mark.parametrize("traffic", [(), ALLREDUCE], ids=["free", "allreduce"])
@pytest.mark.parametrize("name", list(CLUSTERS))
def test_lockstep_of_run_is_bit_for_bit_the_event_ordered_timeline_collapsed(name, traffic, resolution, monkeypatch):
    c, n, t = CLUSTERS[name], 4, 30
    own_pace = pace.OwnPace(resolution=resolution)
    want = reference(c, n, t, seed=7, traffic=traffic, own_pace=own_pace)
    counts = Counts(monkeypatch)
    got = pace.of_run(c, n, t, seed=7, waits=pace.LOCKSTEP, traffic=traffic, own_pace=own_pace)
    assert_identical(got, want)
    if name in ALWAYS_ON:  # closed form: no tick simulated
        assert counts.ticks == 0
    else:  # the event loop, stopped at the T-th round's close
        assert_stopped_at_the_last_round(c, n, t, counts.ticks, seed=7, traffic=traffic, resolution=want.resolution)
        assert want.lost[-1] > 0  # the nodes did go off
    if name in ALWAYS_ON:  # T draws per node (a first block at least), none without jitter
        jitter = c.compute.jitter > 0
        assert counts.draws == (n * max(t, pace._Durations.FIRST_BLOCK) if jitter else 0)


def test_the_closed_form_holds_past_numpys_pairwise_block_and_with_stragglers(monkeypatch):
    # 130 nodes (a round's node-seconds summed past numpy's 128-element pairwise block), one 3x slower, jitter
    n, t = 130, 4
    c = cluster(clock.Compute(0.01, speed=clock.stragglers(n, count=1, slowdown=3.0), jitter=0.2))
    for own_pace in (True, pace.OwnPace(resolution=0.0)):
        want = reference(c, n, t, seed=2, traffic=ALLREDUCE, own_pace=own_pace)
        assert_identical(pace.of_run(c, n, t, seed=2, waits=pace.LOCKSTEP, traffic=ALLREDUCE, own_pace=own_pace),
                         want)
    assert pace.of_run(c, n, 0, seed=2, waits=pace.LOCKSTEP).num_ticks == 0


def test_with_nodes_going_off_the_event_loop_stops_at_the_t_th_round_and_draws_what_it_uses(monkeypatch):
    n, t = 32, 300
    c = cluster(clock.Compute(0.05, jitter=0.2), clock.Availability(mean_up=2.0, mean_down=0.5))
    counts = Counts(monkeypatch)
    tl = pace.of_run(c, n, t, seed=1, waits=pace.LOCKSTEP, traffic=ALLREDUCE, own_pace=True)
    ticks, draws = counts.ticks, counts.draws
    assert tl.num_ticks == t and tl.lost[-1] > 0
    # before: T x N ticks (9,600) and T x N + 16 draws per node (9,616); here the ticks to the T-th close, and
    # blocks that double as a node uses them (T steps and the ones lost: less than twice over)
    assert_stopped_at_the_last_round(c, n, t, ticks, seed=1, traffic=ALLREDUCE, resolution=tl.resolution)
    assert ticks < t * n and draws <= n * 4 * t


def test_synchronous_sgd_at_256_nodes_and_2000_steps_does_t_rounds_of_work(monkeypatch):
    n, t = 256, 2000
    c = cluster(clock.Compute(0.05, speed=clock.stragglers(n, count=4, slowdown=3.0), jitter=0.2))
    counts = Counts(monkeypatch)
    began = time.perf_counter()
    tl = pace.of_run(c, n, t, seed=0, waits=pace.LOCKSTEP, traffic=(), own_pace=True)
    seconds = time.perf_counter() - began
    # T draws per node and no tick simulated (before: T x N ticks and T x N + 16 draws per node, ~200 s)
    assert counts.ticks == 0 and counts.draws == n * t
    assert tl.num_ticks == t and tl.due.shape == (t, n) and tl.steps[-1].tolist() == [t] * n
    assert np.all(np.diff(tl.time) > 0) and tl.closes.all() and 0 < tl.goodput(t) < 1
    # each round closes at its slowest node's step end
    np.testing.assert_array_equal(tl.time, tl.node_time.max(axis=1))
    assert math.isfinite(tl.time[-1])
    print(f"of_run LOCKSTEP N={n} T={t}: {seconds:.3f} s")
    assert seconds < 30  # loose (a shared 2-core machine); the bound that matters is the work counted above
