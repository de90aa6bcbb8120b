"""Synchronous data-parallel SGD over the network's nodes and shards, gradients optionally compressed.

The baseline thesis ch. 2 argues against (§1.3.2.2, §2.1): N nodes hold the
same disjoint shards as a :mod:`jaxcomm.network`, but train ONE shared model.
Every step each node

1. draws a minibatch of its own shard (:func:`jaxcomm.classifier.minibatch`, the same
   draws as an isolated network of the same seed: :mod:`jaxcomm.streams`) and computes
   the gradient of the shared model on it (per-node code lifted
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
apply); :func:`sync_sgd` makes it a method (:class:`jaxcomm.methods.Method`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import NamedTuple

import flax.linen as nn
import jax
import jax.numpy as jnp
import optax

from jaxcomm import (
    bandwidth,
    classifier,
    compression,
    driver,
    ledger,
    methods,
    network,
    pace,
    population,
    powersgd,
    streams,
)
from jaxcomm.checkpoint import Checkpointer
from jaxcomm.data import ImageDataset


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
    layout = None  # one shared model: nothing to hold apart
    waits = pace.LOCKSTEP  # every node waits for the slowest at every step (at its own pace: only the clock moves)

    def models_of(self, state: DataParallelState) -> population.NodeState:
        """The one shared model (a population of one)."""
        return state.nodes

    @property
    def traffic(self) -> tuple[ledger.Round, ...]:
        """Every step, blocking: a ring all-reduce of the dense gradients (``4 P`` bytes) or of PowerSGD's summed
        factors (P, then Q: two collectives), or an all-gather of compressed messages (messages of different
        supports cannot be summed on the way)."""
        if self.dense:
            return (ledger.Round("allreduce", 4.0 * self.num_params),)
        if self.summed:
            return (ledger.Round("allreduce", float(self.message_bytes), parts=2),)
        return (ledger.Round("allgather", float(self.message_bytes)),)

    def booking(self, state, steps_done: int, data_model: str | None = None) -> ledger.Booking:
        """Every step's gradient exchange (:attr:`traffic`)."""
        return ledger.book(self.traffic, self.config.num_nodes, steps_done)

    def bytes_per_node_step(self) -> float:
        """Bytes each node sends per step: ``2 (N-1)/N x 4 P`` dense, ``2 (N-1)/N x message_bytes`` summed,
        ``(N - 1) x message_bytes`` compressed (:func:`jaxcomm.ledger.per_node_step`)."""
        return ledger.per_node_step(self.traffic, self.config.num_nodes)


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
    optimizer = optimizer or optax.adam(classifier.learning_rate(config))
    init_model = classifier.classifier_init(model, optimizer, image_shape)
    dense = compressor is None
    compressor = compression.make("none") if dense else compressor
    summed = isinstance(compressor, powersgd.CollectiveCompressor)
    abstract = jax.eval_shape(init_model, jax.random.PRNGKey(0))  # shapes only: nothing is initialised
    shapes = abstract.params
    num_params = bandwidth.num_params(shapes)

    node_loss = classifier.classifier_loss(model)

    def node_gradient(params, model_state, images, targets, key):
        """One node's gradient of the shared model on its minibatch, its loss and batch statistics."""
        (loss, (new_state, _)), grads = jax.value_and_grad(node_loss, has_aux=True)(params, model_state, images,
                                                                                    targets, key)
        return grads, loss, new_state

    # timed as one node's gradient step on the shared model (the optimiser step is the shared model's, once)
    timed = lambda state, images, targets, key: (state, node_gradient(state.params, state.model_state, images,  # noqa: E731
                                                                     targets, key))
    backend, step_loop, _ = classifier.choose_backend(
        config, timed, init_model, classifier.node_args(b, image_shape, num_classes))
    gradients = population.lift(node_gradient, backend=backend, in_axes=(None, None, 0, 0, 0))
    compress = None if summed else population.lift(compressor.update, backend=backend)
    mean_over_nodes = lambda tree: jax.tree_util.tree_map(lambda leaf: jnp.mean(leaf, axis=0), tree)  # noqa: E731

    def init(key: jax.Array) -> DataParallelState:
        keys = streams.init_keys(key)
        shared = init_model(keys.nodes)
        memory_key = streams.named(keys.nodes, "compressor")
        if summed:
            memory = compressor.init(shared.params, n, memory_key)
        else:
            memory = population.init_population(lambda _: compressor.init(shared.params), memory_key, n,
                                                backend="vmap")
        return DataParallelState(population.stack([shared]), memory, jnp.zeros((), jnp.int32), keys.run)

    def step(state: DataParallelState, data: network.NetworkData) -> tuple[DataParallelState, DataParallelInfo]:
        keys = streams.step_keys(state.key, augment=config.augment)
        batch = classifier.minibatch(keys, data, b, num_classes)  # an isolated network's draws
        shared = population.node(state.nodes, 0)
        grads, loss, model_state = gradients(shared.params, shared.model_state, batch.images, batch.targets,
                                             jax.random.split(keys.nodes, n))
        if summed:
            grad, memory = compressor.reduce(grads, state.memory)
        else:
            sent, memory = compress(grads, state.memory, jax.random.split(streams.named(state.key, "compress"), n))
            grad = mean_over_nodes(sent)  # the all-reduce
        updates, opt_state = optimizer.update(grad, shared.opt_state, shared.params)
        shared = population.NodeState(optax.apply_updates(shared.params, updates), mean_over_nodes(model_state),
                                      opt_state)
        return (DataParallelState(population.stack([shared]), memory, state.step + 1, keys.next),
                DataParallelInfo(loss, batch.indices))

    predict = jax.jit(population.lift(classifier.classifier_predict(model), backend="loop", in_axes=(0, None)))
    return DataParallel(config, init, step, predict, compressor.message_bytes(shapes), num_params, dense, backend,
                        step_loop, summed)


def sync_sgd(compressor: compression.Compressor | powersgd.CollectiveCompressor | None = None, *,
             name: str | None = None) -> methods.Method:
    """Synchronous SGD as a method (:class:`jaxcomm.methods.Method`): one shared model, every node's gradient
    (compressed by ``compressor``: :func:`jaxcomm.compression.make`, or :func:`jaxcomm.powersgd.power_sgd`; None:
    dense) averaged every step; scored by the shared model's accuracy."""

    def build(config, model, *, image_shape, num_classes):
        return make_data_parallel(config, model, image_shape=image_shape, num_classes=num_classes,
                                  compressor=compressor)

    dense = compressor is None
    # one model per run: 8 sync SGD runs vmapped ran 2.11x one by one, run by run 1.40x (results/benchmark/sweep_arms/;
    # compressors and PowerSGD share the structure, not measured)
    return methods.Method(name or ("sync_sgd" if dense else "compressed_sgd"), build,
                          family="sync" if dense else "compressed", score="model", sweep_mode="population")


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
    """Trains with synchronous SGD and evaluates the shared model every ``eval_every`` steps
    (:func:`jaxcomm.methods.train` of :func:`sync_sgd`).

    Returns :func:`jaxcomm.methods.train`'s dict (its ``avg_accuracy`` and collective accuracies are the one
    model's accuracy) plus ``system`` (the :class:`DataParallel`, with its byte counts).
    """
    out = methods.train(sync_sgd(compressor), config, model, dataset, eval_split=eval_split, progress=progress,
                        desc=desc, checkpointer=checkpointer, divergence=divergence)
    return out | {"system": out["built"]}
