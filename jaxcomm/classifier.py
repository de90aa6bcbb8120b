"""The classifier kit: what every population of classifier nodes on shards shares.

The chapter-2 network and every baseline it is compared with (synchronous SGD and its compressors,
PowerSGD, local SGD / DiLoCo, codistillation, gossip, sparse averaging, a researcher's own method)
train Flax classifiers ``model(x [B, H, W, C], train=bool) -> (logits [B, C], features [B, F])`` on
the same N disjoint shards. This module is those shared parts, written once:

* one node's model functions: :func:`apply_classifier` (optionally in a lower precision,
  :func:`in_dtype`), :func:`classifier_init`, :func:`classifier_loss`, :func:`classifier_predict`;
* the shards on the device (:class:`ShardData`, :func:`shard_data`) and ONE minibatch draw
  (:func:`local_batches`, :func:`gather`, :func:`minibatch`: sample from the own shard, gather uint8
  images, augment, one-hot), its keys from named streams (:mod:`jaxcomm.streams`);
* evaluation of any ``predict`` function in padded batches (:func:`predict_in_batches`,
  :func:`evaluate`: node average and collective decision), on test and validation splits;
* ONE backend chooser that measures the actual step for every system (:func:`choose_backend`);
* the glue that makes a system of stacked classifier models a :class:`jaxcomm.driver.System`
  (:func:`evaluated_system`).
"""

from __future__ import annotations

import functools
import sys
from collections.abc import Callable, Mapping, Sequence
from typing import Any, NamedTuple

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import optax

from jaxcomm import compiling, decision, driver, pace, population, speed, validation
from jaxcomm.data import ImageDataset, partition
from jaxcomm.exchange import cross_entropy
from jaxcomm.models import to_unit_float

# --------------------------------------------------------------------------- one node's model


def apply_classifier(model: nn.Module, params, model_state, x: jax.Array, *, train: bool, key=None):
    """``((logits [B, C], features [B, F]), model_state)`` of a classifier on float images ``x``.

    In training, mutable collections (BatchNorm's ``batch_stats``) are updated
    and returned; ``key`` feeds the "dropout" rng.
    """
    variables = {"params": params, **model_state}
    rngs = {"dropout": key} if key is not None else None
    mode = train_mode(model, train)
    if train and model_state:
        return model.apply(variables, x, rngs=rngs, mutable=list(model_state), **mode)
    return model.apply(variables, x, rngs=rngs, **mode), model_state


CLASSIFIER_CONTRACT = ("a Flax module whose __call__(self, x) (optionally with train: bool) returns (logits [B, C], "
                       "features [B, F])")


def train_mode(model: nn.Module, train: bool) -> dict:
    """``{"train": train}`` for a model whose ``__call__`` takes it; ``{}`` for one without (it behaves alike in
    training and evaluation)."""
    return {"train": train} if validation.takes_keyword(type(model).__call__, "train") else {}


def check_classifier(model: nn.Module, image_shape: tuple[int, ...]) -> None:
    """Raises TypeError, before anything compiles, naming what a classifier must be (:data:`CLASSIFIER_CONTRACT`)
    when ``model`` on a ``[1, *image_shape]`` batch does not return ``(logits [1, C], features [1, F])``."""
    dummy = jax.ShapeDtypeStruct((1, *image_shape), jnp.float32)
    try:
        variables = jax.eval_shape(model.init, jax.random.PRNGKey(0), dummy)
        out = jax.eval_shape(lambda v, x: model.apply(v, x, **train_mode(model, False)), variables, dummy)
    except TypeError as error:
        raise TypeError(f"{type(model).__name__} is not a jaxcomm classifier ({error}); expected "
                        f"{CLASSIFIER_CONTRACT}") from error
    ok = (isinstance(out, tuple | list) and len(out) == 2
          and all(hasattr(a, "shape") and len(a.shape) == 2 and a.shape[0] == 1 for a in out))
    if not ok:
        got = jax.tree_util.tree_map(lambda a: tuple(a.shape), out)
        raise TypeError(f"{type(model).__name__} returns {got} on a [1, {', '.join(map(str, image_shape))}] batch; "
                        f"expected {CLASSIFIER_CONTRACT}")


def in_dtype(apply: Callable, dtype) -> Callable:
    """``apply(params, model_state, x, **kw) -> (outputs, model_state)`` computing in ``dtype`` (mixed precision).

    Float parameters and the input are cast to ``dtype`` on the way in and the outputs back to float32 on
    the way out, so the caller keeps float32 parameters (their gradients come back float32 through the
    cast), model state and optimiser state, as flax's ``dtype``/``param_dtype`` split does. Model state
    (BatchNorm statistics) is not cast: flax reduces it in float32.
    """
    dtype = jnp.dtype(dtype)
    if dtype == jnp.float32:
        return apply

    def cast(tree, to):
        return jax.tree.map(lambda a: a.astype(to) if jnp.issubdtype(a.dtype, jnp.floating) else a, tree)

    def apply_in(params, model_state, x, **kwargs):
        outputs, model_state = apply(cast(params, dtype), model_state, x.astype(dtype), **kwargs)
        return cast(outputs, jnp.float32), model_state

    return apply_in


def learning_rate(config, peak: float | jax.Array | None = None) -> float | jax.Array | optax.Schedule:
    """Adam's step size for ``config.lr_schedule``: a constant, or a schedule of the update count.

    Reads ``learning_rate`` (unless ``peak`` replaces it, e.g. a sweep's traced value),
    ``lr_schedule`` and ``num_steps`` of a :class:`jaxcomm.network.NetworkConfig` (or any config with those fields).
    """
    peak = config.learning_rate if peak is None else peak
    if config.lr_schedule == "cosine":
        return optax.cosine_decay_schedule(peak, decay_steps=max(config.num_steps, 1))
    return peak


def classifier_init(model: nn.Module, optimizer: optax.GradientTransformation,
                    image_shape: tuple[int, ...]) -> Callable[[jax.Array], population.NodeState]:
    """``init(key) -> NodeState`` of one Flax classifier with ``optimizer``'s state (the model checked first:
    :func:`check_classifier`)."""
    check_classifier(model, image_shape)
    try:
        hash(model)  # flax modules are hashable by their fields: equal models share one compiled init
        model_init = functools.partial(_model_variables(), model, image_shape=tuple(image_shape))
    except TypeError:  # a field that is not hashable (a list): compiled once for this build
        model_init = compiling.nestable(functools.partial(_variables, model, image_shape=tuple(image_shape)))

    def init_node(key: jax.Array) -> population.NodeState:
        variables = dict(model_init(key))
        params = variables.pop("params")
        return population.NodeState(params, variables, optimizer.init(params))

    return init_node


def _variables(model: nn.Module, key: jax.Array, *, image_shape: tuple[int, ...]) -> dict:
    return model.init(key, jnp.zeros((1, *image_shape), jnp.float32))


# One compiled program, shared by every build of an equal model (a method built once per run, one by one, compiles
# it once): op by op, a model's init compiles each initializer's ops eagerly (seconds for the student MLP, ~10 s for
# the CNN on a CPU) and dispatches them again for every run; compiled, the same bits (tests/test_classifier.py).
@functools.cache
def _model_variables() -> Callable:
    return compiling.nestable(_variables, static_argnums=0, static_argnames="image_shape")


def classifier_loss(model: nn.Module, compute_dtype: str = "float32") -> Callable:
    """``loss(params, model_state, images uint8 [B, H, W, C], targets [B, C], key) -> (loss [], (model_state,
    (logits [B, C], features [B, F])))``: one node's cross-entropy on its targets, the forward pass in
    ``compute_dtype``; the shape :func:`jaxcomm.population.make_train_step` takes (aux: the outputs)."""
    apply = in_dtype(functools.partial(apply_classifier, model), compute_dtype)

    def loss_fn(params, model_state, images, targets, key):
        outputs, model_state = apply(params, model_state, to_unit_float(images), train=True, key=key)
        return cross_entropy(outputs[0], targets), (model_state, outputs)

    return loss_fn


def classifier_predict(model: nn.Module, compute_dtype: str = "float32"
                       ) -> Callable[[population.NodeState, jax.Array], jax.Array]:
    """``predict(state, images uint8 [M, H, W, C]) -> probs [M, C]`` of one Flax classifier node, its
    forward pass in ``compute_dtype``."""
    apply = in_dtype(functools.partial(apply_classifier, model), compute_dtype)

    def predict_node(state: population.NodeState, images):
        (logits, _), _ = apply(state.params, state.model_state, to_unit_float(images), train=False)
        return jax.nn.softmax(logits)

    return predict_node


def feature_dim(model: nn.Module, image_shape: tuple[int, ...]) -> int:
    """F, the width of a classifier's features (from shapes only)."""
    dummy = jnp.zeros((1, *image_shape), jnp.float32)
    return jax.eval_shape(lambda: model.apply(model.init(jax.random.PRNGKey(0), dummy), dummy)[1]).shape[-1]


# --------------------------------------------------------------------------- shards and the minibatch draw


class ShardData(NamedTuple):
    """The arrays a step reads, on the device once.

    Attributes:
      images: ``[M, H, W, C] uint8``, the whole training split.
      labels: ``[M] int32``.
      shard_indices: ``[N, S] int32`` rows of node n's shard (padded).
      shard_sizes: ``[N] int32`` real sizes; node n samples positions < size.
      settings: the run's numbers a sweep may vary (:class:`jaxcomm.kit.RunSettings`), float32 scalars.
      pace: the timeline's rows of a run at its own pace (:class:`jaxcomm.pace.Rows`, ``[T, ...]``), read by the
        step one tick at a time: data of the run, so no step carries them, no checkpoint stores them and a sweep
        maps them as it maps the shards; None: lockstep.
    """

    images: jax.Array
    labels: jax.Array
    shard_indices: jax.Array
    shard_sizes: jax.Array
    settings: Any
    pace: Any = None


def shards_of(labels: np.ndarray, config):
    """The config's partition of the training split over its shards (:func:`jaxcomm.data.partition`): one per node,
    or one per client of a config of clients (``config.num_shards``, :attr:`jaxcomm.kit.RunConfig.num_shards`)."""
    return partition(labels, config.num_shards, scheme=config.partition, alpha=config.dirichlet_alpha,
                     seed=config.seed)


def shard_data(dataset: ImageDataset, config, settings: Any) -> ShardData:
    """Partitions the training split into the config's N shards and puts everything on the device."""
    shards = shards_of(dataset.train.labels, config)
    return ShardData(images=jnp.asarray(dataset.train.images, jnp.uint8),
                     labels=jnp.asarray(dataset.train.labels, jnp.int32),
                     shard_indices=jnp.asarray(shards.indices, jnp.int32),
                     shard_sizes=jnp.asarray(shards.sizes, jnp.int32), settings=settings)


def run_data(base: ShardData, labels: np.ndarray, config, settings: Any) -> ShardData:
    """One run's data in a sweep: ``base``'s images and labels (the same objects, shared by every run) with
    ``config``'s shards and ``settings``."""
    shards = shards_of(labels, config)
    return base._replace(shard_indices=jnp.asarray(shards.indices, jnp.int32),
                         shard_sizes=jnp.asarray(shards.sizes, jnp.int32), settings=settings)


def flip_and_crop(key: jax.Array, images: jax.Array, *, pad: int = 4) -> jax.Array:
    """Random horizontal flips and random ``pad``-pixel-padded crops of ``images [B, H, W, C]`` (any dtype)."""
    b, h, w, c = images.shape
    k_flip, k_shift = jax.random.split(key)
    flip = jax.random.bernoulli(k_flip, 0.5, (b,))
    images = jnp.where(flip[:, None, None, None], images[:, :, ::-1], images)
    padded = jnp.pad(images, ((0, 0), (pad, pad), (pad, pad), (0, 0)))
    corner = jax.random.randint(k_shift, (b, 2), 0, 2 * pad + 1)
    crop = lambda image, at: jax.lax.dynamic_slice(image, (at[0], at[1], 0), (h, w, c))  # noqa: E731
    return jax.vmap(crop)(padded, corner)


def augmentation(num_nodes: int) -> Callable[[jax.Array, jax.Array], jax.Array]:
    """``augment(key, images [N, B, H, W, C]) -> images``: every node's own flips and crops."""
    return lambda key, images: jax.vmap(flip_and_crop)(jax.random.split(key, num_nodes), images)


def local_batches(key: jax.Array, data: ShardData, batch_size: int) -> jax.Array:
    """``[N, B]`` training-set rows: each node's minibatch, drawn with replacement from its own shard only."""
    n = data.shard_indices.shape[0]
    position = jax.random.randint(key, (n, batch_size), 0, data.shard_sizes[:, None])
    return jnp.take_along_axis(data.shard_indices, position, axis=1)


def gather(data: ShardData, indices: jax.Array, augment_key: jax.Array | None) -> jax.Array:
    """``[N, B, H, W, C] uint8`` images of rows ``indices [N, B]``, flipped and cropped per node when
    ``augment_key`` is given."""
    images = data.images[indices]
    if augment_key is not None:
        images = augmentation(indices.shape[0])(augment_key, images)
    return images


class Minibatch(NamedTuple):
    """One draw of every node's local minibatch. Attributes: indices ``[N, B] int32`` rows of the training split;
    images ``[N, B, H, W, C] uint8`` (augmented if asked); targets ``[N, B, C] float32`` one-hot labels."""

    indices: jax.Array
    images: jax.Array
    targets: jax.Array


def minibatch(keys, data: ShardData, batch_size: int, num_classes: int) -> Minibatch:
    """THE local minibatch draw: rows from each node's own shard (``keys.sample``), their uint8 images, flipped
    and cropped when ``keys.augment`` is not None, and one-hot targets. ``keys``: a step's
    :class:`jaxcomm.streams.StepKeys`, so every method drawing with the same keys draws the same batches."""
    indices = local_batches(keys.sample, data, batch_size)  # [N, B]
    return Minibatch(indices, gather(data, indices, keys.augment), jax.nn.one_hot(data.labels[indices], num_classes))


# --------------------------------------------------------------------------- evaluation


def predict_in_batches(predict: Callable, models, images: np.ndarray, *, batch_size: int = 1000) -> np.ndarray:
    """Every model's class probabilities on ``images``: ``[N, M, C]`` float32.

    Args:
      predict: ``predict(models, images [m, H, W, C] uint8) -> [N, m, C]`` (a lifted, compiled predict), or an
        object with such a ``predict`` attribute (a :class:`jaxcomm.network.Network`).
      models: the stacked states it reads (leaves ``[N, ...]``).
      images: ``[M, H, W, C] uint8``.
      batch_size: images per call; the last batch is padded so one compiled shape serves all batches.
    """
    predict, m = getattr(predict, "predict", predict), len(images)
    batch_size = min(batch_size, m)
    out = []
    for start in range(0, m, batch_size):
        chunk = images[start:start + batch_size]
        pad = batch_size - len(chunk)
        if pad:
            chunk = np.concatenate([chunk, np.zeros((pad, *chunk.shape[1:]), chunk.dtype)])
        out.append(population.to_host(predict(models, jnp.asarray(chunk)))[:, : batch_size - pad])
    return np.concatenate(out, axis=1)


def evaluate(probs: np.ndarray, labels: np.ndarray, *, reachable: np.ndarray | None = None) -> dict:
    """Accuracies (%) of N nodes' predictions ``probs [N, M, C]`` on ``labels [M]``.

    Args:
      probs: every node's class probabilities.
      labels: true classes.
      reachable: ``[N] bool`` nodes the collective decision may ask (default all).

    Returns:
      ``avg_accuracy`` (mean over all nodes; None when no node is reachable: every one is down),
      ``node_accuracies`` ``[N]``, ``collective_accuracy`` per weighting of :data:`jaxcomm.decision.WEIGHTINGS`
      over the reachable nodes (each None when no node is reachable: there is no collective decision to take),
      and ``reachable`` (how many), all computed from the same predictions.
    """
    probs, labels = jnp.asarray(probs), jnp.asarray(labels)
    mask = None if reachable is None else jnp.asarray(reachable, bool)
    count = len(probs) if mask is None else int(mask.sum())
    if count:
        nodes, collective = decision.accuracies(probs, labels, mask=mask)  # one compiled program a shape
        collective = {w: 100.0 * float(collective[w]) for w in decision.WEIGHTINGS}
    else:  # every node down: no collective decision to take
        nodes, collective = decision.node_accuracies(probs, labels), dict.fromkeys(decision.WEIGHTINGS)
    per_node = 100.0 * np.asarray(nodes)
    return {"avg_accuracy": float(per_node.mean()) if count else None, "node_accuracies": per_node.tolist(),
            "collective_accuracy": collective, "reachable": count}


def split_images(split, also: Mapping[str, Any] | None = None) -> tuple[np.ndarray, Callable]:
    """The images of ``split`` and of the named ``also`` splits in one array (predicted in one pass), and
    ``records(probs [N, M, C], reachable) -> dict``: :func:`evaluate` of ``split`` with each other split's
    metrics under its name. Empty splits are left out."""
    extra = {name: s for name, s in (also or {}).items() if len(s.labels)}
    images = np.concatenate([split.images, *(s.images for s in extra.values())]) if extra else split.images
    ends = np.cumsum([len(split.labels), *(len(s.labels) for s in extra.values())])

    def records(probs: np.ndarray, reachable: np.ndarray | None = None) -> dict:
        record = evaluate(probs[:, : ends[0]], split.labels, reachable=reachable)
        for (name, s), start, end in zip(extra.items(), ends[:-1], ends[1:], strict=True):
            record[name] = evaluate(probs[:, start:end], s.labels, reachable=reachable)
        return record

    return images, records


def splits_of(dataset: ImageDataset, eval_split: str | Sequence[str]) -> tuple[Any, dict[str, Any]]:
    """``(first split, {name: split} of the others)`` of ``eval_split``: "test", "validation", "train", or several
    names, e.g. ``("test", "validation")``; ValueError naming a bad one."""
    names = (eval_split,) if isinstance(eval_split, str) else tuple(eval_split)
    for name in names:
        if name not in ("train", "validation", "test"):
            raise ValueError(f"eval_split={eval_split!r}: {name!r} is not a split; "
                             "expected 'train', 'validation' or 'test'")
    return getattr(dataset, names[0]), {n: getattr(dataset, n) for n in names[1:]}


def progress_postfix(record: dict) -> dict:
    """The average and negentropy-collective accuracies of a record, for a progress bar; at its own pace the
    virtual seconds too (the bar counts ticks)."""
    shown = {}
    if isinstance(record.get("pace"), dict):
        shown["virtual"] = f"{record['pace']['seconds']:.4g}s"
    if record.get("avg_accuracy") is not None:
        shown["avg"] = f"{record['avg_accuracy']:.1f}"
    collective = record.get("collective_accuracy")
    if isinstance(collective, dict) and "negentropy" in collective:
        shown["coll"] = "-" if collective["negentropy"] is None else f"{collective['negentropy']:.1f}"
    return shown


def summarize_info(info):
    """What a step keeps per step: everything but the sample indices (large, and only the step needs them)."""
    return info._replace(indices=info.indices[..., :0])


# --------------------------------------------------------------------------- backends and systems


def node_args(batch_size: int, image_shape: tuple[int, ...], num_classes: int,
              *between: jax.ShapeDtypeStruct) -> tuple[jax.ShapeDtypeStruct, ...]:
    """Shapes of one node's step arguments after its state, as :func:`choose_backend` times them: images
    ``uint8 [B, H, W, C]``, one-hot targets ``[B, C]``, the method's own ``between``, and a raw key ``uint32 [2]``."""
    return (jax.ShapeDtypeStruct((batch_size, *image_shape), jnp.uint8),
            jax.ShapeDtypeStruct((batch_size, num_classes), jnp.float32), *between,
            jax.ShapeDtypeStruct((2,), jnp.uint32))


def choose_backend(config, train: Callable, init: Callable, node_args: Sequence[jax.ShapeDtypeStruct], *,
                   family: str | None = None) -> tuple[str, str, str]:
    """``(backend, step_loop, family)`` for N nodes of ``train(state, *node_args)``: the config's, or where it
    says "auto", measured for this step (:func:`jaxcomm.speed.step_timer`; the cache keeps the answer) or read
    from the benchmark table when autotuning is off. Every system on the kit chooses here.

    Args:
      config: reads ``num_nodes``, ``batch_size``, ``backend`` and ``step_loop``.
      train: one node's step ``train(state, *args) -> (state, aux)``, unlifted.
      init: ``init(key) -> state`` of one node.
      node_args: shapes and dtypes of one node's other arguments (keys as ``uint32 [2]``).
      family: the speed family (None: measured from what ``train`` computes).
    """
    n = config.num_nodes
    family = family or speed.family_of(train, jax.eval_shape(init, jax.random.PRNGKey(0)), *node_args)
    timer = (speed.step_timer(train, init, n, node_args)
             if speed.autotune_enabled() and population.AUTO in (config.backend, config.step_loop) else None)
    backend, step_loop = speed.choose(
        family, n, batch_size=config.batch_size, backend=config.backend, step_loop=config.step_loop, timer=timer,
        planned_steps=config.num_steps,
        report=lambda line: print(f"jaxcomm: auto chose {line} for {n} nodes ({family} speed family)", file=sys.stderr,
                                   flush=True))
    return backend, step_loop, family


# The "eager" and "dispatch" step loops hold node states apart (one set of buffers per node, as the thesis' N
# models) within a chunk: the "loop" and "unrolled" lifts then update each node where it lies instead of slicing
# and stacking the population (10 CNN nodes unrolled: 1.05x a step, results/benchmark/vs_pytorch/notes.md).
NODES_APART = driver.Layout(lambda state: state._replace(nodes=population.unstack(state.nodes)),
                            lambda state: state._replace(nodes=population.restack(state.nodes)))


def layout_for(backend: str) -> driver.Layout | None:
    """The layout of a system whose state holds its nodes in ``nodes``: node states apart (:data:`NODES_APART`) for
    the "loop" and "unrolled" lifts, the ones that take them so; as it is (None) for any other. A "scan" keeps them
    stacked (:func:`jaxcomm.driver.chunk_runner`)."""
    return NODES_APART if backend in population.APART_BACKENDS else None


def evaluated_system(built, split, models_of: Callable, *, also: Mapping[str, Any] | None = None,
                     extra: Callable | None = None) -> driver.System:
    """A system of classifier models on shards as a :class:`jaxcomm.driver.System`.

    Args:
      built: has ``init``, ``step``, ``predict`` (``predict(models, images) -> [N, M, C]``), ``step_loop`` and
        may have a ``layout`` (:class:`jaxcomm.driver.Layout`); its infos have ``loss [N]`` and ``indices``.
      split: the split whose metrics are the record's (images, labels).
      models_of: ``models_of(state)``: the models evaluated (a population: one shared model, or every node's).
      also: further named splits evaluated in the same pass, under their names.
      extra: ``extra(state, steps_done) -> dict`` merged into each record (e.g. the byte ledger's ``bytes``).
    """
    images, records = split_images(split, also)

    def evaluate_(state, infos, steps_done: int) -> dict:
        probs = predict_in_batches(built.predict, models_of(state), images)
        record = {"loss": pace.taken_mean(population.to_host(infos.loss), state, steps_done), **records(probs)}
        return record | (extra(state, steps_done) if extra is not None else {})

    return driver.System(built.init, built.step, evaluate_, losses=lambda infos: infos.loss,
                         summarize=summarize_info, step_loop=built.step_loop,
                         postfix=progress_postfix, layout=getattr(built, "layout", None))
