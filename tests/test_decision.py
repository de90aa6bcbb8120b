"""Tests for jaxcomm.decision (thesis §2.2.2.4, Algorithm 3)."""

from __future__ import annotations

import functools

import chex
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxcomm import decision
from jaxcomm.decision import (
    WEIGHTINGS,
    collective_accuracy,
    collective_decision,
    entropy,
    node_accuracies,
    node_weights,
)

# Three nodes, two classes, one example. Node 0 is confident in class 0, nodes
# 1 and 2 lean weakly towards class 1.
#   h([0.9, 0.1]) = -(0.9 ln 0.9 + 0.1 ln 0.1) = 0.09482 + 0.23026 = 0.32508
#   h([0.4, 0.6]) = -(0.4 ln 0.4 + 0.6 ln 0.6) = 0.36652 + 0.30650 = 0.67301
THREE = np.array([[[0.9, 0.1]], [[0.4, 0.6]], [[0.4, 0.6]]], np.float32)  # [3, 1, 2]
THREE_H = np.array([0.32508297, 0.67301167, 0.67301167])

# Two nodes, three classes, two examples.
# Example 0:
#   h([0.7, 0.2, 0.1]) = 0.24967 + 0.32189 + 0.23026 = 0.80182
#   h([0.2, 0.5, 0.3]) = 0.32189 + 0.34657 + 0.36119 = 1.02965
# Example 1: both nodes one-hot (h = 0), on different classes (0 and 2).
TWO = np.array(
    [
        [[0.7, 0.2, 0.1], [1.0, 0.0, 0.0]],
        [[0.2, 0.5, 0.3], [0.0, 0.0, 1.0]],
    ],
    np.float32,
)  # [2, 2, 3]


def test_entropy_hand_values():
    np.testing.assert_allclose(np.asarray(entropy(THREE))[:, 0], THREE_H, rtol=1e-6)
    np.testing.assert_allclose(
        entropy(TWO), [[0.80181855, 0.0], [1.02965301, 0.0]], rtol=1e-6, atol=1e-7
    )
    # uniform over 4 classes: ln 4; other axis: shape without that axis.
    np.testing.assert_allclose(entropy(np.full((4,), 0.25)), np.log(4), rtol=1e-6)
    chex.assert_shape(entropy(np.ones((2, 5, 3)) / 5, axis=1), (2, 3))


def test_entropy_gradient_finite_at_zero():
    grad = jax.grad(lambda p: entropy(p))(jnp.array([1.0, 0.0]))
    chex.assert_tree_all_finite(grad)


def test_entropy_weighting_is_algorithm3_literal():
    # s = -(0.32508 + 0.67301 + 0.67301) = -1.67111
    # w = -h / s = [0.32508, 0.67301, 0.67301] / 1.67111 = [0.19453, 0.40273, 0.40273]
    # y_0 = 0.19453 * 0.9 + 0.80547 * 0.4 = 0.17508 + 0.32219 = 0.49727 -> class 1
    w = node_weights(THREE, weighting="entropy")
    np.testing.assert_allclose(np.asarray(w)[:, 0], [0.19453159, 0.4027342, 0.4027342], rtol=1e-5)
    y = collective_decision(THREE, weighting="entropy")
    np.testing.assert_allclose(y, [[0.4972658, 0.5027342]], rtol=1e-5)


def test_negentropy_weighting():
    # log C - h = ln 2 - h = 0.69315 - [0.32508, 0.67301, 0.67301]
    #           = [0.36806, 0.02014, 0.02014], sum 0.40834
    # w = [0.90138, 0.04931, 0.04931]
    # y_0 = 0.90138 * 0.9 + 0.09862 * 0.4 = 0.81124 + 0.03945 = 0.85069 -> class 0
    w = node_weights(THREE, weighting="negentropy")
    np.testing.assert_allclose(np.asarray(w)[:, 0], [0.90137754, 0.04931123, 0.04931123], rtol=1e-5)
    y = collective_decision(THREE)  # negentropy is the default
    np.testing.assert_allclose(y, [[0.85068877, 0.14931123]], rtol=1e-5)


def test_mean_and_vote_weighting():
    # mean: y = ([0.9, 0.1] + 2 * [0.4, 0.6]) / 3 = [0.56667, 0.43333]
    np.testing.assert_allclose(
        collective_decision(THREE, weighting="mean"), [[0.5666667, 0.4333333]], rtol=1e-6
    )
    # vote: argmaxes 0, 1, 1 -> shares [1/3, 2/3]
    np.testing.assert_allclose(
        collective_decision(THREE, weighting="vote"), [[1 / 3, 2 / 3]], rtol=1e-6
    )
    np.testing.assert_allclose(np.asarray(node_weights(THREE, weighting="vote"))[:, 0], [1 / 3] * 3)


def test_entropy_and_negentropy_disagree():
    # The sign issue of Algorithm 3: the literal version trusts the two unsure
    # nodes (class 1), the confident reading trusts node 0 (class 0).
    labels = np.array([0])
    assert int(np.argmax(collective_decision(THREE, weighting="entropy")[0])) == 1
    assert int(np.argmax(collective_decision(THREE, weighting="negentropy")[0])) == 0
    assert float(collective_accuracy(THREE, labels, weighting="entropy")) == 0.0
    assert float(collective_accuracy(THREE, labels, weighting="negentropy")) == 1.0


def test_three_classes_two_examples_all_weightings():
    # Example 0, entropy: w = [0.80182, 1.02965] / 1.83147 = [0.43780, 0.56220]
    #   y = 0.43780 * [0.7, 0.2, 0.1] + 0.56220 * [0.2, 0.5, 0.3]
    #     = [0.41890, 0.36866, 0.21244]
    # Example 0, negentropy: ln 3 = 1.09861; g = [0.29679, 0.06896], sum 0.36575
    #   w = [0.81146, 0.18854]; y = [0.60573, 0.25656, 0.13771]
    # Example 0, mean: [0.45, 0.35, 0.2]; vote: argmaxes 0, 1 -> [0.5, 0.5, 0]
    # Example 1: both one-hot, so h = [0, 0]: "entropy" has sum h = 0 and
    #   "negentropy" has g = [ln 3, ln 3]; both give equal weights, as do mean
    #   and vote: y = [0.5, 0, 0.5].
    expected = {
        "entropy": [[0.41890008, 0.36865995, 0.21243997], [0.5, 0.0, 0.5]],
        "negentropy": [[0.60572972, 0.25656217, 0.13770811], [0.5, 0.0, 0.5]],
        "mean": [[0.45, 0.35, 0.2], [0.5, 0.0, 0.5]],
        "vote": [[0.5, 0.5, 0.0], [0.5, 0.0, 0.5]],
    }
    for weighting, want in expected.items():
        got = collective_decision(TWO, weighting=weighting)
        chex.assert_shape(got, (2, 3))
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-7, err_msg=weighting)
    np.testing.assert_allclose(
        node_weights(TWO, weighting="entropy"), [[0.43780016, 0.5], [0.56219984, 0.5]],
        rtol=1e-5,
    )
    # Ties in example 1 ([0.5, 0, 0.5]) resolve to class 0, so labels [0, 0]
    # score 1.0 for vote (example 0 tie 0 vs 1 -> 0 too) and for negentropy.
    labels = np.array([0, 0])
    assert float(collective_accuracy(TWO, labels, weighting="vote")) == 1.0
    assert float(collective_accuracy(TWO, labels, weighting="negentropy")) == 1.0
    assert float(collective_accuracy(TWO, np.array([1, 2]), weighting="mean")) == 0.0


def test_vote_tie_resolves_to_lowest_class():
    # Node 0 votes class 2, node 1 votes class 1: shares [0, 0.5, 0.5] -> class 1.
    probs = np.array([[[0.1, 0.2, 0.7]], [[0.1, 0.8, 0.1]]], np.float32)
    y = collective_decision(probs, weighting="vote")
    np.testing.assert_allclose(y, [[0.0, 0.5, 0.5]])
    assert int(np.argmax(y[0])) == 1
    assert float(collective_accuracy(probs, np.array([1]), weighting="vote")) == 1.0
    # A node whose own distribution is tied votes for its lowest class.
    tied = np.array([[[0.5, 0.5]]], np.float32)
    np.testing.assert_allclose(collective_decision(tied, weighting="vote"), [[1.0, 0.0]])


def test_uniform_nodes_negentropy_falls_back_to_equal_weights():
    probs = np.full((3, 4, 5), 0.2, np.float32)
    w = node_weights(probs, weighting="negentropy")
    np.testing.assert_allclose(w, np.full((3, 4), 1 / 3), rtol=1e-5)
    np.testing.assert_allclose(collective_decision(probs), np.full((4, 5), 0.2), rtol=1e-5)


def _random_probs(seed: int, shape: tuple[int, ...]) -> np.ndarray:
    # NumPy, not jax.random: test inputs should not cost compilations.
    logits = np.random.default_rng(seed).normal(size=shape) * 2.0
    e = np.exp(logits - logits.max(axis=-1, keepdims=True))
    return (e / e.sum(axis=-1, keepdims=True)).astype(np.float32)


# One random input for the property tests (one compilation per weighting):
# N=5 nodes, a 2x3 grid of examples (more than one example dim), C=3 classes.
RAND = _random_probs(0, (5, 2, 3, 3))
RAND_LABELS = np.array([[0, 1, 2], [2, 1, 0]])
RAND_MASK = np.array([True, False, True, False, True])
JIT_DECISION = jax.jit(collective_decision, static_argnames="weighting")


@pytest.mark.parametrize("weighting", WEIGHTINGS)
def test_weights_sum_to_one(weighting):
    for mask in (None, RAND_MASK):
        w = np.asarray(node_weights(RAND, weighting=weighting, mask=mask))
        assert w.shape == (5, 2, 3)
        np.testing.assert_allclose(w.sum(axis=0), np.ones((2, 3)), rtol=1e-6)
        assert (w >= 0).all()
        y = collective_decision(RAND, weighting=weighting, mask=mask)
        chex.assert_shape(y, (2, 3, 3))
        np.testing.assert_allclose(np.sum(y, axis=-1), np.ones((2, 3)), rtol=1e-5)
    np.testing.assert_array_equal(w[~RAND_MASK], 0)


@pytest.mark.parametrize("weighting", WEIGHTINGS)
def test_mask_equals_subset(weighting):
    masked = collective_decision(RAND, weighting=weighting, mask=RAND_MASK)
    subset = collective_decision(RAND[RAND_MASK], weighting=weighting)
    np.testing.assert_allclose(masked, subset, rtol=1e-6, atol=1e-7)
    np.testing.assert_allclose(
        collective_accuracy(RAND, RAND_LABELS, weighting=weighting, mask=RAND_MASK),
        collective_accuracy(RAND[RAND_MASK], RAND_LABELS, weighting=weighting),
    )


@pytest.mark.parametrize("weighting", WEIGHTINGS)
def test_jit_equals_no_jit(weighting):
    mask = jnp.asarray(RAND_MASK)
    chex.assert_trees_all_close(
        JIT_DECISION(RAND, weighting=weighting, mask=mask),
        collective_decision(RAND, weighting=weighting, mask=mask),
        rtol=1e-6,
    )
    acc = jax.jit(functools.partial(collective_accuracy, weighting=weighting))
    chex.assert_trees_all_close(
        acc(RAND, RAND_LABELS),
        collective_accuracy(RAND, RAND_LABELS, weighting=weighting),
    )


def test_traced_all_false_mask_gives_uniform():
    for weighting in WEIGHTINGS:
        # Same shapes as test_jit_equals_no_jit: no new compilation.
        y = JIT_DECISION(RAND, weighting=weighting, mask=jnp.zeros(5, bool))
        chex.assert_tree_all_finite(y)
        np.testing.assert_allclose(y, np.full((2, 3, 3), 1 / 3), rtol=1e-6)


def test_node_accuracies():
    # node 0 predicts [0, 0], node 1 predicts [1, 2]; labels [0, 2]
    probs = np.array(
        [[[0.6, 0.3, 0.1], [0.5, 0.4, 0.1]], [[0.1, 0.8, 0.1], [0.2, 0.2, 0.6]]],
        np.float32,
    )
    acc = node_accuracies(probs, np.array([0, 2]))
    chex.assert_shape(acc, (2,))
    np.testing.assert_allclose(acc, [0.5, 0.5])


def test_errors():
    probs = THREE
    with pytest.raises(ValueError, match=r"weighting must be one of .*'median'"):
        collective_decision(probs, weighting="median")
    with pytest.raises(ValueError, match="weighting"):
        node_weights(probs, weighting="Entropy")
    with pytest.raises(ValueError, match=r"probs .*ndim >= 2.*\(2,\)"):
        collective_decision(np.array([0.5, 0.5]))
    with pytest.raises(ValueError, match=r"mask must have shape \[N\] = \(3,\).*\(2,\)"):
        collective_decision(probs, mask=np.array([True, False]))
    with pytest.raises(ValueError, match=r"mask must have shape .*\(3, 1\)"):
        collective_decision(probs, mask=np.ones((3, 1), bool))
    with pytest.raises(ValueError, match="mask must have dtype bool"):
        collective_decision(probs, mask=np.ones(3, np.float32))
    with pytest.raises(ValueError, match="mask must select at least one"):
        collective_decision(probs, mask=np.zeros(3, bool))
    with pytest.raises(ValueError, match="labels must have shape"):
        collective_accuracy(probs, np.array([0, 1]))
    with pytest.raises(ValueError, match="labels must have shape"):
        node_accuracies(probs, np.array([0, 1]))
    # Validation runs at trace time too.
    with pytest.raises(ValueError, match="mask must have shape"):
        JIT_DECISION(probs, mask=jnp.ones(2, bool))


def test_public_names():
    assert decision.WEIGHTINGS == ("negentropy", "entropy", "mean", "vote")


@pytest.mark.parametrize("mask", [None, np.array([True, False, True, True, False, True])])
def test_accuracies_in_one_program_equal_each_accuracy_alone(mask):
    rng = np.random.default_rng(3)
    probs = jax.nn.softmax(jnp.asarray(rng.normal(size=(6, 50, 5)) * 3, jnp.float32))
    probs = probs.at[0, :10].set(jax.nn.one_hot(jnp.arange(10) % 5, 5))  # ties and one-hot rows too
    labels = jnp.asarray(rng.integers(0, 5, 50))
    nodes, collective = decision.accuracies(probs, labels, mask=mask)
    np.testing.assert_array_equal(nodes, decision.node_accuracies(probs, labels))
    assert set(collective) == set(decision.WEIGHTINGS)
    for w in decision.WEIGHTINGS:
        assert float(collective[w]) == float(decision.collective_accuracy(probs, labels, weighting=w, mask=mask))
    with pytest.raises(ValueError, match="at least one reachable"):
        decision.accuracies(probs, labels, mask=np.zeros(6, bool))
