"""A trained teacher picks the hardest samples of the student's stack (thesis ch. 3).

The student forwards n minibatches of m samples; the teacher, holding its own
predictions on the same n*m samples, scores each one by a distance between its
predictive distribution P and the student's Q, and hands back the m highest
(:func:`select_hardest`). Everything here is pure and jittable: the distance is a
static Python string, or, for a population whose students use different
distances, an integer code into :data:`DISTANCES` (:func:`scores_by_code`), so
that one vmapped step serves every student.

Padded stacks: students with different stack sizes n share one population by
padding every stack to the largest n and passing a ``valid`` mask; invalid slots
score ``-inf`` and are never selected while at least m slots are valid.

References:
  Lacaille (2018), §3.2.3 (eqs. 3.2.1, 3.2.2, the teacher stack); Mindermann et
  al. (2022), "Prioritized training on points that are learnable, worth
  learning, and not yet learnt" (RHO-LOSS), for the "learnability" score.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

# The order fixes the integer codes used by populations (:func:`scores_by_code`).
DISTANCES = ("cross_entropy", "euclidean", "random", "learnability")
DISTANCE_CODES = {name: code for code, name in enumerate(DISTANCES)}

# Probabilities are clipped here before a log: a student that puts exactly zero
# mass on a class would otherwise score +inf and tie with every other such sample.
_TINY = 1e-12


def _check_distance(distance: str, key: jax.Array | None, labels: jax.Array | None) -> None:
    if distance not in DISTANCES:
        raise ValueError(f"distance must be one of {DISTANCES}, got {distance!r}")
    if distance == "random" and key is None:
        raise ValueError("distance 'random' needs a PRNG key (key=...)")
    if distance == "learnability" and labels is None:
        raise ValueError("distance 'learnability' needs the true labels (labels=...)")


def cross_entropy(teacher_probs: jax.Array, student_probs: jax.Array) -> jax.Array:
    """H(P_teacher, Q_student) = -sum_y P(y) log Q(y) per sample (eq. 3.2.1).

    Args:
      teacher_probs: ``[K, C]`` P, the teacher's class probabilities.
      student_probs: ``[K, C]`` Q, the student's.

    Returns:
      ``[K]`` float32.
    """
    return -jnp.sum(teacher_probs * jnp.log(jnp.maximum(student_probs, _TINY)), axis=-1)


def euclidean(teacher_probs: jax.Array, student_probs: jax.Array) -> jax.Array:
    """[sum_y (P(y) - Q(y))^2]^(1/2) per sample (eq. 3.2.2); ``[K, C]`` -> ``[K]``."""
    return jnp.sqrt(jnp.sum(jnp.square(teacher_probs - student_probs), axis=-1))


def learnability(teacher_probs: jax.Array, student_probs: jax.Array, labels: jax.Array) -> jax.Array:
    """Student loss minus teacher loss on the true label, per sample (RHO-LOSS).

    ``-log Q(y) + log P(y)``: high where the student is wrong but the teacher
    (the "irreducible loss" model) is right, so noisy or ambiguous samples that
    the teacher also gets wrong are not chosen.

    Args:
      teacher_probs: ``[K, C]``.
      student_probs: ``[K, C]``.
      labels: ``[K]`` int true labels.

    Returns:
      ``[K]`` float32.
    """
    pick = lambda probs: jnp.take_along_axis(probs, labels[:, None].astype(jnp.int32), axis=-1)[:, 0]
    return -jnp.log(jnp.maximum(pick(student_probs), _TINY)) + jnp.log(jnp.maximum(pick(teacher_probs), _TINY))


def scores(
    teacher_probs: jax.Array,
    student_probs: jax.Array,
    *,
    distance: str = "cross_entropy",
    key: jax.Array | None = None,
    labels: jax.Array | None = None,
) -> jax.Array:
    """Hardness of each stacked sample under one distance (higher = harder).

    Args:
      teacher_probs: ``[K, C]`` with K = n*m.
      student_probs: ``[K, C]``.
      distance: one of :data:`DISTANCES` (static).
      key: PRNG key, needed by "random" (uniform scores in [0, 1)).
      labels: ``[K]`` true labels, needed by "learnability".

    Returns:
      ``[K]`` float32 scores.
    """
    _check_distance(distance, key, labels)
    if distance == "cross_entropy":
        return cross_entropy(teacher_probs, student_probs)
    if distance == "euclidean":
        return euclidean(teacher_probs, student_probs)
    if distance == "random":
        return jax.random.uniform(key, teacher_probs.shape[:1])
    return learnability(teacher_probs, student_probs, labels)


def scores_by_code(
    code: jax.Array,
    teacher_probs: jax.Array,
    student_probs: jax.Array,
    key: jax.Array,
    labels: jax.Array,
) -> jax.Array:
    """:func:`scores` with the distance given as a traced integer code.

    For populations whose students use different distances in one vmapped step:
    every distance is computed (they are cheap next to the student's forward
    pass) and the code picks one. Needs both ``key`` and ``labels``.

    Args:
      code: ``[]`` int32 index into :data:`DISTANCES`.
      teacher_probs, student_probs: ``[K, C]``.
      key: PRNG key of "random".
      labels: ``[K]`` true labels of "learnability".

    Returns:
      ``[K]`` float32, equal to ``scores(..., distance=DISTANCES[code])``.
    """
    table = jnp.stack([scores(teacher_probs, student_probs, distance=d, key=key, labels=labels) for d in DISTANCES])
    return table[code]


def top_m(scores_: jax.Array, m: int, *, valid: jax.Array | None = None) -> jax.Array:
    """Indices of the m highest scores among the valid slots.

    ``lax.top_k`` returns m distinct positions by construction, so a sample is
    never returned twice in one minibatch. Ties go to the lower index.

    Args:
      scores_: ``[K]`` float scores.
      m: how many to keep (static), ``1 <= m <= K``.
      valid: optional ``[K]`` bool; invalid slots are ranked below every valid
        one. The caller guarantees at least m valid slots (a padded stack of
        n >= 1 minibatches has n*m).

    Returns:
      ``[m]`` int32, in decreasing order of score.
    """
    k = scores_.shape[0]
    if not 1 <= m <= k:
        raise ValueError(f"m must be in [1, n*m = {k}], got {m}")
    if valid is not None:
        scores_ = jnp.where(valid, scores_, -jnp.inf)
    return jax.lax.top_k(scores_, m)[1].astype(jnp.int32)


def select_hardest(
    teacher_probs: jax.Array,
    student_probs: jax.Array,
    m: int,
    *,
    distance: str = "cross_entropy",
    key: jax.Array | None = None,
    labels: jax.Array | None = None,
    valid: jax.Array | None = None,
) -> jax.Array:
    """The teacher's choice: the m hardest of the n*m stacked samples (§3.2.3.3).

    Args:
      teacher_probs: ``[n*m, C]`` the teacher's predictive distributions P.
      student_probs: ``[n*m, C]`` the student's Q on the same samples.
      m: the student's batch size (static).
      distance: "cross_entropy" (eq. 3.2.1), "euclidean" (eq. 3.2.2), "random"
        (needs ``key``), or "learnability" (student minus teacher loss on the
        true label, needs ``labels``; beyond the thesis).
      key: PRNG key for "random".
      labels: ``[n*m]`` int true labels for "learnability".
      valid: optional ``[n*m]`` bool mask of real (not padded) stack slots.

    Returns:
      ``[m]`` int32 distinct positions into the stack, hardest first.

    Raises:
      ValueError: unknown distance, "random" without key, "learnability"
        without labels, or m outside [1, n*m].
    """
    _check_distance(distance, key, labels)
    if teacher_probs.shape != student_probs.shape or teacher_probs.ndim != 2:
        raise ValueError(f"teacher_probs and student_probs must both be [n*m, C], got {teacher_probs.shape} and "
                         f"{student_probs.shape}")
    return top_m(scores(teacher_probs, student_probs, distance=distance, key=key, labels=labels), m, valid=valid)
