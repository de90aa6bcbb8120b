"""A population of N nodes as one pytree, and the lift of per-node code to N.

Every leaf of a population carries the node axis first: a Dense kernel of shape
``[784, 32]`` becomes ``[N, 784, 32]``. Per-node functions (init, train step,
predict) are written for ONE node and lifted to all N by :func:`lift`, whose
backend is a swappable detail tested equal across choices:

* ``"vmap"``: ``jax.vmap`` over the node axis. Dense layers become batched
  matmuls: the fast choice for many small MLPs.
* ``"patches"``: ``"vmap"`` with every plain Flax ``nn.Conv`` (2-D, undilated,
  ungrouped) traced as im2col and one matmul
  (:func:`jaxcomm.models.patches.patch_convs`), so convolutional nodes, too,
  batch as matmuls: vmapped, a convolution of per-node kernels becomes a grouped
  convolution, several times slower on CPU than a per-node loop. The same as
  "vmap" for models without convolutions.
* ``"loop"``: the reference. A Python loop that calls the single-node function
  on node ``i``'s slice of every stacked argument and stacks the results. Called
  eagerly (the driver's "eager" step loop) it dispatches one compiled call per
  node, one node after another (the thesis' way, §2.2.1): the index is an
  argument, so N nodes share one compile, and the results are stacked in one more;
  given node states :class:`Unstacked` (N separate sets of buffers, as the
  thesis' N models), it neither slices nor stacks them.
* ``"unrolled"``: the same loop traced inside the caller's ``jit``: N copies of
  the single-node graph in one program, each convolution in its own fast layout
  (under an outer ``jit``, "loop" becomes exactly this); given node states
  :class:`Unstacked`, it too neither slices nor stacks them.
* ``"map"``: ``jax.lax.map`` over nodes, ``map_batch_size`` at a time (vmapped
  within a batch): bounded memory and compile time for large N.
* ``"sharded"``: the node axis laid over a 1-D device mesh (axis ``"nodes"``)
  with ``jax.shard_map``; each device vmaps over its own nodes. This is how a
  run spreads over several chips or hosts.

References:
  Lacaille (2018), §2.2.1 "Simulated nodes"; fedjax ``for_each_client``.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import optax

from jaxcomm.models.patches import patch_convs

BACKENDS = ("vmap", "loop", "unrolled", "map", "sharded", "patches")
APART_BACKENDS = ("loop", "unrolled")
"""The lifts that take node states :class:`Unstacked` and keep them so (the driver's "eager" and "dispatch" step
loops hold them apart within a chunk)."""
AUTO = "auto"  # resolved per model by jaxcomm.speed.choose
NODE_AXIS = "nodes"  # mesh axis name of the "sharded" backend

PyTree = Any


def held_apart(backend: str, step_loop: str) -> bool:
    """Whether the driver holds node states apart (:class:`Unstacked`) through a chunk of ``step_loop`` steps under
    ``backend``: a lift of :data:`APART_BACKENDS`, outside a scan (which keeps them stacked)."""
    return backend in APART_BACKENDS and step_loop != "scan"


def check_backend(backend: str, *, allow_auto: bool = False) -> None:
    """Raises ValueError unless ``backend`` is one of :data:`BACKENDS` (or "auto")."""
    allowed = (AUTO, *BACKENDS) if allow_auto else BACKENDS
    if backend not in allowed:
        raise ValueError(f"backend must be one of {allowed}, got {backend!r}")


def num_nodes(tree: PyTree) -> int:
    """Size of the leading (node) axis shared by every leaf of ``tree``."""
    sizes = {jnp.shape(leaf)[0] for leaf in jax.tree_util.tree_leaves(tree)}
    if len(sizes) != 1:
        raise ValueError(f"leaves disagree on the node axis: sizes {sorted(sizes)}")
    return sizes.pop()


def node(tree: PyTree, i: int) -> PyTree:
    """Node ``i``'s slice of a stacked pytree (drops the node axis)."""
    return jax.tree_util.tree_map(lambda leaf: leaf[i], tree)


def stack(trees: Sequence[PyTree]) -> PyTree:
    """Stacks per-node pytrees of identical structure on a new leading axis."""
    return jax.tree_util.tree_map(lambda *leaves: jnp.stack(leaves), *trees)


def where(mask: jax.Array, on_true: PyTree, on_false: PyTree) -> PyTree:
    """Per node: the leaves of ``on_true`` where ``mask [N]`` holds, else those of ``on_false`` (both ``[N, ...]``,
    or both :class:`Unstacked`: node by node, no stack built)."""
    mask = jnp.asarray(mask)
    if isinstance(on_true, Unstacked):
        return Unstacked(_where_apart(mask, on_true.trees, on_false.trees))
    return jax.tree_util.tree_map(
        lambda a, b: jnp.where(mask.reshape((-1,) + (1,) * (jnp.ndim(a) - 1)), a, b), on_true, on_false)


@jax.jit  # one compiled call per step of the eager loop, not one per leaf and node
def _where_apart(mask: jax.Array, on_true: tuple, on_false: tuple) -> tuple:
    return tuple(jax.tree_util.tree_map(lambda a, b, i=i: jnp.where(mask[i], a, b), x, y)
                 for i, (x, y) in enumerate(zip(on_true, on_false, strict=True)))


HELD_BACKENDS = ("vmap", "patches", "map")
"""The stacked lifts whose held step (:func:`lift_held`) gathers the due nodes ``capacity`` at a time."""


def lift_held(fn: Callable[..., tuple], *, backend: str, in_axes: int | None | Sequence[int | None] = 0,
              held: int = 0, capacity: int | None = None, lifted: Callable[..., Any] | None = None,
              **lift_kwargs) -> Callable[..., tuple]:
    """``fn`` lifted as :func:`lift` lifts it, called ``held_step(due [N] bool, *args)``: a node not due is
    held, its state (``args[held]``, the structure of ``fn``'s first output) as it was and its auxiliary
    outputs zero, and where the lift allows its step is not computed at all:

    * nodes :class:`Unstacked` in the eager loop ("loop"): only the due nodes' compiled step is called (``due``
      read on the host);
    * stacked under :data:`HELD_BACKENDS` with ``capacity`` < N: the due nodes are gathered ``capacity`` at a
      time (a loop of ``ceil(due / capacity)`` passes), stepped by ``lifted`` and scattered back in place;
    * otherwise every node is computed and the due ones kept (``where``).

    ``fn(*args) -> (state, aux)`` for one node; ``lifted``: its lift (default ``lift(fn, ...)``; e.g.
    :func:`lift_train`'s). Every path gives the due nodes the values ``lifted`` gives them (tested)."""
    lifted = lifted or lift(fn, backend=backend, in_axes=in_axes, **lift_kwargs)
    one = _node_call(fn)

    def apart(due, args, axes):
        n = len(args[held].trees)
        if isinstance(due, jax.core.Tracer):  # a jitted step: every node computed, kept where due (on CPU a
            # branch per node would put its convolutions in a nested computation, many times slower)
            states, auxes = zip(*lifted(*args).trees, strict=True)
            return Unstacked(tuple(zip(_where_apart(due, states, args[held].trees),
                                       _where_apart(due, auxes, tuple(map(_zeros, auxes))), strict=True)))
        due = np.asarray(due)  # the eager loop: only the due nodes' compiled calls
        own = [axis == 0 and isinstance(arg, Unstacked) for arg, axis in zip(args, axes, strict=True)]
        call_axes = tuple(None if o else axis for o, axis in zip(own, axes, strict=True))
        steps, zeros = {}, None
        for i in np.flatnonzero(due):
            steps[i] = one(call_axes, np.int32(i), *(arg.trees[i] if o else arg for arg, o in zip(args, own,
                                                                                                 strict=True)))
            zeros = zeros if zeros is not None else jax.tree_util.tree_map(jnp.zeros_like, steps[i][1])
        if zeros is None:  # no node due: one abstract call for the auxiliaries' shapes
            zeros = _zeros(jax.eval_shape(one, call_axes, np.int32(0), *(
                arg.trees[0] if o else arg for arg, o in zip(args, own, strict=True)))[1])
        return Unstacked(tuple(steps[i] if i in steps else (args[held].trees[i], zeros) for i in range(n)))

    def held_step(due: jax.Array, *args):
        axes = _normalise_axes(in_axes, len(args))
        if isinstance(args[held], Unstacked):
            return apart(due, args, axes)
        if backend in HELD_BACKENDS and capacity is not None and capacity < num_nodes(args[held]):
            return _in_passes(lifted, due, args, axes, held, capacity)
        state, aux = lifted(*args)
        return where(due, state, args[held]), where(due, aux, jax.tree_util.tree_map(jnp.zeros_like, aux))

    return held_step


def _zeros(shapes: PyTree) -> PyTree:
    return jax.tree_util.tree_map(lambda s: jnp.zeros(s.shape, s.dtype), shapes)


def _in_passes(lifted: Callable[..., tuple], due: jax.Array, args: tuple, axes: tuple, held: int,
               capacity: int) -> tuple:
    """:func:`lift_held`'s gather: the due nodes, ``capacity`` at a time, stepped and scattered back in place."""
    n = due.shape[0]
    order = jnp.nonzero(due, size=-(-n // capacity) * capacity, fill_value=n)[0]  # the due nodes first, then n

    def pass_of(state, idx):  # the held state read from the loop's own carry: no copy of the population
        take = lambda leaf: jnp.take(leaf, idx, axis=0, mode="clip")  # noqa: E731
        return lifted(*(jax.tree_util.tree_map(take, state if k == held else arg) if axis == 0 else arg
                        for k, (arg, axis) in enumerate(zip(args, axes, strict=True))))

    aux_shape = jax.eval_shape(pass_of, args[held], order[:capacity])[1]
    aux = jax.tree_util.tree_map(lambda s: jnp.zeros((n, *s.shape[1:]), s.dtype), aux_shape)

    def body(p, carry):
        state, aux = carry
        idx = jax.lax.dynamic_slice_in_dim(order, p * capacity, capacity)
        new_state, new_aux = pass_of(state, idx)
        put = lambda full, part: full.at[idx].set(part, mode="drop")  # noqa: E731  a slot of no node drops
        return jax.tree_util.tree_map(put, state, new_state), jax.tree_util.tree_map(put, aux, new_aux)

    passes = (jnp.sum(due, dtype=jnp.int32) + capacity - 1) // capacity
    return jax.lax.fori_loop(0, passes, body, (args[held], aux))


def _normalise_axes(in_axes: int | None | Sequence[int | None], num_args: int) -> tuple[int | None, ...]:
    axes = (in_axes,) * num_args if in_axes is None or isinstance(in_axes, int) else tuple(in_axes)
    if len(axes) != num_args:
        raise ValueError(f"in_axes has {len(axes)} entries for {num_args} arguments")
    if any(axis not in (0, None) for axis in axes):
        raise ValueError(f"in_axes entries must be 0 or None, got {axes}")
    if 0 not in axes:
        raise ValueError("at least one argument must be stacked on the node axis (in_axes=0)")
    return axes


def node_mesh(devices: Sequence[jax.Device] | None = None) -> jax.sharding.Mesh:
    """A 1-D device mesh whose single axis, ``"nodes"``, carries the node axis.

    Args:
      devices: the devices to spread nodes over; all of ``jax.devices()`` by
        default (every host's, after ``jax.distributed.initialize``).
    """
    devices = list(jax.devices() if devices is None else devices)
    return jax.sharding.Mesh(np.asarray(devices), (NODE_AXIS,))


def _identity(tree: PyTree) -> PyTree:  # one function object, so gathers of one structure compile once
    return tree


def to_host(tree: PyTree) -> PyTree:
    """Every leaf as a numpy array on this host, gathering shards from other processes.

    With the "sharded" backend across processes (``jax.distributed``), an array
    spans devices this process cannot read; every process then receives the
    whole array (a collective: all processes must call this together). All such
    leaves are replicated by one program (one compile per tree structure, not one
    per leaf shape).
    """
    leaves, treedef = jax.tree_util.tree_flatten(tree)
    remote = [i for i, leaf in enumerate(leaves) if isinstance(leaf, jax.Array) and not leaf.is_fully_addressable]
    if remote:
        named = all(isinstance(leaves[i].sharding, jax.sharding.NamedSharding) for i in remote)
        if named:
            gather = jax.jit(_identity, out_shardings=tuple(leaves[i].sharding.update(
                spec=jax.sharding.PartitionSpec()) for i in remote))
            gathered = [np.asarray(out.addressable_data(0)) for out in gather(tuple(leaves[i] for i in remote))]
        else:
            from jax.experimental import multihost_utils  # noqa: PLC0415

            gathered = [np.asarray(multihost_utils.process_allgather(leaves[i], tiled=True)) for i in remote]
        for i, value in zip(remote, gathered, strict=True):
            leaves[i] = value
    return treedef.unflatten([np.asarray(leaf) for leaf in leaves])


def lift(
    fn: Callable[..., Any],
    *,
    backend: str = "vmap",
    in_axes: int | None | Sequence[int | None] = 0,
    map_batch_size: int | None = None,
    mesh: jax.sharding.Mesh | None = None,
) -> Callable[..., Any]:
    """Lifts a single-node function to all N nodes of a population.

    Args:
      fn: a function of one node, ``fn(*args) -> out`` (any pytrees).
      backend: one of :data:`BACKENDS`.
      in_axes: as ``jax.vmap``, restricted to ``0`` (argument is stacked on the
        node axis) or ``None`` (argument shared by all nodes); one value or one
        per positional argument.
      map_batch_size: nodes per ``lax.map`` iteration (``"map"`` only; None = 1).
      mesh: the device mesh of ``"sharded"`` (default :func:`node_mesh`); N must
        be a multiple of its size.

    Returns:
      ``lifted(*args) -> out`` where every leaf of ``out`` gains a leading
      ``[N]`` axis. All backends return the same values (tested to float32
      tolerance).
    """
    check_backend(backend)
    if backend == "vmap":
        return jax.vmap(fn, in_axes=in_axes)
    if backend == "patches":
        return jax.vmap(_with_patched_convs(fn), in_axes=in_axes)
    if backend == "sharded":
        return _sharded(fn, in_axes, mesh)
    if backend == "map":
        return _mapped(fn, in_axes, map_batch_size)
    if backend == "loop":
        return _looped(fn, in_axes)

    def unrolled(*args):
        axes = _normalise_axes(in_axes, len(args))
        pairs = list(zip(args, axes, strict=True))
        apart = [arg for arg, axis in pairs if axis == 0 and isinstance(arg, Unstacked)]
        if apart:  # node i's own buffers go in as they are; its outputs stay its own (no slice, no stack)
            return Unstacked(tuple(fn(*(_of_node(arg, axis, i) for arg, axis in pairs))
                                   for i in range(len(apart[0].trees))))
        n = num_nodes([arg for arg, axis in pairs if axis == 0])
        return stack([fn(*(_of_node(arg, axis, i) for arg, axis in pairs)) for i in range(n)])

    return unrolled


def _of_node(arg: Any, axis: int | None, i: int) -> Any:
    """Node ``i``'s part of a lifted function's argument: its own tree (:class:`Unstacked`), its slice (stacked,
    ``axis`` 0) or the argument itself (shared, ``axis`` None)."""
    if axis is None:
        return arg
    return arg.trees[i] if isinstance(arg, Unstacked) else node(arg, i)


def _with_patched_convs(fn: Callable[..., Any]) -> Callable[..., Any]:
    """``fn`` traced under :func:`jaxcomm.models.patches.patch_convs`: its Flax convolutions become matmuls."""

    @functools.wraps(fn)
    def patched(*args):
        with patch_convs():  # at trace time: the interception decides what vmap and jit see
            return fn(*args)

    return patched


@jax.jit
def stack_jitted(trees: tuple) -> PyTree:
    """:func:`stack` in one compiled call: stacking eagerly compiles a program per leaf shape."""
    return stack(trees)


def _node_at(tree: PyTree, i: jax.Array) -> PyTree:  # node i's slice, i traced: one program whatever i
    return jax.tree_util.tree_map(lambda leaf: jax.lax.dynamic_index_in_dim(leaf, i, keepdims=False), tree)


_node_of = jax.jit(_node_at)


class Unstacked(NamedTuple):
    """N per-node pytrees held as N separate sets of buffers, not stacked on a node axis.

    The "eager" and "dispatch" step loops' layout of node states within a chunk
    of steps (:class:`jaxcomm.driver.Layout`): a "loop" lift called eagerly, or
    an "unrolled" one in a jitted step, reads node ``i``'s tree where it lies
    and returns each node's output as its own, as the thesis' N separate models
    are updated. Stacked, every step would copy
    the population twice (a slice of each node, a stack of the results) and,
    on CPU, write the stack into freshly mapped memory, page by page: for 32
    wide MLP nodes (27 MB of state each) that made the step 2-3x slower than
    the thesis' loop.

    Attributes:
      trees: node ``i``'s pytree at position ``i``.
    """

    trees: tuple


def unstack(tree: PyTree) -> Unstacked:
    """A stacked tree (leaves ``[N, ...]``) as :class:`Unstacked` (N compiled calls of one program);
    an :class:`Unstacked` tree as it is."""
    if isinstance(tree, Unstacked):
        return tree
    return Unstacked(tuple(_node_of(tree, np.int32(i)) for i in range(num_nodes(tree))))


def restack(tree: PyTree) -> PyTree:
    """An :class:`Unstacked` tree stacked on a new leading node axis; a stacked tree as it is."""
    return stack_jitted(tree.trees) if isinstance(tree, Unstacked) else tree


RUNS_AXIS = "jaxcomm_runs"
"""The vmap axis name of a sweep's runs (:func:`jaxcomm.sweep.population_step`)."""


def _due_in_any_run(due: jax.Array | bool) -> jax.Array | bool:
    """Inside a sweep's runs axis, whether any run is due (one value for the population, so a ``lax.cond`` on it
    stays a branch: on a per-run value vmap would run both branches every step); ``due`` itself elsewhere."""
    if not isinstance(due, jax.Array):
        return due
    try:
        return jax.lax.pmax(due, RUNS_AXIS)
    except NameError:  # not inside a sweep
        return due


def _on_stacked(fn: Callable[..., tuple], nodes: Unstacked, *rest: PyTree) -> tuple:
    """``fn(nodes, *rest)`` of :func:`when_due` on nodes held apart: stacked for ``fn``, set apart again."""
    new_nodes, *others = fn(restack(nodes), *rest)
    return (unstack(new_nodes), *others)


def when_due(due: jax.Array | bool, fn: Callable[..., tuple], nodes: PyTree, *rest: PyTree) -> tuple:
    """``fn(nodes, *rest)`` where ``due``, else ``(nodes, *rest)`` as they are; ``fn`` returns a tuple of
    the same structure (a periodic whole-population operation: gossip averaging, a local-SGD round's end).

    Stacked nodes (``[N, ...]``, ``due`` traced or not): a ``lax.cond``, so ``fn`` runs only on the steps it is
    due; inside a sweep's runs axis (:data:`RUNS_AXIS`) on the steps some run is due, each run changed only where
    it is. Nodes :class:`Unstacked` (the eager loop, or a jitted "unrolled" step): only when due are they stacked
    for ``fn`` and set apart again (``due`` read on the host when it is not traced); regrouping every step would
    cost the copies that :class:`Unstacked` avoids.
    """
    if isinstance(nodes, Unstacked):
        if not isinstance(due, jax.core.Tracer):
            return _on_stacked(fn, nodes, *rest) if bool(due) else (nodes, *rest)
        fn = functools.partial(_on_stacked, fn)
    anyone = _due_in_any_run(due)
    if anyone is due:
        return jax.lax.cond(due, fn, lambda *args: args, nodes, *rest)

    def each_run(*args):  # in a sweep: where each run is due (runs may differ), on steps some run is
        return jax.tree_util.tree_map(lambda new, old: jnp.where(due, new, old), fn(*args), args)

    return jax.lax.cond(anyone, each_run, lambda *args: args, nodes, *rest)


def state_and_aux(out: PyTree) -> tuple[PyTree, PyTree]:
    """A lifted step's ``(state, aux)``: from an :class:`Unstacked` output of N per-node pairs, the states
    :class:`Unstacked` (they stay where they are) and the auxiliaries stacked (``[N, ...]``, small); a stacked
    pair as it is."""
    if not isinstance(out, Unstacked):
        return out
    return Unstacked(tuple(state for state, _ in out.trees)), stack_jitted(tuple(aux for _, aux in out.trees))


def _node_call(fn: Callable[..., Any]) -> Callable[..., Any]:
    """``one(axes, i, *args)``: ``fn`` on node ``i``'s slices of the stacked (``axes`` 0) arguments, jitted.

    Called eagerly, each node is one compiled dispatch (asynchronous: no host sync between nodes) with the node's
    index an argument, so every node runs the one compiled program; slicing N nodes leaf by leaf op by op would
    cost more dispatches than the step. Under an outer jit the calls inline: "loop" becomes "unrolled"."""

    @functools.partial(jax.jit, static_argnums=0)
    def one(axes: tuple[int | None, ...], i: jax.Array, *args):
        return fn(*(_node_at(arg, i) if axis == 0 else arg for arg, axis in zip(args, axes, strict=True)))

    return one


def _looped(fn: Callable[..., Any], in_axes) -> Callable[..., Any]:
    one = _node_call(fn)

    def looped(*args):
        axes = _normalise_axes(in_axes, len(args))
        apart = [axis == 0 and isinstance(arg, Unstacked) for arg, axis in zip(args, axes, strict=True)]
        if any(apart):  # node i's own buffers go in as they are; its outputs stay its own
            n = len(next(arg for arg, a in zip(args, apart, strict=True) if a).trees)
            call_axes = tuple(None if a else axis for a, axis in zip(apart, axes, strict=True))
            return Unstacked(tuple(one(call_axes, np.int32(i), *(arg.trees[i] if a else arg
                                                                  for arg, a in zip(args, apart, strict=True)))
                                   for i in range(n)))
        n = num_nodes([arg for arg, axis in zip(args, axes, strict=True) if axis == 0])
        return stack_jitted(tuple(one(axes, np.int32(i), *args) for i in range(n)))

    return looped


def _mapped(fn: Callable[..., Any], in_axes, batch_size: int | None) -> Callable[..., Any]:
    def mapped(*args):
        axes = _normalise_axes(in_axes, len(args))
        stacked = tuple(arg for arg, axis in zip(args, axes, strict=True) if axis == 0)

        def one(node_args):
            rest = iter(node_args)
            return fn(*(next(rest) if axis == 0 else arg for arg, axis in zip(args, axes, strict=True)))

        return jax.lax.map(one, stacked, batch_size=batch_size)

    return mapped


def _sharded(fn: Callable[..., Any], in_axes, mesh: jax.sharding.Mesh | None) -> Callable[..., Any]:
    spec = jax.sharding.PartitionSpec

    @functools.cache
    def program(axes: tuple[int | None, ...], grid: jax.sharding.Mesh) -> Callable[..., Any]:
        # Each device runs vmap over its own N / devices nodes. Jitted: called eagerly (a population's init), a
        # shard_map runs op by op, seconds where one compile costs a fraction; under the caller's jit it inlines.
        return jax.jit(jax.shard_map(jax.vmap(fn, in_axes=axes), mesh=grid,
                                     in_specs=tuple(spec(NODE_AXIS) if axis == 0 else spec() for axis in axes),
                                     out_specs=spec(NODE_AXIS)))

    def sharded(*args):
        axes = _normalise_axes(in_axes, len(args))
        grid = node_mesh() if mesh is None else mesh
        n = num_nodes([arg for arg, axis in zip(args, axes, strict=True) if axis == 0])
        if n % grid.size:
            raise ValueError(f"backend 'sharded' needs num_nodes divisible by the {grid.size} devices of the mesh, "
                             f"got num_nodes={n}")
        return program(axes, grid)(*args)

    return sharded


class NodeState(NamedTuple):
    """Training state of one node; stacked, of all N nodes.

    Attributes:
      params: the model's parameters.
      model_state: the model's other variable collections (e.g. ``batch_stats``);
        an empty dict for models without any.
      opt_state: the optax optimiser state of ``params``.
    """

    params: PyTree
    model_state: PyTree
    opt_state: optax.OptState


def init_population(
    init_fn: Callable[[jax.Array], PyTree],
    key: jax.Array,
    num_nodes: int,
    *,
    backend: str = "vmap",
) -> PyTree:
    """Initialises N nodes from N split keys and stacks them.

    Node ``i`` gets ``jax.random.split(key, num_nodes)[i]``, whatever the
    backend, so a population equals N independent single-node inits.

    Args:
      init_fn: ``init_fn(key) -> state`` for one node.
      key: a PRNG key.
      num_nodes: N >= 1.
      backend: how to lift ``init_fn``.

    Returns:
      The stacked state, every leaf ``[N, ...]``.
    """
    if num_nodes < 1:
        raise ValueError(f"num_nodes must be >= 1, got {num_nodes}")
    return lift(init_fn, backend=backend)(jax.random.split(key, num_nodes))


@dataclasses.dataclass(frozen=True)
class TrainStep:
    """One node's gradient step (:func:`make_train_step`): callable whole, ``step(state, *batch) -> (state, (loss,
    aux))``, or in two halves, so :func:`lift_train` can run them differently: :meth:`gradients` per node and
    :meth:`update` (the optimiser: elementwise) over the stacked population at once.

    Attributes:
      loss_fn: ``loss_fn(params, model_state, *batch) -> (loss, (model_state, aux))`` for one node.
      optimizer: an optax transformation.
    """

    loss_fn: Callable[..., tuple[jax.Array, tuple[PyTree, PyTree]]]
    optimizer: optax.GradientTransformation

    def gradients(self, state: NodeState, *batch) -> tuple[PyTree, PyTree, tuple[jax.Array, PyTree]]:
        """``(grads, new model_state, (loss, aux))`` of one node's batch."""
        grad_fn = jax.value_and_grad(self.loss_fn, has_aux=True)
        (loss, (model_state, aux)), grads = grad_fn(state.params, state.model_state, *batch)
        return grads, model_state, (loss, aux)

    def update(self, args: tuple, grads: PyTree, model_state: PyTree) -> NodeState:
        """The optimiser's update of the state in ``args`` (the step's arguments) by ``grads``."""
        state = args[0]
        updates, opt_state = self.optimizer.update(grads, state.opt_state, state.params)
        return NodeState(optax.apply_updates(state.params, updates), model_state, opt_state)

    def __call__(self, state: NodeState, *batch) -> tuple[NodeState, tuple[jax.Array, PyTree]]:
        grads, model_state, out = self.gradients(state, *batch)
        return self.update((state, *batch), grads, model_state), out


def make_train_step(
    loss_fn: Callable[..., tuple[jax.Array, tuple[PyTree, PyTree]]],
    optimizer: optax.GradientTransformation,
) -> TrainStep:
    """Builds one node's gradient step from its loss.

    Args:
      loss_fn: ``loss_fn(params, model_state, *batch) -> (loss, (model_state,
        aux))`` for one node; ``aux`` is anything to report (e.g. logits).
      optimizer: an optax transformation.

    Returns:
      ``train_step(state: NodeState, *batch) -> (state, (loss, aux))``, pure and
      single-node (a :class:`TrainStep`); lift it with :func:`lift_train`.
    """
    return TrainStep(loss_fn, optimizer)


def update_backend(backend: str) -> str:
    """The backend :func:`lift_train` updates a population's optimiser state under when its nodes are lifted by
    ``backend``: "vmap" for "unrolled" (one pass over the stack), ``backend`` itself otherwise."""
    return "vmap" if backend == "unrolled" else backend


def lift_train(step: Any, *, backend: str, in_axes: int | None | Sequence[int | None] = 0,
               **lift_kwargs) -> Callable[..., Any]:
    """A node's train step lifted to a population, as :func:`lift` lifts it, except that under "unrolled" only
    ``step.gradients(*args) -> (grads, model_state, out)`` runs node by node and ``step.update(args, grads,
    model_state) -> state`` (the optimiser: elementwise) runs once, vmapped, over the stacked population: the
    same arithmetic, where N per-node updates in one program slice and restack every parameter and moment (10
    CNN nodes' Adam: 3x the time). ``step``: a :class:`TrainStep`, or anything with those two methods and
    ``__call__`` (the whole step); any other function is lifted whole."""
    if update_backend(backend) == backend or not (hasattr(step, "gradients") and hasattr(step, "update")):
        return lift(step, backend=backend, in_axes=in_axes, **lift_kwargs)
    gradients = lift(step.gradients, backend=backend, in_axes=in_axes, **lift_kwargs)
    whole = lift(step, backend=backend, in_axes=in_axes, **lift_kwargs)

    def lifted(*args):
        if any(isinstance(arg, Unstacked) for arg in args):  # nodes apart: each updates its own buffers, no stack
            return whole(*args)
        grads, model_state, out = gradients(*args)
        axes = _normalise_axes(in_axes, len(args))
        return jax.vmap(step.update, in_axes=(axes, 0, 0))(args, grads, model_state), out

    return lifted
