"""Local SGD and DiLoCo over the network's nodes and shards: H local steps, then one outer step on the average.

The low-communication training a practitioner would pick today instead of exchanging outputs (Stich
2018; Douillard et al. 2023, "DiLoCo", arXiv 2311.08105). N nodes hold the same disjoint shards as a
:mod:`jaxcomm.network`; each starts every round from the global model, takes ``sync_every`` = H inner
steps (Adam, the config's rate and schedule, each node keeping its own Adam state across rounds) on
minibatches of its own shard, and then

1. the outer gradient ``Delta = theta_global - mean_i theta_i`` is all-reduced (one all-reduce of the
   parameters every H steps: 1/H of synchronous SGD's bytes);
2. an outer optimiser steps the global model with it: Nesterov momentum SGD (DiLoCo's outer lr 0.7,
   momentum 0.9 by default), or plain SGD with rate 1 and no momentum, which is local SGD /
   parameter averaging;
3. every node restarts from the new global model (BatchNorm statistics averaged).

With H = 1, outer SGD at rate 1 and inner SGD this is synchronous SGD (tested against
:mod:`jaxcomm.data_parallel`). At their own pace (``methods.train(..., own_pace=True)``, :mod:`jaxcomm.pace`)
the nodes wait for each other at every round's end; with a ``quorum`` of K, a round closes when K nodes have
reported (and those of a grace window after), the outer gradient is the mean of the members' own ones (each
from the global model it started its round from, however many rounds ago), only the members restart, and
the late nodes merge at the next round what they missed (Decoupled DiLoCo's quorum; every member has taken H
steps, so the token weights are equal). Evaluation reads the global model. It is written on the kit's node population
(:func:`jaxcomm.kit.nodes`): the local steps are an isolated network's, the round's end is this method's own.

References:
  Stich (2018), "Local SGD converges fast and communicates little"; Douillard et al. (2023), DiLoCo,
  Algorithm 1; MaxText's ``diloco.py`` (replicas stacked on a leading axis, as jaxcomm's nodes).
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable
from typing import NamedTuple

import flax.linen as nn
import jax
import jax.numpy as jnp
import optax

from jaxcomm import classifier, compiling, driver, kit, ledger, methods, pace, population
from jaxcomm.checkpoint import Checkpointer
from jaxcomm.data import ImageDataset
from jaxcomm.validation import is_real, require


class LocalSGDInfo(NamedTuple):
    """What one step did. Attributes: loss: ``[N]`` each node's loss; indices: ``[N, B] int32`` rows drawn;
    synced: ``[]`` bool, whether this step ended a round."""

    loss: jax.Array
    indices: jax.Array
    synced: jax.Array


@dataclasses.dataclass(frozen=True)
class LocalSGD(kit.Built):
    """Pure functions of local SGD / DiLoCo (a :class:`jaxcomm.kit.Built`); build with :func:`make_local_sgd`.
    The state is a :class:`jaxcomm.kit.NodesState` whose ``extra`` is the global model, a population of one (its
    ``opt_state`` the outer optimiser's).

    Attributes:
      sync_every: H.
      num_params: P.
    """

    sync_every: int = 1
    num_params: int = 0


def diloco_outer(learning_rate: float = 0.7, momentum: float = 0.9) -> optax.GradientTransformation:
    """DiLoCo's outer optimiser: SGD with Nesterov momentum (the paper's lr 0.7, momentum 0.9)."""
    require(is_real(learning_rate) and 0 < learning_rate < float("inf"), "learning_rate",
            "a finite outer learning rate > 0", learning_rate)
    require(is_real(momentum) and 0 <= momentum < 1, "momentum", "a number in [0, 1)", momentum)
    return optax.sgd(learning_rate, momentum=momentum, nesterov=True)


def local_sgd_outer() -> optax.GradientTransformation:
    """Plain local SGD: the global model becomes the nodes' average (outer SGD, rate 1, no momentum)."""
    return optax.sgd(1.0)


def make_local_sgd(config: kit.RunConfig, model: nn.Module, *, image_shape: tuple[int, ...],
                   num_classes: int, sync_every: int, outer: optax.GradientTransformation | None = None,
                   inner: optax.GradientTransformation | Callable | None = None, quorum: int | None = None,
                   grace: float = 0.0) -> LocalSGD:
    """Builds local SGD / DiLoCo of ``model``, a Flax classifier returning ``(logits, features)``.

    Args:
      config: reads ``num_nodes``, ``batch_size``, ``learning_rate``, ``lr_schedule``, ``num_steps``,
        ``augment``, ``backend`` and ``step_loop``.
      model: every node's classifier.
      image_shape: ``(H, W, C)``.
      num_classes: C.
      sync_every: H >= 1, inner steps per round.
      outer: the outer optimiser (default :func:`diloco_outer`; :func:`local_sgd_outer` for local SGD).
      inner: each node's optimiser: a function of the learning rate (``optax.sgd``: the config's rate and schedule,
        swept as data), or a transformation used as it is (its own rate; the config's unread); default Adam at the
        config's rate and schedule.
      quorum: K reports that close a round (None: every node's, synchronous DiLoCo); grace: seconds a round stays
        open after its quorum (:class:`jaxcomm.pace.Waits`).
    """
    require(isinstance(sync_every, int) and sync_every >= 1, "sync_every", "an integer >= 1", sync_every)
    n = config.num_nodes
    waits = pace.rounds_of(sync_every) if quorum is None else pace.Waits(sync_every, quorum, grace)
    pop = kit.nodes(config, model, image_shape=image_shape, num_classes=num_classes, optimizer=inner, waits=waits)
    outer = outer or diloco_outer()
    mean_over_nodes = lambda tree: jax.tree_util.tree_map(lambda leaf: jnp.mean(leaf, axis=0), tree)  # noqa: E731

    def global_model(nodes: population.NodeState) -> population.NodeState:  # every node starts from it
        start = population.node(nodes, 0)
        return population.stack([population.NodeState(start.params, start.model_state, outer.init(start.params))])

    def outer_step(state: kit.NodesState, ctx: kit.Context) -> kit.NodesState:
        tick = ctx.tick  # lockstep: a round every H steps, every node in it
        if quorum is None:
            nodes, glob = population.when_due(tick.closes, sync, state.nodes, state.extra)
        else:
            nodes, glob = population.when_due(tick.closes, functools.partial(merge, tick.members), state.nodes,
                                              state.extra)
        return state._replace(nodes=nodes, extra=glob)

    def merge(members: jax.Array, nodes: population.NodeState, extra):
        """A quorum round's end: the outer step from the members' mean outer gradient, each from the global model
        it started from; the members restart from the new global model, the others go on."""
        glob, starts = population.node(extra[0], 0), extra[1]
        weights = members / jnp.maximum(members.sum(), 1)  # every member took H steps: equal token weights
        mean = lambda tree: jax.tree_util.tree_map(lambda leaf: jnp.tensordot(weights, leaf, 1), tree)  # noqa: E731
        delta = mean(jax.tree_util.tree_map(jnp.subtract, starts, nodes.params))
        updates, outer_state = outer.update(delta, glob.opt_state, glob.params)
        glob = population.NodeState(optax.apply_updates(glob.params, updates), mean(nodes.model_state), outer_state)
        fresh = population.stack([glob.params] * n)
        restart = population.where(members, nodes._replace(
            params=fresh, model_state=population.stack([glob.model_state] * n)), nodes)
        return restart, (population.stack([glob]), population.where(members, fresh, starts))

    @jax.jit  # one program whether called in a jitted step or eagerly at a round's end
    def sync(nodes: population.NodeState, global_model: population.NodeState):
        """A round's end: the outer step from the nodes' mean; every node restarts from the new global model
        (``[N, ...]`` nodes, ``[1, ...]`` global model)."""
        glob = population.node(global_model, 0)
        # the outer gradient: how far the nodes moved from the global model, on average
        delta = jax.tree_util.tree_map(lambda g, p: g - p, glob.params, mean_over_nodes(nodes.params))
        updates, outer_state = outer.update(delta, glob.opt_state, glob.params)
        glob = population.NodeState(optax.apply_updates(glob.params, updates), mean_over_nodes(nodes.model_state),
                                    outer_state)
        restart = population.NodeState(population.stack([glob.params] * n), population.stack([glob.model_state] * n),
                                       nodes.opt_state)  # inner optimiser states stay with their nodes
        return restart, population.stack([glob])

    # one blocking ring all-reduce of the float32 parameters (or outer gradients) at every round's end
    built = pop.built_with(kit.Communicator(
        init=(lambda nodes, key: global_model(nodes)) if quorum is None else
        (lambda nodes, key: (global_model(nodes), nodes.params)),
        communicate=outer_step, info=lambda info, ctx: LocalSGDInfo(*info, ctx.tick.closes),
        traffic=(ledger.Round("allreduce", 4.0 * pop.num_params, every=sync_every),), same_start=True,
        models_of=(lambda state: state.extra) if quorum is None else (lambda state: state.extra[0]),
        stacked=False))  # nodes read together only at a round's end
    node_predict = classifier.classifier_predict(model)
    predict = compiling.nestable(population.lift(node_predict, backend="loop", in_axes=(0, None)))
    return built.extended(LocalSGD, predict=predict, sync_every=sync_every, num_params=pop.num_params)


def check_inner(inner: Callable | None) -> None:
    """Raises ValueError naming ``inner`` unless it is None or a function of the learning rate: a method's inner
    optimiser trains at the config's learning rate (swept as data), never at one of its own."""
    require(inner is None or callable(inner), "inner",
            "a function of the learning rate (optax.sgd, not optax.sgd(0.05)): the config's learning_rate is the "
            "inner rate", inner)


def local_sgd(sync_every: int, *, outer: optax.GradientTransformation | None = None,
              inner: Callable | None = None, name: str | None = None, quorum: int | None = None,
              grace: float = 0.0) -> methods.Method:
    """Local SGD / DiLoCo as a method (:class:`jaxcomm.methods.Method`): H = ``sync_every`` inner steps, then the
    outer step (default :func:`local_sgd_outer`, plain averaging); scored by the global model's accuracy.
    ``inner``: each node's optimiser as a function of the learning rate (default Adam; ``optax.sgd``: FedAvg's
    plain-SGD clients), given the config's rate and schedule. ``quorum``, ``grace``: a round closes on K reports
    (:func:`make_local_sgd`)."""
    outer = outer or local_sgd_outer()
    check_inner(inner)

    def build(config, model, *, image_shape, num_classes):
        return make_local_sgd(config, model, image_shape=image_shape, num_classes=num_classes,
                              sync_every=sync_every, outer=outer, inner=inner, quorum=quorum, grace=grace)

    suffix = "" if quorum is None else f"_q{quorum}"
    return methods.Method(name or f"local_sgd_h{sync_every}{suffix}", build, family="local_sgd", score="model")


def diloco(sync_every: int, *, learning_rate: float = 0.7, momentum: float = 0.9, inner: Callable | None = None,
           quorum: int | None = None, grace: float = 0.0, name: str | None = None) -> methods.Method:
    """DiLoCo as a method: :func:`local_sgd` with the Nesterov outer optimiser (:func:`diloco_outer`); ``inner`` as
    :func:`local_sgd`'s (default Adam, the paper's AdamW without decay); with a ``quorum`` of K (and a ``grace``
    window in seconds), a round closes on K reports at its own pace."""
    suffix = "" if quorum is None else f"_q{quorum}"
    return local_sgd(sync_every, outer=diloco_outer(learning_rate, momentum), inner=inner, quorum=quorum, grace=grace,
                     name=name or f"diloco_h{sync_every}{suffix}")


def train_local_sgd(
    config: kit.RunConfig,
    model: nn.Module,
    dataset: ImageDataset,
    *,
    sync_every: int,
    outer: optax.GradientTransformation | None = None,
    eval_split: str = "test",
    progress: bool = True,
    desc: str | None = None,
    checkpointer: Checkpointer | None = None,
    divergence: float | None = driver.DIVERGENCE,
) -> dict:
    """Trains with local SGD / DiLoCo (default: DiLoCo's outer optimiser) and evaluates the global model every
    ``eval_every`` steps (:func:`jaxcomm.methods.train`).

    Returns :func:`jaxcomm.methods.train`'s dict plus ``system`` (the :class:`LocalSGD`, with its byte counts).
    """
    method = local_sgd(sync_every, outer=outer or diloco_outer())
    out = methods.train(method, config, model, dataset, eval_split=eval_split, progress=progress, desc=desc,
                        checkpointer=checkpointer, divergence=divergence)
    return out | {"system": out["built"]}
