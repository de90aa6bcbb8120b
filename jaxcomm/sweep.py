"""Sweeps: R runs of one structure trained together, returned as R results.

The core (:func:`train_runs`, :func:`stack_runs`, :func:`population_step`) takes any
:class:`jaxcomm.driver.System` and R initial states and data of one structure and imports no system;
:func:`jaxcomm.methods.sweep` sweeps any method on it, and :func:`train_networks` (below) is the
chapter-2 network's adapter.

A table's rows times its seeds are runs of the same shape: same number of nodes,
model, exchange, batch size, inbox and schedule. :func:`train_networks` trains
them with ONE compiled step. What may differ from run to run is data to that
step: the seed (shards, initialisation, every draw), the :class:`jaxcomm.network.Settings`
(p_c, p_b, q, D, tau, consumed weight, learning rate), the partition and a
static graph (a per-run adjacency, or a named static topology). Every other field
of :class:`jaxcomm.network.NetworkConfig` is structure, and a sweep whose runs
disagree on one is refused with an error naming the field.

Two ways to run a sweep, each equal to the runs alone (tested):

* ``"population"``: the R runs as one population of R x N nodes, the network
  step vmapped over runs (per-run settings and shards as ``[R]``-leading arrays,
  each run's graph its own block). One program fills an accelerator that one
  10-node network leaves 97-99 % idle, and on CPU pays compilation, dispatch and
  evaluation set-up once.
* ``"sequential"``: run after run through :func:`jaxcomm.driver.train`, sharing
  one compiled step (settings and shards are arguments, not constants). For
  convolutional nodes on CPU, where the node backend is an unrolled loop or the
  eager per-node loop, and vmapping convolutions turns them into slow grouped
  convolutions.

``mode="auto"`` follows the node backend :func:`jaxcomm.speed.choose` picked for
the model: "sequential" under the "unrolled"/"loop" backends (CPU convolutions),
else "population".

References:
  Lacaille (2018), §2.3 (Table 2.1: six rows, here times seeds).
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable, Sequence

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

from jaxcomm import driver, network, population, topology
from jaxcomm import exchange as exchanges
from jaxcomm.checkpoint import Checkpointer
from jaxcomm.data import ImageDataset
from jaxcomm.network import NetworkConfig, NodeProgram

MODES = ("auto", "population", "sequential")
# Fields runs may vary: data of the one compiled step (see the module docstring).
PER_RUN = ("seed", "partition", "dirichlet_alpha", *network.Settings._fields)
# Graph fields, which may vary only while every run's graph is static (its adjacency then lives in the state).
GRAPH_FIELDS = ("topology", "num_neighbours", "redraw_every")
SEQUENTIAL_BACKENDS = ("unrolled", "loop")

Graph = np.ndarray | jax.Array | topology.GraphFn | None


def check_structure(configs: Sequence[NetworkConfig], graphs: Sequence[Graph] | None = None) -> None:
    """Raises ValueError naming the first field on which the runs' structures disagree.

    Args:
      configs: the R runs.
      graphs: each run's graph argument (None: its config's named topology).
    """
    if not configs:
        raise ValueError("a sweep needs at least one network configuration")
    for r, config in enumerate(configs):
        if not isinstance(config, NetworkConfig):
            raise TypeError(f"configs[{r}] must be a jaxcomm.network.NetworkConfig, got {type(config).__name__}")
    graphs = list(graphs) if graphs is not None else [None] * len(configs)
    dynamic = [network.graph_of(c, g)[1] for c, g in zip(configs, graphs, strict=True)]
    free = set(PER_RUN) | (set(GRAPH_FIELDS) if not any(dynamic) else set())
    first = configs[0]
    for r, config in enumerate(configs[1:], start=1):
        for field in dataclasses.fields(NetworkConfig):
            a, b = getattr(first, field.name), getattr(config, field.name)
            if field.name not in free and a != b:
                raise ValueError(f"runs of a sweep must share {field.name} (structure of the one compiled step): "
                                 f"run 0 has {a!r}, run {r} has {b!r}")
        if config.has_failures != first.has_failures:
            raise ValueError(f"runs of a sweep must all have failures or none (failure_prob > 0 or a "
                             f"failure_schedule draws a separate key stream): run 0 has failure_prob="
                             f"{first.failure_prob!r}, run {r} has failure_prob={config.failure_prob!r}")
        if any(dynamic) and graphs[r] is not graphs[0]:
            raise ValueError(f"runs of a sweep with a time-varying graph must share its function: graph of run {r} "
                             "differs from run 0's")


def _per_run_graphs(graph, num_runs: int) -> list[Graph]:
    if isinstance(graph, (list, tuple)):
        if len(graph) != num_runs:
            raise ValueError(f"graph: a sequence needs one entry per run ({num_runs}), got {len(graph)}")
        return list(graph)
    return [graph] * num_runs


def choose_mode(backend: str, mode: str = "auto", step_loop: str = "scan") -> str:
    """"population" or "sequential" for the node ``backend`` (see the module docstring); an "eager" ``step_loop``
    sweeps only run by run."""
    if mode not in MODES:
        raise ValueError(f"mode must be one of {MODES}, got {mode!r}")
    if mode == "auto":
        mode = "sequential" if backend in SEQUENTIAL_BACKENDS else "population"
    if mode == "population" and step_loop == "eager":
        raise ValueError("an 'eager' step loop runs one compiled call per node, op by op around them: a sweep of it "
                         "runs mode='sequential' (vmapped over runs it would run op by op)")
    return mode


def _initial_state(net: network.Network, config: NetworkConfig, graph: Graph) -> network.NetworkState:
    """Run ``config``'s initial state, as its own :func:`jaxcomm.network.make_network` would make it."""
    state = net.init(jax.random.PRNGKey(config.seed))
    graph_fn, _ = network.graph_of(config, graph)
    return state._replace(adj=jnp.asarray(graph_fn(state.graph_key, jnp.zeros((), jnp.int32)), bool))


@jax.jit
def _run_of(stacked, r):
    """Run ``r``'s slice of a sweep's stacked state (leaves ``[R, ...]``) in one program: sliced eagerly, every leaf
    shape compiles an op of its own (seconds for a BiGAN network's thousand leaves)."""
    return jax.tree_util.tree_map(lambda leaf: leaf[r], stacked)


def _infos_of_run(infos, r: int):
    """Run ``r``'s slice of a chunk's infos (leaves ``[L, R, ...]``; :func:`_run_of` of a state)."""
    return jax.tree_util.tree_map(lambda x: x[:, r], infos)


# --------------------------------------------------------------------------- the core: any system


def stack_runs(datas: Sequence) -> tuple:
    """``(data, axes)``: R runs' data (one pytree structure) as one pytree and its vmap axes.

    A leaf every run holds as the same object (the training images and labels) is shared (axis None); the
    others are stacked on a new leading run axis (axis 0). Integer leaves of different widths (shards of
    different sizes) are padded on their last axis by repeating their last value: a node's padded row
    repeats a real index of its shard, and positions drawn stay below each node's size, as alone.
    """
    leaves = [jax.tree_util.tree_leaves(d) for d in datas]
    treedef = jax.tree_util.tree_structure(datas[0])
    out, axes = [], []
    for column in zip(*leaves, strict=True):
        if all(leaf is column[0] for leaf in column):
            out.append(column[0])
            axes.append(None)
            continue
        width = max(np.shape(leaf)[-1] if np.ndim(leaf) else 0 for leaf in column)
        padded = [np.pad(np.asarray(leaf), [(0, 0)] * (np.ndim(leaf) - 1) + [(0, width - np.shape(leaf)[-1])],
                         mode="edge") if np.ndim(leaf) and np.shape(leaf)[-1] != width else leaf for leaf in column]
        out.append(jnp.stack([jnp.asarray(leaf) for leaf in padded]))
        axes.append(0)
    return jax.tree_util.tree_unflatten(treedef, out), jax.tree_util.tree_unflatten(treedef, axes)


def data_of_run(data, axes, r: int):
    """Run ``r``'s data of a :func:`stack_runs` result."""
    return jax.tree_util.tree_map(lambda leaf, axis: leaf if axis is None else leaf[r], data, axes,
                                  is_leaf=lambda x: x is None)


@functools.lru_cache(maxsize=32)  # one per step and axes: the driver's compiled chunks are reused
def population_step(step: Callable, axes=None) -> Callable:
    """``step(states, data) -> (states, infos)`` of R runs: ``step`` vmapped over the run axis of the states and of
    ``data``'s leaves whose axis in ``axes`` is 0 (:func:`stack_runs`; None: the network's, shared images and
    labels, per-run shards and settings)."""
    if axes is None:
        axes = network.NetworkData(None, None, 0, 0, 0)
    return jax.vmap(step, in_axes=(0, axes))


def train_runs(systems: Sequence[driver.System], states: Sequence, datas: Sequence, seeds: Sequence[int], *,
               mode: str, num_steps: int, eval_every: int, nodes_per_run: int, progress: bool = True,
               desc: str | None = None, checkpointer: Checkpointer | None = None,
               divergence: float | None = driver.DIVERGENCE, donate: bool = False) -> list[dict]:
    """Trains R runs of one structure, one population of R x N nodes (``mode="population"``) or one after another
    (``"sequential"``); R results of :func:`jaxcomm.driver.train`, each equal to the run alone.

    Args:
      systems: each run's system (the same step; its own ``evaluate``); ``init`` is not called.
      states: each run's initial state (one structure).
      datas: each run's data (one structure; shared arrays as the same objects, see :func:`stack_runs`).
      seeds: each run's seed (the driver's key; the sequential checkpoint folders are per run).
      mode: "population" or "sequential" (:func:`choose_mode`).
      num_steps, eval_every, progress, desc, divergence, donate: as :func:`jaxcomm.driver.train`.
      nodes_per_run: N, to name the run and node of a loss stop.
      checkpointer: saves and resumes the sweep, bit-identically ("sequential": one sub-folder per run).

    Returns:
      R dicts of :func:`jaxcomm.driver.train` (history, final, state, ...), each with ``sweep`` =
      ``{"runs": R, "mode": mode}``; ``train_seconds`` is the whole sweep's in "population" mode.
    """
    info = {"runs": len(states), "mode": mode}
    data, axes = stack_runs(datas)  # run by run too: one width of shards, one compiled step for every run
    if mode == "sequential":
        out = []
        for r, (system, state, seed) in enumerate(zip(systems, states, seeds, strict=True)):
            ckpt = (Checkpointer(checkpointer.directory / f"run_{r}", every=checkpointer.every,
                                 resume=checkpointer.resume) if checkpointer is not None else None)
            try:
                result = driver.train(system._replace(init=lambda key, state=state: state), data_of_run(data, axes, r),
                                      num_steps=num_steps,
                                      eval_every=eval_every, key=jax.random.PRNGKey(seed), progress=progress,
                                      desc=f"{desc or 'sweep'} run {r + 1}", checkpointer=ckpt,
                                      divergence=divergence, donate=donate)
            except driver.LossStop as stop:
                stop.add_note(f"in the sweep: run {r}")
                raise
            out.append(result | {"sweep": info})
        return out

    def evaluate(stacked, infos, steps_done: int) -> dict:
        return {"runs": [s.evaluate(_run_of(stacked, r), _infos_of_run(infos, r), steps_done)
                         for r, s in enumerate(systems)]}

    def postfix(record: dict) -> dict:
        averages = [r["avg_accuracy"] for r in record["runs"] if r.get("avg_accuracy") is not None]
        return {"avg": f"{np.mean(averages):.1f}"} if averages else {}

    stacked, first = population.stack(list(states)), systems[0]
    system = driver.System(lambda key: stacked, population_step(first.step, axes), evaluate,
                           losses=None if first.losses is None else
                           lambda infos: (lambda x: x.reshape(x.shape[0], -1))(first.losses(infos)),
                           summarize=first.summarize, step_loop=first.step_loop, postfix=postfix)
    try:
        result = driver.train(system, data, num_steps=num_steps, eval_every=eval_every,
                              key=jax.random.PRNGKey(seeds[0]), progress=progress,
                              desc=desc or f"sweep of {len(states)}", checkpointer=checkpointer,
                              divergence=divergence, donate=donate)
    except driver.LossStop as stop:
        if stop.node is not None:
            stop.add_note(f"in the sweep: run {stop.node // nodes_per_run}, node {stop.node % nodes_per_run}")
        raise
    out = []
    for r in range(len(states)):
        history = [{"step": rec["step"], **rec["runs"][r], "seconds": rec["seconds"]} for rec in result["history"]]
        out.append({**result, "history": history, "final": history[-1] if history else None,
                    "state": _run_of(result["state"], r), "sweep": info})
    return out


# --------------------------------------------------------------------------- the network's adapter


def train_networks(
    configs: Sequence[NetworkConfig],
    model: nn.Module | NodeProgram,
    dataset: ImageDataset,
    *,
    graph: Graph | Sequence[Graph] = None,
    exchange: exchanges.Exchange | None = None,
    eval_split: str | Sequence[str] = "test",
    progress: bool = True,
    desc: str | None = None,
    checkpointer: Checkpointer | None = None,
    evaluator: Callable | None = None,
    divergence: float | None | network.ProgramDefault = network.PROGRAM_DEFAULT,
    mode: str = "auto",
    donate: bool | None = None,
) -> list[dict]:
    """Trains R network runs of one structure as one sweep; each result equals :func:`jaxcomm.network.train_network`'s.

    Args:
      configs: the R runs; they may differ in :data:`PER_RUN` fields and, with
        static graphs, in :data:`GRAPH_FIELDS` (else ValueError naming the field).
      model: a Flax classifier or a :class:`jaxcomm.network.NodeProgram` (shared).
      dataset: images and labels; each run shards the training split by its seed.
      graph: None (each config's topology), one graph for every run, or a
        sequence of R graphs (bool ``[N, N]`` arrays or None; see
        :func:`jaxcomm.network.make_network`).
      exchange: what messages carry (shared); None: the configs' content.
      eval_split: as :func:`jaxcomm.network.train_network`, for the default evaluator.
      progress: draw a progress bar.
      desc: its label.
      checkpointer: saves and resumes the sweep, bit-identically ("sequential":
        one sub-folder per run).
      evaluator: ``evaluator(network, state, steps_done) -> dict`` of one run
        (its own config in ``network.config``); default accuracies on ``eval_split``.
      divergence: as :func:`jaxcomm.network.train_network` (the bound is taken
        from the mean first-step loss over all runs of a "population" sweep).
      mode: one of :data:`MODES`.
      donate: as :func:`jaxcomm.network.train_network` (one copy of the sweep's state on the device).

    Returns:
      R dicts as :func:`jaxcomm.network.train_network` returns, in the order of
      ``configs``, each with ``sweep`` = ``{"runs": R, "mode": ...}``;
      ``train_seconds`` is the whole sweep's time in training chunks as one population, the run's own (over
      all parts of a resumed run) when the runs train one after another ("sequential").

    Raises:
      ValueError: the runs disagree on a structural field (named).
      jaxcomm.driver.NonFiniteLoss, jaxcomm.driver.Diverged: a loss left its bounds
        (the note names the run and node).
      jaxcomm.driver.Interrupted: a checkpointed sweep was interrupted (after saving).
    """
    configs = list(configs)
    graphs = _per_run_graphs(graph, len(configs))
    check_structure(configs, graphs)
    first = configs[0]
    net = network.make_network(first, model, image_shape=dataset.train.images.shape[1:],
                               num_classes=dataset.num_classes, graph=graphs[0], exchange=exchange)
    nets = [dataclasses.replace(net, config=c) for c in configs]
    divergence = network.divergence_of(net, divergence)
    evaluator = evaluator or network.split_evaluator(dataset, eval_split)
    base = network.network_data(dataset, first)
    datas = [base._replace(shard_indices=jnp.asarray(s.indices, jnp.int32), shard_sizes=jnp.asarray(s.sizes, jnp.int32),
                           settings=network.settings(c))
             for c, s in zip(configs, (network.shards_of(dataset.train.labels, c) for c in configs), strict=True)]
    states = [_initial_state(net, c, g) for c, g in zip(configs, graphs, strict=True)]
    mode = choose_mode(net.backend, mode, net.step_loop)
    systems = [network.system(n, evaluator) for n in nets]
    results = train_runs(systems, states, datas, [c.seed for c in configs], mode=mode, num_steps=first.num_steps,
                         eval_every=first.eval_every, nodes_per_run=first.num_nodes, progress=progress, desc=desc,
                         checkpointer=checkpointer, divergence=divergence, donate=driver.donation(donate))
    return [result | {"network": n, "unreachable_evaluations": network.unreachable_evaluations(result["history"])}
            for result, n in zip(results, nets, strict=True)]
