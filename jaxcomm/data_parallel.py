"""Synchronous data-parallel SGD over the network's nodes and shards, gradients optionally compressed.

The baseline thesis ch. 2 argues against (§1.3.2.2, §2.1): N nodes hold the
same disjoint shards as a :mod:`jaxcomm.network`, but train ONE shared model.
Every step each node

1. draws a minibatch of its own shard (:func:`jaxcomm.network.local_batches`)
   and computes the gradient of the shared model on it (per-node code lifted
   by :func:`jaxcomm.population.lift`);
2. compresses it with its own :class:`jaxcomm.compression.Compressor` (and
   error-feedback memory), and sends it;

then the decoded gradients are averaged (an all-reduce, or an all-gather of
compressed messages) and one Adam step updates the shared model. BatchNorm
statistics are averaged the same way. Without compression this is exactly
single-model training on the concatenated ``N x B`` batch (tested, for models
without batch statistics).

It reads the same :class:`jaxcomm.network.NetworkConfig` as a network (nodes,
shards, batch, optimiser, augmentation, schedule; the message fields do not
apply) and is its own :class:`jaxcomm.driver.System`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import NamedTuple

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import optax

from jaxcomm import bandwidth, compression, driver, network, population, powersgd, speed
from jaxcomm.checkpoint import Checkpointer
from jaxcomm.data import ImageDataset
from jaxcomm.exchange import cross_entropy
from jaxcomm.models import to_unit_float


class DataParallelState(NamedTuple):
    """Attributes: nodes: the shared model as a population of one (leaves ``[1, ...]``); memory: every node's
    compressor state (``[N, ...]``, e.g. error-feedback residuals); step: ``[]``; key: of the next step."""

    nodes: population.NodeState
    memory: population.PyTree
    step: jax.Array
    key: jax.Array


class DataParallelInfo(NamedTuple):
    """What one step did. Attributes: loss: ``[N]`` each node's loss on its minibatch; indices: ``[N, B] int32``
    the training-set rows each node drew."""

    loss: jax.Array
    indices: jax.Array


@dataclasses.dataclass(frozen=True)
class DataParallel:
    """Pure functions of synchronous SGD; build with :func:`make_data_parallel`.

    Attributes:
      config: the network configuration it reads (nodes, shards, optimiser, schedule).
      init: ``init(key) -> DataParallelState``.
      step: ``step(state, data) -> (state, DataParallelInfo)``, pure; jit it.
      predict: ``predict(nodes, images) -> probs [1, M, C]`` of the shared model, jitted.
      message_bytes: bytes of one node's (compressed) gradient message.
      num_params: P, the model's trainable parameters.
      dense: no compressor: the gradients are all-reduced.
      backend, step_loop: the resolved choices.
      summed: the compressed messages are summed on the way (a
        :class:`jaxcomm.powersgd.CollectiveCompressor`: an all-reduce of them).
    """

    config: network.NetworkConfig
    init: Callable[[jax.Array], DataParallelState]
    step: Callable
    predict: Callable
    message_bytes: int
    num_params: int
    dense: bool
    backend: str
    step_loop: str
    summed: bool = False

    def bytes_per_node_step(self) -> float:
        """Bytes each node sends per step.

        Dense: a ring all-reduce (:func:`jaxcomm.bandwidth.allreduce_bytes`).
        Compressed: messages of different supports cannot be summed on the way,
        so every node's message reaches the N - 1 others (an all-gather):
        ``(N - 1) x message_bytes``. Summed (PowerSGD's factors): a ring
        all-reduce of ``message_bytes``, ``2 (N - 1) / N x message_bytes``.
        """
        n = self.config.num_nodes
        if self.dense:
            return bandwidth.allreduce_bytes(n, self.num_params)
        if self.summed:
            return 2 * (n - 1) / n * self.message_bytes
        return float((n - 1) * self.message_bytes)


def make_data_parallel(config: network.NetworkConfig, model: nn.Module, *, image_shape: tuple[int, ...],
                       num_classes: int,
                       compressor: compression.Compressor | powersgd.CollectiveCompressor | None = None,
                       optimizer: optax.GradientTransformation | None = None) -> DataParallel:
    """Builds synchronous SGD of ``model``, a Flax classifier returning ``(logits, features)``.

    Args:
      config: reads ``num_nodes``, ``batch_size``, ``learning_rate``, ``lr_schedule``,
        ``num_steps``, ``augment``, ``backend`` and ``step_loop`` (shards and
        schedule are read by :func:`train_data_parallel`).
      model: the shared classifier.
      image_shape: ``(H, W, C)``.
      num_classes: C.
      compressor: each node's gradient compressor (:func:`jaxcomm.compression.make`), or one
        that compresses all nodes' gradients together (:func:`jaxcomm.powersgd.power_sgd`);
        None: dense gradients, all-reduced.
      optimizer: of the shared model (default Adam at the config's rate and schedule).
    """
    n, b = config.num_nodes, config.batch_size
    optimizer = optimizer or optax.adam(network.learning_rate(config))
    init_model = network.classifier_init(model, optimizer, image_shape)
    dense = compressor is None
    compressor = compression.make("none") if dense else compressor
    summed = isinstance(compressor, powersgd.CollectiveCompressor)
    abstract = jax.eval_shape(init_model, jax.random.PRNGKey(0))  # shapes only: nothing is initialised
    shapes = abstract.params
    num_params = bandwidth.num_params(shapes)

    def node_gradient(params, model_state, images, targets, key):
        """One node's gradient of the shared model on its minibatch, its loss and batch statistics."""

        def loss_fn(params):
            (logits, _), new_state = network.apply_classifier(model, params, model_state, to_unit_float(images),
                                                              train=True, key=key)
            return cross_entropy(logits, targets), new_state

        (loss, new_state), grads = jax.value_and_grad(loss_fn, has_aux=True)(params)
        return grads, loss, new_state

    family = speed.family_of(node_gradient, shapes, abstract.model_state,
                             jax.ShapeDtypeStruct((b, *image_shape), jnp.uint8),
                             jax.ShapeDtypeStruct((b, num_classes), jnp.float32), jax.random.PRNGKey(0))
    backend, step_loop = speed.choose(family, n, batch_size=b, backend=config.backend, step_loop=config.step_loop)
    gradients = population.lift(node_gradient, backend=backend, in_axes=(None, None, 0, 0, 0))
    compress = None if summed else population.lift(compressor.update, backend=backend)
    mean_over_nodes = lambda tree: jax.tree_util.tree_map(lambda leaf: jnp.mean(leaf, axis=0), tree)
    augment = network.augmentation(n) if config.augment else None

    def init(key: jax.Array) -> DataParallelState:
        model_key, run_key = jax.random.split(key)
        shared = init_model(model_key)
        if summed:
            memory = compressor.init(shared.params, n, model_key)
        else:
            memory = population.init_population(lambda _: compressor.init(shared.params), model_key, n,
                                                backend="vmap")
        return DataParallelState(population.stack([shared]), memory, jnp.zeros((), jnp.int32), run_key)

    def step(state: DataParallelState, data: network.NetworkData) -> tuple[DataParallelState, DataParallelInfo]:
        key, k_sample, k_nodes, k_compress, k_augment = jax.random.split(state.key, 5)
        indices = network.local_batches(k_sample, data, b)  # [N, B]
        images = data.images[indices]
        if augment is not None:
            images = augment(k_augment, images)
        targets = jax.nn.one_hot(data.labels[indices], num_classes)
        shared = population.node(state.nodes, 0)
        grads, loss, model_state = gradients(shared.params, shared.model_state, images, targets,
                                             jax.random.split(k_nodes, n))
        if summed:
            grad, memory = compressor.reduce(grads, state.memory)
        else:
            sent, memory = compress(grads, state.memory, jax.random.split(k_compress, n))
            grad = mean_over_nodes(sent)  # the all-reduce
        updates, opt_state = optimizer.update(grad, shared.opt_state, shared.params)
        shared = population.NodeState(optax.apply_updates(shared.params, updates), mean_over_nodes(model_state),
                                      opt_state)
        return DataParallelState(population.stack([shared]), memory, state.step + 1, key), DataParallelInfo(loss,
                                                                                                           indices)

    predict = jax.jit(population.lift(network.classifier_predict(model), backend="loop", in_axes=(0, None)))
    return DataParallel(config, init, step, predict, compressor.message_bytes(shapes), num_params, dense, backend,
                        step_loop, summed)


def system(dp: DataParallel, split) -> driver.System:
    """Sync SGD as a :class:`jaxcomm.driver.System`: records the nodes' mean loss and the shared model's
    accuracies on ``split`` (:func:`jaxcomm.network.evaluate` of one model: every collective accuracy is its own)."""
    return evaluated_system(dp, split, lambda state: state.nodes)


def evaluated_system(built, split, models_of: Callable) -> driver.System:
    """A baseline on the network's shards (sync SGD, local SGD, codistillation) as a :class:`jaxcomm.driver.System`:
    ``built`` has ``init``, ``step``, ``predict``, ``step_loop`` and may have a ``layout``
    (:class:`jaxcomm.driver.Layout`); ``models_of(state)`` are the models evaluated on ``split`` (a population: one
    shared model, or every node's; :func:`jaxcomm.network.evaluate`); its infos have ``loss [N]`` and ``indices``."""

    def evaluate(state, infos, steps_done: int) -> dict:
        probs = network.predict_in_batches(built, models_of(state), split.images)
        return {"loss": float(np.mean(population.to_host(infos.loss))), **network.evaluate(probs, split.labels)}

    return driver.System(built.init, built.step, evaluate, losses=lambda infos: infos.loss,
                         summarize=network.summarize_info, step_loop=built.step_loop,
                         postfix=network.progress_postfix, layout=getattr(built, "layout", None))


def train_data_parallel(
    config: network.NetworkConfig,
    model: nn.Module,
    dataset: ImageDataset,
    *,
    compressor: compression.Compressor | None = None,
    eval_split: str = "test",
    progress: bool = True,
    desc: str | None = None,
    checkpointer: Checkpointer | None = None,
    divergence: float | None = driver.DIVERGENCE,
) -> dict:
    """Trains with synchronous SGD and evaluates the shared model every ``eval_every`` steps.

    Returns :func:`jaxcomm.driver.train`'s dict (its ``avg_accuracy`` and collective
    accuracies are the one model's accuracy) plus ``system`` (the :class:`DataParallel`,
    with its byte counts).
    """
    dp = make_data_parallel(config, model, image_shape=dataset.train.images.shape[1:],
                            num_classes=dataset.num_classes, compressor=compressor)
    return train_evaluated(system(dp, getattr(dataset, eval_split)), dp, dataset, progress=progress, desc=desc,
                           checkpointer=checkpointer, divergence=divergence)


def train_evaluated(system_: driver.System, built, dataset: ImageDataset, *, progress: bool, desc: str | None,
                    checkpointer: Checkpointer | None, divergence: float | None) -> dict:
    """Runs ``system_`` (of ``built``, a baseline with a ``config``: sync SGD, local SGD, codistillation) under the
    driver on ``dataset``'s shards for its config's steps; :func:`jaxcomm.driver.train`'s dict plus ``system``."""
    config = built.config
    out = driver.train(system_, network.network_data(dataset, config), num_steps=config.num_steps,
                       eval_every=config.eval_every, key=jax.random.PRNGKey(config.seed), progress=progress,
                       desc=desc, checkpointer=checkpointer, divergence=divergence)
    return out | {"system": built}
