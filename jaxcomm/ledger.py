"""One byte ledger: what every method sends, booked by kind, read one way.

Each method books the traffic its run made as a :class:`Booking` of total bytes sent over the run, all
nodes together, by kind:

* ``inputs``: images a message carries (exclusive shards, the ``private`` data model);
* ``payload``: what is said about them (labels, logits, features);
* ``parameters``: parameters or gradients, dense, compressed or low-rank (all-reduce, gossip, DiLoCo's
  outer gradients, checkpoints);
* ``indices``: sample indices (the ``shared`` data model);
* ``headers``: message headers (sender id and step);
* ``coordinates``: which coordinates of a sparse parameter vector travel (top-k's int32 positions).

Inputs are counted under an encoding (:data:`ENCODINGS`): ``raw``, the uint8 arrays the simulator holds, or
``stored``, the dataset's stored size per image (:func:`jaxcomm.data.stored_bytes_per_image`: ~921 B per CIFAR-10
JPEG against 3,072 raw); :func:`encoded` re-prices a record's inputs.

:func:`record` turns a booking into the ``bytes`` record every method's history carries:
``{"total", "per_node_step", "by_kind": {kind: per node and step}, "data_model", "encoding"}``. The
helpers below book messages (:func:`messages`) and parameters sent to neighbours (:func:`to_neighbours`).

A method whose traffic is a schedule (every ``H`` steps, the same collective) states it as :class:`Round` values,
its ``traffic``; :func:`book` prices them in bytes and :mod:`jaxcomm.clock` in seconds, so bytes and time
are read from the same description.

References:
  Patarasuk & Yuan (2009) (ring all-reduce); Lacaille (2018), §1.3.2.2 (what a message costs).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

import numpy as np

from jaxcomm import exchange as exchanges

KINDS = ("inputs", "payload", "parameters", "indices", "headers", "coordinates")
DATA_MODELS = exchanges.DATA_MODELS
ENCODINGS = ("raw", "stored")  # inputs as the uint8 arrays held, or as the dataset stores them


class Booking(NamedTuple):
    """Bytes sent over a run, all nodes together, by kind (floats; see the module docstring)."""

    inputs: float = 0.0
    payload: float = 0.0
    parameters: float = 0.0
    indices: float = 0.0
    headers: float = 0.0
    coordinates: float = 0.0

    def __add__(self, other: Booking) -> Booking:  # type: ignore[override]
        return Booking(*(a + b for a, b in zip(self, other, strict=True)))

    def scale(self, factor: float) -> Booking:
        return Booking(*(float(v) * factor for v in self))

    @property
    def total(self) -> float:
        return float(sum(self))


def message(exchange: exchanges.Exchange, batch_size: int, payload_dim: int, *, sample_bytes: float,
            data_model: str = "private") -> Booking:
    """One output-sharing message by kind: :func:`jaxcomm.exchange.message_parts`, whose sum is
    :func:`jaxcomm.exchange.message_bytes`."""
    return Booking(**exchanges.message_parts(exchange, batch_size, payload_dim, sample_bytes=sample_bytes,
                                             data_model=data_model))


def messages(copies: int, one: Booking) -> Booking:
    """``copies`` copies of a message ``one`` (a copy per receiver, the inbox ``sent`` counter)."""
    return one.scale(copies)


def to_neighbours(copies: int, num_values: int, *, bytes_per_value: int = 4) -> Booking:
    """``copies`` parameter messages of ``num_values`` values each (one per out-edge and round: gossip)."""
    return Booking(parameters=float(copies * num_values * bytes_per_value))


PATTERNS = ("allreduce", "allgather", "neighbours", "server")


class Round(NamedTuple):
    """One recurring exchange of a method's schedule: a collective every ``every`` steps.

    Attributes:
      pattern: "allreduce" (a ring all-reduce of a ``nbytes`` vector held by every node), "allgather" (every
        node's ``nbytes`` message reaches the N - 1 others: messages that cannot be summed on the way) or
        "neighbours" (every node sends ``nbytes`` to each of its out-neighbours, ``edges`` copies in all) or "server"
        (clients to a server: each of the N nodes, a cohort's clients, uploads ``nbytes`` and downloads the server's
        ``nbytes`` reply, the global model, once per round: FedAvg, SCAFFOLD; the ledger books the uploads).
      nbytes: one node's contribution (see ``pattern``).
      every: steps between rounds; a round ends steps ``every, 2 every, ...``.
      blocking: the nodes wait for it (synchronous); False: it overlaps the ``every`` steps of compute before
        the next round (codistillation's checkpoints).
      parts: collectives the round is split into, one after the other (PowerSGD's P and Q: 2); each pays the
        latency.
      edges: directed edges a "neighbours" round sends along (all nodes together).
      kind: the ledger kind the bytes are booked as (:data:`KINDS`).
      takers: how many nodes take part in each round, in order (empty: all N; a round past its end takes the last):
        a federated cohort's clients that are on (:func:`jaxcomm.federated.fedavg` with ``available``). The ledger
        books these and the lockstep clock times them (:func:`jaxcomm.clock.seconds`: a round of k takers as
        k nodes, one of none as 0 s); a run at its own pace times every round as N.
    """

    pattern: str
    nbytes: float
    every: int = 1
    blocking: bool = True
    parts: int = 1
    edges: int = 0
    kind: str = "parameters"
    takers: tuple[int, ...] = ()

    def taking_part(self, num_nodes: int, rounds: int) -> list[int]:
        """The nodes taking part in each of the first ``rounds`` rounds."""
        if not self.takers:
            return [num_nodes] * rounds
        return [self.takers[min(r, len(self.takers) - 1)] for r in range(rounds)]

    def sent_in(self, num_nodes: int, rounds: int) -> float:
        """Bytes all nodes send in the first ``rounds`` rounds."""
        if not self.takers:
            return rounds * self.sent_per_round(num_nodes)
        return float(sum(self.sent_per_round(k) for k in self.taking_part(num_nodes, rounds)))

    def sent_per_round(self, num_nodes: int) -> float:
        """Bytes all nodes send in one round: ``N x 2 (N-1)/N x nbytes`` (ring all-reduce), ``N (N-1) x nbytes``
        (all-gather), ``edges x nbytes`` (neighbours), ``N x nbytes`` (server: the N uploads; the server's reply
        is the server's, not a node's)."""
        if self.pattern == "allreduce":
            return 2.0 * (num_nodes - 1) * self.nbytes
        if self.pattern == "allgather":
            return float(num_nodes * (num_nodes - 1) * self.nbytes)
        if self.pattern == "neighbours":
            return float(self.edges * self.nbytes)
        if self.pattern == "server":
            return float(num_nodes * self.nbytes)
        raise ValueError(f"pattern must be one of {PATTERNS}, got {self.pattern!r}")

    def rounds_done(self, steps_done: int) -> int:
        return int(steps_done) // self.every


def book(traffic: tuple[Round, ...], num_nodes: int, steps_done: int) -> Booking:
    """What a schedule of :class:`Round` values has sent after ``steps_done`` steps, by kind."""
    total = Booking()
    for r in traffic:
        total = total + Booking(**{r.kind: r.sent_in(num_nodes, r.rounds_done(steps_done))})
    return total


def book_at_own_pace(traffic: tuple[Round, ...], node_steps, members, *, waited_every: int = 0) -> Booking:
    """What a schedule has sent at its own pace, from what happened: a round the nodes wait for (``every`` equal to
    ``waited_every``, :class:`jaxcomm.pace.Waits`) once per round that closed, among its members; any other round
    once every ``every`` of each node's own steps.

    Args:
      traffic: the method's rounds.
      node_steps: ``[N]`` each node's own steps so far.
      members: ``[R, N] bool`` the members of each round that closed so far (R rounds).
      waited_every: the period of the rounds the nodes wait for (0: they wait for none).
    """
    n, total = len(node_steps), Booking()
    size_of = np.asarray(members, bool).sum(axis=1)  # [R] each closed round's members
    for r in traffic:
        if waited_every and r.every == waited_every:
            taking = np.minimum(size_of, r.taking_part(n, len(size_of))) if r.takers else size_of
            sizes, rounds = np.unique(taking, return_counts=True)  # rounds of k members
            sent = sum(int(count) * (r.sent_per_round(int(k)) if r.pattern != "neighbours"
                                     else r.sent_per_round(n) * int(k) / n)
                       for k, count in zip(sizes, rounds, strict=True))
        else:  # every `every` of a node's own steps, its share of a round
            sent = int(np.sum(np.asarray(node_steps) // r.every)) * r.sent_per_round(n) / n
        total = total + Booking(**{r.kind: float(sent)})
    return total


def averaged(stages: Sequence[tuple[Sequence[Round], float]], num_steps: int) -> tuple[Round, ...]:
    """A schedule that changes by stage as the steady one a run books: one round per shape (its fields but the
    bytes, in order of first appearance) whose bytes are the stages' ``(rounds, steps)`` weighted by each stage's
    steps of the ``num_steps``, so the run's totals are exact at its last step (LGC's stages)."""
    total: dict[Round, float] = {}
    for rounds, steps in stages:
        for r in rounds:
            shape = r._replace(nbytes=0.0)
            total[shape] = total.get(shape, 0.0) + r.nbytes * steps / max(num_steps, 1)
    return tuple(shape._replace(nbytes=nbytes) for shape, nbytes in total.items())


def per_node_step(traffic: tuple[Round, ...], num_nodes: int) -> float:
    """Bytes a schedule sends per node and step, on average over a round."""
    return sum(r.sent_per_round(num_nodes) / r.every for r in traffic) / num_nodes


def encoded(record: dict, *, raw_per_input: float, stored_per_input: float) -> dict:
    """A ``bytes`` record (:func:`record`, raw encoding) with its inputs re-priced under the ``stored`` encoding:
    every input's ``raw_per_input`` bytes become ``stored_per_input`` (inputs travel whole, so the count is exact)."""
    if record.get("encoding", "raw") != "raw":
        raise ValueError(f"encoded: re-prices a raw record, got encoding {record['encoding']!r}")
    by_kind = dict(record["by_kind"])
    ratio = stored_per_input / raw_per_input
    extra = by_kind.get("inputs", 0.0) * (ratio - 1.0)  # per node and step
    steps_nodes = record["total"] / record["per_node_step"] if record["per_node_step"] else 0.0
    by_kind["inputs"] = by_kind.get("inputs", 0.0) * ratio
    return record | {"total": record["total"] + extra * steps_nodes, "per_node_step": record["per_node_step"] + extra,
                     "by_kind": by_kind, "encoding": "stored"}


def record(booking: Booking, *, num_nodes: int, steps: int, data_model: str = "private",
           encoding: str = "raw", node_steps: int | None = None) -> dict:
    """The ``bytes`` record of a run: ``total`` (all nodes, whole run), ``per_node_step`` and ``by_kind`` (per node
    and step; 0 before the first step), the ``data_model`` and input ``encoding`` it was counted under.

    At its own pace ``steps`` counts ticks and ``node_steps`` the nodes' own steps, all together: "per node step"
    divides by those, and ``per_node_tick`` is per node and tick."""
    count = num_nodes * steps if node_steps is None else node_steps
    per = (lambda v: float(v) / count) if count else (lambda v: 0.0)
    out = {"total": booking.total, "per_node_step": per(booking.total),
           "by_kind": {kind: per(v) for kind, v in zip(KINDS, booking, strict=True)},
           "data_model": data_model, "encoding": encoding}
    if node_steps is not None:
        out["per_node_tick"] = float(booking.total) / (num_nodes * steps) if steps else 0.0
    return out
