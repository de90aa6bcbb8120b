"""Sparse parameter averaging over the neighbour graph (SPARTA, gossiped): a method in one file.

Every node trains its own classifier on its own shard (an isolated network's draws) and after every step
averages a random fraction ``p`` of its parameters with its in-neighbours (gossip weights on a static graph).
The coordinates come from a stream every node shares (:func:`jaxcomm.streams.named`), so only values travel:
``p x P`` float32 values per out-edge and step, booked as parameters. ``p = 0`` is an isolated network,
``p = 1`` gossip every step. SPARTA's authors average over all nodes and name gossip as future work.

References:
  EXO Gym, ``strategy/sparta.py`` (sparse parameter averaging every step, a shared random index set).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import NamedTuple

import jax
import jax.numpy as jnp
import optax

from jaxcomm import bandwidth, classifier, ledger, methods, network, population, streams, topology


class SpartaState(NamedTuple):
    """Attributes: nodes: every node's model and optimiser state (``[N, ...]``); step: ``[]``; key: of the next step."""

    nodes: population.NodeState
    step: jax.Array
    key: jax.Array


class SpartaInfo(NamedTuple):
    """Attributes: loss: ``[N]``; indices: ``[N, B] int32`` rows drawn."""

    loss: jax.Array
    indices: jax.Array


@dataclasses.dataclass(frozen=True)
class Sparta:
    """One run's pure functions (:class:`jaxcomm.methods.Built`); ``edges``: out-edges of the graph."""

    config: network.NetworkConfig
    init: Callable
    step: Callable
    predict: Callable
    backend: str
    step_loop: str
    fraction: float
    num_params: int
    edges: int
    layout = None

    def models_of(self, state: SpartaState) -> population.NodeState:  # every node's
        return state.nodes

    @property
    def traffic(self) -> tuple[ledger.Round, ...]:
        """Every step, blocking: ``p x P`` float32 values along each edge (the expected count of the mask)."""
        return (ledger.Round("neighbours", 4.0 * round(self.fraction * self.num_params), edges=self.edges),)

    def booking(self, state, steps_done: int, data_model: str | None = None) -> ledger.Booking:
        """Every step, ``p x P`` values along each edge (:attr:`traffic`)."""
        return ledger.book(self.traffic, self.config.num_nodes, steps_done)


def sparta(fraction: float, num_neighbours: int = 0, *, name: str | None = None) -> methods.Method:
    """SPARTA as a method: every step each node averages a random ``fraction`` of its parameters (the same
    coordinates on every node) with its in-neighbours, on a ring of ``num_neighbours`` (0: the config's graph)."""
    if not 0.0 <= fraction <= 1.0:
        raise ValueError(f"fraction must be in [0, 1], got {fraction!r}")
    ring = (lambda c: c.replace(topology="ring", num_neighbours=num_neighbours)) if num_neighbours else None

    def build(config, model, *, image_shape, num_classes):
        n, b = config.num_nodes, config.batch_size
        optimizer = optax.adam(classifier.learning_rate(config))
        init_node = classifier.classifier_init(model, optimizer, image_shape)
        node_step = population.make_train_step(classifier.classifier_loss(model), optimizer)
        backend, step_loop, _ = classifier.choose_backend(
            config, node_step, init_node, classifier.node_args(b, image_shape, num_classes))
        train_nodes = population.lift_train(node_step, backend=backend)
        graph_fn, dynamic = network.graph_of(config)
        if dynamic:
            raise ValueError(f"sparta averages over a static graph; topology={config.topology!r} changes over time")
        adj = graph_fn(jax.random.PRNGKey(0), jnp.zeros((), jnp.int32))
        weights = topology.mixing_matrix(adj)

        def init(key):
            keys = streams.init_keys(key)  # an isolated network's init
            nodes = population.init_population(init_node, keys.nodes, n, backend=backend)
            return SpartaState(nodes, jnp.zeros((), jnp.int32), keys.run)

        def step(state: SpartaState, data):
            keys = streams.step_keys(state.key, augment=config.augment)
            batch = classifier.minibatch(keys, data, b, num_classes)  # an isolated network's draws
            nodes, (loss, _) = population.state_and_aux(train_nodes(state.nodes, batch.images, batch.targets,
                                                                    jax.random.split(keys.nodes, n)))
            params = nodes.params
            leaves, treedef = jax.tree_util.tree_flatten(params)
            masks = [jax.random.bernoulli(k, fraction, leaf.shape[1:]) for k, leaf in
                     zip(jax.random.split(streams.named(state.key, "sparta"), len(leaves)), leaves, strict=True)]
            mixed = jax.tree_util.tree_leaves(topology.mix(weights, params))
            params = treedef.unflatten([jnp.where(m, x, p) for m, x, p in zip(masks, mixed, leaves, strict=True)])
            return SpartaState(nodes._replace(params=params), state.step + 1, keys.next), SpartaInfo(loss,
                                                                                                 batch.indices)

        predict = jax.jit(population.lift(classifier.classifier_predict(model), backend=backend, in_axes=(0, None)))
        num_params = bandwidth.num_params(jax.eval_shape(init_node, jax.random.PRNGKey(0)).params)
        return Sparta(config, init, step, predict, backend, step_loop, fraction, num_params, int(jnp.sum(adj)))

    label = name or f"sparta_{fraction:g}" + (f"_ring{num_neighbours}" if num_neighbours else "")
    return methods.Method(label, build, family="sparse_averaging", configure=ring)
