"""Who talks to whom: boolean neighbour matrices for a network of nodes.

Convention everywhere in jaxcomm: ``adj[i, j]`` is True when node ``i`` sends
(broadcasts) to node ``j``. Row ``i`` is node ``i``'s set of neighbours (its
out-edges, the thesis' ``p`` neighbours); column ``j`` is who fills node
``j``'s inbox. A node never sends to itself, so the diagonal is always False.

Fixed graphs (``ring``, ``full``, ``exponential``) are built with NumPy: they
depend only on static ints and are constants of a run. Random graphs are built
with JAX so a time-varying graph can be drawn inside a jitted training loop
from a traced step counter. Research code passes its own graph as a matrix or
as a function ``(key, step) -> bool [N, N]`` (:data:`GraphFn`);
:func:`as_graph_fn` checks either and :func:`named` builds the named ones.

References:
    Lacaille (2018), §2.2.2.3 "Communication and network of nodes".
"""

from __future__ import annotations

import functools
import math
import operator
from collections.abc import Callable

import jax
import jax.numpy as jnp
import numpy as np

__all__ = [
    "ring",
    "full",
    "exponential",
    "random_graph",
    "graph_at",
    "check",
    "as_graph_fn",
    "named",
    "validate_adjacency",
    "in_degree",
    "in_neighbours",
    "out_degree",
    "one_peer_exponential",
    "mixing_matrix",
    "mix",
]

#: The topologies :func:`named` builds.
NAMES = ("ring", "full", "random", "time_varying", "exponential")

#: A graph as a function: ``graph(key, step) -> bool [N, N]``, ``adj[i, j]`` = node i sends to
#: node j at training step ``step`` (a Python int or a traced int32 scalar); jittable.
GraphFn = Callable[[jax.Array, int | jax.Array], jax.Array]


def _as_int(name: str, value: object) -> int:
    """Returns ``value`` as a Python int, rejecting bools, floats and arrays."""
    # bool is an int subclass: ring(True, ...) is almost surely a bug.
    if isinstance(value, (bool, np.bool_)):
        raise TypeError(f"{name} must be an int, got bool {value!r}")
    try:
        # operator.index accepts int and NumPy integers, rejects 3.0 and tracers.
        return operator.index(value)
    except TypeError:
        raise TypeError(
            f"{name} must be an int, got {type(value).__name__} {value!r}"
        ) from None


def _check_num_nodes(num_nodes: object) -> int:
    n = _as_int("num_nodes", num_nodes)
    if n < 1:
        raise ValueError(f"num_nodes must be >= 1, got {n}")
    return n


def _check_num_neighbours(num_neighbours: object, num_nodes: int) -> int:
    p = _as_int("num_neighbours", num_neighbours)
    if not 0 <= p <= num_nodes - 1:
        raise ValueError(
            "num_neighbours must be in [0, num_nodes - 1] = "
            f"[0, {num_nodes - 1}], got {p}"
        )
    return p


def ring(num_nodes: int, num_neighbours: int) -> np.ndarray:
    """Ring topology: each node sends to its ``p`` nearest nodes on a circle.

    Nodes sit on a circle in index order. Offsets are taken by increasing
    distance, clockwise first: ``+1, -1, +2, -2, ...``, and each node keeps the
    first ``p`` of them. So ``p=1`` sends only to the next node clockwise,
    ``p=2`` to both direct neighbours, ``p=3`` adds the next-but-one clockwise,
    and ``p = N - 1`` is fully connected (for even ``N`` the opposite node,
    offset ``N/2``, is reached once). ``p=0`` gives no edges.

    Args:
        num_nodes: N >= 1, the number of nodes.
        num_neighbours: p in [0, N - 1], out-degree of every node.

    Returns:
        ``[N, N] bool`` adjacency, ``adj[i, j]`` = node i sends to node j;
        every row has exactly p True entries and the diagonal is False.

    Raises:
        TypeError: if an argument is not an int.
        ValueError: if N < 1 or p is outside [0, N - 1].

    References:
        Lacaille (2018), §2.2.2.3: "considering all nodes in a circle, with the
        neighbours being selected as the closest nodes".
    """
    n = _check_num_nodes(num_nodes)
    p = _check_num_neighbours(num_neighbours, n)
    offsets: list[int] = []
    # Walk +1, -1, +2, -2, ... and dedupe modulo N (for even N, +N/2 == -N/2);
    # p <= N - 1 guarantees we stop before running out of distinct offsets.
    distance = 1
    while len(offsets) < p:
        for signed in (distance, -distance):
            offset = signed % n
            if offset not in offsets and len(offsets) < p:
                offsets.append(offset)
        distance += 1
    adj = np.zeros((n, n), dtype=bool)
    senders = np.arange(n)
    for offset in offsets:
        adj[senders, (senders + offset) % n] = True
    return adj


def full(num_nodes: int) -> np.ndarray:
    """Fully connected topology: every node sends to every other node.

    Args:
        num_nodes: N >= 1, the number of nodes.

    Returns:
        ``[N, N] bool`` adjacency, True everywhere except the diagonal.

    Raises:
        TypeError: if ``num_nodes`` is not an int.
        ValueError: if N < 1.

    References:
        Lacaille (2018), §2.2.2.3 (the p = N - 1 case, e.g. 25 nodes, p = 24).
    """
    n = _check_num_nodes(num_nodes)
    return ~np.eye(n, dtype=bool)


def exponential(num_nodes: int) -> np.ndarray:
    """Exponential graph: node i sends to ``(i + 2**k) % N`` for every ``k < ceil(log2 N)``.

    The offsets are the powers of two below N (1, 2, 4, ...), so every node has
    out-degree and in-degree ``ceil(log2 N)``, and any node reaches any other
    in at most ``ceil(log2 N)`` hops. It is BlueFog's ``ExponentialTwoGraph``
    (``topology_util.py``) without its self-loops; N = 1 gives no edges.

    Args:
        num_nodes: N >= 1, the number of nodes.

    Returns:
        ``[N, N] bool`` adjacency, ``adj[i, j]`` = node i sends to node j; the
        diagonal is False.

    Raises:
        TypeError: if ``num_nodes`` is not an int.
        ValueError: if N < 1.

    References:
        Ying, Yuan, Chen, Hu, Pan, Yin (2021), "Exponential Graph is Provably
        Efficient for Decentralized Deep Training", NeurIPS.
    """
    n = _check_num_nodes(num_nodes)
    adj = np.zeros((n, n), dtype=bool)
    senders = np.arange(n)
    # 2**k < N for k < ceil(log2 N): the offsets are distinct and never 0 mod N.
    for k in range(math.ceil(math.log2(n))):
        adj[senders, (senders + 2**k) % n] = True
    return adj


def random_graph(
    key: jax.Array, num_nodes: int, num_neighbours: int
) -> jax.Array:
    """Random fixed topology: each node gets ``p`` distinct random out-neighbours.

    Each row draws uniform scores, sets its own score to +inf and keeps the p
    smallest, so every node has exactly p neighbours, never itself, chosen
    uniformly among the other N - 1 nodes. In-degrees vary. Jittable with
    ``num_nodes`` and ``num_neighbours`` static.

    Args:
        key: PRNG key; the same key gives the same graph.
        num_nodes: N >= 1, static.
        num_neighbours: p in [0, N - 1], static.

    Returns:
        ``[N, N] bool`` adjacency, ``adj[i, j]`` = node i sends to node j;
        every row has exactly p True entries and the diagonal is False.

    Raises:
        TypeError: if an int argument is not an int.
        ValueError: if N < 1 or p is outside [0, N - 1].

    References:
        Lacaille (2018), §2.2.2.3, proposed extension: "each node has a random
        set of neighbours, fixed or changing".
    """
    n = _check_num_nodes(num_nodes)
    p = _check_num_neighbours(num_neighbours, n)
    return _random_graph(key, n, p)


# Jitted so eager calls compile once per (N, p); inlined under an outer jit.
@functools.partial(jax.jit, static_argnums=(1, 2))
def _random_graph(key: jax.Array, n: int, p: int) -> jax.Array:
    """Unchecked ``random_graph``."""
    scores = jax.random.uniform(key, (n, n))
    # uniform < 1 < inf, so with p <= N - 1 a node never picks itself.
    scores = jnp.where(jnp.eye(n, dtype=bool), jnp.inf, scores)
    # rank of each score within its row; argsort breaks ties by index, so the
    # ranks are a permutation and exactly p entries per row are below p.
    ranks = jnp.argsort(jnp.argsort(scores, axis=1), axis=1)
    return ranks < p


def graph_at(
    key: jax.Array,
    step: int | jax.Array,
    *,
    num_nodes: int,
    num_neighbours: int,
    every: int,
) -> jax.Array:
    """Time-varying random topology: a new ``random_graph`` every ``every`` steps.

    The graph for ``step`` is ``random_graph(fold_in(key, step // every))``, so
    it is constant within each window of ``every`` consecutive steps and
    recomputable from the step alone (no graph state to carry). Jittable with a
    traced ``step``; the ints are static.

    Args:
        key: PRNG key shared by the whole run.
        step: scalar int >= 0, the training step (Python int or traced).
        num_nodes: N >= 1, static.
        num_neighbours: p in [0, N - 1], static.
        every: k >= 1, static; number of steps each graph lasts.

    Returns:
        ``[N, N] bool`` adjacency for this step, as ``random_graph``.

    Raises:
        TypeError: if an int argument is not an int.
        ValueError: if N < 1, p is outside [0, N - 1] or every < 1.

    References:
        Lacaille (2018), §2.2.2.3, proposed extension ("fixed or changing").
    """
    k = _as_int("every", every)
    if k < 1:
        raise ValueError(f"every must be >= 1, got {k}")
    # Validate the graph size before touching the (possibly traced) step.
    n = _check_num_nodes(num_nodes)
    p = _check_num_neighbours(num_neighbours, n)
    return _graph_at(key, step, n, p, k)


@functools.partial(jax.jit, static_argnums=(2, 3, 4))
def _graph_at(
    key: jax.Array, step: int | jax.Array, n: int, p: int, k: int
) -> jax.Array:
    """Unchecked ``graph_at``."""
    return _random_graph(jax.random.fold_in(key, step // k), n, p)


def validate_adjacency(adj: np.ndarray | jax.Array) -> None:
    """Checks that ``adj`` is a valid neighbour matrix.

    Shape and dtype are checked always (also on tracers); the self-loop check
    needs concrete values and is skipped under ``jit``.

    Args:
        adj: candidate ``[N, N] bool`` adjacency.

    Raises:
        ValueError: if ``adj`` is not 2-D and square, not bool, or has a True
            entry on its diagonal; the message names the problem and the shape.

    References:
        Lacaille (2018), §2.2.2.3.
    """
    shape = tuple(np.shape(adj))
    if len(shape) != 2 or shape[0] != shape[1]:
        raise ValueError(f"adj must be a square 2-D [N, N] array, got shape {shape}")
    dtype = np.dtype(adj.dtype) if hasattr(adj, "dtype") else np.asarray(adj).dtype
    if dtype != np.bool_:
        raise ValueError(
            f"adj must have dtype bool, got {dtype} (shape {shape})"
        )
    if isinstance(adj, jax.core.Tracer):
        return
    _check_no_self_loops(np.asarray(adj), shape)


def _check_no_self_loops(adj: np.ndarray, shape: tuple[int, ...], what: str = "adj") -> None:
    """Raises ValueError naming the nodes of a concrete ``adj`` that send to themselves."""
    loops = np.flatnonzero(np.diagonal(adj))
    if loops.size:
        raise ValueError(
            f"{what} must have no self-loops, but nodes {loops.tolist()} send to "
            f"themselves (shape {shape})"
        )


def check(adj: np.ndarray | jax.Array, num_nodes: int) -> np.ndarray:
    """Validates a user's neighbour matrix for ``num_nodes`` nodes and returns it as bool.

    Args:
        adj: ``[N, N]`` array, ``adj[i, j]`` = node i sends to node j: bool, or
            integers that are all 0 or 1. Concrete (not traced under ``jit``).
        num_nodes: N >= 1.

    Returns:
        ``[N, N] bool`` NumPy copy of ``adj``.

    Raises:
        TypeError: if ``adj`` is traced, or ``num_nodes`` is not an int.
        ValueError: naming the problem: a shape other than ``(N, N)`` (both
            shapes given), values other than booleans / 0 / 1 (floats are
            refused: cast with ``.astype(bool)``), or self-loops (which nodes).
    """
    n = _check_num_nodes(num_nodes)
    if isinstance(adj, jax.core.Tracer):
        raise TypeError("adj must be a concrete array, not traced inside jit; pass a graph function "
                        "(key, step) -> bool [N, N] for a graph computed in the step")
    values = np.asarray(adj)
    shape = values.shape
    if shape != (n, n):
        raise ValueError(f"adj must have shape (num_nodes, num_nodes) = {(n, n)}, got shape {shape}")
    if values.dtype != np.bool_:
        if not np.issubdtype(values.dtype, np.integer):
            raise ValueError(f"adj must be boolean (bool, or integers 0/1), got dtype {values.dtype} "
                             f"(shape {shape}); cast it with .astype(bool)")
        bad = np.unique(values[(values != 0) & (values != 1)])
        if bad.size:
            raise ValueError(f"adj must be boolean (bool, or integers 0/1), got values {bad[:5].tolist()} "
                             f"(dtype {values.dtype}, shape {shape})")
        values = values.astype(bool)
    _check_no_self_loops(values, shape)
    return np.array(values, dtype=bool)


def as_graph_fn(
    graph: np.ndarray | jax.Array | GraphFn, num_nodes: int, *, key: jax.Array | None = None
) -> tuple[GraphFn, bool]:
    """A graph given by value or as a function, as a :data:`GraphFn` and whether it changes.

    Args:
        graph: a ``[N, N]`` neighbour matrix (see :func:`check`), or a function
            ``graph(key, step) -> bool [N, N]`` evaluated at every step: jittable
            in a traced int32 ``step``.
        num_nodes: N.
        key: the key the function is checked with at step 0 (default
            ``PRNGKey(0)``).

    Returns:
        ``(graph_fn, dynamic)``: for a matrix a function returning it whatever
        the key and step, and ``dynamic=False``; for a function the function
        itself and ``dynamic=True``.

    Raises:
        TypeError: if ``graph`` is neither an array nor callable, or the
            function cannot be traced.
        ValueError: if the matrix, or the function's output (shape and dtype
            from ``jax.eval_shape``, self-loops from its value at step 0), is
            not a valid ``[N, N] bool`` neighbour matrix.
    """
    n = _check_num_nodes(num_nodes)
    if not callable(graph):
        if not hasattr(graph, "shape") and not isinstance(graph, list | tuple):
            raise TypeError(f"graph must be a bool [N, N] array or a function (key, step) -> bool [N, N], "
                            f"got {type(graph).__name__}")
        adj = jnp.asarray(check(graph, n))
        return (lambda key, step: adj), False
    key = jax.random.PRNGKey(0) if key is None else key
    step = jnp.zeros((), jnp.int32)
    name = getattr(graph, "__name__", type(graph).__name__)
    try:
        out = jax.eval_shape(graph, key, step)
    except Exception as error:
        raise TypeError(f"graph function {name}(key, step) could not be traced with a PRNG key and an int32 "
                        f"step: {type(error).__name__}: {error}") from error
    if not hasattr(out, "shape") or tuple(out.shape) != (n, n) or out.dtype != jnp.bool_:
        got = f"shape {tuple(out.shape)}, dtype {out.dtype}" if hasattr(out, "shape") else type(out).__name__
        raise ValueError(f"graph function {name}(key, step) must return a bool array of shape "
                         f"(num_nodes, num_nodes) = {(n, n)}, got {got}")
    _check_no_self_loops(np.asarray(graph(key, step)), (n, n), what=f"graph function {name}(key, step=0)")
    return graph, True


def named(
    name: str, num_nodes: int, *, num_neighbours: int | None = None, redraw_every: int | None = None
) -> tuple[GraphFn, bool]:
    """The named topologies as :data:`GraphFn` values, as the network draws them.

    * "ring": :func:`ring` ``(N, num_neighbours)``; "full": :func:`full`;
      "exponential": :func:`exponential` (``num_neighbours`` unused). Constant.
    * "random": :func:`random_graph` ``(key, N, num_neighbours)``: one graph per
      key, fixed for the run.
    * "time_varying": :func:`graph_at` ``(key, step, num_nodes=N,
      num_neighbours=p, every=redraw_every)``: a new random graph every
      ``redraw_every`` steps.

    Args:
        name: one of :data:`NAMES`.
        num_nodes: N.
        num_neighbours: p, for "ring", "random" and "time_varying".
        redraw_every: for "time_varying".

    Returns:
        ``(graph_fn, dynamic)``; ``dynamic`` is True only for "time_varying" (a
        graph the step changes; "random" depends on the key alone).

    Raises:
        ValueError: for an unknown name, or a missing or invalid argument.
    """
    n = _check_num_nodes(num_nodes)
    if name not in NAMES:
        raise ValueError(f"topology must be one of {NAMES}, got {name!r}")
    if name in ("full", "exponential"):
        adj = jnp.asarray(full(n) if name == "full" else exponential(n))
        return (lambda key, step: adj), False
    if num_neighbours is None:
        raise ValueError(f"topology {name!r} needs num_neighbours")
    p = _check_num_neighbours(num_neighbours, n)
    if name == "ring":
        adj = jnp.asarray(ring(n, p))
        return (lambda key, step: adj), False
    if name == "random":
        return (lambda key, step: random_graph(key, n, p)), False
    if redraw_every is None:
        raise ValueError("topology 'time_varying' needs redraw_every")
    every = _as_int("redraw_every", redraw_every)
    if every < 1:
        raise ValueError(f"redraw_every must be >= 1, got {every}")
    return (lambda key, step: graph_at(key, step, num_nodes=n, num_neighbours=p, every=every)), True


def in_degree(adj: np.ndarray | jax.Array) -> jax.Array:
    """Number of senders per node: how many nodes broadcast into each inbox.

    Args:
        adj: ``[N, N] bool`` adjacency.

    Returns:
        ``[N] int32``, ``in_degree[j] = sum_i adj[i, j]``.
    """
    return jnp.sum(jnp.asarray(adj), axis=0, dtype=jnp.int32)


def out_degree(adj: np.ndarray | jax.Array) -> jax.Array:
    """Number of neighbours per node: how many inboxes each node broadcasts to.

    Args:
        adj: ``[N, N] bool`` adjacency.

    Returns:
        ``[N] int32``, ``out_degree[i] = sum_j adj[i, j]`` (p for ``ring``).
    """
    return jnp.sum(jnp.asarray(adj), axis=1, dtype=jnp.int32)


def mixing_matrix(adj: np.ndarray | jax.Array) -> jax.Array:
    """Gossip weights ``W [N, N]``: node j averages itself with its in-neighbours, equally.

    ``W[j, i] = 1 / (1 + in_degree(j))`` for ``i = j`` and every ``i`` with
    ``adj[i, j]`` (i sends to j), else 0; every row sums to 1.
    """
    received = jnp.asarray(adj, jnp.float32).T + jnp.eye(jnp.shape(adj)[0], dtype=jnp.float32)
    return received / jnp.sum(received, axis=1, keepdims=True)


def mix(weights: jax.Array, tree):
    """``W @ x`` along the node axis of every leaf ``[N, ...]`` of ``tree``: one gossip round."""
    return jax.tree_util.tree_map(
        lambda leaf: jnp.tensordot(weights, leaf.astype(jnp.float32), axes=1).astype(leaf.dtype), tree)


def in_neighbours(adj: np.ndarray) -> tuple[np.ndarray, jax.Array]:
    """``(senders [N, D] int32, weights [N, D + 1] float32)`` of a static graph: each node's in-neighbours (padded
    with itself at weight 0 to the largest in-degree D) and its gossip weights, itself first
    (:func:`jaxcomm.topology.mixing_matrix`'s: ``1 / (1 + in-degree)`` each)."""
    adj = np.asarray(adj, bool)
    n = adj.shape[0]
    lists = [np.flatnonzero(adj[:, j]) for j in range(n)]
    depth = max(1, max(len(senders) for senders in lists))
    senders = np.array([list(s) + [j] * (depth - len(s)) for j, s in enumerate(lists)], np.int32)
    weights = np.array([[1.0] + [1.0] * len(s) + [0.0] * (depth - len(s)) for s in lists], np.float32)
    weights /= np.array([1 + len(s) for s in lists], np.float32)[:, None]
    return senders, jnp.asarray(weights)


def one_peer_exponential(num_nodes: int) -> GraphFn:
    """SGP's time-varying directed exponential graph with one peer per step, as a :data:`GraphFn`.

    At step ``t`` node ``i`` sends to the single peer ``(i + 2**(t mod ceil(log2 N))) mod N``: the offsets of
    :func:`exponential` taken one at a time, 1 first. Every node has out-degree and in-degree 1 at every step
    (the offsets are a permutation), and for N a power of two ``log2 N`` consecutive steps of push-sum with
    weights 1/2 average exactly. N = 1 gives no edges. Jittable in a traced ``step``; the key is unused.

    Args:
        num_nodes: N >= 1.

    Returns:
        ``graph(key, step) -> bool [N, N]``, ``adj[i, j]`` = node i sends to node j at ``step``.

    Raises:
        TypeError: if ``num_nodes`` is not an int.
        ValueError: if N < 1.

    References:
        Assran, Loizou, Ballas, Rabbat (2019), "Stochastic Gradient Push for Distributed Deep Learning", ICML,
        §5 and the appendix (one peer per iteration, cycling through the peers 2^0, 2^1, ... hops away);
        facebookresearch/stochastic_gradient_push, ``NPeerDynamicDirectedExponentialGraph`` with one peer.
    """
    n = _check_num_nodes(num_nodes)
    offsets = jnp.asarray([2**k for k in range((n - 1).bit_length())] or [0], jnp.int32)  # ceil(log2 N) of them

    def graph(key: jax.Array, step: int | jax.Array) -> jax.Array:
        nodes = jnp.arange(n)
        peer = (nodes + offsets[jnp.asarray(step) % offsets.shape[0]]) % n
        return (nodes[None, :] == peer[:, None]) & (n > 1)

    graph.__name__ = f"one_peer_exponential_{n}"
    return graph
