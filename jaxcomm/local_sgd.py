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
:mod:`jaxcomm.data_parallel`). Evaluation reads the global model. It reads the same
:class:`jaxcomm.network.NetworkConfig` as a network and is its own :class:`jaxcomm.driver.System`.

References:
  Stich (2018), "Local SGD converges fast and communicates little"; Douillard et al. (2023), DiLoCo,
  Algorithm 1; MaxText's ``diloco.py`` (replicas stacked on a leading axis, as jaxcomm's nodes).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import NamedTuple

import flax.linen as nn
import jax
import jax.numpy as jnp
import optax

from jaxcomm import bandwidth, data_parallel, driver, network, population, speed
from jaxcomm.checkpoint import Checkpointer
from jaxcomm.data import ImageDataset
from jaxcomm.exchange import cross_entropy
from jaxcomm.models import to_unit_float
from jaxcomm.validation import require


class LocalSGDState(NamedTuple):
    """Attributes: nodes: every node's model and inner optimiser state (``[N, ...]``); global_model: the outer
    model as a population of one (its ``opt_state`` is the outer optimiser's); step: ``[]``; key: of the next step."""

    nodes: population.NodeState
    global_model: population.NodeState
    step: jax.Array
    key: jax.Array


class LocalSGDInfo(NamedTuple):
    """What one step did. Attributes: loss: ``[N]`` each node's loss; indices: ``[N, B] int32`` rows drawn;
    synced: ``[]`` bool, whether this step ended a round."""

    loss: jax.Array
    indices: jax.Array
    synced: jax.Array


@dataclasses.dataclass(frozen=True)
class LocalSGD:
    """Pure functions of local SGD / DiLoCo; build with :func:`make_local_sgd`.

    Attributes:
      config: the network configuration it reads.
      init, step: as every system's (``step(state, data) -> (state, LocalSGDInfo)``, pure).
      predict: ``predict(global_model, images) -> probs [1, M, C]``, jitted.
      sync_every: H.
      num_params: P.
      backend, step_loop: the resolved choices.
    """

    config: network.NetworkConfig
    init: Callable[[jax.Array], LocalSGDState]
    step: Callable
    predict: Callable
    sync_every: int
    num_params: int
    backend: str
    step_loop: str

    @property
    def layout(self) -> driver.Layout | None:
        """How the "eager" step loop holds the state within a chunk (:func:`jaxcomm.network.layout_for`): under
        the "loop" lift node states apart, regrouped at each round's end only."""
        return network.layout_for(self.backend)

    def bytes_per_node_step(self) -> float:
        """One ring all-reduce of the float32 parameters every H steps: ``2 (N-1)/N x 4 P / H``."""
        return bandwidth.allreduce_bytes(self.config.num_nodes, self.num_params) / self.sync_every


def diloco_outer(learning_rate: float = 0.7, momentum: float = 0.9) -> optax.GradientTransformation:
    """DiLoCo's outer optimiser: SGD with Nesterov momentum (the paper's lr 0.7, momentum 0.9)."""
    return optax.sgd(learning_rate, momentum=momentum, nesterov=True)


def local_sgd_outer() -> optax.GradientTransformation:
    """Plain local SGD: the global model becomes the nodes' average (outer SGD, rate 1, no momentum)."""
    return optax.sgd(1.0)


def make_local_sgd(config: network.NetworkConfig, model: nn.Module, *, image_shape: tuple[int, ...],
                   num_classes: int, sync_every: int, outer: optax.GradientTransformation | None = None,
                   inner: optax.GradientTransformation | None = None) -> LocalSGD:
    """Builds local SGD / DiLoCo of ``model``, a Flax classifier returning ``(logits, features)``.

    Args:
      config: reads ``num_nodes``, ``batch_size``, ``learning_rate``, ``lr_schedule``, ``num_steps``,
        ``augment``, ``backend`` and ``step_loop``.
      model: every node's classifier.
      image_shape: ``(H, W, C)``.
      num_classes: C.
      sync_every: H >= 1, inner steps per round.
      outer: the outer optimiser (default :func:`diloco_outer`; :func:`local_sgd_outer` for local SGD).
      inner: each node's optimiser (default Adam at the config's rate and schedule).
    """
    require(isinstance(sync_every, int) and sync_every >= 1, "sync_every", "an integer >= 1", sync_every)
    n, b = config.num_nodes, config.batch_size
    inner = inner or optax.adam(network.learning_rate(config))
    outer = outer or diloco_outer()
    init_model = network.classifier_init(model, inner, image_shape)
    abstract = jax.eval_shape(init_model, jax.random.PRNGKey(0))
    num_params = bandwidth.num_params(abstract.params)

    def loss_fn(params, model_state, images, targets, key):
        (logits, _), new_state = network.apply_classifier(model, params, model_state, to_unit_float(images),
                                                          train=True, key=key)
        return cross_entropy(logits, targets), (new_state, None)

    node_step = population.make_train_step(loss_fn, inner)  # (state, images, targets, key) -> (state, (loss, _))
    family = speed.family_of(node_step, abstract, jax.ShapeDtypeStruct((b, *image_shape), jnp.uint8),
                             jax.ShapeDtypeStruct((b, num_classes), jnp.float32),
                             jax.ShapeDtypeStruct((2,), jnp.uint32))
    backend, step_loop = speed.choose(family, n, batch_size=b, backend=config.backend, step_loop=config.step_loop)
    train_nodes = population.lift(node_step, backend=backend)
    mean_over_nodes = lambda tree: jax.tree_util.tree_map(lambda leaf: jnp.mean(leaf, axis=0), tree)  # noqa: E731
    augment = network.augmentation(n) if config.augment else None

    def init(key: jax.Array) -> LocalSGDState:
        model_key, run_key = jax.random.split(key)
        start = init_model(model_key)
        nodes = population.stack([start] * n)  # every node starts from the global model
        global_model = population.NodeState(start.params, start.model_state, outer.init(start.params))
        return LocalSGDState(nodes, population.stack([global_model]), jnp.zeros((), jnp.int32), run_key)

    def step(state: LocalSGDState, data: network.NetworkData) -> tuple[LocalSGDState, LocalSGDInfo]:
        key, k_sample, k_nodes, _, k_augment = jax.random.split(state.key, 5)  # data_parallel's draws
        indices = network.local_batches(k_sample, data, b)  # [N, B]
        images = data.images[indices]
        if augment is not None:
            images = augment(k_augment, images)
        targets = jax.nn.one_hot(data.labels[indices], num_classes)
        nodes, (loss, _) = population.state_and_aux(train_nodes(state.nodes, images, targets,
                                                                jax.random.split(k_nodes, n)))
        synced = (state.step + 1) % sync_every == 0
        nodes, global_model = population.when_due(synced, sync, nodes, state.global_model)
        return LocalSGDState(nodes, global_model, state.step + 1, key), LocalSGDInfo(loss, indices, synced)

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

    predict = jax.jit(population.lift(network.classifier_predict(model), backend="loop", in_axes=(0, None)))
    return LocalSGD(config, init, step, predict, sync_every, num_params, backend, step_loop)


def system(ls: LocalSGD, split) -> driver.System:
    """Local SGD as a :class:`jaxcomm.driver.System`: the nodes' mean loss and the global model's accuracies on
    ``split`` (one model: every collective accuracy is its own)."""
    return data_parallel.evaluated_system(ls, split, lambda state: state.global_model)


def train_local_sgd(
    config: network.NetworkConfig,
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
    """Trains with local SGD / DiLoCo and evaluates the global model every ``eval_every`` steps.

    Returns :func:`jaxcomm.driver.train`'s dict plus ``system`` (the :class:`LocalSGD`, with its byte counts).
    """
    ls = make_local_sgd(config, model, image_shape=dataset.train.images.shape[1:], num_classes=dataset.num_classes,
                        sync_every=sync_every, outer=outer)
    return data_parallel.train_evaluated(system(ls, getattr(dataset, eval_split)), ls, dataset,
                                         progress=progress, desc=desc, checkpointer=checkpointer,
                                         divergence=divergence)
