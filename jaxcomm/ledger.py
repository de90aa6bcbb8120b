"""One byte ledger: what every method sends, booked by kind, read one way.

Each method books the traffic its run made as a :class:`Booking` of total bytes sent over the run, all
nodes together, by kind:

* ``inputs``: images a message carries (exclusive shards, the ``private`` data model);
* ``payload``: what is said about them (labels, logits, features);
* ``parameters``: parameters or gradients, dense, compressed or low-rank (all-reduce, gossip, DiLoCo's
  outer gradients, checkpoints);
* ``indices``: sample indices (the ``shared`` data model) and message headers.

:func:`record` turns a booking into the ``bytes`` record every method's history carries:
``{"total", "per_node_step", "by_kind": {kind: per node and step}, "data_model", "encoding"}``. The
helpers below book the usual patterns: messages (:func:`messages`), a ring all-reduce
(:func:`allreduce`), an all-gather (:func:`allgather`), sending to neighbours (:func:`to_neighbours`).

References:
  Patarasuk & Yuan (2009) (ring all-reduce); Lacaille (2018), §1.3.2.2 (what a message costs).
"""

from __future__ import annotations

from typing import NamedTuple

from jaxcomm import bandwidth
from jaxcomm import exchange as exchanges

KINDS = ("inputs", "payload", "parameters", "indices")
DATA_MODELS = exchanges.DATA_MODELS
ENCODINGS = ("raw",)  # inputs as the uint8 arrays held


class Booking(NamedTuple):
    """Bytes sent over a run, all nodes together, by kind (floats; see the module docstring)."""

    inputs: float = 0.0
    payload: float = 0.0
    parameters: float = 0.0
    indices: float = 0.0

    def __add__(self, other: Booking) -> Booking:  # type: ignore[override]
        return Booking(*(a + b for a, b in zip(self, other, strict=True)))

    def scale(self, factor: float) -> Booking:
        return Booking(*(float(v) * factor for v in self))

    @property
    def total(self) -> float:
        return float(sum(self))


def message(exchange: exchanges.Exchange, batch_size: int, payload_dim: int, *, sample_bytes: int,
            data_model: str = "private") -> Booking:
    """One output-sharing message by kind; its total is :func:`jaxcomm.exchange.message_bytes`: the B inputs
    (``private``) or their int32 indices (``shared``), the payload and the header (booked with the indices)."""
    if not exchange.sends:
        return Booking()
    private = data_model == "private"
    return Booking(inputs=float(batch_size * sample_bytes) if private else 0.0,
                   payload=float(exchange.payload_bytes(batch_size, payload_dim)),
                   indices=float((0 if private else batch_size * exchanges.INDEX_BYTES) + exchanges.HEADER_BYTES))


def messages(copies: int, one: Booking) -> Booking:
    """``copies`` copies of a message ``one`` (a copy per receiver, the inbox ``sent`` counter)."""
    return one.scale(copies)


def allreduce(num_nodes: int, num_values: int, rounds: int, *, bytes_per_value: int = 4) -> Booking:
    """``rounds`` ring all-reduces of ``num_values`` values by every node: ``2 (N-1)/N x 4 V`` each, per node."""
    return Booking(parameters=rounds * num_nodes * bandwidth.allreduce_bytes(num_nodes, num_values,
                                                                             bytes_per_value=bytes_per_value))


def allgather(num_nodes: int, message_bytes: float, rounds: int) -> Booking:
    """``rounds`` all-gathers of every node's ``message_bytes`` message (messages of different supports cannot be
    summed on the way): each node sends its message to the N - 1 others."""
    return Booking(parameters=float(rounds * num_nodes * (num_nodes - 1) * message_bytes))


def to_neighbours(copies: int, num_values: int, *, bytes_per_value: int = 4) -> Booking:
    """``copies`` parameter messages of ``num_values`` values each (one per out-edge and round: gossip)."""
    return Booking(parameters=float(copies * num_values * bytes_per_value))


def record(booking: Booking, *, num_nodes: int, steps: int, data_model: str = "private",
           encoding: str = "raw") -> dict:
    """The ``bytes`` record of a run: ``total`` (all nodes, whole run), ``per_node_step`` and ``by_kind`` (per node
    and step; 0 before the first step), the ``data_model`` and input ``encoding`` it was counted under."""
    per = (lambda v: float(v) / (num_nodes * steps)) if steps else (lambda v: 0.0)
    return {"total": booking.total, "per_node_step": per(booking.total),
            "by_kind": {kind: per(v) for kind, v in zip(KINDS, booking, strict=True)},
            "data_model": data_model, "encoding": encoding}
