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
compressed messages) and every node takes the same Adam step of the shared
model, as every worker of a data-parallel job does. BatchNorm statistics are
averaged the same way. Without compression this is exactly single-model
training on the concatenated ``N x B`` batch (tested, for models without batch
statistics).

It is written on the kit (:class:`jaxcomm.kit.Communicator`'s gradients hook,
between every node's backward pass and its update) and reads a
:class:`jaxcomm.kit.RunConfig` (nodes, shards, batch, optimiser and its
swept learning rate, schedule, augmentation, compute dtype);
:func:`sync_sgd` makes it a method (:class:`jaxcomm.methods.Method`).
"""

from __future__ import annotations

import dataclasses

import flax.linen as nn
import jax
import optax

from jaxcomm import compression, driver, kit, ledger, methods, pace, population, powersgd, streams
from jaxcomm.checkpoint import Checkpointer
from jaxcomm.data import ImageDataset


@dataclasses.dataclass(frozen=True)
class DataParallel(kit.Built):
    """Pure functions of synchronous SGD (a :class:`jaxcomm.kit.Built`); build with :func:`make_data_parallel`. The
    state is a :class:`jaxcomm.kit.NodesState`: every node holds the shared model (the same values on every node,
    as every worker of a data-parallel job does), ``extra`` every node's compressor state (``[N, ...]``, e.g.
    error-feedback residuals).

    Attributes:
      message_bytes: bytes of one node's (compressed) gradient message.
      num_params: P, the model's trainable parameters.
      dense: no compressor: the gradients are all-reduced.
      summed: the compressed messages are summed on the way (a :class:`jaxcomm.powersgd.CollectiveCompressor`: an
        all-reduce of them).
    """

    message_bytes: int = 0
    num_params: int = 0
    dense: bool = True
    summed: bool = False


def traffic_of(num_params: int, message_bytes: int, *, dense: bool, summed: bool) -> tuple[ledger.Round, ...]:
    """Every step, blocking: a ring all-reduce of the dense gradients (``4 P`` bytes) or of PowerSGD's summed factors
    (P, then Q: two collectives), or an all-gather of compressed messages (messages of different supports cannot be
    summed on the way)."""
    if dense:
        return (ledger.Round("allreduce", 4.0 * num_params),)
    if summed:
        return (ledger.Round("allreduce", float(message_bytes), parts=2),)
    return (ledger.Round("allgather", float(message_bytes)),)


def make_data_parallel(config: kit.RunConfig, model: nn.Module, *, image_shape: tuple[int, ...], num_classes: int,
                       compressor: compression.Compressor | powersgd.CollectiveCompressor | None = None,
                       optimizer: optax.GradientTransformation | None = None) -> DataParallel:
    """Builds synchronous SGD of ``model``, a Flax classifier returning ``(logits, features)``, on the kit's nodes:
    the gradients hook (:class:`jaxcomm.kit.Communicator`) compresses every node's gradient and averages them, so
    every node takes the same update of the same model.

    Args:
      config: a :class:`jaxcomm.kit.RunConfig` (nodes, shards, batch, optimiser, schedule, compute dtype).
      model: the shared classifier.
      image_shape: ``(H, W, C)``.
      num_classes: C.
      compressor: each node's gradient compressor (:func:`jaxcomm.compression.make`), or one that compresses all
        nodes' gradients together (:func:`jaxcomm.powersgd.power_sgd`); None: dense gradients, all-reduced.
      optimizer: of the shared model (default Adam at the run's learning rate, data of the step, and schedule).
    """
    n = config.num_nodes
    dense = compressor is None
    compressor = compression.make("none") if dense else compressor
    summed = isinstance(compressor, powersgd.CollectiveCompressor)
    pop = kit.nodes(config, model, image_shape=image_shape, num_classes=num_classes, optimizer=optimizer,
                    waits=pace.LOCKSTEP)
    compress = None if summed else population.lift(compressor.update, backend=pop.backend)

    def memory(nodes: population.NodeState, key: jax.Array):
        shared, key = population.node(nodes.params, 0), streams.named(key, "compressor")
        if summed:
            return compressor.init(shared, n, key)
        return population.init_population(lambda _: compressor.init(shared), key, n, backend="vmap")

    def all_reduce(grads, state: kit.NodesState, ctx: kit.Context):
        if summed:
            grad, residual = compressor.reduce(grads, state.extra)
        else:
            sent, residual = compress(grads, state.extra, jax.random.split(streams.named(ctx.key, "compress"), n))
            grad = kit.mean_of_nodes(sent)  # the all-reduce
        return grad, state._replace(extra=residual)

    message_bytes = compressor.message_bytes(jax.eval_shape(pop.init_node, jax.random.PRNGKey(0)).params)
    built = pop.built_with(kit.one_model(n, init=memory, reduce=all_reduce,
                                         traffic=traffic_of(pop.num_params, message_bytes, dense=dense, summed=summed)))
    # one model per run: 8 sync SGD runs vmapped ran 2.11x one by one, run by run 1.40x (results/benchmark/sweep_arms/;
    # compressors and PowerSGD share the structure, not measured)
    return built.extended(DataParallel, message_bytes=message_bytes, num_params=pop.num_params, dense=dense,
                          summed=summed, sweep_mode="population")


def sync_sgd(compressor: compression.Compressor | powersgd.CollectiveCompressor | None = None, *,
             name: str | None = None) -> methods.Method:
    """Synchronous SGD as a method (:class:`jaxcomm.methods.Method`): one shared model, every node's gradient
    (compressed by ``compressor``: :func:`jaxcomm.compression.make`, or :func:`jaxcomm.powersgd.power_sgd`; None:
    dense) averaged every step; scored by the shared model's accuracy."""

    def build(config, model, *, image_shape, num_classes):
        return make_data_parallel(config, model, image_shape=image_shape, num_classes=num_classes,
                                  compressor=compressor)

    dense = compressor is None
    return methods.Method(name or ("sync_sgd" if dense else f"{compressor.name}_sgd"), build,
                          family="sync" if dense else "compressed", score="model")


def train_data_parallel(
    config: kit.RunConfig,
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
