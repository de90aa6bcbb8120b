"""The chapter-2 network's sweep: :func:`train_networks` on the core of :mod:`jaxcomm.sweep`.

Runs may differ in :data:`PER_RUN` fields (data of the one compiled step) and, while every run's graph
is static, in :data:`GRAPH_FIELDS`; :func:`check_structure` refuses any other difference, naming the
field. Reached as ``jaxcomm.sweep.train_networks`` (see that module's docstring).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

from jaxcomm import checkpoint, classifier, driver, network, topology
from jaxcomm import exchange as exchanges
from jaxcomm.checkpoint import Checkpointer
from jaxcomm.data import ImageDataset
from jaxcomm.network import NetworkConfig, NodeProgram
from jaxcomm.sweep import choose_mode, train_runs

# Fields runs may vary: data of the one compiled step (see the module docstring).
PER_RUN = ("seed", "partition", "dirichlet_alpha", *network.Settings._fields)
# Graph fields, which may vary only while every run's graph is static (its adjacency then lives in the state).
GRAPH_FIELDS = ("topology", "num_neighbours", "redraw_every")

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


def initial_state(net: network.Network, config: NetworkConfig, graph: Graph) -> network.NetworkState:
    """Run ``config``'s initial state, as its own :func:`jaxcomm.network.make_network` would make it."""
    state = net.init(jax.random.PRNGKey(config.seed))
    graph_fn, _ = network.graph_of(config, graph)
    return state._replace(adj=jnp.asarray(graph_fn(state.graph_key, jnp.zeros((), jnp.int32)), bool))


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
    cluster: Any = None,
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
      cluster: as :func:`jaxcomm.network.train_network` (messages in flight, every run's own); the delays are
        the first run's (from its graph's out-degrees at step 0), as :func:`jaxcomm.methods.sweep`'s.

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
    configs = [checkpoint.pinned(checkpointer, c) for c in configs]  # resumed: the lift it trained with
    graphs = _per_run_graphs(graph, len(configs))
    check_structure(configs, graphs)
    first = configs[0]
    net = network.make_network(first, model, image_shape=dataset.train.images.shape[1:],
                               num_classes=dataset.num_classes, graph=graphs[0], exchange=exchange, cluster=cluster)
    checkpoint.record_lift(checkpointer, net)
    nets = [dataclasses.replace(net, config=c) for c in configs]
    divergence = network.divergence_of(net, divergence)
    evaluator = evaluator or network.split_evaluator(dataset, eval_split)
    base = network.network_data(dataset, first)
    datas = [classifier.run_data(base, dataset.train.labels, c, network.settings(c)) for c in configs]
    states = [initial_state(net, c, g) for c, g in zip(configs, graphs, strict=True)]
    mode = choose_mode(net.backend, mode, net.step_loop, net.family)
    systems = [network.system(n, evaluator) for n in nets]
    results = train_runs(systems, states, datas, [c.seed for c in configs], mode=mode, num_steps=first.num_steps,
                         eval_every=first.eval_every, nodes_per_run=first.num_nodes, progress=progress, desc=desc,
                         checkpointer=checkpointer, divergence=divergence, donate=driver.donation(donate))
    return [result | {"network": n, "unreachable_evaluations": network.unreachable_evaluations(result["history"])}
            for result, n in zip(results, nets, strict=True)]
