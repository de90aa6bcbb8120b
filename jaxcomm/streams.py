"""Random draws by name: every draw is ``fold_in`` of its parent key with its stream's name.

A run's initial key gives the models' initialisation, the first step's key and the graph's key
(:func:`init_keys`); a step's key gives the next step's key, Algorithm 2's draws (consume,
broadcast), the local minibatch (sample), the nodes' own keys (dropout) and, where a run has them,
failures and augmentation (:func:`step_keys`). Each is ``fold_in(key, stream_id(name))``, so no draw
depends on which others a run makes: turning failures or augmentation on leaves every minibatch as it
was, and an isolated network, synchronous SGD, local SGD, codistillation and sparse averaging with the
same seed draw the same minibatches.

A method's own draw comes from :func:`named` the same way (e.g. ``named(state.key, "sparta")``): it
changes no key of :func:`step_keys`, so adding one to a method leaves every other method's results
bit-identical.

Before commit "draws by name" (issue 57), :func:`init_keys` and :func:`step_keys` split their key
positionally (``split(key, 3)``, ``split(key, 5)`` with failures and augmentation chained off the next
key); results drawn so are listed in ``results/PROVENANCE.md``.

References:
  optax / flax practice (``jax.random.fold_in`` with named constants); STYLE.md item 16.
"""

from __future__ import annotations

import zlib
from typing import NamedTuple

import jax


class InitKeys(NamedTuple):
    """A run's initial keys, each its own stream. Attributes: nodes: the models' initialisation; run: the first
    step's key; graph: the graph's (a random topology's draw, a time-varying graph's)."""

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
    """The keys of a run's initial state from its seed's key, each ``named(key, field)``."""
    return InitKeys(*(named(key, f"init/{field}") for field in InitKeys._fields))


def step_keys(key: jax.Array, *, failures: bool = False, augment: bool = False) -> StepKeys:
    """The named draws of one step from the step's key (the state's ``key``), each ``named(key, field)``;
    ``failures`` and ``augment`` None where the run has none (drawing them changes no other key)."""
    drawn = {field: named(key, f"step/{field}") for field in ("next", "consume", "broadcast", "sample", "nodes")}
    return StepKeys(**drawn, failures=named(key, "step/failures") if failures else None,
                    augment=named(key, "step/augment") if augment else None)


def stream_id(name: str) -> int:
    """A stable 31-bit number of a stream's name (CRC-32): the same in every process and version."""
    return zlib.crc32(name.encode()) & 0x7FFFFFFF


def named(key: jax.Array, name: str) -> jax.Array:
    """The key of stream ``name`` of a step (or of a run's initial key): ``fold_in(key, stream_id(name))``.

    E.g. ``named(state.key, "compress")`` for a gradient compressor's draws, ``named(state.key, "sparta")``
    for a sparse-averaging mask. It changes no other draw.
    """
    return jax.random.fold_in(key, stream_id(name))
