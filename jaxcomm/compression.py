"""Gradient compressors as pure, composable transforms, with exact byte counts.

The baselines thesis ch. 2 argues against compress what distributed SGD sends:
the gradients. A compressor here is built in three layers:

* a **vector compressor** (:class:`VectorCompressor`) maps one flat float32
  vector ``v [d]`` to its decompressed estimate ``v_hat [d]`` and says how many
  bytes the message carrying it takes: :func:`top_k`, :func:`random_k`,
  :func:`sign`, :func:`qsgd`, :func:`identity`;
* :func:`layerwise` applies one to every leaf of a gradient pytree separately
  (a scale, a k, a norm per tensor: how toolkits compress), :func:`whole` to the
  whole model flattened into one vector;
* :func:`error_feedback` wraps either: the node compresses ``g + e`` and keeps
  the residual ``e' = g + e - C(g + e)`` for the next step (Seide et al. 2014;
  Karimireddy et al. 2019).

A :class:`Compressor` is optax-like: ``init(params) -> state`` and
``update(grads, state, key) -> (grads_hat, state)``, pure, for ONE node (lift it
to N with :func:`jaxcomm.population.lift`), plus ``message_bytes(params)``, the
exact size of one node's message for a model shaped like ``params``: values,
indices and scales, counted as a real encoder would lay them out.

Byte conventions (float32 values and scales, int32 indices, bits packed):

==============  =========================================================
top-k           k x (4 value + 4 index) bytes
random-k        k x 4 value bytes + 4 bytes of seed (indices re-drawn by
                the receiver from the shared seed)
sign            ceil(d / 8) bytes of sign bits + 4 bytes of scale
QSGD, s levels  ceil(d (1 + ceil(log2(s + 1))) / 8) bytes (a sign bit and
                a level in [0, s] per value) + 4 bytes of norm per bucket
                of 512 values
identity        4 d bytes
==============  =========================================================

per vector: :func:`layerwise` pays the per-vector overhead (scale, seed,
norm) once per tensor.

References:
  Stich et al. (2018) "Sparsified SGD with memory"; Alistarh et al. (2017)
  QSGD; Bernstein et al. (2018) signSGD; Karimireddy et al. (2019) EF-SignSGD;
  seeds/004 (layer-by-layer compression).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
from jax.flatten_util import ravel_pytree

from jaxcomm.validation import is_int, is_real, require

PyTree = Any
METHODS = ("none", "top_k", "random_k", "sign", "qsgd")
FLOAT_BYTES = INDEX_BYTES = SEED_BYTES = 4


class VectorCompressor(NamedTuple):
    """A lossy code for one flat vector.

    Attributes:
      apply: ``apply(key, v [d]) -> v_hat [d]``, the receiver's decoded estimate.
      num_bytes: ``num_bytes(d) -> int``, the size of the message for a length-d vector.
    """

    apply: Callable[[jax.Array, jax.Array], jax.Array]
    num_bytes: Callable[[int], int]


class Compressor(NamedTuple):
    """A gradient compressor of one node, optax-style.

    Attributes:
      init: ``init(params) -> state``.
      update: ``update(grads, state, key) -> (grads_hat, state)``, pure.
      message_bytes: ``message_bytes(params) -> int``, bytes of one message.
    """

    init: Callable[[PyTree], PyTree]
    update: Callable[[PyTree, PyTree, jax.Array], tuple[PyTree, PyTree]]
    message_bytes: Callable[[PyTree], int]


def num_kept(fraction: float, d: int) -> int:
    """k = the number of values top-k and random-k keep of ``d``: ``round(fraction d)``, at least 1."""
    return max(1, min(d, round(fraction * d)))


def identity() -> VectorCompressor:
    """No compression: the dense float32 vector."""
    return VectorCompressor(lambda key, v: v, lambda d: FLOAT_BYTES * d)


def top_k(fraction: float) -> VectorCompressor:
    """Keeps the k = :func:`num_kept` entries of largest magnitude, zeroes the rest (biased)."""

    def apply(key, v):
        _, keep = jax.lax.top_k(jnp.abs(v), num_kept(fraction, v.shape[0]))
        return jnp.zeros_like(v).at[keep].set(v[keep])

    return VectorCompressor(apply, lambda d: num_kept(fraction, d) * (FLOAT_BYTES + INDEX_BYTES))


def random_k(fraction: float, *, rescale: bool = False) -> VectorCompressor:
    """Keeps k = :func:`num_kept` entries chosen uniformly without replacement.

    Args:
      fraction: k / d.
      rescale: multiply the kept entries by d / k, which makes the estimate
        unbiased at the price of d / k times the variance; off under error
        feedback, which corrects the bias itself (Stich et al. 2018).
    """

    def apply(key, v):
        d = v.shape[0]
        k = num_kept(fraction, d)
        _, keep = jax.lax.top_k(jax.random.uniform(key, (d,)), k)  # k distinct uniform indices
        scale = d / k if rescale else 1.0
        return jnp.zeros_like(v).at[keep].set(scale * v[keep])

    return VectorCompressor(apply, lambda d: num_kept(fraction, d) * FLOAT_BYTES + SEED_BYTES)


def sign() -> VectorCompressor:
    """``(||v||_1 / d) sign(v)``: one bit per entry and one scale (Karimireddy et al. 2019)."""

    def apply(key, v):
        return jnp.mean(jnp.abs(v)) * jnp.where(v >= 0, 1.0, -1.0).astype(v.dtype)

    return VectorCompressor(apply, lambda d: math.ceil(d / 8) + FLOAT_BYTES)


def qsgd(levels: int, *, bucket: int = 512) -> VectorCompressor:
    """QSGD with ``s = levels``: ``||u||_2 sign(v_i) xi_i / s``, xi_i stochastic rounding of ``s |v_i| / ||u||_2``.

    ``u`` is the bucket of ``bucket`` consecutive entries holding ``v_i`` (one norm
    per bucket, as Alistarh et al. do: one norm for a long vector makes the
    variance grow like ``sqrt(d) / s``). Unbiased; each entry is a sign bit and a
    level in ``[0, s]``.
    """
    bits = 1 + math.ceil(math.log2(levels + 1))

    def apply(key, v):
        d = v.shape[0]
        rows = -(-d // bucket)
        u = jnp.pad(v, (0, rows * bucket - d)).reshape(rows, bucket)
        norm = jnp.linalg.norm(u, axis=1, keepdims=True)
        scaled = levels * jnp.abs(u) / jnp.where(norm > 0, norm, 1.0)
        lower = jnp.floor(scaled)
        level = lower + jax.random.bernoulli(key, scaled - lower).astype(v.dtype)
        return (norm * jnp.sign(u) * level / levels).reshape(-1)[:d]

    return VectorCompressor(apply, lambda d: math.ceil(d * bits / 8) + FLOAT_BYTES * -(-d // bucket))


def layerwise(vector: VectorCompressor) -> Compressor:
    """Compresses every leaf (tensor) of the gradient separately; its bytes add up over leaves."""

    def update(grads, state, key):
        leaves, treedef = jax.tree_util.tree_flatten(grads)
        keys = jax.random.split(key, len(leaves))
        out = [vector.apply(k, leaf.reshape(-1)).reshape(leaf.shape) for k, leaf in zip(keys, leaves, strict=True)]
        return jax.tree_util.tree_unflatten(treedef, out), state

    def message_bytes(params):
        return sum(vector.num_bytes(math.prod(jnp.shape(leaf))) for leaf in jax.tree_util.tree_leaves(params))

    return Compressor(lambda params: (), update, message_bytes)


def whole(vector: VectorCompressor) -> Compressor:
    """Compresses the whole gradient flattened into one vector (one k, scale or norm for the model)."""

    def update(grads, state, key):
        flat, unravel = ravel_pytree(grads)
        return unravel(vector.apply(key, flat)), state

    def message_bytes(params):
        return vector.num_bytes(sum(math.prod(jnp.shape(leaf)) for leaf in jax.tree_util.tree_leaves(params)))

    return Compressor(lambda params: (), update, message_bytes)


class ErrorFeedbackState(NamedTuple):
    """Attributes: residual: what compression dropped so far, shaped like the gradient; inner: the wrapped state."""

    residual: PyTree
    inner: PyTree


def error_feedback(compressor: Compressor) -> Compressor:
    """Compresses ``g + e`` and carries the residual ``e' = g + e - C(g + e)`` to the next step."""

    def init(params):
        zeros = jax.tree_util.tree_map(lambda p: jnp.zeros(jnp.shape(p), jnp.float32), params)
        return ErrorFeedbackState(zeros, compressor.init(params))

    def update(grads, state, key):
        corrected = jax.tree_util.tree_map(jnp.add, grads, state.residual)
        sent, inner = compressor.update(corrected, state.inner, key)
        residual = jax.tree_util.tree_map(jnp.subtract, corrected, sent)
        return sent, ErrorFeedbackState(residual, inner)

    return Compressor(init, update, compressor.message_bytes)


def vector_compressor(method: str, *, fraction: float = 0.01, levels: int = 4) -> VectorCompressor:
    """The vector code of ``method`` (one of :data:`METHODS`)."""
    check(method, fraction=fraction, levels=levels, per_layer=True, feedback=False)
    return {"none": identity, "top_k": lambda: top_k(fraction), "random_k": lambda: random_k(fraction),
            "sign": sign, "qsgd": lambda: qsgd(levels)}[method]()


def make(method: str, *, fraction: float = 0.01, levels: int = 4, per_layer: bool = True,
         feedback: bool = True) -> Compressor:
    """A whole compressor from its description (what configs hold).

    Args:
      method: one of :data:`METHODS`.
      fraction: k / d of "top_k" and "random_k".
      levels: s of "qsgd".
      per_layer: per tensor (:func:`layerwise`) or the whole model as one vector (:func:`whole`).
      feedback: wrap in :func:`error_feedback` (ignored by "none").
    """
    check(method, fraction=fraction, levels=levels, per_layer=per_layer, feedback=feedback)
    vector = vector_compressor(method, fraction=fraction, levels=levels)
    compressor = layerwise(vector) if per_layer else whole(vector)
    return error_feedback(compressor) if feedback and method != "none" else compressor


def check(method: str, *, fraction: float, levels: int, per_layer: bool, feedback: bool) -> None:
    """Raises ValueError naming the first bad field of a compressor description."""
    require(method in METHODS, "compression", f"one of {METHODS}", method)
    require(is_real(fraction) and 0 < fraction <= 1, "fraction", "a number in (0, 1]", fraction)
    require(is_int(levels) and levels >= 1, "levels", "an integer >= 1", levels)
    require(isinstance(per_layer, bool), "per_layer", "True or False", per_layer)
    require(isinstance(feedback, bool), "feedback", "True or False", feedback)
