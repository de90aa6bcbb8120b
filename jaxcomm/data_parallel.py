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

A :class:`DataParallel` has a :class:`jaxcomm.network.Network`'s ``config``,
``init``, ``step``, ``predict`` and ``step_loop``, so :func:`jaxcomm.network.fit`
trains it; its ``predict`` sees one node, the shared model.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import NamedTuple

import flax.linen as nn
import jax
import jax.numpy as jnp
import optax

from jaxcomm import compression, network, population, speed
from jaxcomm.checkpoint import Checkpointer
from jaxcomm.data import ImageDataset
from jaxcomm.models import to_unit_float
from jaxcomm.validation import is_int, is_real, require


@dataclasses.dataclass(frozen=True)
class DataParallelConfig:
    """Synchronous SGD of one model over N nodes' shards; validated on construction.

    Attributes:
      num_nodes: N.
      compression: one of :data:`jaxcomm.compression.METHODS` ("none": a dense all-reduce).
      fraction: k / d of "top_k" and "random_k".
      levels: s of "qsgd".
      per_layer: compress every tensor separately (True) or the whole model as one vector.
      feedback: error feedback (ignored by "none").
      batch_size: B per node (the model sees N x B samples per step).
      learning_rate: Adam's step size.
      lr_schedule: "constant" or "cosine" (to 0 at ``num_steps``), as
        :class:`jaxcomm.network.NetworkConfig`.
      partition, dirichlet_alpha: the shards, as :class:`jaxcomm.network.NetworkConfig`.
      augment: random flips and crops of every minibatch.
      backend: how the per-node gradients are lifted (one of
        :data:`jaxcomm.population.BACKENDS` or "auto").
      step_loop: "scan", "dispatch" or "auto".
      num_steps: training steps.
      eval_every: steps between evaluations.
      seed: seeds the partition, the initialisation and every draw.
    """

    num_nodes: int = 10
    compression: str = "none"
    fraction: float = 0.01
    levels: int = 4
    per_layer: bool = True
    feedback: bool = True
    batch_size: int = 32
    learning_rate: float = 1e-3
    lr_schedule: str = "constant"
    partition: str = "iid"
    dirichlet_alpha: float = 0.5
    augment: bool = False
    backend: str = "auto"
    step_loop: str = "auto"
    num_steps: int = 1000
    eval_every: int = 100
    seed: int = 0

    has_failures = False  # read by jaxcomm.network.accuracy_evaluator

    def __post_init__(self):
        require(is_int(self.num_nodes) and self.num_nodes >= 1, "num_nodes", "an integer >= 1", self.num_nodes)
        compression.check(self.compression, fraction=self.fraction, levels=self.levels, per_layer=self.per_layer,
                          feedback=self.feedback)
        require(is_int(self.batch_size) and self.batch_size >= 1, "batch_size", "an integer >= 1", self.batch_size)
        require(is_real(self.learning_rate) and self.learning_rate > 0, "learning_rate", "a number > 0",
                self.learning_rate)
        require(self.lr_schedule in network.LR_SCHEDULES, "lr_schedule", f"one of {network.LR_SCHEDULES}",
                self.lr_schedule)
        require(self.partition in network.PARTITIONS, "partition", f"one of {network.PARTITIONS}", self.partition)
        require(is_real(self.dirichlet_alpha) and self.dirichlet_alpha > 0, "dirichlet_alpha", "a number > 0",
                self.dirichlet_alpha)
        require(isinstance(self.augment, bool), "augment", "True or False", self.augment)
        population.check_backend(self.backend, allow_auto=True)
        loops = (population.AUTO, *speed.STEP_LOOPS)
        require(self.step_loop in loops, "step_loop", f"one of {loops}", self.step_loop)
        require(is_int(self.num_steps) and self.num_steps >= 0, "num_steps", "an integer >= 0", self.num_steps)
        require(is_int(self.eval_every) and self.eval_every >= 1, "eval_every", "an integer >= 1", self.eval_every)
        require(is_int(self.seed), "seed", "an integer", self.seed)

    def compressor(self) -> compression.Compressor:
        return compression.make(self.compression, fraction=self.fraction, levels=self.levels,
                                per_layer=self.per_layer, feedback=self.feedback)

    def replace(self, **changes) -> DataParallelConfig:
        return dataclasses.replace(self, **changes)


class DataParallelState(NamedTuple):
    """Attributes: nodes: the shared model as a population of one (leaves ``[1, ...]``); memory: every node's
    compressor state (``[N, ...]``, e.g. error-feedback residuals); step: ``[]``; key: of the next step."""

    nodes: population.NodeState
    memory: population.PyTree
    step: jax.Array
    key: jax.Array


@dataclasses.dataclass(frozen=True)
class DataParallel:
    """Pure functions of synchronous SGD; build with :func:`make_data_parallel`.

    Attributes:
      config: the validated configuration.
      init: ``init(key) -> DataParallelState``.
      step: ``step(state, data) -> (state, StepInfo)``, pure; jit it.
      predict: ``predict(nodes, images) -> probs [1, M, C]`` of the shared model, jitted.
      message_bytes: bytes of one node's (compressed) gradient message.
      num_params: P, the model's trainable parameters.
      backend, step_loop: the resolved choices.
    """

    config: DataParallelConfig
    init: Callable[[jax.Array], DataParallelState]
    step: Callable
    predict: Callable
    message_bytes: int
    num_params: int
    backend: str
    step_loop: str

    def bytes_per_node_step(self) -> float:
        """Bytes each node sends per step.

        Dense: a ring all-reduce, ``2 (N - 1) / N x 4 P``. Compressed: messages of
        different supports cannot be summed on the way, so every node's message
        reaches the N - 1 others (an all-gather): ``(N - 1) x message_bytes``.
        """
        n = self.config.num_nodes
        if self.config.compression == "none":
            return 2.0 * (n - 1) / n * 4 * self.num_params
        return float((n - 1) * self.message_bytes)


def make_data_parallel(config: DataParallelConfig, model: nn.Module, *, image_shape: tuple[int, ...],
                       num_classes: int) -> DataParallel:
    """Builds synchronous SGD of ``model``, a Flax classifier returning ``(logits, features)``."""
    n, b = config.num_nodes, config.batch_size
    backend, step_loop = speed.choose(speed.model_family(model), n, batch_size=b, backend=config.backend,
                                      step_loop=config.step_loop)
    optimizer = optax.adam(network.learning_rate(config))
    # The shared model's init and predict are those of one classifier node.
    program = network.classifier_program(network.NetworkConfig(num_nodes=1, topology="full", content="none",
                                               learning_rate=config.learning_rate, lr_schedule=config.lr_schedule,
                                               num_steps=config.num_steps),
                                 model, image_shape=image_shape, num_classes=num_classes)
    compressor = config.compressor()
    shapes = jax.eval_shape(program.init, jax.random.PRNGKey(0)).params
    num_params = sum(leaf.size for leaf in jax.tree_util.tree_leaves(shapes))

    def node_gradient(params, model_state, images, targets, key):
        """One node's gradient of the shared model on its minibatch, its loss and batch statistics."""

        def loss_fn(params):
            (logits, _), new_state = network.apply_classifier(model, params, model_state, to_unit_float(images),
                                                              train=True, key=key)
            return network.cross_entropy(logits, targets), new_state

        (loss, new_state), grads = jax.value_and_grad(loss_fn, has_aux=True)(params)
        return grads, loss, new_state

    gradients = population.lift(node_gradient, backend=backend, in_axes=(None, None, 0, 0, 0))
    compress = population.lift(compressor.update, backend=backend)
    mean_over_nodes = lambda tree: jax.tree_util.tree_map(lambda leaf: jnp.mean(leaf, axis=0), tree)

    def init(key: jax.Array) -> DataParallelState:
        model_key, run_key = jax.random.split(key)
        shared = program.init(model_key)
        memory = population.init_population(lambda _: compressor.init(shared.params), model_key, n,
                                            backend="vmap")
        return DataParallelState(population.stack([shared]), memory, jnp.zeros((), jnp.int32), run_key)

    def step(state: DataParallelState, data) -> tuple[DataParallelState, network.StepInfo]:
        key, k_sample, k_nodes, k_compress, k_augment = jax.random.split(state.key, 5)
        indices = network.local_batches(k_sample, data, b)  # [N, B]
        images = data.images[indices]
        if config.augment:
            images = jax.vmap(network.flip_and_crop)(jax.random.split(k_augment, n), images)
        targets = jax.nn.one_hot(data.labels[indices], num_classes)
        shared = population.node(state.nodes, 0)
        grads, loss, model_state = gradients(shared.params, shared.model_state, images, targets,
                                             jax.random.split(k_nodes, n))
        sent, memory = compress(grads, state.memory, jax.random.split(k_compress, n))
        grad = mean_over_nodes(sent)  # the all-reduce
        updates, opt_state = optimizer.update(grad, shared.opt_state, shared.params)
        shared = population.NodeState(optax.apply_updates(shared.params, updates), mean_over_nodes(model_state),
                                      opt_state)
        everyone, nobody = jnp.ones((n,), bool), jnp.zeros((n,), bool)
        info = network.StepInfo(loss, nobody, nobody, indices, jnp.full((n,), -1, jnp.int32), everyone)
        return DataParallelState(population.stack([shared]), memory, state.step + 1, key), info

    predict = jax.jit(population.lift(program.predict, backend="loop", in_axes=(0, None)))
    return DataParallel(config, init, step, predict, compressor.message_bytes(shapes), num_params, backend,
                        step_loop)


def train_data_parallel(
    config: DataParallelConfig,
    model: nn.Module,
    dataset: ImageDataset,
    *,
    eval_split: str = "test",
    progress: bool = True,
    desc: str | None = None,
    checkpointer: Checkpointer | None = None,
) -> dict:
    """Trains with synchronous SGD and evaluates the shared model every ``eval_every`` steps.

    Returns :func:`jaxcomm.network.fit`'s dict (its ``avg_accuracy`` and
    collective accuracies are the one model's accuracy) plus ``system`` (the
    :class:`DataParallel`, with its byte counts).
    """
    system = make_data_parallel(config, model, image_shape=dataset.train.images.shape[1:],
                                num_classes=dataset.num_classes)
    evaluator = network.accuracy_evaluator(getattr(dataset, eval_split))
    out = network.fit(system, network.network_data(dataset, config), evaluator, progress=progress, desc=desc,
                      checkpointer=checkpointer)
    return out | {"system": system}
