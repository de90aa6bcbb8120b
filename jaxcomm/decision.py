"""Collective decision: combine the nodes' predictive distributions into one.

At test time every node sees the same input and outputs a distribution over C
classes; the group answers with a weighted average of those distributions
(thesis Algorithm 3). Four weightings are provided:

- ``"entropy"``: Algorithm 3 exactly as printed. Its normalisation
  ``w_i = -h_i / s`` with ``s = -sum_j h_j`` equals ``h_i / sum_j h_j``, which
  gives MORE weight to LESS confident (higher-entropy) nodes, the opposite of
  what the surrounding text says ("leveraging [entropy's] relationship to
  uncertainty as a confidence level"). Kept literally so the thesis numbers can
  be compared against it.
- ``"negentropy"`` (default): the confident-node reading of the text,
  ``w_i`` proportional to ``log C - h_i``, so a one-hot node has the largest
  weight and a uniform node weight 0.
- ``"mean"``: plain average (bagging-style ensemble).
- ``"vote"``: majority vote; each node contributes ``one_hot(argmax y^i)``.

Weights are computed per example. An optional ``mask`` of reachable nodes
restricts the decision to a subset (the "partial decision" the thesis leaves
to future work): unreachable nodes get weight 0 and the result equals running
on the reachable subset alone.

References:
    Lacaille (2018), §2.2.2.4 "Collective decision making", Algorithm 3.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np

from jaxcomm import compiling

__all__ = [
    "WEIGHTINGS",
    "entropy",
    "node_weights",
    "collective_decision",
    "collective_accuracy",
    "node_accuracies",
    "accuracies",
]

WEIGHTINGS = ("negentropy", "entropy", "mean", "vote")


def entropy(probs: jax.Array, axis: int = -1) -> jax.Array:
    """Shannon entropy in nats, with ``0 log 0 = 0``.

    Gradients are finite at zero probabilities (double-``where``), so it can be
    used inside a loss.

    Args:
        probs: ``[..., C]`` probabilities (any shape; ``axis`` is the class axis).
        axis: axis holding the classes.

    Returns:
        ``[...]`` entropies: ``probs``'s shape without ``axis``.

    References:
        Lacaille (2018), Algorithm 3, line 5: ``h^i = -sum_k y^i_k log y^i_k``.
    """
    return _entropy(_as_float(probs), axis)


# The unchecked cores are jitted so that eager calls compile once per shape
# instead of dispatching many small ops; under an outer jit they are inlined.
@functools.partial(jax.jit, static_argnames="axis")
def _entropy(probs: jax.Array, axis: int) -> jax.Array:
    positive = probs > 0
    # log(1) = 0 in the masked-out branch keeps both value and gradient finite.
    safe = jnp.where(positive, probs, 1.0)
    return -jnp.sum(jnp.where(positive, probs * jnp.log(safe), 0.0), axis=axis)


def _as_float(x: jax.Array) -> jax.Array:
    x = jnp.asarray(x)
    if not jnp.issubdtype(x.dtype, jnp.floating):
        x = x.astype(jnp.float32)
    return x


def _is_concrete(x: object) -> bool:
    return not isinstance(x, jax.core.Tracer)


def _check_weighting(weighting: str) -> None:
    if not isinstance(weighting, str) or weighting not in WEIGHTINGS:
        raise ValueError(
            f"weighting must be one of {WEIGHTINGS}, got {weighting!r}"
        )


def _check(
    probs: jax.Array, mask: jax.Array | None
) -> tuple[jax.Array, jax.Array]:
    """Python-level validation shared by the public functions.

    Returns:
        ``probs`` as a float array and the mask as ``[N] bool`` (all True when
        ``mask`` is None).
    """
    shape = tuple(np.shape(probs))
    if len(shape) < 2:
        raise ValueError(
            f"probs must be [N, ..., C] with ndim >= 2, got shape {shape}"
        )
    probs = _as_float(probs)
    num_nodes = shape[0]
    if mask is None:
        # All reachable. One code path (and one compilation) with or without
        # a mask; the extra multiply is free.
        return probs, np.ones((num_nodes,), bool)
    mask_shape = tuple(np.shape(mask))
    if mask_shape != (num_nodes,):
        raise ValueError(
            f"mask must have shape [N] = ({num_nodes},) to match probs "
            f"{shape}, got shape {mask_shape}"
        )
    mask = jnp.asarray(mask) if _is_concrete(mask) else mask
    if mask.dtype != jnp.bool_:
        raise ValueError(f"mask must have dtype bool, got {mask.dtype}")
    # Only checkable on a concrete mask; a traced all-False mask is handled
    # numerically (see collective_decision).
    if _is_concrete(mask) and not bool(np.any(np.asarray(mask))):
        raise ValueError(
            f"mask must select at least one reachable node, got all False "
            f"(shape {mask_shape})"
        )
    return probs, mask


@functools.partial(jax.jit, static_argnames="weighting")
def _node_weights(probs: jax.Array, weighting: str, mask: jax.Array) -> jax.Array:
    """Unchecked ``node_weights``: ``[N, ..., C]`` -> ``[N, ...]``."""
    num_classes = probs.shape[-1]
    batch_shape = probs.shape[:-1]  # [N, ...]
    # [N] -> [N, 1, ...] -> [N, ...]: the same mask for every example.
    reach = mask.astype(probs.dtype).reshape((-1,) + (1,) * (probs.ndim - 2))
    reach = jnp.broadcast_to(reach, batch_shape)
    if weighting in ("mean", "vote"):
        raw = reach
    else:
        h = _entropy(probs, -1)  # [N, ...]
        if weighting == "entropy":
            # Algorithm 3: s = -sum h, w = -h / s = h / sum h (see module doc).
            raw = h * reach
        else:
            # Confidence log C - h in [0, log C]; clip float noise below 0.
            raw = jnp.maximum(jnp.log(num_classes) - h, 0.0) * reach
        # All reachable nodes one-hot ("entropy") or uniform ("negentropy"):
        # nothing to weigh by, fall back to equal weights.
        degenerate = jnp.sum(raw, axis=0, keepdims=True) <= 0
        raw = jnp.where(degenerate, reach, raw)
    total = jnp.sum(raw, axis=0, keepdims=True)
    # total == 0 only for an all-False (traced) mask: weights stay 0, no NaN.
    return raw / jnp.where(total > 0, total, 1.0)


def node_weights(
    probs: jax.Array,
    *,
    weighting: str = "negentropy",
    mask: jax.Array | None = None,
) -> jax.Array:
    """Per-example weight of each node in the collective decision.

    For ``"vote"`` the weights are equal (one vote per reachable node); what is
    weighted is the node's one-hot argmax, see ``collective_decision``.

    Args:
        probs: ``[N, ..., C]`` per-node class probabilities.
        weighting: one of ``WEIGHTINGS``; static under ``jit``.
        mask: optional ``[N] bool``, True for reachable nodes.

    Returns:
        ``[N, ...]`` non-negative weights summing to 1 over the node axis;
        unreachable nodes get 0. (All zeros only for an all-False mask under
        ``jit``, which cannot be rejected there.)

    Raises:
        ValueError: for an unknown ``weighting``, ``probs`` with ndim < 2, a
            ``mask`` not of shape ``[N]`` or not bool, or a concrete all-False
            ``mask``.

    References:
        Lacaille (2018), §2.2.2.4, Algorithm 3, lines 3-10.
    """
    _check_weighting(weighting)
    probs, mask = _check(probs, mask)
    return _node_weights(probs, weighting, mask)


def collective_decision(
    probs: jax.Array,
    *,
    weighting: str = "negentropy",
    mask: jax.Array | None = None,
) -> jax.Array:
    """Combines the nodes' predictive distributions into one (Algorithm 3).

    ``y = sum_i w_i * y^i`` with per-example weights from ``node_weights``; for
    ``"vote"``, ``y^i`` is replaced by ``one_hot(argmax y^i)`` so ``y`` is the
    vote share of each class (ties between classes resolve to the lowest
    index when the caller takes ``argmax y``). Jittable with ``weighting``
    static: ``jax.jit(collective_decision, static_argnames="weighting")``.

    A concrete all-False ``mask`` raises; a traced one (under ``jit``) cannot
    be checked and returns the uniform distribution ``1/C`` (no node answers,
    so no information), which is finite and sums to 1.

    Args:
        probs: ``[N, ..., C]`` per-node class probabilities, e.g. ``[N, M, C]``
            for M examples.
        weighting: one of ``WEIGHTINGS`` = ("negentropy", "entropy", "mean",
            "vote"); static under ``jit``.
        mask: optional ``[N] bool``, True for reachable nodes; unreachable
            nodes get weight 0.

    Returns:
        ``[..., C]`` combined distribution (sums to 1 over C).

    Raises:
        ValueError: for an unknown ``weighting``, ``probs`` with ndim < 2, a
            ``mask`` not of shape ``[N]`` or not bool, or a concrete all-False
            ``mask``.

    References:
        Lacaille (2018), §2.2.2.4, Algorithm 3.
    """
    _check_weighting(weighting)
    probs, mask = _check(probs, mask)
    return _collective_decision(probs, weighting, mask)


@functools.partial(jax.jit, static_argnames="weighting")
def _collective_decision(
    probs: jax.Array, weighting: str, mask: jax.Array
) -> jax.Array:
    """Unchecked ``collective_decision``: ``[N, ..., C]`` -> ``[..., C]``."""
    num_classes = probs.shape[-1]
    weights = _node_weights(probs, weighting, mask)  # [N, ...]
    if weighting == "vote":
        # argmax takes the lowest index among tied classes within a node.
        probs = jax.nn.one_hot(
            jnp.argmax(probs, axis=-1), num_classes, dtype=probs.dtype
        )
    combined = jnp.sum(weights[..., None] * probs, axis=0)  # [..., C]
    # Only an all-False traced mask leaves every weight 0.
    nobody = jnp.sum(weights, axis=0)[..., None] <= 0
    return jnp.where(nobody, 1.0 / num_classes, combined)


def _check_labels(labels: jax.Array, expected: tuple[int, ...]) -> jax.Array:
    shape = tuple(np.shape(labels))
    if shape != expected:
        raise ValueError(
            f"labels must have shape {expected} (probs' example dims), "
            f"got shape {shape}"
        )
    return jnp.asarray(labels)


def collective_accuracy(
    probs: jax.Array,
    labels: jax.Array,
    *,
    weighting: str = "negentropy",
    mask: jax.Array | None = None,
) -> jax.Array:
    """Accuracy of the collective decision's argmax.

    Args:
        probs: ``[N, ..., C]`` per-node class probabilities.
        labels: ``[...] int`` true classes.
        weighting: one of ``WEIGHTINGS``; static under ``jit``.
        mask: optional ``[N] bool`` of reachable nodes.

    Returns:
        Scalar float32, fraction of examples where ``argmax`` of the combined
        distribution (lowest index on ties) equals the label.

    Raises:
        ValueError: as ``collective_decision``, or if ``labels``' shape is not
            ``probs.shape[1:-1]``.

    References:
        Lacaille (2018), Algorithm 3, line 12: "argmax y".
    """
    _check_weighting(weighting)
    probs, mask = _check(probs, mask)
    labels = _check_labels(labels, probs.shape[1:-1])
    # Two jitted pieces rather than one: the decision's compilation is shared
    # with collective_decision calls, the accuracy's across weightings.
    return _accuracy(_collective_decision(probs, weighting, mask), labels)


@jax.jit
def _accuracy(probs: jax.Array, labels: jax.Array) -> jax.Array:
    """``[..., C]``, ``[...]`` -> scalar fraction of correct argmax."""
    return jnp.mean(jnp.argmax(probs, axis=-1) == labels, dtype=jnp.float32)


def node_accuracies(probs: jax.Array, labels: jax.Array) -> jax.Array:
    """Accuracy of each node on its own.

    Args:
        probs: ``[N, ..., C]`` per-node class probabilities (or logits).
        labels: ``[...] int`` true classes, shared by all nodes.

    Returns:
        ``[N] float32``, fraction correct of each node's argmax.

    Raises:
        ValueError: if ``probs`` has ndim < 2 or ``labels``' shape is not
            ``probs.shape[1:-1]``.

    References:
        Lacaille (2018), §2.2.3.1 (per-node evaluation beside the collective
        one).
    """
    shape = tuple(np.shape(probs))
    if len(shape) < 2:
        raise ValueError(
            f"probs must be [N, ..., C] with ndim >= 2, got shape {shape}"
        )
    labels = _check_labels(labels, shape[1:-1])
    return _node_accuracies(jnp.asarray(probs), labels)


@jax.jit
def _node_accuracies(probs: jax.Array, labels: jax.Array) -> jax.Array:
    return jax.vmap(_accuracy, in_axes=(0, None))(probs, labels)


def accuracies(
    probs: jax.Array,
    labels: jax.Array,
    *,
    mask: jax.Array | None = None,
) -> tuple[jax.Array, dict[str, jax.Array]]:
    """Every node's accuracy and the collective decision's under each of ``WEIGHTINGS``, in one compiled program
    (one compile per shape, where four collective decisions and the nodes' accuracies compiled five); the same
    values as :func:`node_accuracies` and :func:`collective_accuracy` (tested bit for bit).

    Args:
        probs: ``[N, ..., C]`` per-node class probabilities.
        labels: ``[...] int`` true classes.
        mask: optional ``[N] bool`` of nodes the collective decision may ask (at least one).

    Returns:
        ``([N] float32 node accuracies, {weighting: scalar float32 collective accuracy})``.
    """
    probs, mask = _check(probs, mask)
    labels = _check_labels(labels, probs.shape[1:-1])
    return _accuracies()(probs, labels, mask)


@functools.cache
def _accuracies():
    return compiling.nestable(_accuracies_of)


def _accuracies_of(probs: jax.Array, labels: jax.Array, mask: jax.Array):
    return _node_accuracies(probs, labels), {
        w: _accuracy(_collective_decision(probs, w, mask), labels) for w in WEIGHTINGS}
