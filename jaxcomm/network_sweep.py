"""The chapter-2 network's sweep: :func:`train_networks` on the core of :mod:`jaxcomm.sweep`.

Runs may differ in :data:`jaxcomm.network.PER_RUN` fields (data of the one compiled step) and, while every run's
graph is static, in :data:`jaxcomm.network.GRAPH_FIELDS`; :func:`jaxcomm.network.check_structure` refuses any other
difference, naming the field. :func:`jaxcomm.methods.sweep` of :func:`jaxcomm.network.output_sharing` is the same
sweep through the door every method uses; this function keeps the network's own arguments (a
:class:`jaxcomm.network.NodeProgram`, an evaluator, a graph per run).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from typing import Any

import flax.linen as nn

from jaxcomm import checkpoint, classifier, driver, network
from jaxcomm import exchange as exchanges
from jaxcomm.checkpoint import Checkpointer
from jaxcomm.data import ImageDataset
from jaxcomm.network import GRAPH_FIELDS, PER_RUN, Graph, NetworkConfig, NodeProgram, check_structure, initial_state
from jaxcomm.sweep import choose_mode, train_runs

__all__ = ["GRAPH_FIELDS", "PER_RUN", "Graph", "check_structure", "initial_state", "train_networks"]

def _per_run_graphs(graph, num_runs: int) -> list[Graph]:
    if isinstance(graph, (list, tuple)):
        if len(graph) != num_runs:
            raise ValueError(f"graph: a sequence needs one entry per run ({num_runs}), got {len(graph)}")
        return list(graph)
    return [graph] * num_runs


@driver.interruptible
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
