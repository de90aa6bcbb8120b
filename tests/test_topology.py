"""Tests for jaxcomm.topology (thesis §2.2.2.3)."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxcomm import topology
from jaxcomm.topology import (
    as_graph_fn,
    check,
    exponential,
    full,
    graph_at,
    in_degree,
    named,
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


def _edges(adj) -> set[tuple[int, int]]:
    return {(int(i), int(j)) for i, j in zip(*np.nonzero(np.asarray(adj)), strict=True)}


def test_exponential_by_hand():
    assert exponential(1).shape == (1, 1) and not exponential(1).any()
    np.testing.assert_array_equal(exponential(2), [[False, True], [True, False]])
    # N = 5: ceil(log2 5) = 3 offsets, 1, 2, 4.
    assert _edges(exponential(5)) == {(i, (i + d) % 5) for i in range(5) for d in (1, 2, 4)}
    assert _edges(exponential(5)) >= {(0, 1), (0, 2), (0, 4), (4, 0), (4, 1), (4, 3)}
    # N = 8: i -> i+1, i+2, i+4.
    want = np.zeros((8, 8), bool)
    for i in range(8):
        want[i, [(i + 1) % 8, (i + 2) % 8, (i + 4) % 8]] = True
    got = exponential(8)
    assert got.dtype == np.bool_
    np.testing.assert_array_equal(got, want)
    assert _edges(got) >= {(0, 1), (0, 2), (0, 4), (7, 0), (7, 1), (7, 3), (5, 6), (5, 7), (5, 1)}


@pytest.mark.parametrize("n", [2, 3, 4, 7, 8, 16, 33, 64])
def test_exponential_degrees(n):
    adj = exponential(n)
    degree = int(np.ceil(np.log2(n)))
    assert not np.diagonal(adj).any()
    np.testing.assert_array_equal(out_degree(adj), degree)
    np.testing.assert_array_equal(in_degree(adj), degree)
    if n & (n - 1) == 0:
        assert degree == n.bit_length() - 1  # log2 N exactly


def test_exponential_bad_sizes():
    with pytest.raises(ValueError, match="num_nodes must be >= 1"):
        exponential(0)
    with pytest.raises(TypeError, match="num_nodes must be an int"):
        exponential(4.0)


def test_check_accepts_bool_and_01_ints():
    adj = ring(4, 1)
    for given in (adj, jnp.asarray(adj), adj.astype(np.int32), adj.astype(np.uint8).tolist()):
        got = check(given, 4)
        assert isinstance(got, np.ndarray) and got.dtype == np.bool_
        np.testing.assert_array_equal(got, adj)


def test_check_errors():
    with pytest.raises(ValueError, match=r"shape \(num_nodes, num_nodes\) = \(4, 4\), got shape \(3, 3\)"):
        check(ring(3, 1), 4)
    with pytest.raises(ValueError, match=r"= \(4, 4\), got shape \(4,\)"):
        check(np.zeros(4, bool), 4)
    with pytest.raises(ValueError, match=r"got values \[2\] \(dtype int64"):
        check(2 * ring(4, 1).astype(np.int64), 4)
    with pytest.raises(ValueError, match=r"got dtype float32 .*astype\(bool\)"):
        check(ring(4, 1).astype(np.float32), 4)
    bad = ring(5, 1)
    bad[1, 1] = bad[3, 3] = True
    with pytest.raises(ValueError, match=r"no self-loops, but nodes \[1, 3\] send to themselves"):
        check(bad, 5)
    with pytest.raises(TypeError, match="concrete"):
        jax.jit(lambda a: check(a, 4))(jnp.asarray(ring(4, 1)))


def test_as_graph_fn_of_an_array_is_the_array():
    adj = exponential(8)
    fn, dynamic = as_graph_fn(adj, 8)
    assert dynamic is False
    key = jax.random.PRNGKey(3)
    for step in (0, 7, jnp.int32(100)):
        np.testing.assert_array_equal(fn(key, step), adj)
    np.testing.assert_array_equal(jax.jit(fn)(key, jnp.int32(5)), adj)
    with pytest.raises(ValueError, match="self-loops"):
        as_graph_fn(np.eye(3, dtype=bool), 3)
    with pytest.raises(TypeError, match="bool \\[N, N\\] array or a function"):
        as_graph_fn("ring", 3)


def test_as_graph_fn_of_a_function():
    def every_50(key, step):
        return graph_at(key, step, num_nodes=6, num_neighbours=2, every=50)

    fn, dynamic = as_graph_fn(every_50, 6)
    assert fn is every_50 and dynamic is True
    with pytest.raises(ValueError, match=r"every_50\(key, step\) must return a bool array of shape .* "
                       r"= \(5, 5\), got shape \(6, 6\), dtype bool"):
        as_graph_fn(every_50, 5)
    with pytest.raises(ValueError, match=r"got shape \(4, 4\), dtype int32"):
        as_graph_fn(lambda key, step: jnp.ones((4, 4), jnp.int32), 4)
    with pytest.raises(ValueError, match=r"step=0\) must have no self-loops, but nodes \[0, 1, 2, 3\]"):
        as_graph_fn(lambda key, step: jnp.ones((4, 4), bool), 4)
    # Self-loops are looked for at step 0 only; later steps are the caller's responsibility.
    as_graph_fn(lambda key, step: (step > 0) | ~jnp.eye(4, dtype=bool), 4)
    with pytest.raises(TypeError, match="could not be traced"):
        as_graph_fn(lambda key, step: ring(4, int(step) + 1), 4)


def _today(name, key, step, n, p, every):
    """The graph jaxcomm.network's make_network drew before graphs were values."""
    if name == "ring":
        return jnp.asarray(ring(n, p))
    if name == "full":
        return jnp.asarray(full(n))
    if name == "random":
        return random_graph(key, n, p)
    return graph_at(key, step, num_nodes=n, num_neighbours=p, every=every)


@pytest.mark.parametrize("name", ["ring", "full", "random", "time_varying"])
@pytest.mark.parametrize("n,p", [(1, 0), (5, 2), (10, 3)])
def test_named_reproduces_todays_graphs(name, n, p):
    fn, dynamic = named(name, n, num_neighbours=p, redraw_every=4)
    assert dynamic == (name == "time_varying")
    for seed in (0, 1):
        key = jax.random.PRNGKey(seed)
        for step in (0, 3, 4, 9, jnp.int32(13)):
            got = fn(key, step)
            np.testing.assert_array_equal(got, _today(name, key, step, n, p, 4))
            assert got.dtype == jnp.bool_
        np.testing.assert_array_equal(jax.jit(fn)(key, jnp.int32(8)), _today(name, key, 8, n, p, 4))


def test_named_exponential_and_errors():
    fn, dynamic = named("exponential", 8)
    assert dynamic is False
    np.testing.assert_array_equal(fn(jax.random.PRNGKey(0), 3), exponential(8))
    with pytest.raises(ValueError, match="topology must be one of"):
        named("star", 4, num_neighbours=1)
    with pytest.raises(ValueError, match="needs num_neighbours"):
        named("ring", 4)
    with pytest.raises(ValueError, match="needs redraw_every"):
        named("time_varying", 4, num_neighbours=1)
    with pytest.raises(ValueError, match="num_neighbours must be in"):
        named("random", 4, num_neighbours=4)
    assert set(topology.NAMES) == {"ring", "full", "random", "time_varying", "exponential"}
