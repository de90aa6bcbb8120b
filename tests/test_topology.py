"""Tests for jaxcomm.topology (thesis §2.2.2.3)."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxcomm import topology
from jaxcomm.topology import (
    full,
    graph_at,
    in_degree,
    out_degree,
    random_graph,
    ring,
    validate_adjacency,
)


def test_ring_5_2_by_hand():
    # p=2: offsets +1, -1 -> each node sends to both direct neighbours.
    want = np.array(
        [
            [0, 1, 0, 0, 1],
            [1, 0, 1, 0, 0],
            [0, 1, 0, 1, 0],
            [0, 0, 1, 0, 1],
            [1, 0, 0, 1, 0],
        ],
        bool,
    )
    got = ring(5, 2)
    assert got.dtype == np.bool_ and got.shape == (5, 5)
    np.testing.assert_array_equal(got, want)


def test_ring_6_3_by_hand():
    # p=3: offsets +1, -1, +2 -> node i sends to i+1, i-1, i+2 (mod 6).
    want = np.array(
        [
            [0, 1, 1, 0, 0, 1],
            [1, 0, 1, 1, 0, 0],
            [0, 1, 0, 1, 1, 0],
            [0, 0, 1, 0, 1, 1],
            [1, 0, 0, 1, 0, 1],
            [1, 1, 0, 0, 1, 0],
        ],
        bool,
    )
    np.testing.assert_array_equal(ring(6, 3), want)


def test_ring_1_is_next_clockwise():
    np.testing.assert_array_equal(ring(4, 1), np.roll(np.eye(4, dtype=bool), 1, axis=1))


@pytest.mark.parametrize("n", range(2, 10))
def test_ring_full_when_p_is_n_minus_1(n):
    np.testing.assert_array_equal(ring(n, n - 1), full(n))


def test_full_by_hand():
    np.testing.assert_array_equal(full(3), [[0, 1, 1], [1, 0, 1], [1, 1, 0]])
    np.testing.assert_array_equal(full(1), [[False]])


@pytest.mark.parametrize("n", [1, 2, 7])
def test_ring_p0_empty(n):
    adj = ring(n, 0)
    assert adj.shape == (n, n) and not adj.any()


@pytest.mark.parametrize("n", range(1, 10))
def test_ring_degrees_and_no_self_loops(n):
    for p in range(n):
        adj = ring(n, p)
        validate_adjacency(adj)
        np.testing.assert_array_equal(out_degree(adj), np.full(n, p))
        # A ring is regular: every inbox has p senders too.
        np.testing.assert_array_equal(in_degree(adj), np.full(n, p))
        assert not np.diagonal(adj).any()


def test_thesis_example_25_nodes():
    # §2.2.2.3: 25 nodes with p=24 -> everyone broadcasts to everyone.
    np.testing.assert_array_equal(ring(25, 24), full(25))
    # 100 nodes, p=5: neighbours are the adjacent nodes +-1, +-2, +3.
    np.testing.assert_array_equal(np.flatnonzero(ring(100, 5)[10]), [8, 9, 11, 12, 13])


# Few distinct (N, p): each one is a compilation of the threefry sampler.
@pytest.mark.parametrize("n,p", [(1, 0), (8, 0), (8, 2), (8, 7)])
def test_random_graph_degrees(n, p):
    adj = random_graph(jax.random.PRNGKey(0), n, p)
    assert adj.shape == (n, n) and adj.dtype == jnp.bool_
    validate_adjacency(adj)
    np.testing.assert_array_equal(out_degree(adj), np.full(n, p))
    assert int(in_degree(adj).sum()) == n * p
    assert not bool(jnp.diagonal(adj).any())


def test_random_graph_keys():
    k0, k1 = jax.random.PRNGKey(0), jax.random.PRNGKey(1)
    np.testing.assert_array_equal(random_graph(k0, 8, 2), random_graph(k0, 8, 2))
    assert not np.array_equal(random_graph(k0, 8, 2), random_graph(k1, 8, 2))


def test_random_graph_jit_vmap_covers_all_targets():
    # Under jit + vmap over 300 keys: equal to eager per key, and every
    # off-diagonal edge appears while the diagonal never does.
    keys = jax.random.split(jax.random.PRNGKey(0), 300)
    graphs = np.asarray(jax.jit(jax.vmap(lambda k: random_graph(k, 8, 2)))(keys))
    np.testing.assert_array_equal(graphs[0], random_graph(keys[0], 8, 2))
    np.testing.assert_array_equal(graphs.sum(axis=2), 2)
    counts = graphs.sum(axis=0)
    assert (counts[~np.eye(8, dtype=bool)] > 0).all()
    assert (np.diagonal(counts) == 0).all()


GRAPH_KW = dict(num_nodes=8, num_neighbours=2, every=5)


def test_graph_at_windows():
    key = jax.random.PRNGKey(42)
    windows = []
    for w in range(4):
        graphs = [graph_at(key, 5 * w + t, **GRAPH_KW) for t in range(5)]
        for g in graphs[1:]:
            np.testing.assert_array_equal(g, graphs[0])
        np.testing.assert_array_equal(
            graphs[0], random_graph(jax.random.fold_in(key, w), 8, 2)
        )
        windows.append(np.asarray(graphs[0]))
    assert any(not np.array_equal(windows[0], g) for g in windows[1:])


def test_graph_at_jit_traced_step():
    # The realistic use: a scan over training steps inside jit, the step being
    # the traced carry.
    key = jax.random.PRNGKey(7)

    @jax.jit
    def run(key):
        def body(step, _):
            return step + 1, graph_at(key, step, **GRAPH_KW)

        return jax.lax.scan(body, jnp.int32(0), length=12)[1]

    graphs = np.asarray(run(key))  # [12, 8, 8]
    for step in range(12):
        np.testing.assert_array_equal(graphs[step], graph_at(key, step, **GRAPH_KW))
    np.testing.assert_array_equal(graphs[0], graphs[4])
    np.testing.assert_array_equal(graphs[5], graphs[9])


def test_degree_helpers():
    adj = np.array([[0, 1, 1], [0, 0, 1], [0, 0, 0]], bool)
    np.testing.assert_array_equal(out_degree(adj), [2, 1, 0])
    np.testing.assert_array_equal(in_degree(adj), [0, 1, 2])


@pytest.mark.parametrize("fn", [ring, lambda n, p: random_graph(jax.random.PRNGKey(0), n, p)])
def test_bad_sizes(fn):
    with pytest.raises(ValueError, match=r"num_nodes must be >= 1, got 0"):
        fn(0, 0)
    with pytest.raises(ValueError, match=r"num_nodes must be >= 1, got -3"):
        fn(-3, 0)
    with pytest.raises(
        ValueError, match=r"num_neighbours must be in \[0, num_nodes - 1\] = \[0, 9\], got 10"
    ):
        fn(10, 10)
    with pytest.raises(ValueError, match=r"num_neighbours .*got -1"):
        fn(10, -1)
    with pytest.raises(TypeError, match="num_nodes must be an int"):
        fn(4.0, 1)
    with pytest.raises(TypeError, match="num_neighbours must be an int, got bool"):
        fn(4, True)
    with pytest.raises(TypeError, match="num_neighbours must be an int"):
        fn(4, 1.5)


def test_bad_sizes_full_and_graph_at():
    key = jax.random.PRNGKey(0)
    with pytest.raises(ValueError, match="num_nodes must be >= 1, got 0"):
        full(0)
    with pytest.raises(TypeError, match="num_nodes must be an int, got bool"):
        full(True)
    with pytest.raises(ValueError, match="every must be >= 1, got 0"):
        graph_at(key, 0, num_nodes=4, num_neighbours=1, every=0)
    with pytest.raises(TypeError, match="every must be an int"):
        graph_at(key, 0, num_nodes=4, num_neighbours=1, every=2.0)
    with pytest.raises(ValueError, match=r"num_neighbours must be in .*\[0, 3\], got 4"):
        graph_at(key, 0, num_nodes=4, num_neighbours=4, every=2)
    # Python-level checks also fire while tracing.
    with pytest.raises(ValueError, match="every must be >= 1"):
        jax.jit(lambda s: graph_at(key, s, num_nodes=4, num_neighbours=1, every=0))(0)


def test_numpy_ints_accepted():
    np.testing.assert_array_equal(ring(np.int64(5), np.int32(2)), ring(5, 2))


def test_validate_adjacency():
    validate_adjacency(ring(4, 2))
    validate_adjacency(jnp.asarray(full(3)))
    with pytest.raises(ValueError, match=r"adj must be a square 2-D .*\(3, 4\)"):
        validate_adjacency(np.zeros((3, 4), bool))
    with pytest.raises(ValueError, match=r"adj must be a square .*\(4,\)"):
        validate_adjacency(np.zeros(4, bool))
    with pytest.raises(ValueError, match=r"adj must have dtype bool, got int64 \(shape \(3, 3\)\)"):
        validate_adjacency(np.zeros((3, 3), np.int64))
    bad = ring(4, 1)
    bad[2, 2] = True
    with pytest.raises(ValueError, match=r"self-loops.*\[2\].*\(4, 4\)"):
        validate_adjacency(bad)
    # Under jit only shape and dtype can be checked; it must not crash.
    jax.jit(lambda a: (validate_adjacency(a), a)[1])(jnp.asarray(ring(4, 1)))


def test_public_names():
    for name in topology.__all__:
        assert callable(getattr(topology, name))
