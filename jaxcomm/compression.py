"""Gradient compressors as pure, composable transforms, with exact byte counts.

The baselines thesis ch. 2 argues against compress what distributed SGD sends:
the gradients. A compressor here is built in three layers:

* a **vector compressor** (:class:`VectorCompressor`) maps one flat float32
  vector ``v [d]`` to its decompressed estimate ``v_hat [d]`` and says how many
  bytes the message carrying it takes: :func:`top_k`, :func:`random_k`,
  :func:`sign`, :func:`qsgd`, :func:`natural`, :func:`identity`, and
  :func:`induced`, which makes an unbiased code of a biased one (Horvath &
  Richtarik 2021);
* :func:`layerwise` applies one to every leaf of a gradient pytree separately
  (a scale, a k, a norm per tensor: how toolkits compress), :func:`whole` to the
  whole model flattened into one vector;
* :func:`error_feedback` wraps either: the node compresses ``g + e`` and keeps
  the residual ``e' = g + e - C(g + e)`` for the next step (Seide et al. 2014;
  Karimireddy et al. 2019).

:func:`adacomp` (Chen et al. 2018) is a whole compressor of its own: its
selection reads the residual and the new gradient separately, so its residual
is part of the code, not an :func:`error_feedback` wrapper, and how many values
it sends depends on the data (its state counts the bytes it sent:
:class:`SentBytes`).

A :class:`Compressor` is optax-like: ``init(params) -> state`` and
``update(grads, state, key) -> (grads_hat, state)``, pure, for ONE node (lift it
to N with :func:`jaxcomm.population.lift`), plus ``message_bytes(params)``, the
exact size of one node's message for a model shaped like ``params``: values,
indices and scales, counted as a real encoder would lay them out (for AdaComp,
whose size depends on the data, its largest size).

Byte conventions (float32 values and scales, int32 indices and counts, bits packed):

==============  =========================================================
top-k           k x (4 value + 4 index) bytes
random-k        k x 4 value bytes + 4 bytes of seed (indices re-drawn by
                the receiver from the shared seed)
sign            ceil(d / 8) bytes of sign bits + 4 bytes of scale
QSGD, s levels  ceil(d (1 + ceil(log2(s + 1))) / 8) bytes (a sign bit and
                a level in [0, s] per value) + 4 bytes of norm per bucket
                of 512 values
natural         ceil(9 d / 8) bytes (a sign bit and the 8-bit float32
                exponent per value: powers of two need no mantissa)
induced C1, C2  C1's message + C2's message (top-k + random-k at k each:
                8 k + 4 k + 4 bytes)
AdaComp         4 bytes of count + 4 bytes of scale + the smaller of
                n x 4 index + ceil(n / 8) sign bytes (n values sent) and
                ceil(d / 4) bytes of 2-bit ternary codes; unquantised:
                4 bytes of count + the smaller of n x (4 value + 4 index)
                and 4 d. n is data-dependent: ``message_bytes`` is the
                bound at n = d, :class:`SentBytes` what was sent
identity        4 d bytes
==============  =========================================================

per vector: :func:`layerwise` pays the per-vector overhead (scale, seed,
norm, count) once per tensor.

References:
  Stich et al. (2018) "Sparsified SGD with memory"; Alistarh et al. (2017)
  QSGD; Bernstein et al. (2018) signSGD; Karimireddy et al. (2019) EF-SignSGD;
  Chen et al. (2018) "AdaComp: adaptive residual gradient compression for
  data-parallel distributed training", AAAI, arXiv:1712.02679; Horvath et al.
  (2019) "Natural compression for distributed deep learning",
  arXiv:1905.10988; Horvath & Richtarik (2021) "A better alternative to error
  feedback for communication-efficient distributed learning", ICLR,
  arXiv:2006.11077; seeds/004 (layer-by-layer compression).
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
METHODS = ("none", "top_k", "random_k", "sign", "qsgd", "natural", "natural_det", "induced", "adacomp")
FLOAT_BYTES = INDEX_BYTES = SEED_BYTES = COUNT_BYTES = 4
ADACOMP_BINS = {"conv": 50, "dense": 500}
"""AdaComp's bin length L_T by layer kind, the paper's defaults (Chen et al. 2018): 50 for convolutional kernels
(leaves of 3 or more dimensions), 500 for the others (dense kernels, biases, norm scales)."""


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
      name: what it is (:func:`make`'s method), the default name of synchronous SGD with it.
    """

    init: Callable[[PyTree], PyTree]
    update: Callable[[PyTree, PyTree, jax.Array], tuple[PyTree, PyTree]]
    message_bytes: Callable[[PyTree], int]
    name: str = "compressed"


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


def natural(*, stochastic: bool = True) -> VectorCompressor:
    """Natural compression: every entry rounded to a neighbouring power of two, ``sign(v_i) 2^a`` or ``2^(a+1)``.

    With ``|v_i| = 2^a (1 + m)``, ``m`` in ``[0, 1)`` (``a = floor(log2 |v_i|)``), the stochastic code C_nat
    rounds up with probability ``m``, which makes it unbiased with variance ``omega = 1/8`` (Horvath et al.
    2019, arXiv:1905.10988); the deterministic one rounds to the nearer power (up when ``m >= 1/2``): biased,
    contractive with ``||C(v) - v||^2 <= ||v||^2 / 9`` (at ``m = 1/2`` the error is a third of ``|v_i|``).
    Zero stays zero. Either is a sign bit and the float32 exponent, 9 bits per entry.

    Args:
      stochastic: round up at random (unbiased C_nat) or to the nearer power (biased).
    """

    def apply(key, v):
        mantissa, exponent = jnp.frexp(jnp.abs(v))  # |v| = mantissa 2^exponent, mantissa in [1/2, 1)
        low = jnp.ldexp(jnp.ones_like(v), exponent - 1)  # 2^a
        m = 2.0 * mantissa - 1.0  # |v| / 2^a - 1, in [0, 1)
        up = jax.random.bernoulli(key, m) if stochastic else m >= 0.5
        return jnp.sign(v) * jnp.where(up, 2.0 * low, low)

    return VectorCompressor(apply, lambda d: math.ceil(9 * d / 8))


def induced(biased: VectorCompressor, unbiased: VectorCompressor) -> VectorCompressor:
    """The compressor induced by a biased C1 and an unbiased C2: ``C1(v) + C2(v - C1(v))`` (Horvath & Richtarik 2021).

    C2 compresses what C1 left out, so ``E[C_ind(v)] = C1(v) + (v - C1(v)) = v``: unbiased whatever C1 is, with
    variance ``omega (1 - 1/delta)`` for a C1 contractive with ``delta`` (``E||C1(v) - v||^2 <= (1 - 1/delta)
    ||v||^2``) and a C2 of variance ``omega``. The message is both messages (the receiver adds the decodings).

    Args:
      biased: C1, e.g. :func:`top_k`, :func:`sign`, ``natural(stochastic=False)``.
      unbiased: C2, e.g. ``random_k(f, rescale=True)``, :func:`qsgd`, :func:`natural`.
    """

    def apply(key, v):
        first, second = jax.random.split(key)
        kept = biased.apply(first, v)
        return kept + unbiased.apply(second, v - kept)

    return VectorCompressor(apply, lambda d: biased.num_bytes(d) + unbiased.num_bytes(d))


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


class SentBytes(NamedTuple):
    """What a code whose size depends on the data (:func:`adacomp`) has sent, one node's counter in its state.

    Attributes:
      last: int32 ``[]``, bytes of the last message (exact below 2^31 bytes).
      total: float32 ``[]``, bytes of every message so far (a float: a run's total passes 2^31; relative
        rounding 2^-24 an addition).
    """

    last: jax.Array
    total: jax.Array


def sent_bytes(state: PyTree) -> SentBytes | None:
    """The :class:`SentBytes` counter in a compressor's state (:func:`adacomp`'s, with or without its residual),
    or None for a code of fixed size (its bytes are ``message_bytes``)."""
    if isinstance(state, SentBytes):
        return state
    if isinstance(state, ErrorFeedbackState):
        return sent_bytes(state.inner)
    return None


def adacomp_bin_size(shape: tuple[int, ...]) -> int:
    """L_T of a leaf shaped ``shape`` by its kind (:data:`ADACOMP_BINS`): 50 for a convolutional kernel (3 or more
    dimensions, Flax's ``(kh, kw, c_in, c_out)``), 500 for the others."""
    return ADACOMP_BINS["conv" if len(shape) >= 3 else "dense"]


def adacomp_bytes(sent, d: int, *, quantize: bool = True, minimum: Callable = min):
    """Bytes of one AdaComp message sending ``sent`` of ``d`` values (the module's byte table).

    A 4-byte count heads the message (-1 would mark the dense layout); then, quantised, a float32 scale and the
    smaller layout: ``sent`` int32 indices and their sign bits, or a 2-bit ternary code (0, +scale, -scale) for
    every value; unquantised, ``sent`` (value, index) pairs or the ``d`` float32 values.

    Args:
      sent: n, a Python int or an int32 array ``[]`` (then pass ``minimum=jnp.minimum``).
      d: the vector's length.
      quantize: sent values as sign x scale (AdaComp's code) or as float32.
      minimum: ``min`` or ``jnp.minimum``.
    """
    if quantize:
        return COUNT_BYTES + FLOAT_BYTES + minimum(INDEX_BYTES * sent + (sent + 7) // 8, (d + 3) // 4)
    return COUNT_BYTES + minimum((FLOAT_BYTES + INDEX_BYTES) * sent, FLOAT_BYTES * d)


def adacomp_select(g: jax.Array, r: jax.Array, bin_size: int) -> tuple[jax.Array, jax.Array, jax.Array]:
    """AdaComp's selection in one vector (Chen et al. 2018, Algorithm 1).

    ``G = r + g`` (the residual plus the new gradient) and ``H = G + g``; the vector is cut into bins of
    ``bin_size`` consecutive values (the last one shorter), ``g_max`` is the largest ``|G|`` of each bin, and
    every value whose ``|H| >= g_max`` of its bin is sent: a value the new gradient pushes further is sent
    sooner, the bin's largest residue itself stays when the gradient turns back. A value whose ``G`` is 0 is not
    sent (it decodes to 0 either way; an all-zero bin would otherwise send all of its values).

    Args:
      g: ``[d]`` the gradient.
      r: ``[d]`` the residual (zeros without memory).
      bin_size: L_T.

    Returns:
      ``G [d]``, ``send [d]`` (bool), ``g_max [ceil(d / bin_size)]``.
    """
    d = g.shape[0]
    rows = -(-d // bin_size)
    binned = lambda x: jnp.pad(x, (0, rows * bin_size - d)).reshape(rows, bin_size)
    G = r + g
    H = G + g
    g_max = jnp.max(jnp.abs(binned(G)), axis=1)
    send = (jnp.abs(binned(H)) >= g_max[:, None]).reshape(-1)[:d] & (G != 0)
    return G, send, g_max


def adacomp(bin_size: int | None = None, *, quantize: bool = True, per_layer: bool = True,
            feedback: bool = True) -> Compressor:
    """AdaComp, adaptive residual gradient compression (Chen et al. 2018, arXiv:1712.02679).

    Every step each tensor (``per_layer``) or the whole model is selected by :func:`adacomp_select` (bins of
    L_T values, a value sent when ``|G + g| >= max |G|`` of its bin) and the sent values are quantised to
    ``sign(G) x scale``, one float per message: the mean of the message's bin maxima ``g_max`` (the scale of a
    public MXNet re-implementation, contrib ``ada_comp``); what is not sent, and the quantisation error of what
    is, stays in the residual: ``r' = G - sent``. How many values go is the data's: the residual grows
    until a value passes its bin's threshold. Bytes: :func:`adacomp_bytes`; the state's :class:`SentBytes`
    counts what was sent, ``message_bytes`` is the largest message (every value sent).

    Args:
      bin_size: L_T for every tensor; None: by layer kind (:func:`adacomp_bin_size`: 50 convolutional, 500
        else). Bins never cross tensors, also with ``per_layer=False``.
      quantize: sent values as ``sign x scale`` (the paper) or as float32 (``G`` itself).
      per_layer: one message (count, scale) per tensor, or one for the whole model.
      feedback: keep the residual (the paper); False: no memory (``G = g``, ``H = 2 g``: a value is sent when
        ``|g| >= max |g| / 2`` of its bin and the rest is dropped), an ablation.

    Returns:
      a :class:`Compressor` whose state is ``ErrorFeedbackState(residual, SentBytes)`` (``SentBytes`` alone
      without feedback).
    """

    def bins(shape):
        return bin_size or adacomp_bin_size(shape)

    def init(params):
        counter = SentBytes(jnp.zeros((), jnp.int32), jnp.zeros((), jnp.float32))
        if not feedback:
            return counter
        return ErrorFeedbackState(jax.tree_util.tree_map(lambda p: jnp.zeros(jnp.shape(p), jnp.float32), params),
                                  counter)

    def encode(group):
        """One message of selected vectors [(G, send, g_max), ...] -> (decoded vectors, bytes)."""
        scale = jnp.mean(jnp.concatenate([g_max for _, _, g_max in group]))
        out = [jnp.where(send, jnp.sign(G) * scale if quantize else G, 0.0) for G, send, _ in group]
        count = sum(jnp.sum(send, dtype=jnp.int32) for _, send, _ in group)
        return out, adacomp_bytes(count, sum(G.shape[0] for G, _, _ in group), quantize=quantize,
                                  minimum=jnp.minimum)

    def update(grads, state, key):
        leaves, treedef = jax.tree_util.tree_flatten(grads)
        residuals = jax.tree_util.tree_leaves(state.residual) if feedback else [jnp.zeros(leaf.shape, jnp.float32)
                                                                               for leaf in leaves]
        selected = [adacomp_select(leaf.reshape(-1).astype(jnp.float32), r.reshape(-1), bins(leaf.shape))
                    for leaf, r in zip(leaves, residuals, strict=True)]
        out, nbytes = [], jnp.zeros((), jnp.int32)
        for group in ([[s] for s in selected] if per_layer else [selected]):
            decoded, size = encode(group)
            out, nbytes = out + decoded, nbytes + size
        counter = sent_bytes(state)
        counter = SentBytes(nbytes, counter.total + nbytes.astype(jnp.float32))
        sent = jax.tree_util.tree_unflatten(treedef, [o.reshape(leaf.shape) for o, leaf in zip(out, leaves,
                                                                                               strict=True)])
        if not feedback:
            return sent, counter
        residual = [(G - o).reshape(leaf.shape) for (G, _, _), o, leaf in zip(selected, out, leaves,
                                                                               strict=True)]
        return sent, ErrorFeedbackState(jax.tree_util.tree_unflatten(treedef, residual), counter)

    def message_bytes(params):
        sizes = [math.prod(jnp.shape(leaf)) for leaf in jax.tree_util.tree_leaves(params)]
        groups = [[d] for d in sizes] if per_layer else [sizes]
        return sum(adacomp_bytes(sum(group), sum(group), quantize=quantize) for group in groups)

    return Compressor(init, update, message_bytes)


def vector_compressor(method: str, *, fraction: float = 0.01, levels: int = 4) -> VectorCompressor:
    """The vector code of ``method`` (one of :data:`METHODS` but "adacomp", which is no vector code: its residual
    is part of it, :func:`adacomp`)."""
    check(method, fraction=fraction, levels=levels, per_layer=True, feedback=False)
    require(method != "adacomp", "compression", "a vector code (adacomp keeps a residual: use make)", method)
    return {"none": identity, "top_k": lambda: top_k(fraction), "random_k": lambda: random_k(fraction),
            "sign": sign, "qsgd": lambda: qsgd(levels), "natural": natural,
            "natural_det": lambda: natural(stochastic=False),
            "induced": lambda: induced(top_k(fraction), random_k(fraction, rescale=True))}[method]()


def make(method: str, *, fraction: float = 0.01, levels: int = 4, per_layer: bool = True,
         feedback: bool = True, bin_size: int | None = None) -> Compressor:
    """A whole compressor from its description (what configs hold).

    Args:
      method: one of :data:`METHODS`: "natural" is unbiased C_nat, "natural_det" its biased rounding
        (:func:`natural`); "induced" is top-k + rescaled random-k of what top-k left, each keeping k =
        :func:`num_kept` ``(fraction, d)`` (:func:`induced`); "adacomp" is :func:`adacomp`.
      fraction: k / d of "top_k", "random_k" and of both halves of "induced".
      levels: s of "qsgd".
      per_layer: per tensor (:func:`layerwise`) or the whole model as one vector (:func:`whole`).
      feedback: wrap in :func:`error_feedback` (ignored by "none"); "adacomp" keeps its own residual, False
        drops it.
      bin_size: L_T of "adacomp" (None: 50 for convolutional kernels, 500 else).
    """
    check(method, fraction=fraction, levels=levels, per_layer=per_layer, feedback=feedback, bin_size=bin_size)
    if method == "adacomp":
        return adacomp(bin_size, per_layer=per_layer, feedback=feedback)._replace(name="adacomp")
    vector = vector_compressor(method, fraction=fraction, levels=levels)
    compressor = layerwise(vector) if per_layer else whole(vector)
    compressor = error_feedback(compressor) if feedback and method != "none" else compressor
    return compressor._replace(name=method)


def check(method: str, *, fraction: float, levels: int, per_layer: bool, feedback: bool,
          bin_size: int | None = None) -> None:
    """Raises ValueError naming the first bad field of a compressor description."""
    require(method in METHODS, "compression", f"one of {METHODS}", method)
    require(is_real(fraction) and 0 < fraction <= 1, "fraction", "a number in (0, 1]", fraction)
    require(is_int(levels) and levels >= 1, "levels", "an integer >= 1", levels)
    require(isinstance(per_layer, bool), "per_layer", "True or False", per_layer)
    require(isinstance(feedback, bool), "feedback", "True or False", feedback)
    require(bin_size is None or (is_int(bin_size) and bin_size >= 1), "bin_size", "None or an integer >= 1",
            bin_size)
