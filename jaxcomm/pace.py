"""Nodes at their own pace: an event-ordered timeline of who steps when, in virtual seconds.

Algorithm 2 of the thesis is asynchronous: no node waits for another. Here every node has its own step
duration (:class:`jaxcomm.clock.Compute`: a nominal time, per-node speeds or device profiles, lognormal
jitter, traces) and its own availability (:class:`jaxcomm.clock.Availability`: an on/off process, or
windows), and the simulation advances through time event by event:

* a node's step ends at its own time; the next one starts at once (its step duration drawn from its own
  stream), unless its method makes it wait (:class:`Waits`);
* a *tick* is one compiled step of the whole population: it takes the earliest step end and every other
  one within ``resolution`` seconds of it (the simulation's time resolution: events closer than that may be
  taken in either order); the nodes whose step ends there are *due*, the others hold
  (:func:`jaxcomm.population.lift_held`: the eager loop computes only the due nodes; a stacked population
  computes every node and keeps the due ones, or with ``OwnPace(capacity=K)`` gathers the due nodes K at a
  time);
* a node that goes off during a step loses that step (its work does not reach any model) and starts again
  when it is back;
* a method that waits (:class:`Waits`: synchronous SGD every step, DiLoCo every H steps, a quorum of K of
  N within a grace window) makes a node *report* after its H-th step and hold until its round closes; the
  round stops taking reports at the K-th report plus the grace window (at once when every node has
  reported) and closes after its transfer, when its members restart.

The timeline depends on durations, availability and waits only, never on what the nodes learn, so it is
computed on the host in float64 before the run (:func:`timeline`), and the compiled step reads one row of
it per tick (:class:`Rows`: who is due, whether a round closes and who is in it). Equal speeds with no
jitter, no failures and resolution 0 give every node every tick: today's lockstep run, bit for bit (tested).

References:
  APPFL's virtual-time simulator (an event queue rebuilding arrival order on one device); Nguyen et al.
  (2022), FedBuff (buffered asynchronous aggregation); Douillard et al. (2025), Decoupled DiLoCo (a quorum
  within a grace window); Lacaille (2018), Algorithm 2.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import jax.numpy as jnp
import numpy as np

from jaxcomm import clock, streams
from jaxcomm.validation import is_int, is_real, require


class Waits(NamedTuple):
    """What a method's nodes wait for.

    Attributes:
      every: steps between rounds (0: the nodes wait for nothing; 1: synchronous SGD; H: DiLoCo).
      quorum: reports that close a round (None: every node's).
      grace: seconds a round stays open after its quorum for later reports (``math.inf``: until every node).
    """

    every: int = 0
    quorum: int | None = None
    grace: float = 0.0

    def check(self, num_nodes: int) -> None:
        require(is_int(self.every) and self.every >= 0, "every", "an integer >= 0", self.every)
        require(self.quorum is None or (is_int(self.quorum) and 1 <= self.quorum <= num_nodes), "quorum",
                f"None or an integer in [1, {num_nodes}]", self.quorum)
        require(is_real(self.grace) and self.grace >= 0, "grace", "a number >= 0", self.grace)


NOTHING = Waits()
"""Waits for nothing: output sharing, gossip on last received copies, isolated nodes."""


def rounds_of(every: int) -> Waits:
    """Every node waits for every other every ``every`` steps (synchronous SGD: 1; synchronous DiLoCo: H)."""
    return Waits(every, None, math.inf)


LOCKSTEP = rounds_of(1)
"""Every node waits for every other at every step: synchronous SGD, whose compiled step is a whole round (its
timeline has one tick per round, :meth:`Timeline.collapsed`, and its step reads no rows)."""


class Rows(NamedTuple):
    """What the compiled step reads of the timeline, one row per tick (``[T, ...]``, on the device).

    Attributes:
      due: ``[T, N] bool`` the nodes whose step ends at tick t (the others hold).
      closes: ``[T] bool`` a round closes after tick t's steps.
      members: ``[T, N] bool`` the nodes in that round (those that reported).
      steps: ``[T, N] int32`` each node's steps after tick t (a method's own period, counted in a node's steps).
      start, end: ``[T, N] float32`` virtual seconds at which the step of each node that ends by tick t began, and
        its end (what a message read or sent is timed by; float32: about 1e-7 of the time).
    """

    due: jnp.ndarray
    closes: jnp.ndarray
    members: jnp.ndarray
    steps: jnp.ndarray
    start: jnp.ndarray
    end: jnp.ndarray


class Timeline(NamedTuple):
    """Who steps when, in virtual seconds (host arrays, float64).

    Attributes:
      time: ``[T]`` seconds at tick t (the latest step end it takes; a round's close, after its transfer, where one
        closes), non-decreasing: a tick after a close is read at that close at least.
      due: ``[T, N] bool`` the nodes whose step ends at tick t.
      closes: ``[T] bool``; members: ``[T, N] bool``: the rounds (:class:`Waits`).
      steps: ``[T, N]`` each node's steps after tick t.
      node_time: ``[T, N]`` the end of each node's last step by tick t (0 before its first).
      node_start: ``[T, N]`` the start of that step.
      useful: ``[T]`` node-seconds of steps that reach the models by tick t (every completed step of a method that
        waits for nothing; a round's members' steps once merged).
      lost: ``[T]`` node-seconds of steps cut short by a node going off, by tick t.
      staleness: per closed round ``(tick, seconds, rounds)``: the oldest member's age (seconds since it started
        the round; rounds closed since), as lists.
      resolution: seconds within which events may be taken in either order.
    """

    time: np.ndarray
    due: np.ndarray
    closes: np.ndarray
    members: np.ndarray
    steps: np.ndarray
    node_time: np.ndarray
    node_start: np.ndarray
    useful: np.ndarray
    lost: np.ndarray
    staleness: list
    resolution: float

    @property
    def num_ticks(self) -> int:
        return len(self.time)

    def host_rows(self) -> Rows:
        """The rows as host arrays, in the dtypes the compiled step reads (what an evaluation reads: no transfer)."""
        return Rows(self.due, self.closes, self.members, np.asarray(self.steps, np.int32),
                    np.asarray(self.node_start, np.float32), np.asarray(self.node_time, np.float32))

    def rows(self) -> Rows:
        """The device rows the compiled step reads (:class:`Rows`)."""
        return Rows(*map(jnp.asarray, self.host_rows()))

    def due_share(self) -> float:
        """The mean share of nodes due per tick: of a step that computes every node, the useful work."""
        return float(self.due.mean()) if self.due.size else 1.0

    def goodput(self, ticks: int) -> float:
        """The share of node-seconds, after ``ticks`` ticks, spent on steps that reach the models."""
        if ticks == 0:
            return 1.0
        n = self.due.shape[1]
        seconds = self.time[ticks - 1]
        return min(1.0, float(self.useful[ticks - 1] / (n * seconds))) if seconds > 0 else 1.0  # no float overshoot

    def collapsed(self, num_rounds: int) -> Timeline:
        """One tick per closed round, for a method that steps every node together once per round (synchronous SGD:
        its compiled step is the round): the first ``num_rounds`` rounds; raises if fewer closed."""
        ends = np.flatnonzero(self.closes)[:num_rounds]
        if len(ends) < num_rounds:
            raise ValueError(f"the timeline closed {len(ends)} rounds, not {num_rounds}: build more ticks")
        n = self.due.shape[1]
        every = np.ones((num_rounds, n), bool)
        return Timeline(self.time[ends], every, np.ones(num_rounds, bool), every, self.steps[ends],
                        self.node_time[ends], self.node_start[ends], self.useful[ends], self.lost[ends],
                        [(r, age, rounds) for r, (_, age, rounds) in enumerate(self.staleness[:num_rounds])],
                        self.resolution)

    def record(self, ticks: int) -> dict:
        """The ``pace`` record of a history entry after ``ticks`` ticks: the virtual time, each node's steps and
        last step's end, the goodput and the node-seconds lost; with rounds, how many closed, the mean age of their
        oldest member's global model and the most rounds a member missed."""
        if ticks == 0:
            n = self.due.shape[1]
            return {"seconds": 0.0, "node_steps": [0] * n, "node_seconds": [0.0] * n, "goodput": 1.0, "lost": 0.0}
        t = ticks - 1
        record = {"seconds": float(self.time[t]), "node_steps": self.steps[t].tolist(),
                  "node_seconds": self.node_time[t].tolist(), "goodput": self.goodput(ticks),
                  "lost": float(self.lost[t])}
        closed = [(age, rounds) for tick, age, rounds in self.staleness if tick <= t]
        if closed:  # the merged models' ages: seconds since their global model was made, rounds missed
            record |= {"rounds": len(closed), "mean_round_age_seconds": float(np.mean([a for a, _ in closed])),
                       "max_rounds_missed": int(max(r for _, r in closed))}
        return record


class _Durations:
    """Each node's step durations in order, drawn from its own stream (``pace/jitter``, the node, the seed): a
    node's k-th duration is the same whatever the others do, and however its stream is drawn in blocks (a
    Generator's lognormal draws do not depend on the block sizes, tested)."""

    FIRST_BLOCK = 64  # a node's first draws; each later block doubles them: less than twice what it uses

    def __init__(self, compute: clock.Compute, num_nodes: int, seed: int):
        self.base = compute.step_seconds(num_nodes)
        self.trace = None if not len(compute.trace) else np.asarray(compute.trace, float)
        if self.trace is not None:
            require(self.trace.ndim == 2 and self.trace.shape[0] == num_nodes and self.trace.shape[1] >= 1,
                    "trace", f"[{num_nodes}, S] seconds per step", self.trace.shape)
        sigma2 = math.log1p(compute.jitter ** 2)  # lognormal of mean 1 and coefficient of variation `jitter`
        self.sigma, self.mu = math.sqrt(sigma2), -sigma2 / 2
        self.rngs = [np.random.default_rng((streams.stream_id("pace/jitter"), seed & 0x7FFFFFFF, i))
                     for i in range(num_nodes)]
        self.drawn = [np.empty(0)] * num_nodes
        self.used = np.zeros(num_nodes, int)

    def _factors(self, i: int, count: int) -> np.ndarray:
        """``[>= count]`` node i's lognormal factors, drawn on until there are ``count`` of them."""
        drawn = self.drawn[i]
        if count > len(drawn):
            more = max(count - len(drawn), len(drawn), self.FIRST_BLOCK)
            self.drawn[i] = drawn = np.concatenate([drawn, self.rngs[i].lognormal(self.mu, self.sigma, more)])
        return drawn

    def next(self, i: int) -> float:
        k = self.used[i]
        self.used[i] += 1
        nominal = self.base[i] if self.trace is None else self.trace[i, k % self.trace.shape[1]]
        if self.sigma == 0:
            return float(nominal)
        return float(nominal * self._factors(i, k + 1)[k])

    def first(self, count: int) -> np.ndarray:
        """``[N, count]`` each node's first ``count`` durations: what ``count`` calls of :meth:`next` give."""
        k = np.arange(count)
        nominal = self.base[:, None] if self.trace is None else self.trace[:, k % self.trace.shape[1]]
        if self.sigma == 0:
            return np.broadcast_to(nominal, (len(self.base), count)).astype(float)
        return nominal * np.stack([self._factors(i, count)[:count] for i in range(len(self.base))])


class _Availability:
    """Each node's off windows in time order, drawn lazily from its own stream (``pace/availability``)."""

    def __init__(self, availability: clock.Availability | None, num_nodes: int, seed: int):
        self.spec = availability
        self.windows: list[list[tuple[float, float]]] = [[] for _ in range(num_nodes)]
        self.until = np.zeros(num_nodes)  # windows are known up to this time
        if availability is not None:
            for i, spans in dict(availability.windows).items():
                self.windows[i] = sorted((float(a), float(b)) for a, b in spans)
                self.until[i] = math.inf
        self.rngs = [np.random.default_rng((streams.stream_id("pace/availability"), seed & 0x7FFFFFFF, i))
                     for i in range(num_nodes)]

    def _extend(self, i: int, horizon: float) -> None:
        spec = self.spec
        if spec is None or not math.isfinite(spec.mean_up):
            self.until[i] = math.inf
            return
        while self.until[i] <= horizon:  # up for Exp(mean_up), then down for Exp(mean_down)
            start = self.until[i] + self.rngs[i].exponential(spec.mean_up)
            end = start + self.rngs[i].exponential(spec.mean_down)
            self.windows[i].append((start, end))
            self.until[i] = end

    def first_off(self, i: int, start: float, end: float) -> tuple[float, float] | None:
        """The first off window of node i that meets ``[start, end)``, or None."""
        self._extend(i, end)
        for a, b in self.windows[i]:
            if b > start and a < end:
                return a, b
            if a >= end:
                break
        return None


def on_through(availability: clock.Availability | None, num_nodes: int, starts, ends=None, *,
               seed: int = 0) -> np.ndarray:
    """``[R, N] bool``: whether node n is on through all of ``[starts[r], ends[r])``, under the same off windows a
    cluster's nodes meet at their own pace (one stream per node, ``pace/availability``, and the seed): a federated
    round's available clients (:func:`jaxcomm.federated.fedavg`'s ``available``).

    Args:
      availability: the on/off process or windows (None: every node always on).
      num_nodes: N (M clients).
      starts: ``[R]`` seconds, ascending; ends: ``[R]`` seconds, each > its start (default: the next start, and
        an instant for the last).
      seed: the run's seed, as :func:`timeline`'s.

    Raises ValueError naming ``starts`` or ``ends`` on times out of order, before anything is drawn.
    """
    starts = np.asarray(starts, np.float64).reshape(-1)
    ends = np.append(starts[1:], starts[-1:]) if ends is None else np.asarray(ends, np.float64).reshape(-1)
    require(bool(np.all(np.isfinite(starts)) and np.all(starts >= 0) and np.all(np.diff(starts) >= 0)), "starts",
            "finite seconds >= 0 in ascending order", starts)
    require(ends.shape == starts.shape and bool(np.all(ends >= starts)), "ends",
            f"{starts.size} seconds, each >= its start", ends)
    on = np.ones((starts.size, num_nodes), bool)
    if availability is None or starts.size == 0:
        return on
    off = _Availability(availability, num_nodes, seed)
    for n in range(num_nodes):
        off._extend(n, float(ends[-1]))
        if not off.windows[n]:
            continue
        a, b = np.asarray(off.windows[n]).T  # disjoint windows in time order
        first = np.searchsorted(b, starts, side="right")  # the first window ending after each start
        meets = first < a.size
        meets[meets] = a[first[meets]] < np.maximum(ends[meets], starts[meets] + 1e-12)
        on[:, n] = ~meets
    return on


class _Nodes:
    """N nodes' event-ordered state: each one's step in progress, its counts, and the round it reports to."""

    def __init__(self, cluster: clock.Cluster, n: int, seed: int, transfers: tuple[tuple[int, float], ...] = ()):
        self.durations = _Durations(cluster.compute, n, seed)
        self.transfers = tuple((int(every), float(seconds)) for every, seconds in transfers if seconds > 0)
        self.off = _Availability(cluster.availability, n, seed)
        self.ready = np.zeros(n)  # the end of each node's step in progress (inf: waiting for its round)
        self.began = np.zeros(n)  # its start
        self.steps = np.zeros(n, int)
        self.last_end, self.last_start = np.zeros(n), np.zeros(n)
        self.round_start = np.zeros(n)  # when each node started its current round (its copy of the global model)
        self.rounds_done = np.zeros(n, int)  # rounds closed when it started it
        self.reported = np.zeros(n, bool)
        self.pending = np.zeros(n)  # seconds of steps not yet merged
        self.useful, self.lost, self.closed = 0.0, 0.0, 0
        self.staleness: list[tuple[int, float, int]] = []
        for i in range(n):
            self.start(i, 0.0)

    def start(self, i: int, at: float) -> None:
        """Node i starts a step at ``at``, retried after every off window it meets (the time until it, lost)."""
        while True:
            d = self.durations.next(i)
            window = self.off.first_off(i, at, at + d)
            if window is None:
                self.began[i], self.ready[i] = at, at + d
                return
            self.lost += max(0.0, window[0] - at)
            at = window[1]

    def transfer_after(self, i: int) -> float:
        """Seconds node i waits on its own exchanges after the step it just ended (0 without any)."""
        steps = self.steps[i]
        return sum(seconds for every, seconds in self.transfers if steps % every == 0)

    def take(self, resolution: float, waits: Waits) -> tuple[np.ndarray, float]:
        """Ends the steps due next (within ``resolution`` of the first); the due mask [N] and the tick's time.
        A node whose round's last step this was reports and waits; the others start their next step."""
        active = np.isfinite(self.ready)
        if not active.any():
            raise RuntimeError("every node waits and no round can close: a quorum larger than the nodes?")
        due = active & (self.ready <= self.ready[active].min() + resolution)
        time = float(self.ready[due].max())
        self.steps[due] += 1
        self.last_end[due], self.last_start[due] = self.ready[due], self.began[due]
        for i in np.flatnonzero(due):
            seconds = self.ready[i] - self.began[i]
            if not waits.every:
                self.useful += seconds
                self.start(i, self.last_end[i] + self.transfer_after(i))
                continue
            self.pending[i] += seconds
            if self.steps[i] % waits.every == 0:  # its round's last step: it reports and waits
                self.reported[i], self.ready[i] = True, math.inf
            else:
                self.start(i, self.last_end[i])
        return due, time

    def close(self, t: int, waits: Waits, quorum: int, round_seconds: float) -> tuple[np.ndarray, float] | None:
        """Closes the round at tick t if it can (a quorum reported and no step ends before it stops taking
        reports): its members [N] and the merge's time, its members restarted; None if it stays open."""
        if not waits.every or self.reported.sum() < quorum:
            return None
        reports = np.sort(self.last_end[self.reported])
        cutoff = reports[-1] if self.reported.all() else reports[quorum - 1] + waits.grace
        running = np.isfinite(self.ready)
        if (self.ready[running].min() if running.any() else math.inf) <= cutoff:
            return None
        close = cutoff + round_seconds  # the merge, after the round's transfer
        members = self.reported.copy()
        self.staleness.append((t, float(np.max(close - self.round_start[members])),
                               int(np.max(self.closed - self.rounds_done[members]))))
        self.closed += 1
        self.useful += self.pending[members].sum()
        self.pending[members] = 0.0
        for i in np.flatnonzero(members):
            self.round_start[i], self.rounds_done[i] = close, self.closed
            self.start(i, close)
        self.reported[:] = False
        return members, close


def timeline(cluster: clock.Cluster, num_nodes: int, num_ticks: int, *, seed: int = 0, waits: Waits = NOTHING,
             resolution: float = 0.0, round_seconds: float = 0.0,
             transfers: tuple[tuple[int, float], ...] = ()) -> Timeline:
    """The first ``num_ticks`` ticks of N nodes on ``cluster`` (event-ordered, see the module's docstring).

    Args:
      cluster: step durations (``cluster.compute``) and availability (``cluster.availability``).
      num_nodes: N.
      num_ticks: T, the compiled steps of the run.
      seed: the run's seed (jitter and availability draws, each node its own stream).
      waits: what the method waits for (:class:`Waits`).
      resolution: seconds within which step ends are taken in one tick (0: only equal times).
      round_seconds: a round's transfer, from its last report until it closes (and its members restart).
      transfers: ``(every, seconds)`` of each exchange a node waits for on its own, no collective: after every
        ``every``-th of its own steps it waits ``seconds`` before its next (SGP's push and its in-peer's message).
    """
    return _simulate(cluster, num_nodes, num_ticks, seed=seed, waits=waits, resolution=resolution,
                     round_seconds=round_seconds, transfers=transfers)


def _simulate(cluster: clock.Cluster, num_nodes: int, num_ticks: int, *, seed: int, waits: Waits,
              resolution: float, round_seconds: float, rounds: int | None = None,
              transfers: tuple[tuple[int, float], ...] = ()) -> Timeline:
    """:func:`timeline`; with ``rounds``, only the ticks at which a round closes, and none after the ``rounds``-th
    (what :meth:`Timeline.collapsed` keeps of the first ``num_ticks`` ticks, without simulating the rest)."""
    n = num_nodes
    waits.check(n)
    require(is_int(num_ticks) and num_ticks >= 0, "num_ticks", "an integer >= 0", num_ticks)
    require(is_real(resolution) and resolution >= 0, "resolution", "a number >= 0", resolution)
    nodes, quorum = _Nodes(cluster, n, seed, transfers), waits.quorum or n
    out = {name: [] for name in ("time", "due", "closes", "members", "steps", "node_time", "node_start", "useful",
                                 "lost")}
    for t in range(num_ticks):
        if rounds is not None and nodes.closed >= rounds:
            break
        due, time = nodes.take(resolution, waits)
        closed = nodes.close(t, waits, quorum, round_seconds)
        if rounds is not None and closed is None:
            continue
        members = np.zeros(n, bool) if closed is None else closed[0]
        time = time if closed is None else max(time, closed[1])
        if out["time"]:  # time never runs backwards: a tick after a round's close is read at that close at least
            time = max(time, out["time"][-1])
        for name, value in (("time", time), ("due", due), ("closes", closed is not None), ("members", members),
                            ("steps", nodes.steps.copy()), ("node_time", nodes.last_end.copy()),
                            ("node_start", nodes.last_start.copy()), ("useful", nodes.useful), ("lost", nodes.lost)):
            out[name].append(value)
    arrays = {k: np.asarray(v) for k, v in out.items()}
    if not out["time"]:
        arrays |= {"due": np.zeros((0, n), bool), "members": np.zeros((0, n), bool), "steps": np.zeros((0, n), int),
                   "node_time": np.zeros((0, n)), "node_start": np.zeros((0, n))}
    return Timeline(**arrays, staleness=nodes.staleness, resolution=float(resolution))


def _always_on(availability: clock.Availability | None) -> bool:
    """Whether no node ever goes off (:class:`_Availability` draws no window): no process and no window given."""
    return availability is None or (not math.isfinite(availability.mean_up)
                                    and not any(len(spans) for spans in dict(availability.windows).values()))


def _lockstep_rounds(cluster: clock.Cluster, num_nodes: int, num_rounds: int, *, seed: int, resolution: float,
                     round_seconds: float) -> Timeline:
    """The first ``num_rounds`` rounds of synchronous SGD (:data:`LOCKSTEP`) on a cluster whose nodes are always on,
    collapsed (:meth:`Timeline.collapsed`), in closed form: round k's nodes all start at the previous round's close
    ``s[k]`` (0 for the first), node i's step ends at ``s[k] + d[k, i]`` (its k-th duration), and the round closes at
    the latest end plus its transfer. Equal, bit for bit, to the event-ordered timeline of ``num_rounds x N``
    ticks collapsed (tested): the same float64 operations in the same order, on the same draws (T per node, not
    T x N), in O(T N) vectorised work instead of T x N ticks simulated one by one."""
    n, t = num_nodes, num_rounds
    require(is_real(resolution) and resolution >= 0, "resolution", "a number >= 0", resolution)
    d = _Durations(cluster.compute, n, seed).first(t).T  # [T, N]
    longest = d.max(axis=1)  # max_i (s + d_i) == s + max_i d_i: rounding to nearest is monotonic
    start, close, at = np.empty(t), np.empty(t), 0.0
    for k in range(t):  # the only sequential part: a round starts at the previous one's close
        start[k] = at
        at = at + longest[k] + round_seconds
        close[k] = at
    node_time = start[:, None] + d  # [T, N]
    node_start = np.repeat(start[:, None], n, axis=1)
    seconds = node_time - node_start  # [T, N] each member's step as the event loop measures it (end - start)
    merged = np.array([row.sum() for row in seconds])  # [T] one round's at a time, as the event loop sums them
    every = np.ones((t, n), bool)
    return Timeline(close, every, np.ones(t, bool), every, np.repeat(np.arange(1, t + 1)[:, None], n, axis=1),
                    node_time, node_start, np.cumsum(merged), np.zeros(t),
                    [(k, float(close[k] - start[k]), 0) for k in range(t)], float(resolution))


def lockstep(num_nodes: int, num_ticks: int, waits: Waits = NOTHING) -> Rows:
    """The rows of a run in which every node steps every tick (no cluster), a step a second: rounds every
    ``waits.every`` steps with every node."""
    t = np.arange(num_ticks)
    closes = (t + 1) % waits.every == 0 if waits.every else np.zeros(num_ticks, bool)
    return Rows(jnp.ones((num_ticks, num_nodes), bool), jnp.asarray(closes),
                jnp.asarray(np.repeat(closes[:, None], num_nodes, axis=1)),
                *(jnp.asarray(np.repeat(t[:, None] + k, num_nodes, axis=1), dtype) for k, dtype in
                  ((1, jnp.int32), (0, jnp.float32), (1, jnp.float32))))


class OwnPace(NamedTuple):
    """How a run at its own pace is simulated (``methods.train(..., own_pace=OwnPace(...))``; True: the defaults).

    Attributes:
      resolution: seconds within which step ends are taken in one tick (events closer than that may be taken
        in either order); None: three quarters of the fastest node's nominal step, which keeps about three
        quarters of the nodes due per tick at 20 % jitter.
      capacity: nodes per pass where a stacked population's step computes only the nodes due
        (:func:`jaxcomm.population.lift_held`: it pays where few nodes are due, ``results/benchmark/pace/``);
        None, or N or more: every node computed each tick and the due ones kept.
    """

    resolution: float | None = None
    capacity: int | None = None

    def capacity_for(self, num_nodes: int) -> int:
        return num_nodes if self.capacity is None else int(self.capacity)

    def tick_seconds(self, compute: clock.Compute, num_nodes: int) -> float:
        """The fastest node's nominal step: about a tick's length (what message delays are rounded up to)."""
        nominal = (np.asarray(compute.trace, float).mean(axis=1) if len(compute.trace)
                   else compute.step_seconds(num_nodes))
        return float(nominal.min())

    def resolution_for(self, compute: clock.Compute, num_nodes: int) -> float:
        if self.resolution is not None:
            return float(self.resolution)
        return 0.75 * self.tick_seconds(compute, num_nodes)


def own_pace_of(own_pace: OwnPace | bool) -> OwnPace:
    """``own_pace`` as an :class:`OwnPace` (True: the defaults)."""
    return own_pace if isinstance(own_pace, OwnPace) else OwnPace()


def of_run(cluster: clock.Cluster, num_nodes: int, num_ticks: int, *, seed: int, waits: Waits,
           traffic=(), own_pace: OwnPace | bool = True) -> Timeline:
    """The timeline of one run: :func:`timeline` with the round transfer of the method's blocking rounds
    (``traffic``, :class:`jaxcomm.ledger.Round` values) on the cluster's links; where the nodes wait for no round
    (``waits.every`` 0), each blocking exchange delays each node by its own transfer after its steps (SGP's push:
    :func:`jaxcomm.clock.round_seconds` of it every ``every`` of the node's steps), as the lockstep clock charges it.
    Synchronous SGD's (:data:`LOCKSTEP`) has one tick per round (:meth:`Timeline.collapsed`), in closed form where
    no node goes off (O(T N) work), else simulated up to its T-th round's close (at most T x N ticks)."""
    settings = own_pace_of(own_pace)
    blocking = [r for r in traffic if r.blocking]
    if waits.every or not blocking:  # the nodes wait for rounds: every blocking exchange is the round's transfer
        round_seconds, transfers = sum(clock.round_seconds(r, cluster, num_nodes) for r in blocking), ()
    else:  # no collective: each node waits on its own exchanges (a neighbours round: its copies, one link's time)
        round_seconds = 0.0
        transfers = tuple((r.every, clock.round_seconds(r, cluster, num_nodes)) for r in blocking)
    resolution = settings.resolution_for(cluster.compute, num_nodes)
    if waits == LOCKSTEP:  # one compiled step per round: a round's ticks collapsed into one
        require(is_int(num_ticks) and num_ticks >= 0, "num_ticks", "an integer >= 0", num_ticks)
        if _always_on(cluster.availability) and num_nodes >= 1:
            return _lockstep_rounds(cluster, num_nodes, num_ticks, seed=seed, resolution=resolution,
                                    round_seconds=round_seconds)
        # a round takes at most N ticks (each ends one member's step): T rounds close within T x N of them
        return _simulate(cluster, num_nodes, num_ticks * num_nodes, seed=seed, waits=waits, resolution=resolution,
                         round_seconds=round_seconds, rounds=num_ticks).collapsed(num_ticks)
    return timeline(cluster, num_nodes, num_ticks, seed=seed, waits=waits, resolution=resolution,
                    round_seconds=round_seconds, transfers=transfers)


def taken_mean(losses, state, steps_done: int) -> float:
    """The mean of a chunk's losses ``[L, N]`` over the node-steps taken: at its own pace (``state.pace``) the
    nodes due (a node held reports 0), else every entry."""
    losses = np.asarray(losses)
    rows = getattr(state, "pace", None)
    due = None if rows is None else np.asarray(rows.due)
    if due is None or due.ndim != 2 or losses.ndim != 2 or losses.shape[1] != due.shape[1]:
        return float(np.mean(losses))
    took = due[steps_done - len(losses):steps_done]
    return float(np.mean(losses[took])) if took.any() else float("nan")
