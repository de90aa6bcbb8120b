"""The teacher's selection (thesis eqs. 3.2.1, 3.2.2) against hand-computed rankings."""

from __future__ import annotations

import chex
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxcomm import teacher

# A stack of n*m = 4 samples over C = 3 classes (rows sum to 1).
P = jnp.asarray([[0.8, 0.1, 0.1],
                 [0.1, 0.8, 0.1],
                 [0.2, 0.2, 0.6],
                 [1.0, 0.0, 0.0]])
Q = jnp.asarray([[0.7, 0.2, 0.1],   # close to P
                 [0.6, 0.2, 0.2],   # confidently wrong on the teacher's class
                 [0.3, 0.4, 0.3],   # unsure
                 [0.5, 0.5, 0.0]])  # half right
LABELS = jnp.asarray([0, 1, 2, 1])  # the last sample: the teacher is wrong too


def hand_cross_entropy():
    p, q = np.asarray(P, np.float64), np.asarray(Q, np.float64)
    return [-sum(p[i, y] * np.log(q[i, y]) for y in range(3) if p[i, y] > 0) for i in range(4)]


def test_cross_entropy_scores_match_hand_values():
    # Row 1: -(0.1 ln 0.6 + 0.8 ln 0.2 + 0.1 ln 0.2) = 1.4996; row 3: -ln 0.5 = 0.6931.
    expected = hand_cross_entropy()
    np.testing.assert_allclose(teacher.cross_entropy(P, Q), expected, rtol=1e-6)
    np.testing.assert_allclose(expected[1], 1.499577, rtol=1e-5)
    np.testing.assert_allclose(expected[3], np.log(2), rtol=1e-6)


def test_euclidean_scores_match_hand_values():
    expected = [np.sqrt(0.01 + 0.01), np.sqrt(0.25 + 0.36 + 0.01), np.sqrt(0.01 + 0.04 + 0.09),
                np.sqrt(0.25 + 0.25)]
    np.testing.assert_allclose(teacher.euclidean(P, Q), expected, rtol=1e-6)


@pytest.mark.parametrize("distance,ranking", [
    # cross-entropy: 1.500 (1) > 1.146 (2) > 0.693 (3) > 0.676 (0)
    ("cross_entropy", [1, 2, 3, 0]),
    # euclidean: 0.787 (1) > 0.707 (3) > 0.374 (2) > 0.141 (0): not the same order as cross-entropy
    ("euclidean", [1, 3, 2, 0]),
])
def test_select_hardest_returns_the_hand_ranking(distance, ranking):
    for m in range(1, 5):
        chosen = teacher.select_hardest(P, Q, m, distance=distance)
        chex.assert_shape(chosen, (m,))
        assert chosen.dtype == jnp.int32
        assert chosen.tolist() == ranking[:m]


def test_learnability_is_student_minus_teacher_loss():
    # -ln Q(y) + ln P(y): [-ln .7 + ln .8, -ln .2 + ln .8, -ln .3 + ln .6, -ln .5 + ln 1e-12]
    expected = [np.log(0.8 / 0.7), np.log(0.8 / 0.2), np.log(0.6 / 0.3), np.log(1e-12 / 0.5)]
    np.testing.assert_allclose(teacher.learnability(P, Q, LABELS), expected, rtol=1e-5)
    # The sample the teacher also gets wrong (3) ranks last, unlike under cross-entropy.
    assert teacher.select_hardest(P, Q, 4, distance="learnability", labels=LABELS).tolist() == [1, 2, 0, 3]


def test_random_selection_is_distinct_and_depends_on_the_key():
    picks = set()
    for seed in range(20):
        chosen = np.asarray(teacher.select_hardest(P, Q, 2, distance="random", key=jax.random.PRNGKey(seed)))
        assert len(set(chosen.tolist())) == 2
        picks.add(tuple(sorted(chosen.tolist())))
    assert len(picks) > 3  # not one fixed answer


def test_never_returns_a_sample_twice_even_with_ties():
    rng = np.random.default_rng(0)
    probs = jnp.asarray(rng.dirichlet(np.ones(10), size=8 * 32), jnp.float32)
    tied = jnp.tile(probs[:32], (8, 1))  # every sample appears 8 times: all scores tie in groups
    for distance in ("cross_entropy", "euclidean"):
        chosen = np.asarray(teacher.select_hardest(tied, tied[::-1], 32, distance=distance))
        assert len(np.unique(chosen)) == 32
    flat = jnp.full((64, 10), 0.1)  # every score equal
    assert len(np.unique(np.asarray(teacher.select_hardest(flat, flat, 32)))) == 32


@pytest.mark.parametrize("distance", teacher.DISTANCES)
def test_masked_padding_is_never_selected(distance):
    # 2 real minibatches of m = 4 padded to 5; padded slots are made the "hardest" of all.
    rng = np.random.default_rng(1)
    m, n_real, n_pad = 4, 2, 5
    p = jnp.asarray(rng.dirichlet(np.ones(3), size=n_pad * m), jnp.float32)
    q = jnp.asarray(rng.dirichlet(np.ones(3), size=n_pad * m), jnp.float32)
    q = q.at[n_real * m:].set(jnp.asarray([1.0, 0.0, 0.0]))  # far from p: high CE and distance
    p = p.at[n_real * m:].set(jnp.asarray([0.0, 0.0, 1.0]))
    labels = jnp.full((n_pad * m,), 2)
    valid = jnp.arange(n_pad * m) < n_real * m
    for seed in range(5):
        chosen = teacher.select_hardest(p, q, m, distance=distance, key=jax.random.PRNGKey(seed), labels=labels,
                                        valid=valid)
        assert (np.asarray(chosen) < n_real * m).all()
        assert len(np.unique(np.asarray(chosen))) == m
    # With only m valid slots, exactly those are returned.
    only = teacher.select_hardest(p, q, m, distance=distance, key=jax.random.PRNGKey(0), labels=labels,
                                  valid=jnp.arange(n_pad * m) < m)
    assert sorted(np.asarray(only).tolist()) == list(range(m))


def test_masked_selection_equals_selection_on_the_unpadded_stack():
    rng = np.random.default_rng(2)
    p = jnp.asarray(rng.dirichlet(np.ones(10), size=160), jnp.float32)
    q = jnp.asarray(rng.dirichlet(np.ones(10), size=160), jnp.float32)
    valid = jnp.arange(160) < 64
    padded = teacher.select_hardest(p, q, 32, valid=valid)
    assert padded.tolist() == teacher.select_hardest(p[:64], q[:64], 32).tolist()


@pytest.mark.parametrize("distance", teacher.DISTANCES)
def test_scores_by_code_equals_the_static_distance_and_jit(distance):
    key = jax.random.PRNGKey(3)
    static = teacher.scores(P, Q, distance=distance, key=key, labels=LABELS)
    code = jnp.asarray(teacher.DISTANCE_CODES[distance])
    np.testing.assert_allclose(jax.jit(teacher.scores_by_code)(code, P, Q, key, LABELS), static, rtol=1e-6)
    jitted = jax.jit(teacher.select_hardest, static_argnums=2, static_argnames="distance")
    assert jitted(P, Q, 2, distance=distance, key=key, labels=LABELS).tolist() == \
        teacher.select_hardest(P, Q, 2, distance=distance, key=key, labels=LABELS).tolist()
    chex.assert_tree_all_finite(static)


def test_zero_student_probability_gives_a_finite_score():
    q = Q.at[1].set(jnp.asarray([1.0, 0.0, 0.0]))
    chex.assert_tree_all_finite(teacher.cross_entropy(P, q))


@pytest.mark.parametrize("kwargs,message", [
    ({"distance": "kl"}, "distance must be one of"),
    ({"distance": "random"}, "needs a PRNG key"),
    ({"distance": "learnability"}, "needs the true labels"),
])
def test_bad_arguments_raise(kwargs, message):
    with pytest.raises(ValueError, match=message):
        teacher.select_hardest(P, Q, 2, **kwargs)


@pytest.mark.parametrize("m", [0, 5])
def test_m_outside_the_stack_raises(m):
    with pytest.raises(ValueError, match=r"m must be in \[1, n\*m = 4\]"):
        teacher.select_hardest(P, Q, m)


def test_mismatched_shapes_raise():
    with pytest.raises(ValueError, match="must both be"):
        teacher.select_hardest(P, Q[:3], 2)
