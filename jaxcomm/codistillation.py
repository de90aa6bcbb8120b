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
from typing import NamedTuple

import flax.linen as nn
import jax
import jax.numpy as jnp

from jaxcomm import classifier, driver, kit, ledger, methods, population
from jaxcomm.checkpoint import Checkpointer
from jaxcomm.data import ImageDataset
from jaxcomm.exchange import cross_entropy
from jaxcomm.validation import is_real, require


class CodistillationInfo(NamedTuple):
    """Attributes: loss: ``[N]``; indices: ``[N, B] int32`` rows drawn; refreshed: ``[]`` bool."""

    loss: jax.Array
    indices: jax.Array
    refreshed: jax.Array


@dataclasses.dataclass(frozen=True)
class Codistillation(kit.Built):
    """Pure functions of codistillation (a :class:`jaxcomm.kit.Built`); build with :func:`make_codistillation`.
    The state is a :class:`jaxcomm.kit.NodesState` whose ``extra`` is the peers' copies, ``(params, model_state)``
    as of the last refresh (``[N, ...]``).

    Attributes:
      refresh_every: K.
      weight: of the distillation loss.
      num_params: P of one node.
      checkpoint_bytes: one node's checkpoint (float32 parameters and model state).
    """

    refresh_every: int = 1
    weight: float = 1.0
    num_params: int = 0
    checkpoint_bytes: int = 0


def make_codistillation(config: kit.RunConfig, model: nn.Module, *, image_shape: tuple[int, ...],
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
    own_loss = classifier.classifier_loss(model, config.compute_dtype)

    def loss_fn(params, model_state, images, targets, peer_probs, key):
        loss, (new_state, (logits, _)) = own_loss(params, model_state, images, targets, key)
        return loss + weight * cross_entropy(logits, peer_probs), (new_state, None)

    pop = kit.nodes(config, model, image_shape=image_shape, num_classes=num_classes, loss=loss_fn,
                    extra_args=(jax.ShapeDtypeStruct((b, num_classes), jnp.float32),))  # the peers' targets
    node_predict = classifier.classifier_predict(model, config.compute_dtype)
    # every stale model on every node's minibatch: [N models, N * B images, C]
    stale_predict = population.lift(lambda params, model_state, images: node_predict(
        population.NodeState(params, model_state, None), images), backend=pop.backend, in_axes=(0, 0, None))

    def targets(state: kit.NodesState, batch: classifier.Minibatch, ctx: kit.Context):
        images = batch.images
        probs = stale_predict(*state.extra, images.reshape(n * b, *images.shape[2:])).reshape(n, n, b, num_classes)
        # node i's targets: the mean of the other nodes' stale predictions on its own minibatch
        others = (jnp.sum(probs, axis=0) - probs[jnp.arange(n), jnp.arange(n)]) / (n - 1)  # [N, B, C]
        return (jax.lax.stop_gradient(others),)

    def refresh(state: kit.NodesState, ctx: kit.Context):  # a node's copy every K of its own steps
        refreshed = ctx.tick.due & (ctx.tick.steps % refresh_every == 0)
        return state._replace(extra=population.where(refreshed, (state.nodes.params, state.nodes.model_state),
                                                     state.extra))

    # each node's checkpoint to its N - 1 peers every K steps, in the background: the nodes train on while it
    # travels (Anil et al. exchange checkpoints asynchronously), waiting only if it takes over K steps
    checkpoint_bytes = 4 * pop.node_values
    traffic = (ledger.Round("allgather", float(checkpoint_bytes), every=refresh_every, blocking=False),)
    built = pop.built_with(kit.Communicator(
        init=lambda nodes, key: (nodes.params, nodes.model_state), targets=targets, communicate=refresh,
        traffic=traffic, info=lambda info, ctx: CodistillationInfo(*info, (ctx.step + 1) % refresh_every == 0)))
    return built.extended(Codistillation, refresh_every=refresh_every, weight=float(weight),
                          num_params=pop.num_params, checkpoint_bytes=checkpoint_bytes)


def codistillation(refresh_every: int, *, weight: float = 1.0, name: str | None = None) -> methods.Method:
    """Codistillation as a method (:class:`jaxcomm.methods.Method`): every node distils toward its peers' checkpoints
    refreshed every K = ``refresh_every`` steps; scored by the nodes' collective decision."""

    def build(config, model, *, image_shape, num_classes):
        return make_codistillation(config, model, image_shape=image_shape, num_classes=num_classes,
                                   refresh_every=refresh_every, weight=weight)

    return methods.Method(name or f"codistill_k{refresh_every}", build, family="codistillation")


def train_codistillation(
    config: kit.RunConfig,
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
