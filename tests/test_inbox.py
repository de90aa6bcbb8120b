"""The array inbox against a deque reference of Algorithm 2, and its counters."""

from __future__ import annotations

import collections

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxcomm import inbox


def fifo_contents(state: inbox.InboxState, n: int) -> list[tuple]:
    """Node n's pending messages, oldest first, as (sender, step, indices, payload)."""
    k = state.capacity
    head, count = int(state.head[n]), int(state.count[n])
    out = []
    for r in range(count):
        slot = (head + r) % k
        m = state.messages
        out.append((int(m.sender[n, slot]), int(m.sent_step[n, slot]),
                    tuple(np.asarray(m.indices[n, slot])), tuple(np.asarray(m.payload[n, slot]).ravel())))
    return out


class DequeInboxes:
    """Algorithm 2's queues, one Python deque per node, one message at a time."""

    def __init__(self, num_nodes: int, capacity: int, overflow: str):
        self.queues = [collections.deque() for _ in range(num_nodes)]
        self.capacity, self.overflow = capacity, overflow
        self.counts = {f: np.zeros(num_nodes, int) for f in inbox.InboxCounters._fields}

    def pop(self, want):
        got = []
        for n, w in enumerate(want):
            if w and self.queues[n]:
                got.append(self.queues[n].popleft())
                self.counts["consumed"][n] += 1
            else:
                got.append(None)
                self.counts["fallbacks"][n] += bool(w)
        return got

    def push(self, messages, send, adj):
        for j in range(len(self.queues)):
            for i in range(len(self.queues)):  # arrivals in sender-id order
                if not (send[i] and adj[i, j]):
                    continue
                self.counts["sent"][i] += 1
                self.counts["received"][j] += 1
                q = self.queues[j]
                if len(q) == self.capacity:
                    self.counts["dropped"][j] += 1
                    if self.overflow == "drop_newest":
                        continue
                    q.popleft()
                q.append(messages[i])


@pytest.mark.parametrize("overflow", inbox.OVERFLOW_POLICIES)
@pytest.mark.parametrize("capacity,p_send,p_want", [(3, 0.7, 0.3), (4, 0.3, 0.6), (1, 0.9, 0.5)])
def test_matches_deque_reference(overflow, capacity, p_send, p_want):
    n, b, d, steps = 5, 2, 3, 25
    rng = np.random.default_rng(capacity * 10 + int(p_send * 10))
    state = inbox.init(n, capacity, b, d)
    ref = DequeInboxes(n, capacity, overflow)
    push = jax.jit(inbox.push, static_argnames="overflow")
    pop = jax.jit(inbox.pop)
    for step in range(steps):
        want = rng.random(n) < p_want
        send = rng.random(n) < p_send
        adj = (rng.random((n, n)) < 0.6) & ~np.eye(n, dtype=bool)
        state, popped, got = pop(state, jnp.asarray(want))
        expected = ref.pop(want)
        for node in range(n):
            assert bool(got[node]) == (expected[node] is not None)
            if expected[node] is not None:
                sender, sent_step, idx, payload = expected[node]
                assert int(popped.sender[node]) == sender and int(popped.sent_step[node]) == sent_step
                np.testing.assert_array_equal(popped.indices[node], idx)
                np.testing.assert_array_equal(np.asarray(popped.payload[node]).ravel(), payload)
        indices = rng.integers(0, 1000, (n, b)).astype(np.int32)
        payload = rng.normal(size=(n, b, d)).astype(np.float32)
        outgoing = inbox.Message(jnp.asarray(indices), jnp.asarray(payload),
                                 jnp.arange(n, dtype=jnp.int32), jnp.full((n,), step, jnp.int32))
        ref.push([(i, step, tuple(indices[i]), tuple(payload[i].ravel())) for i in range(n)], send, adj)
        state = push(state, outgoing, jnp.asarray(send), jnp.asarray(adj), overflow=overflow)
        for node in range(n):
            assert fifo_contents(state, node) == list(ref.queues[node]), (step, node)
        for field in inbox.InboxCounters._fields:
            np.testing.assert_array_equal(getattr(state.counters, field), ref.counts[field], err_msg=field)


@pytest.mark.parametrize("overflow", inbox.OVERFLOW_POLICIES)
def test_counters_add_up(overflow):
    """received = consumed + dropped + pending per node; sent total = received total."""
    n, k = 6, 2
    key = jax.random.PRNGKey(0)
    state = inbox.init(n, k, 4, 1)
    adj = jnp.ones((n, n), bool) & ~jnp.eye(n, dtype=bool)
    for step in range(40):
        key, k1, k2 = jax.random.split(key, 3)
        state, _, _ = inbox.pop(state, jax.random.bernoulli(k1, 0.5, (n,)))
        msg = inbox.Message(jnp.zeros((n, 4), jnp.int32), jnp.zeros((n, 4, 1)),
                            jnp.arange(n, dtype=jnp.int32), jnp.full((n,), step, jnp.int32))
        state = inbox.push(state, msg, jax.random.bernoulli(k2, 0.3, (n,)), adj, overflow=overflow)
    c = state.counters
    np.testing.assert_array_equal(c.received, c.consumed + c.dropped + state.count)
    assert int(c.sent.sum()) == int(c.received.sum())
    assert int(c.dropped.sum()) > 0 and int(c.consumed.sum()) > 0  # both paths exercised


def test_hand_example_drop_oldest_wraps():
    """Capacity 2; node 0 holds [A]; three senders arrive at once: keep the newest two."""
    n, k = 4, 2
    state = inbox.init(n, k, 1, 1)
    adj = np.zeros((n, n), bool)
    adj[[1, 2, 3], 0] = True
    adj[1, 2] = True
    msg = lambda step: inbox.Message(jnp.arange(n, dtype=jnp.int32)[:, None] + 10 * step,
                                     jnp.zeros((n, 1, 1)), jnp.arange(n, dtype=jnp.int32),
                                     jnp.full((n,), step, jnp.int32))
    only_1 = jnp.array([False, True, False, False])
    state = inbox.push(state, msg(0), only_1, jnp.asarray(adj))  # node 0 <- A from 1, node 2 <- from 1
    state = inbox.push(state, msg(1), jnp.ones(n, bool), jnp.asarray(adj))  # node 0 <- 1, 2, 3
    assert [s for s, *_ in fifo_contents(state, 0)] == [2, 3]
    assert [t for _, t, *_ in fifo_contents(state, 0)] == [1, 1]
    assert int(state.counters.dropped[0]) == 2 and int(state.counters.received[0]) == 4
    assert int(state.counters.sent[1]) == 4  # two broadcasts, two receivers each
    state_new = inbox.push(inbox.init(n, k, 1, 1), msg(0), only_1, jnp.asarray(adj), overflow="drop_newest")
    state_new = inbox.push(state_new, msg(1), jnp.ones(n, bool), jnp.asarray(adj), overflow="drop_newest")
    assert [(s, t) for s, t, *_ in fifo_contents(state_new, 0)] == [(1, 0), (1, 1)]


def test_pop_from_empty_counts_fallback():
    state = inbox.init(3, 2, 1, 1)
    state, _, got = inbox.pop(state, jnp.array([True, False, True]))
    assert not bool(got.any())
    np.testing.assert_array_equal(state.counters.fallbacks, [1, 0, 1])
    np.testing.assert_array_equal(state.counters.consumed, [0, 0, 0])


@pytest.mark.parametrize("capacity,overflow,match", [
    (0, "drop_oldest", "inbox_capacity"), (2.5, "drop_oldest", "inbox_capacity"),
    (4, "drop_random", "overflow.*drop_oldest"),
])
def test_validate_rejects(capacity, overflow, match):
    with pytest.raises(ValueError, match=match):
        inbox.validate(capacity, overflow)
