"""Random draws by name: two methods that share a draw are paired, whatever else each draws.

Every method on the classifier kit splits a step's key the same way (:func:`step_keys`): the next
step's key, then the draws of Algorithm 2 (consume, broadcast), the local minibatch (sample), the
nodes' own keys (dropout), and, only where a run has them, failures and augmentation, in the order
the chapter-2 network always drew them (its golden runs are unchanged). So an isolated network,
synchronous SGD, local SGD and codistillation with the same seed draw the same minibatches.

A draw beyond these comes from :func:`named`, ``fold_in`` of the step's key with the stream's
name: it changes no key of :func:`step_keys`, so adding one to a method leaves every other
method's results bit-identical.

References:
  optax / flax practice (``jax.random.fold_in`` with named constants); STYLE.md item 16.
"""

from __future__ import annotations

import zlib
from typing import NamedTuple

import jax


class InitKeys(NamedTuple):
    """A run's initial keys (``split(key, 3)``). Attributes: nodes: the models' initialisation; run: the first
    step's key; graph: a time-varying graph's."""

    nodes: jax.Array
    run: jax.Array
    graph: jax.Array


class StepKeys(NamedTuple):
    """One step's draws. Attributes: next: the next step's key; consume, broadcast: Algorithm 2's Bernoulli
    draws; sample: the local minibatch rows; nodes: split into each node's key; failures, augment: None unless
    the run has failures or augmentation."""

    next: jax.Array
    consume: jax.Array
    broadcast: jax.Array
    sample: jax.Array
    nodes: jax.Array
    failures: jax.Array | None
    augment: jax.Array | None


def init_keys(key: jax.Array) -> InitKeys:
    """The keys of a run's initial state from its seed's key."""
    return InitKeys(*jax.random.split(key, 3))


def step_keys(key: jax.Array, *, failures: bool = False, augment: bool = False) -> StepKeys:
    """The named draws of one step from the step's key (the state's ``key``).

    Failures and augmentation take their keys from the next-key chain only when a run has them, so runs
    without them keep their draws.
    """
    key, consume, broadcast, sample, nodes = jax.random.split(key, 5)
    k_fail = k_augment = None
    if failures:
        key, k_fail = jax.random.split(key)
    if augment:
        key, k_augment = jax.random.split(key)
    return StepKeys(key, consume, broadcast, sample, nodes, k_fail, k_augment)


def stream_id(name: str) -> int:
    """A stable 31-bit number of a stream's name (CRC-32): the same in every process and version."""
    return zlib.crc32(name.encode()) & 0x7FFFFFFF


def named(key: jax.Array, name: str) -> jax.Array:
    """The key of stream ``name`` of a step (or of a run's initial key): ``fold_in(key, stream_id(name))``.

    E.g. ``named(state.key, "compress")`` for a gradient compressor's draws, ``named(state.key, "sparta")``
    for a sparse-averaging mask. It changes no other draw.
    """
    return jax.random.fold_in(key, stream_id(name))
