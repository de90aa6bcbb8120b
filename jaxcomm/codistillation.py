"""Codistillation over the network's nodes and shards: each node distils toward stale copies of its peers.

Anil et al. (ICLR 2018), "Large scale distributed neural network training through online
distillation": N nodes hold the same disjoint shards as a :mod:`jaxcomm.network` and each trains its
own model on its own minibatches with

    loss_i = CE(f_i(x), y) + weight x CE(f_i(x), mean_{j != i} softmax(f~_j(x)))

where ``f~_j`` is node j's model as it was at the last refresh: every ``refresh_every`` = K steps
every node sends its whole checkpoint to its peers (parameters and BatchNorm statistics), and
between refreshes the peers' predictions come from those stale copies. The distillation targets are
computed on the node's own minibatch, so no data moves; the bytes are the checkpoints: N - 1 copies
of 4 x P bytes (plus statistics) per node every K steps. With ``weight = 0`` the nodes are isolated
(tested equal to a :mod:`jaxcomm.network` sharing nothing). Evaluated like a network: node average
and the collective decision of the N models.

References:
  Anil, Pereyra, Passos, Ormandi, Dahl, Hinton (2018), §2 (codistillation, stale predictions).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import NamedTuple

import flax.linen as nn
import jax
import jax.numpy as jnp
import optax

from jaxcomm import bandwidth, classifier, driver, ledger, methods, network, population, streams
from jaxcomm.checkpoint import Checkpointer
from jaxcomm.data import ImageDataset
from jaxcomm.exchange import cross_entropy
from jaxcomm.validation import is_real, require


class CodistillationState(NamedTuple):
    """Attributes: nodes: every node's model and optimiser state (``[N, ...]``); stale: the peers' copies,
    ``(params, model_state)`` as of the last refresh (``[N, ...]``); step: ``[]``; key: of the next step."""

    nodes: population.NodeState
    stale: tuple
    step: jax.Array
    key: jax.Array


class CodistillationInfo(NamedTuple):
    """Attributes: loss: ``[N]``; indices: ``[N, B] int32`` rows drawn; refreshed: ``[]`` bool."""

    loss: jax.Array
    indices: jax.Array
    refreshed: jax.Array


@dataclasses.dataclass(frozen=True)
class Codistillation:
    """Pure functions of codistillation; build with :func:`make_codistillation`.

    Attributes:
      config: the network configuration it reads.
      init, step: as every system's.
      predict: ``predict(nodes, images) -> probs [N, M, C]``, jitted.
      refresh_every: K.
      weight: of the distillation loss.
      num_params: P of one node.
      checkpoint_bytes: one node's checkpoint (float32 parameters and model state).
      backend, step_loop: the resolved choices.
    """

    config: network.NetworkConfig
    init: Callable[[jax.Array], CodistillationState]
    step: Callable
    predict: Callable
    refresh_every: int
    weight: float
    num_params: int
    checkpoint_bytes: int
    backend: str
    step_loop: str
    layout = None  # the stale peers are read together every step: nodes stay stacked

    def models_of(self, state: CodistillationState) -> population.NodeState:
        """Every node's model."""
        return state.nodes

    @property
    def traffic(self) -> tuple[ledger.Round, ...]:
        """Each node's checkpoint to its N - 1 peers every K steps, in the background: the nodes train on while
        it travels (Anil et al. exchange checkpoints asynchronously), waiting only if it takes over K steps."""
        return (ledger.Round("allgather", float(self.checkpoint_bytes), every=self.refresh_every, blocking=False),)

    def booking(self, state, steps_done: int, data_model: str | None = None) -> ledger.Booking:
        """Each node's checkpoint to its N - 1 peers at every refresh (``steps_done // K`` of them)."""
        return ledger.book(self.traffic, self.config.num_nodes, steps_done)

    def bytes_per_node_step(self) -> float:
        """Each node's checkpoint to each of its N - 1 peers every K steps: ``(N - 1) x checkpoint / K``."""
        return ledger.per_node_step(self.traffic, self.config.num_nodes)


def make_codistillation(config: network.NetworkConfig, model: nn.Module, *, image_shape: tuple[int, ...],
                        num_classes: int, refresh_every: int, weight: float = 1.0) -> Codistillation:
    """Builds codistillation of ``model``, a Flax classifier returning ``(logits, features)``.

    Args:
      config: reads ``num_nodes`` (>= 2), ``batch_size``, ``learning_rate``, ``lr_schedule``, ``num_steps``,
        ``augment``, ``backend`` and ``step_loop``; the draws follow an isolated network's.
      model: every node's classifier.
      image_shape: ``(H, W, C)``.
      num_classes: C.
      refresh_every: K >= 1, steps between checkpoint exchanges.
      weight: of the distillation term (0: isolated nodes).
    """
    require(isinstance(refresh_every, int) and refresh_every >= 1, "refresh_every", "an integer >= 1", refresh_every)
    require(is_real(weight) and weight >= 0, "weight", "a number >= 0", weight)
    require(config.num_nodes >= 2, "num_nodes", "at least 2 (peers to distil from)", config.num_nodes)
    n, b = config.num_nodes, config.batch_size
    optimizer = optax.adam(classifier.learning_rate(config))
    init_node = classifier.classifier_init(model, optimizer, image_shape)
    abstract = jax.eval_shape(init_node, jax.random.PRNGKey(0))
    num_params = bandwidth.num_params(abstract.params)
    checkpoint_bytes = 4 * (num_params + bandwidth.num_params(abstract.model_state))
    own_loss = classifier.classifier_loss(model)

    def loss_fn(params, model_state, images, targets, peer_probs, key):
        loss, (new_state, (logits, _)) = own_loss(params, model_state, images, targets, key)
        return loss + weight * cross_entropy(logits, peer_probs), (new_state, None)

    node_step = population.make_train_step(loss_fn, optimizer)
    backend, step_loop, _ = classifier.choose_backend(
        config, node_step, init_node, classifier.node_args(
            b, image_shape, num_classes, jax.ShapeDtypeStruct((b, num_classes), jnp.float32)))  # the peers' targets
    train_nodes = population.lift_train(node_step, backend=backend)
    node_predict = classifier.classifier_predict(model)
    # every stale model on every node's minibatch: [N models, N * B images, C]
    stale_predict = population.lift(lambda params, model_state, images: node_predict(
        population.NodeState(params, model_state, None), images), backend=backend, in_axes=(0, 0, None))

    def init(key: jax.Array) -> CodistillationState:
        keys = streams.init_keys(key)  # an isolated network's init
        nodes = population.init_population(init_node, keys.nodes, n, backend=backend)
        return CodistillationState(nodes, (nodes.params, nodes.model_state), jnp.zeros((), jnp.int32), keys.run)

    def step(state: CodistillationState, data: network.NetworkData) -> tuple[CodistillationState,
                                                                                CodistillationInfo]:
        keys = streams.step_keys(state.key, augment=config.augment)
        batch = classifier.minibatch(keys, data, b, num_classes)  # an isolated network's draws
        images, indices = batch.images, batch.indices
        probs = stale_predict(*state.stale, images.reshape(n * b, *images.shape[2:])).reshape(n, n, b, num_classes)
        # node i's targets: the mean of the other nodes' stale predictions on its own minibatch
        others = (jnp.sum(probs, axis=0) - probs[jnp.arange(n), jnp.arange(n)]) / (n - 1)  # [N, B, C]
        nodes, (loss, _) = train_nodes(state.nodes, images, batch.targets, jax.lax.stop_gradient(others),
                                       jax.random.split(keys.nodes, n))
        refreshed = (state.step + 1) % refresh_every == 0
        stale = jax.tree_util.tree_map(lambda new, old: jnp.where(refreshed, new, old),
                                       (nodes.params, nodes.model_state), state.stale)
        return (CodistillationState(nodes, stale, state.step + 1, keys.next),
                CodistillationInfo(loss, indices, refreshed))

    predict = jax.jit(population.lift(node_predict, backend=backend, in_axes=(0, None)))
    return Codistillation(config, init, step, predict, refresh_every, float(weight), num_params, checkpoint_bytes,
                          backend, step_loop)


def codistillation(refresh_every: int, *, weight: float = 1.0, name: str | None = None) -> methods.Method:
    """Codistillation as a method (:class:`jaxcomm.methods.Method`): every node distils toward its peers' checkpoints
    refreshed every K = ``refresh_every`` steps; scored by the nodes' collective decision."""

    def build(config, model, *, image_shape, num_classes):
        return make_codistillation(config, model, image_shape=image_shape, num_classes=num_classes,
                                   refresh_every=refresh_every, weight=weight)

    return methods.Method(name or f"codistill_k{refresh_every}", build, family="codistillation")


def train_codistillation(
    config: network.NetworkConfig,
    model: nn.Module,
    dataset: ImageDataset,
    *,
    refresh_every: int,
    weight: float = 1.0,
    eval_split: str = "test",
    progress: bool = True,
    desc: str | None = None,
    checkpointer: Checkpointer | None = None,
    divergence: float | None = driver.DIVERGENCE,
) -> dict:
    """Trains with codistillation and evaluates the nodes every ``eval_every`` steps (:func:`jaxcomm.methods.train`).

    Returns :func:`jaxcomm.methods.train`'s dict plus ``system`` (the :class:`Codistillation`, with its bytes).
    """
    out = methods.train(codistillation(refresh_every, weight=weight), config, model, dataset, eval_split=eval_split,
                        progress=progress, desc=desc, checkpointer=checkpointer, divergence=divergence)
    return out | {"system": out["built"]}
