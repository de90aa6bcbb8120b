"""Time, not only steps and bytes: a virtual clock for every method on a cluster of computers and links.

The thesis reads its steps as the wall time of a parallel system (§2.3) with communication free and
instantaneous. Here a :class:`Cluster` is a value: how long a local step takes on each node
(:class:`Compute`, optionally with stragglers) and what links join them (:class:`Link`: bandwidth and
latency, uniform or per edge, with named presets). A method's traffic, as the byte ledger states it
(:class:`jaxcomm.ledger.Round` values, and the network's asynchronous messages), becomes seconds:

* a blocking round makes every node wait for the slowest and for the transfer: a ring all-reduce takes
  ``2 (N-1)`` hops of ``latency + (bytes / N) / bandwidth``, an all-gather ``N - 1`` hops of
  ``latency + bytes / bandwidth``, a neighbour exchange ``latency + degree x bytes / bandwidth`` (each node's
  uplink sends its copies one after the other);
* a background round (codistillation's checkpoints) overlaps the ``every`` steps of compute before the next
  one, and costs only what it takes beyond them;
* asynchronous messages (output sharing, Algorithm 2) leave after the sender's step and overlap its compute;
  a node's uplink sends its copies one after the other, so a node whose uplink cannot keep up is held back
  by it. No node waits for another: the run's clock is the median node's.

:func:`reading` gives the clock of a run after ``steps_done`` steps (``methods.train(..., cluster=)`` puts one in
every history record); :func:`delivery_steps` the delay, in the receiver's steps, after which a broadcast
reaches an inbox (messages in flight, :mod:`jaxcomm.inbox`).

Read after the fact, this clock keeps every node at the same step: heterogeneous speeds change the clock,
not the order of the steps. Trained at their own pace (``methods.train(..., own_pace=True)``,
:mod:`jaxcomm.pace`), a fast node runs ahead of a slow one, with jitter and availability.

References:
  Patarasuk & Yuan (2009) (ring all-reduce: 2 (N-1) steps of 1/N of the data); Hockney (1994) (a transfer as
  latency + bytes / bandwidth); Lacaille (2018), §2.3.
"""

from __future__ import annotations

import collections
import math
from collections.abc import Callable, Mapping
from typing import Any, NamedTuple

import numpy as np

from jaxcomm import driver, ledger
from jaxcomm.validation import is_int, is_real, require

GBIT = 1e9 / 8
"""Bytes per second of 1 Gbit/s."""


class Link(NamedTuple):
    """A link between two nodes, one direction.

    Attributes:
      bandwidth: bytes per second (``math.inf``: no transfer time).
      latency: seconds one way.
      name: how tables call it.
      source: where the figures come from.
    """

    bandwidth: float
    latency: float
    name: str = "link"
    source: str = ""

    def transfer(self, nbytes: float, copies: int = 1) -> float:
        """Seconds for ``copies`` messages of ``nbytes`` sent one after the other: latency + size / bandwidth."""
        return self.latency + copies * nbytes / self.bandwidth


INSTANT = Link(math.inf, 0.0, "instant", "the thesis (§2.3): communication free and instantaneous")
DATACENTER = Link(100 * GBIT, 10e-6, "datacenter",
                  "100 Gbit/s (InfiniBand EDR, 100 GbE line rate) and 10 us one way inside a cluster: "
                  "typical figures, not measured here")
LAN = Link(1 * GBIT, 0.2e-3, "lan_1g", "1 Gbit/s Ethernet (IEEE 802.3ab line rate) and 0.2 ms one way through a "
           "switch: typical figures, not measured here")
WAN = Link(0.1 * GBIT, 40e-3, "wan_100m", "100 Mbit/s and 40 ms one way (about 80 ms round trip, across a "
           "continent): typical wide-area figures, not measured here")
LINKS: dict[str, Link] = {link.name: link for link in (INSTANT, DATACENTER, LAN, WAN)}
"""The named links."""


class Compute(NamedTuple):
    """How long a local step takes on each node.

    Attributes:
      seconds_per_step: one local step (forward, backward, update) of a node at nominal speed.
      speed: per-node slowdown factors (node i's step takes ``seconds_per_step x speed[i]``); empty: all 1.
      source: where ``seconds_per_step`` comes from.
      jitter: the coefficient of variation of a step's duration: each step of node i takes its nominal time times
        a lognormal factor of mean 1 (0.2: "20 % jitter"), drawn from the node's own stream
        (:func:`jaxcomm.pace.timeline`; the lockstep clock, :func:`seconds`, reads nominal times).
      trace: ``[N, S]`` seconds of each node's steps, replayed in a cycle (measured step times); replaces
        ``seconds_per_step x speed`` in :func:`jaxcomm.pace.timeline`.
    """

    seconds_per_step: float
    speed: tuple[float, ...] = ()
    source: str = ""
    jitter: float = 0.0
    trace: tuple = ()

    def step_seconds(self, num_nodes: int) -> np.ndarray:
        """``[N]`` seconds of one local step of each node."""
        speed = np.ones(num_nodes) if not self.speed else np.asarray(self.speed, float)
        if speed.shape != (num_nodes,):
            raise ValueError(f"Compute.speed has {speed.size} factors for {num_nodes} nodes")
        return self.seconds_per_step * speed


def from_flops(flops_per_step: float, flops_per_second: float, *, utilisation: float = 1.0,
               source: str = "") -> Compute:
    """A step of ``flops_per_step`` (e.g. :func:`jaxcomm.flops.count` of a node's training step) on a device of
    ``flops_per_second`` at ``utilisation`` of that rate."""
    if not (flops_per_step > 0 and flops_per_second > 0 and 0 < utilisation <= 1):
        raise ValueError("from_flops needs flops_per_step > 0, flops_per_second > 0 and utilisation in (0, 1]")
    return Compute(flops_per_step / (flops_per_second * utilisation),
                   source=source or f"{flops_per_step:.3g} FLOP at {utilisation:g} x {flops_per_second:.3g} FLOP/s")


class Profile(NamedTuple):
    """A device by its peak throughput. Attributes: name; flops_per_second: dense peak; source: where it is from."""

    name: str
    flops_per_second: float
    source: str


PROFILES: dict[str, Profile] = {p.name: p for p in (
    Profile("h100_sxm", 989.4e12, "NVIDIA H100 Tensor Core GPU datasheet (SXM5): 989.4 TFLOP/s dense BF16"),
    Profile("a100", 312e12, "NVIDIA A100 Tensor Core GPU datasheet: 312 TFLOP/s dense BF16"),
    Profile("l4", 121e12, "NVIDIA L4 datasheet: 121 TFLOP/s dense BF16 (242 with sparsity)"),
    Profile("v100", 125e12, "NVIDIA V100 datasheet (SXM2): 125 TFLOP/s FP16 tensor"),
    Profile("t4", 65e12, "NVIDIA T4 datasheet: 65 TFLOP/s FP16 tensor (mixed precision)"),
)}
"""Named device profiles (peak dense rates from vendor datasheets; a step reaches a share of them, the
``utilisation`` of :func:`profiled`)."""


def profiled(flops_per_step: float, profiles, *, utilisation: float = 0.3, jitter: float = 0.0) -> Compute:
    """Every node's step time from its device: ``profiles`` one :data:`PROFILES` name (or :class:`Profile`) per
    node, each reaching ``utilisation`` of its peak on a step of ``flops_per_step`` FLOP."""
    chosen = [PROFILES[p] if isinstance(p, str) else p for p in profiles]
    seconds = [flops_per_step / (p.flops_per_second * utilisation) for p in chosen]
    base = min(seconds)
    names = sorted({p.name for p in chosen})
    return Compute(base, tuple(s / base for s in seconds),
                   f"{flops_per_step:.3g} FLOP per step at {utilisation:g} of the peak of " + ", ".join(names),
                   jitter)


def stragglers(num_nodes: int, *, count: int = 1, slowdown: float = 3.0, seed: int = 0) -> tuple[float, ...]:
    """Per-node speed factors (:attr:`Compute.speed`): ``count`` nodes, chosen by ``seed``, ``slowdown`` times
    slower than the others."""
    if not (0 <= count <= num_nodes and slowdown >= 1):
        raise ValueError(f"stragglers needs 0 <= count <= {num_nodes} and slowdown >= 1")
    speed = np.ones(num_nodes)
    speed[np.random.default_rng(seed).choice(num_nodes, count, replace=False)] = slowdown
    return tuple(float(s) for s in speed)


class Availability(NamedTuple):
    """When nodes are off, for :func:`jaxcomm.pace.timeline`: a step a node is taking when it goes off is lost, and it
    starts again when it is back.

    Attributes:
      mean_up: mean seconds a node stays on (exponential; ``math.inf``: never goes off by itself).
      mean_down: mean seconds it stays off (exponential).
      windows: ``{node: ((start, end), ...)}`` off windows given by hand (a trace); they replace the process for
        those nodes.
    """

    mean_up: float = math.inf
    mean_down: float = 0.0
    windows: Mapping[int, tuple[tuple[float, float], ...]] = {}


class Cluster(NamedTuple):
    """Computers and the links between them, as a value.

    Attributes:
      compute: every node's step time.
      link: the link between any two nodes.
      edges: ``{(i, j): Link}`` links that differ from ``link`` (i sends to j).
      name: how tables call it (default: the link's).
      availability: when nodes are off (:class:`Availability`; None: always on), read by
        :func:`jaxcomm.pace.timeline`.
      uplinks, downlinks: per-node bandwidth caps in bytes per second (empty: none): a transfer from i to j runs at
        the least of its link's bandwidth, i's uplink and j's downlink (asymmetric access links).
      bottleneck: a link every message also crosses, shared: the k copies sent at one tick take ``latency +
        k x bytes / bandwidth`` on it (output sharing at its own pace, :mod:`jaxcomm.pace`); None: none.
    """

    compute: Compute
    link: Link = LAN
    edges: Mapping[tuple[int, int], Link] = {}
    name: str = ""
    availability: Availability | None = None
    uplinks: tuple[float, ...] = ()
    downlinks: tuple[float, ...] = ()
    bottleneck: Link | None = None

    @property
    def label(self) -> str:
        return self.name or self.link.name

    def check(self, num_nodes: int) -> None:
        """Raises ValueError naming the first field of the cluster that cannot time ``num_nodes`` nodes: step times
        finite and > 0, jitter >= 0, one speed (and uplink, downlink) per node, traces ``[N, S]`` of times > 0,
        availability of mean up time > 0 and windows in order, links of bandwidth > 0 and finite latency >= 0 (what
        :func:`jaxcomm.methods.train` checks before anything is built)."""
        finite = lambda v: is_real(v) and math.isfinite(v)  # noqa: E731
        c, n = self.compute, num_nodes
        require(finite(c.seconds_per_step) and c.seconds_per_step > 0, "compute.seconds_per_step",
                "a finite number of seconds > 0", c.seconds_per_step)
        require(finite(c.jitter) and c.jitter >= 0, "compute.jitter", "a finite number >= 0", c.jitter)
        for field, values in (("compute.speed", c.speed), ("uplinks", self.uplinks), ("downlinks", self.downlinks)):
            require(not len(values) or len(values) == n, field, f"empty or one value per node ({n})", values)
            for v in values:
                require(is_real(v) and v > 0 and (field != "compute.speed" or math.isfinite(v)), field,
                        "values > 0" + (", finite" if field == "compute.speed" else ""), values)
        if len(c.trace):
            trace = np.asarray(c.trace, float)
            require(trace.ndim == 2 and trace.shape[0] == n and trace.shape[1] >= 1 and np.all(np.isfinite(trace))
                    and np.all(trace > 0), "compute.trace", f"[{n}, S] finite seconds > 0", trace.shape)
        if self.availability is not None:
            a = self.availability
            require(is_real(a.mean_up) and a.mean_up > 0, "availability.mean_up", "a number of seconds > 0 (inf: "
                    "never off)", a.mean_up)
            require(finite(a.mean_down) and a.mean_down >= 0, "availability.mean_down",
                    "a finite number of seconds >= 0", a.mean_down)
            for node, spans in dict(a.windows).items():
                require(is_int(node) and 0 <= node < n, "availability.windows", f"nodes in [0, {n})", node)
                for span in spans:
                    require(len(span) == 2 and all(finite(v) for v in span) and 0 <= span[0] < span[1],
                            "availability.windows", "(start, end) spans of 0 <= start < end", span)
        links = [("link", self.link)] + [(f"edges[{k}]", v) for k, v in dict(self.edges).items()] + (
            [("bottleneck", self.bottleneck)] if self.bottleneck is not None else [])
        for field, link in links:
            require(is_real(link.bandwidth) and link.bandwidth > 0, f"{field}.bandwidth",
                    "a number of bytes per second > 0 (inf: instant)", link.bandwidth)
            require(finite(link.latency) and link.latency >= 0, f"{field}.latency", "a finite number of seconds >= 0",
                    link.latency)
        for i, j in dict(self.edges):
            require(is_int(i) and is_int(j) and 0 <= i < n and 0 <= j < n and i != j, "edges",
                    f"(i, j) pairs of nodes in [0, {n}), i != j", (i, j))

    def link_between(self, i: int, j: int) -> Link:
        """The link from i to j: its edge's (or the cluster's), capped by i's uplink and j's downlink."""
        link = self.edges.get((i, j), self.link)
        caps = [link.bandwidth, *(self.uplinks[i:i + 1]), *(self.downlinks[j:j + 1])]
        return link if min(caps) == link.bandwidth else link._replace(bandwidth=min(caps))

    def slowest(self, pairs) -> Link:
        """The link of least bandwidth (then most latency) among the ``(i, j)`` pairs."""
        links = [self.link_between(i, j) for i, j in pairs] or [self.link]
        return Link(min(lk.bandwidth for lk in links), max(lk.latency for lk in links), "slowest")


def two_tier(compute: Compute, num_nodes: int, *, regions: int = 2, inside: Link = LAN, between: Link = WAN,
             name: str = "") -> Cluster:
    """Nodes in ``regions`` equal regions (node i in region ``i * regions // num_nodes``): ``inside`` links within a
    region, ``between`` links across (a ring of the nodes in id order crosses regions ``regions`` times)."""
    region = [i * regions // num_nodes for i in range(num_nodes)]
    edges = {(i, j): between for i in range(num_nodes) for j in range(num_nodes) if region[i] != region[j]}
    return Cluster(compute, inside, edges, name or f"{inside.name}_x{regions}_{between.name}")


def round_seconds(r: ledger.Round, cluster: Cluster, num_nodes: int) -> float:
    """Seconds one round of ``r`` takes on ``cluster`` (the slowest link along a ring of the nodes in id order for
    the collectives; the slowest link of the cluster for a neighbour exchange, whose graph it does not know; the
    server's link for a "server" round, :func:`server_seconds`)."""
    n = num_nodes
    if r.pattern == "server":  # a server is there to talk to even for one client
        return server_seconds(r, cluster, n)
    if n == 1 or r.nbytes == 0:
        return 0.0
    ring = cluster.slowest((i, (i + 1) % n) for i in range(n))
    if r.pattern == "allreduce":  # reduce-scatter then all-gather: 2 (N-1) hops of a 1/N chunk
        return 2 * (n - 1) * (r.parts * ring.latency + r.nbytes / n / ring.bandwidth)
    if r.pattern == "allgather":
        return (n - 1) * (r.parts * ring.latency + r.nbytes / ring.bandwidth)
    if r.pattern == "neighbours":
        worst = cluster.slowest(list(cluster.edges) + [(0, 1)])
        return r.parts * worst.latency + (r.edges / n) * r.nbytes / worst.bandwidth
    raise ValueError(f"pattern must be one of {ledger.PATTERNS}, got {r.pattern!r}")


def server_seconds(r: ledger.Round, cluster: Cluster, num_nodes: int) -> float:
    """Seconds of one "server" round of N clients: the N uploads of ``nbytes``, then the N downloads of the server's
    reply, each direction ``parts x latency + max(N x nbytes / server bandwidth, nbytes / the slowest client's
    access link)``: the server's link (the cluster's ``link``, capped by its ``bottleneck`` where it has one)
    carries the N copies one after the other, and no client's copy passes its own uplink (downlink) faster.

    References: Hockney (1994) (a transfer as latency + bytes / bandwidth); McMahan et al. (2017) (FedAvg: the
    cohort uploads its models, the server broadcasts the average)."""
    if r.nbytes == 0:
        return 0.0
    server = cluster.link if cluster.bottleneck is None else Link(
        min(cluster.link.bandwidth, cluster.bottleneck.bandwidth), cluster.link.latency + cluster.bottleneck.latency)
    n = num_nodes

    def way(access: tuple[float, ...]) -> float:  # one direction: the server's link, or the slowest client's own
        slowest = min(access[:n], default=math.inf)
        return r.parts * server.latency + max(n * r.nbytes / server.bandwidth, r.nbytes / slowest)

    return way(tuple(cluster.uplinks)) + way(tuple(cluster.downlinks))


def traffic_of(built: Any, state: Any) -> tuple[ledger.Round, ...]:
    """A built method's schedule: its ``traffic`` (a tuple of rounds, or a function of the state)."""
    traffic = getattr(built, "traffic", None)
    if traffic is None:
        raise TypeError(f"{type(built).__name__} states no traffic: give it a `traffic` attribute (a tuple of "
                        "jaxcomm.ledger.Round values, () when it sends nothing) to read it in time")
    return tuple(traffic(state) if callable(traffic) else traffic)


def seconds(cluster: Cluster, traffic: tuple[ledger.Round, ...], num_nodes: int, steps_done: int, *,
            uplink_bytes: np.ndarray | None = None) -> dict:
    """The virtual clock after ``steps_done`` steps of a schedule on ``cluster``.

    Args:
      cluster: the computers and links.
      traffic: the method's rounds (:class:`jaxcomm.ledger.Round`).
      num_nodes: N.
      steps_done: steps every node has taken.
      uplink_bytes: ``[N]`` bytes each node has sent asynchronously (output sharing's message copies): its
        uplink's busy time holds a node back when it exceeds its compute.

    Returns:
      ``{"seconds", "compute", "communication"}``: the clock, the part spent computing (the slowest node's
      under any blocking round, the median node's otherwise) and the rest (transfers waited for).
    """
    step = cluster.compute.step_seconds(num_nodes)
    node = steps_done * step  # [N]
    if uplink_bytes is not None:  # copies leave one after the other on a node's uplink
        bandwidth = np.array([min((cluster.link_between(i, j).bandwidth for j in range(num_nodes) if j != i),
                                  default=cluster.link.bandwidth) for i in range(num_nodes)])
        node = np.maximum(node, np.asarray(uplink_bytes, float) / bandwidth)
    blocking = any(r.blocking for r in traffic)
    typical = np.max if blocking else np.median  # the nodes wait for the slowest, or none waits
    nominal, held = float(steps_done * typical(step)), float(typical(node))
    waited = 0.0
    for r in traffic:  # a round of k takers (a federated cohort's clients that are on) is timed for k, 0 s for none
        for k, rounds in collections.Counter(r.taking_part(num_nodes, r.rounds_done(steps_done))).items():
            each = round_seconds(r, cluster, k) if k else 0.0
            waited += rounds * (each if r.blocking else max(0.0, each - r.every * float(np.max(step))))
    return {"seconds": held + waited, "compute": nominal, "communication": held - nominal + waited}


def reading(cluster: Cluster, built: Any, state: Any, steps_done: int) -> dict:
    """The ``clock`` record of a run of ``built`` after ``steps_done`` steps: :func:`seconds` of its traffic and
    asynchronous uplink (``built.uplink_bytes(state)``; None for a method of rounds), and the cluster's name."""
    return {**seconds(cluster, traffic_of(built, state), built.config.num_nodes, steps_done,
                      uplink_bytes=built.uplink_bytes(state)), "cluster": cluster.label}


def retime(result: dict, cluster: Cluster) -> list[dict]:
    """The ``clock`` record at every evaluation of a trained run (a :func:`jaxcomm.methods.train` result) on
    ``cluster``, from its ledger: its traffic and, for asynchronous messages, the copies each record counts
    (spread evenly over the nodes). A method whose training the links do not change (every synchronous one)
    reads the same clock as a run under the cluster; output sharing's messages would have arrived later."""
    built = result["built"]
    n, traffic = built.config.num_nodes, traffic_of(built, result["state"])
    message = built.message_bytes if built.uplink_bytes(result["state"]) is not None else 0  # asynchronous copies
    readings = []
    for record in result["history"]:
        sent = record.get("counters", {}).get("sent", 0) if message else 0
        uplink = np.full(n, sent * message / n) if message else None
        readings.append({**seconds(cluster, traffic, n, record["step"], uplink_bytes=uplink),
                         "cluster": cluster.label})
    return readings


def delivery_seconds(cluster: Cluster, adj: np.ndarray, message_bytes: float, *,
                     copies: np.ndarray | None = None) -> np.ndarray:
    """``[N, N]`` seconds from the end of sender i's step until its broadcast reaches receiver j (``adj[i, j]``;
    0 elsewhere): the latency, and the sender's ``copies[i]`` copies (default: its out-degree in ``adj``) one after
    the other on its uplink; a receiver is counted as getting its copy when the last one leaves (the order of
    the copies is not modelled)."""
    adj = np.asarray(adj, bool)
    n = adj.shape[0]
    copies = adj.sum(1) if copies is None else np.asarray(copies)
    delay = np.zeros((n, n))
    for i, j in zip(*np.nonzero(adj), strict=True):
        delay[i, j] = cluster.link_between(int(i), int(j)).transfer(message_bytes, copies=int(copies[i]))
    return delay


def delivery_steps(cluster: Cluster, adj: np.ndarray, message_bytes: float, *,
                   copies: np.ndarray | None = None) -> np.ndarray:
    """``[N, N] int32`` receiver steps a message spends in flight (:func:`delivery_seconds`): a receiver reads its
    inbox at the start of each of its steps, so a message sent at the end of step t that takes d seconds is
    first read at step ``t + 1 + ceil(d / c_j)`` (``c_j`` the receiver's step time); 0 where it takes no time
    (today's inboxes)."""
    step = cluster.compute.step_seconds(np.asarray(adj).shape[0])
    delay = delivery_seconds(cluster, adj, message_bytes, copies=copies)
    return np.ceil(delay / step[None, :] - 1e-9).clip(min=0).astype(np.int32)


def seconds_to_target(history: list[dict], target: float, read: Callable[[dict], float]) -> float | None:
    """Virtual seconds (the record's ``clock``) of the first evaluation where ``read(record) >= target``; None if
    none reaches it."""
    record = driver.first_reaching(history, target, read)
    return None if record is None else record["clock"]["seconds"]
