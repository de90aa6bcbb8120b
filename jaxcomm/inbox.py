"""Per-node message inboxes: the thesis' Algorithm 2 as array code.

Each node owns a fixed-capacity FIFO ("email inbox", §2.2.2.3) of K messages.
A message is one minibatch: the sample indices it was trained on (never the
images: every node holds the same uint8 image table and messages point into
it), a payload (one-hot true labels, logits or top-level features), the sender
and the step it was sent. All N inboxes live in one :class:`InboxState`, a ring
buffer per node, and are updated together:

* :func:`pop` is a masked gather of each consuming node's oldest message.
* :func:`push` delivers every broadcasting node's message to the receivers that
  ``adj`` names. Rather than scattering N x N copies, every receiver slot
  *gathers* the one incoming message that ends up there; arrivals at a receiver
  are ordered by sender id, so the result is the same as delivering them one
  by one in that order (tested against a deque reference).

Counters per node add up: ``received = consumed + dropped + pending``.

Under a cluster (:mod:`jaxcomm.clock`) a broadcast spends some of the receiver's steps in flight
(:class:`Transit`, :func:`send`): ``sent = received + in flight``; with no delay it is :func:`push`.

References:
  Lacaille (2018), §2.2.2.3 and Algorithm 2.
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp

OVERFLOW_POLICIES = ("drop_oldest", "drop_newest")


class Message(NamedTuple):
    """One message per node (leading ``[N]`` axis when stacked).

    Attributes:
      indices: ``[N, B] int32`` sample indices into the shared image table.
      payload: ``[N, B, D]`` targets for those samples (D = classes or features).
      sender: ``[N] int32`` id of the node that sent it.
      sent_step: ``[N] int32`` training step at which it was sent.
    """

    indices: jax.Array
    payload: jax.Array
    sender: jax.Array
    sent_step: jax.Array


class InboxCounters(NamedTuple):
    """Message counts per node since the start, each ``[N] int32``.

    Attributes:
      sent: copies sent (one per receiver of each broadcast).
      received: copies that arrived, kept or not.
      consumed: messages popped and trained on.
      dropped: messages lost to overflow (either policy).
      fallbacks: consume draws that found the inbox empty and used local data.
    """

    sent: jax.Array
    received: jax.Array
    consumed: jax.Array
    dropped: jax.Array
    fallbacks: jax.Array


class InboxState(NamedTuple):
    """All N inboxes as ring buffers of capacity K.

    Attributes:
      messages: :class:`Message` with leaves ``[N, K, ...]``: slot ``k`` of
        node ``n``'s inbox.
      head: ``[N] int32`` slot of each inbox's oldest message.
      count: ``[N] int32`` messages pending in each inbox.
      counters: :class:`InboxCounters`.
    """

    messages: Message
    head: jax.Array
    count: jax.Array
    counters: InboxCounters

    @property
    def capacity(self) -> int:
        """K, the number of messages each inbox can hold."""
        return self.messages.sender.shape[1]


def validate(capacity: int, overflow: str) -> None:
    """Raises ValueError for a capacity < 1 or an unknown overflow policy."""
    if isinstance(capacity, bool) or not isinstance(capacity, int) or capacity < 1:
        raise ValueError(f"inbox_capacity must be an integer >= 1, got {capacity!r}")
    if overflow not in OVERFLOW_POLICIES:
        raise ValueError(f"overflow must be one of {OVERFLOW_POLICIES}, got {overflow!r}")


def init(
    num_nodes: int,
    capacity: int,
    batch_size: int,
    payload_dim: int,
    payload_dtype: jnp.dtype = jnp.float32,
) -> InboxState:
    """Empty inboxes for N nodes, each holding up to ``capacity`` messages."""
    validate(capacity, OVERFLOW_POLICIES[0])
    n, k = num_nodes, capacity
    zeros = lambda *shape, dtype=jnp.int32: jnp.zeros(shape, dtype)
    messages = Message(
        indices=zeros(n, k, batch_size),
        payload=zeros(n, k, batch_size, payload_dim, dtype=payload_dtype),
        sender=jnp.full((n, k), -1, jnp.int32),
        sent_step=jnp.full((n, k), -1, jnp.int32),
    )
    counters = InboxCounters(*(zeros(n) for _ in InboxCounters._fields))
    return InboxState(messages, zeros(n), zeros(n), counters)


def oldest(state: InboxState) -> Message:
    """Each inbox's oldest message, leaves ``[N, ...]`` (garbage where an inbox is empty), left in place."""
    rows = jnp.arange(state.head.shape[0])
    return jax.tree_util.tree_map(lambda leaf: leaf[rows, state.head], state.messages)


def pop(state: InboxState, want: jax.Array, ready: jax.Array | None = None) -> tuple[InboxState, Message, jax.Array]:
    """Each node that wants to consume takes its oldest message, if any (and if ``ready``).

    Args:
      state: the inboxes.
      want: ``[N] bool``, the nodes' consume draws.
      ready: ``[N] bool``, whether each oldest message may be read yet (at its own pace: it arrived before the
        reader's step began); None: every one.

    Returns:
      ``(state, message, got)``: ``message`` has leaves ``[N, ...]`` (garbage
      where ``got`` is False), ``got`` is ``[N] bool`` = want and non-empty.
      Wanting from an empty inbox counts a fallback (the node trains on local
      data instead, Algorithm 2 line 8 with an empty queue).
    """
    capacity = state.capacity
    got = want & (state.count > 0) & (True if ready is None else ready)
    message = oldest(state)
    c = state.counters
    counters = c._replace(
        consumed=c.consumed + got,
        fallbacks=c.fallbacks + (want & ~got),
    )
    state = state._replace(
        head=jnp.where(got, (state.head + 1) % capacity, state.head),
        count=state.count - got,
        counters=counters,
    )
    return state, message, got


def clear(state: InboxState, mask: jax.Array) -> InboxState:
    """Empties the inboxes of the nodes in ``mask [N] bool``; their pending messages count as dropped."""
    c = state.counters
    lost = jnp.where(mask, state.count, 0)
    return state._replace(count=state.count - lost, counters=c._replace(dropped=c.dropped + lost))


def push(
    state: InboxState,
    outgoing: Message,
    send: jax.Array,
    adj: jax.Array,
    *,
    overflow: str = "drop_oldest",
) -> InboxState:
    """Delivers each sending node's message to all of its out-neighbours.

    Arrivals at a receiver are appended in sender-id order. When they do not fit,
    ``"drop_newest"`` keeps what is stored and discards the excess arrivals;
    ``"drop_oldest"`` keeps the newest ``K`` of (stored + arrivals).

    Args:
      state: the inboxes.
      outgoing: one message per node, leaves ``[N, ...]``.
      send: ``[N] bool``, the nodes' broadcast draws.
      adj: ``[N, N] bool``, ``adj[i, j]`` = node i sends to node j.
      overflow: one of :data:`OVERFLOW_POLICIES`.

    Returns:
      The updated inboxes and counters.
    """
    active = send[:, None] & adj  # [N_send, N_recv]
    state = _count_sent(state, active)
    return _arrive(state, active, lambda source: jax.tree_util.tree_map(lambda leaf: leaf[source], outgoing), overflow)


def _count_sent(state: InboxState, active: jax.Array) -> InboxState:
    c = state.counters
    return state._replace(counters=c._replace(sent=c.sent + active.sum(1, dtype=jnp.int32)))


def _arrive(state: InboxState, active: jax.Array, pick, overflow: str) -> InboxState:
    """Appends the copies ``active [N_send, N_recv]`` to the receivers' inboxes, in sender-id order; ``pick(source
    [N_recv, K]) -> Message`` gives the message sender ``source`` sent to each receiver slot."""
    if overflow not in OVERFLOW_POLICIES:
        raise ValueError(f"overflow must be one of {OVERFLOW_POLICIES}, got {overflow!r}")
    capacity = state.capacity
    arrivals = active.sum(0, dtype=jnp.int32)  # [N_recv]
    # Offset of each slot from the receiver's first free position, [N_recv, K].
    offset = (jnp.arange(capacity)[None, :] - (state.head + state.count)[:, None]) % capacity
    if overflow == "drop_newest":
        kept = jnp.minimum(arrivals, capacity - state.count)
        lands = offset < kept[:, None]
        rank = offset  # arrival r lands at offset r
        count = state.count + kept
        head = state.head
        dropped = arrivals - kept
    else:
        lands = offset < arrivals[:, None]
        # The last arrival with rank = offset (mod K) survives the wrap-around.
        rank = offset + capacity * ((arrivals[:, None] - 1 - offset) // capacity)
        total = state.count + arrivals
        count = jnp.minimum(total, capacity)
        dropped = total - count
        head = (state.head + dropped) % capacity
    # The arrival of rank r at receiver j comes from the (r+1)-th active sender
    # in column j: a search in that column's running count of senders.
    senders_so_far = jnp.cumsum(active, axis=0, dtype=jnp.int32).T  # [N_recv, N_send]
    source = jax.vmap(jnp.searchsorted)(senders_so_far, rank + 1)  # [N_recv, K]
    source = jnp.minimum(source, active.shape[0] - 1)

    def deliver(old, new):
        mask = lands.reshape(lands.shape + (1,) * (old.ndim - 2))
        return jnp.where(mask, new, old)

    messages = jax.tree_util.tree_map(deliver, state.messages, pick(source))
    c = state.counters
    counters = c._replace(received=c.received + arrivals, dropped=c.dropped + dropped)
    return InboxState(messages, head, count, counters)


class Transit(NamedTuple):
    """Messages in flight: the broadcasts of the last D steps, each copy delivered after its edge's delay
    (:func:`jaxcomm.clock.delivery_steps`). Counters stay conserved: ``sent = received + in flight``.

    Attributes:
      messages: :class:`Message` with leaves ``[D, N, ...]``: what each node broadcast at step s (slot s % D).
      edges: ``[D, N, N] bool``: copies sent at that step (sender, receiver) not yet arrived.
      age: ``[N] int32``: the summed age, in steps from sending to consumption, of the messages each node
        consumed (1: sent at the step before).
      age_seconds, age_steps: at its own pace (:mod:`jaxcomm.pace`), the summed ages of the messages each node
        consumed in virtual seconds (float32) and in the receiver's own steps; None otherwise.
    """

    messages: Message
    edges: jax.Array
    age: jax.Array
    age_seconds: jax.Array | None = None
    age_steps: jax.Array | None = None

    @property
    def in_flight(self) -> jax.Array:
        """``[N] int32`` copies on their way to each receiver."""
        return self.edges.sum((0, 1), dtype=jnp.int32)


def transit_init(delays, batch_size: int, payload_dim: int, payload_dtype: jnp.dtype = jnp.float32, *,
                 timed: bool = False) -> Transit:
    """Nothing in flight, for the ``[N, N]`` integer ``delays`` (receiver steps; depth D = max delay + 1); ``timed``:
    ages also in seconds and receiver steps (a run at its own pace)."""
    n = delays.shape[0]
    depth = int(delays.max()) + 1
    box = init(n, depth, batch_size, payload_dim, payload_dtype)
    messages = jax.tree_util.tree_map(lambda leaf: jnp.moveaxis(leaf, 1, 0), box.messages)  # [D, N, ...]
    return Transit(messages, jnp.zeros((depth, n, n), bool), jnp.zeros((n,), jnp.int32),
                   jnp.zeros((n,), jnp.float32) if timed else None, jnp.zeros((n,), jnp.int32) if timed else None)


def send(
    state: InboxState,
    transit: Transit,
    outgoing: Message,
    active: jax.Array,
    step: jax.Array,
    delays,
    *,
    overflow: str = "drop_oldest",
) -> tuple[InboxState, Transit]:
    """Puts this step's copies ``active [N_send, N_recv]`` in flight and delivers every copy whose delay ends now:
    a copy sent at step s along edge (i, j) arrives at step ``s + delays[i, j]`` (0: at once, as :func:`push`).
    Arrivals at a receiver are appended in sender-id order, as :func:`push`'s."""
    depth = transit.edges.shape[0]
    n = active.shape[0]
    slot = step % depth
    messages = jax.tree_util.tree_map(lambda past, new: past.at[slot].set(new), transit.messages, outgoing)
    edges = transit.edges.at[slot].set(active)
    state = _count_sent(state, active)
    due_slot = (step - jnp.asarray(delays, jnp.int32)) % depth  # [N_send, N_recv]: when what arrives now left
    send_ids, recv_ids = jnp.arange(n)[:, None], jnp.arange(n)[None, :]
    due = edges[due_slot, send_ids, recv_ids]
    edges = edges.at[due_slot, send_ids, recv_ids].set(False)  # a slot's bit of edge (i, j) is read only now
    receiver = jnp.arange(n)[:, None]

    def pick(source):  # [N_recv, K] senders -> the message each sent when this copy left
        when = due_slot[source, receiver]
        return jax.tree_util.tree_map(lambda leaf: leaf[when, source], messages)

    return _arrive(state, due, pick, overflow), transit._replace(messages=messages, edges=edges)


def equilibrium_broadcast_prob(consume_prob: float, num_neighbours: int, factor: float = 1.0) -> float:
    """The broadcast probability that keeps inboxes in equilibrium: ``p_b = factor x p_c / p``, at most 1.

    Each step a node pops a message with probability ``p_c`` and each of its
    ``p`` in-neighbours sends it one with probability ``p_b``; on a graph where
    every node has ``p`` out- and ``p`` in-neighbours (ring, full with
    ``p = N - 1``, exponential) arrivals ``p x p_b`` match consumption ``p_c``
    exactly when ``p_b = p_c / p``, so inboxes neither fill up (and drop
    messages) nor run dry. ``factor`` scales it (2: twice as many messages as
    are consumed). On random graphs in-degrees vary and it holds on average.

    Args:
      consume_prob: p_c in [0, 1].
      num_neighbours: p >= 1, each node's out-degree (N - 1 when fully connected).
      factor: > 0; 1 is the equilibrium.

    Returns:
      ``min(1, factor x p_c / p)``.

    References:
      Lacaille (2018), §2.3.1.2: "the frequency of broadcasting was constructed
      in a way that allows for an equilibrium in the number of samples available
      for consumption".
    """
    if num_neighbours < 1:
        raise ValueError(f"num_neighbours must be >= 1 to broadcast to anyone, got {num_neighbours}")
    return min(1.0, factor * consume_prob / num_neighbours)
