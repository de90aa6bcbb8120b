"""The chapter-2 network's sweep: :func:`train_networks`, :func:`jaxcomm.methods.sweep` of
:func:`jaxcomm.network.output_sharing` with the network's own arguments.

Runs may differ in :data:`jaxcomm.network.PER_RUN` fields (data of the one compiled step) and, while every run's
graph is static, in :data:`jaxcomm.network.GRAPH_FIELDS`; :func:`jaxcomm.network.check_structure` refuses any other
difference, naming the field.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import flax.linen as nn

from jaxcomm import exchange as exchanges
from jaxcomm import methods, network
from jaxcomm.checkpoint import Checkpointer
from jaxcomm.data import ImageDataset
from jaxcomm.network import GRAPH_FIELDS, PER_RUN, Graph, NetworkConfig, NodeProgram, check_structure, initial_state

__all__ = ["GRAPH_FIELDS", "PER_RUN", "Graph", "check_structure", "initial_state", "train_networks"]


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
    divergence: float | None | methods.BuiltsWatch = methods.BUILTS_WATCH,
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
    method = network.output_sharing(exchange, graph=graph, evaluator=evaluator)
    return [network.with_network(result) for result in methods.sweep(
        method, configs, model, dataset, eval_split=eval_split, progress=progress, desc=desc,
        checkpointer=checkpointer, divergence=divergence, mode=mode, donate=donate, cluster=cluster)]
