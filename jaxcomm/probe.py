"""Linear probes on frozen features: softmax regression early-stopped on validation accuracy.

The thesis measures learned features by a linear classifier "fully trained using early stopping
on a validation set" (§2.3.3); chapter 2's unsupervised nodes (:mod:`jaxcomm.unsupervised`) and
chapter 4's agents (:mod:`jaxcomm.language`, the probe refit on frozen agents) both use it.
Shapes: ``S`` probes trained side by side (nodes or members), ``M`` training rows, ``F``
features, ``C`` classes.
"""

from __future__ import annotations

import functools
from typing import NamedTuple

import jax
import jax.numpy as jnp
import optax


class ProbeConfig(NamedTuple):
    """The linear classifier's training on frozen features.

    Attributes:
      epochs: passes over the training features; the epoch with the best validation accuracy is
        kept (early stopping with the whole budget as patience).
      batch_size: minibatch of the probe's Adam steps.
      learning_rate: Adam's step size.
    """

    epochs: int = 30
    batch_size: int = 256
    learning_rate: float = 1e-3


DEFAULT_PROBE = ProbeConfig()


class Probe(NamedTuple):
    """A trained linear classifier on raw features: ``logits = features @ weights + bias``.

    Attributes:
      weights: ``[F, C]`` (the features' standardisation folded in).
      bias: ``[C]``.
      best_epoch: ``[] int32`` 1-based epoch kept by early stopping.
      val_accuracy: ``[]`` its validation accuracy (fraction).
      val_curve: ``[epochs]`` validation accuracy after every epoch.
    """

    weights: jax.Array
    bias: jax.Array
    best_epoch: jax.Array
    val_accuracy: jax.Array
    val_curve: jax.Array


def probe_logits(probe: Probe, features: jax.Array) -> jax.Array:
    """``[M, F] -> [M, C]``."""
    return features @ probe.weights + probe.bias


def train_probe(key: jax.Array, train_x: jax.Array, train_y: jax.Array, val_x: jax.Array, val_y: jax.Array, *,
                num_classes: int, config: ProbeConfig = DEFAULT_PROBE) -> Probe:
    """Softmax regression on one node's frozen features, early-stopped on validation accuracy.

    Features are standardised with the training split's mean and standard deviation (the scale
    is folded into the returned weights, so the probe is still linear in the raw features). Adam
    on shuffled minibatches (the remainder of an epoch is dropped); after each epoch the
    validation accuracy is measured and the best epoch's classifier is kept. Pure and jittable;
    ``jax.vmap`` it over nodes (``in_axes=(None, 0, None, 0, None)``).

    Args:
      key: shuffles the minibatches and initialises nothing (weights start at zero).
      train_x: ``[M, F]`` features of the labelled training split.
      train_y: ``[M] int`` its labels.
      val_x: ``[V, F]`` validation features.
      val_y: ``[V] int``.
      num_classes: C.
      config: :class:`ProbeConfig`.

    Returns:
      :class:`Probe`.

    References:
      Lacaille (2018), §2.2.4.1 and §2.3.3 ("fully trained using early stopping on a validation set").
    """
    m, f = train_x.shape
    batch = min(config.batch_size, m)
    steps = m // batch
    mean = jnp.mean(train_x, axis=0)
    scale = 1.0 / (jnp.std(train_x, axis=0) + 1e-6)
    standard = lambda x: (x - mean) * scale
    xs, vs = standard(train_x), standard(val_x)
    targets = jax.nn.one_hot(train_y, num_classes)
    optimizer = optax.adam(config.learning_rate)
    params = (jnp.zeros((f, num_classes)), jnp.zeros((num_classes,)))

    def loss_fn(params, x, y):
        return jnp.mean(optax.softmax_cross_entropy(x @ params[0] + params[1], y))

    def minibatch(carry, rows):
        params, opt_state = carry
        grads = jax.grad(loss_fn)(params, xs[rows], targets[rows])
        updates, opt_state = optimizer.update(grads, opt_state, params)
        return (optax.apply_updates(params, updates), opt_state), None

    def epoch(carry, epoch_key):
        params, opt_state, best, best_acc, best_epoch, index = carry
        order = jax.random.permutation(epoch_key, m)[: steps * batch].reshape(steps, batch)
        (params, opt_state), _ = jax.lax.scan(minibatch, (params, opt_state), order)
        acc = jnp.mean(jnp.argmax(vs @ params[0] + params[1], axis=-1) == val_y)
        better = acc > best_acc
        best = jax.tree_util.tree_map(lambda b, p: jnp.where(better, p, b), best, params)
        carry = (params, opt_state, best, jnp.where(better, acc, best_acc), jnp.where(better, index, best_epoch),
                 index + 1)
        return carry, acc

    init = (params, optimizer.init(params), params, jnp.float32(-1.0), jnp.int32(0), jnp.int32(1))
    (_, _, best, best_acc, best_epoch, _), curve = jax.lax.scan(epoch, init, jax.random.split(key, config.epochs))
    weights = best[0] * scale[:, None]
    bias = best[1] - (mean * scale) @ best[0]
    return Probe(weights, bias, best_epoch, best_acc, curve)


@functools.partial(jax.jit, static_argnames=("num_classes", "config"))
def fit_probes(key, train_x, train_y, val_x, val_y, test_x, *, num_classes: int, config: ProbeConfig = DEFAULT_PROBE):
    """``S`` probes side by side (vmapped), one per feature set, and their probabilities.

    Args:
      key: the minibatches' shuffling key (shared by the S probes: paired).
      train_x: ``[S, M, F]`` features of the labelled training split; ``train_y`` ``[M]`` int.
      val_x: ``[S, V, F]``; ``val_y`` ``[V]`` int (early stopping).
      test_x: ``[S, T, F]``.
      num_classes: C.
      config: :class:`ProbeConfig`.

    Returns:
      ``(probes, val_probs [S, V, C], test_probs [S, T, C])``: the :class:`Probe` leaves have a leading ``S``.
    """
    train = functools.partial(train_probe, num_classes=num_classes, config=config)
    probes = jax.vmap(train, in_axes=(None, 0, None, 0, None))(key, train_x, train_y, val_x, val_y)
    probs = lambda x: jax.nn.softmax(jax.vmap(probe_logits)(probes, x))
    return probes, probs(val_x), probs(test_x)
