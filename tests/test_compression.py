"""Gradient compressors: hand-computed examples, error feedback's residual, byte counts by hand."""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxcomm import compression

V = jnp.array([0.5, -3.0, 1.0, 2.0, -0.25, 0.0, 4.0, -1.5])  # d = 8
KEY = jax.random.PRNGKey(0)


def test_top_k_keeps_the_largest_magnitudes():
    out = compression.top_k(0.25).apply(KEY, V)  # k = 2: 4.0 and -3.0
    np.testing.assert_array_equal(out, [0, -3.0, 0, 0, 0, 0, 4.0, 0])
    assert compression.top_k(0.25).num_bytes(8) == 2 * (4 + 4)


def test_random_k_keeps_k_distinct_entries_unchanged():
    for seed in range(5):
        out = np.asarray(compression.random_k(0.5).apply(jax.random.PRNGKey(seed), V))
        kept = np.flatnonzero(out != 0)
        assert len(kept) <= 4 and set(kept) <= set(range(8))
        np.testing.assert_array_equal(out[kept], np.asarray(V)[kept])
    mask = compression.random_k(0.5).apply(KEY, jnp.ones(8))
    assert float(mask.sum()) == 4  # exactly k distinct positions
    rescaled = compression.random_k(0.5, rescale=True).apply(KEY, jnp.ones(8))
    np.testing.assert_allclose(rescaled, 2.0 * mask)  # d / k
    assert compression.random_k(0.5).num_bytes(8) == 4 * 4 + 4


def test_sign_scales_by_the_mean_magnitude():
    scale = (0.5 + 3 + 1 + 2 + 0.25 + 0 + 4 + 1.5) / 8
    expected = scale * np.array([1, -1, 1, 1, -1, 1, 1, -1])
    np.testing.assert_allclose(compression.sign().apply(KEY, V), expected, rtol=1e-6)
    assert compression.sign().num_bytes(8) == 1 + 4 and compression.sign().num_bytes(9) == 2 + 4


def test_qsgd_rounds_to_the_levels_and_is_unbiased():
    v = jnp.array([3.0, -4.0])  # norm 5, s = 2: |v| s / norm = 1.2, 1.6 -> levels {1, 2}
    draws = jax.vmap(lambda k: compression.qsgd(2).apply(k, v))(jax.random.split(KEY, 4000))
    levels = np.unique(np.round(np.abs(np.asarray(draws)) / 5 * 2, 6), axis=0)
    assert set(levels[:, 0]) <= {1.0, 2.0} and set(levels[:, 1]) <= {1.0, 2.0}
    assert np.all(np.sign(draws) == np.sign(np.asarray(v)))
    np.testing.assert_allclose(np.mean(draws, axis=0), v, atol=0.1)  # E = v; sd of a mean of 4000 ~ 0.02
    # one norm per bucket: two buckets of 2 quantise independently
    w = jnp.array([3.0, -4.0, 0.3, 0.4])
    out = np.asarray(compression.qsgd(1, bucket=2).apply(KEY, w))
    assert set(np.abs(out[:2])) <= {0.0, 5.0} and set(np.abs(out[2:])) <= {0.0, 0.5}
    # s = 4: 1 sign bit + 3 level bits per value, one float norm per 512-value bucket
    assert compression.qsgd(4).num_bytes(1000) == math.ceil(1000 * 4 / 8) + 4 * 2


def test_layerwise_and_whole_differ_in_scope_and_bytes():
    grads = {"a": jnp.array([[10.0, 1.0], [2.0, 3.0]]), "b": jnp.array([0.5, -0.1, 0.2])}
    per_layer = compression.layerwise(compression.top_k(0.25))  # k = 1 per tensor
    out, _ = per_layer.update(grads, per_layer.init(grads), KEY)
    np.testing.assert_array_equal(out["a"], [[10.0, 0], [0, 0]])
    np.testing.assert_array_equal(out["b"], [0.5, 0, 0])
    one = compression.whole(compression.top_k(2 / 7))  # k = 2 of all 7 values
    out, _ = one.update(grads, one.init(grads), KEY)
    np.testing.assert_array_equal(out["a"], [[10.0, 0], [0, 3.0]])
    np.testing.assert_array_equal(out["b"], [0, 0, 0])
    assert per_layer.message_bytes(grads) == 2 * 8 and one.message_bytes(grads) == 2 * 8
    signs_per_layer = compression.layerwise(compression.sign()).message_bytes(grads)
    assert signs_per_layer == (1 + 4) + (1 + 4) and compression.whole(compression.sign()).message_bytes(grads) == 5


def test_error_feedback_carries_exactly_the_residual():
    ef = compression.error_feedback(compression.whole(compression.top_k(0.25)))
    g1 = {"w": V}
    sent, state = ef.update(g1, ef.init(g1), KEY)
    np.testing.assert_array_equal(sent["w"], [0, -3.0, 0, 0, 0, 0, 4.0, 0])
    np.testing.assert_array_equal(state.residual["w"], np.asarray(V) - np.asarray(sent["w"]))
    g2 = {"w": jnp.full(8, 0.1)}
    sent2, state2 = ef.update(g2, state, KEY)
    corrected = np.asarray(V) - np.asarray(sent["w"]) + 0.1  # e + g: 2.1 and -1.4 are now the largest
    np.testing.assert_allclose(sent2["w"], np.where(np.isin(np.arange(8), [3, 7]), corrected, 0), rtol=1e-6)
    np.testing.assert_allclose(state2.residual["w"], corrected - np.asarray(sent2["w"]), rtol=1e-6)
    # nothing is lost: what was sent plus what is kept is every gradient so far
    np.testing.assert_allclose(np.asarray(sent["w"]) + np.asarray(sent2["w"]) + np.asarray(state2.residual["w"]),
                               np.asarray(V) + 0.1, rtol=1e-6)


def test_make_builds_the_described_compressor_and_rejects_bad_ones():
    grads = {"w": V}
    assert isinstance(compression.make("sign").init(grads), compression.ErrorFeedbackState)
    assert compression.make("qsgd", feedback=False).init(grads) == ()
    assert compression.make("none").message_bytes(grads) == 8 * 4
    for kwargs, field in [({"method": "topk"}, "compression"), ({"method": "top_k", "fraction": 0.0}, "fraction"),
                          ({"method": "qsgd", "levels": 0}, "levels"), ({"method": "sign", "per_layer": 1},
                                                                        "per_layer")]:
        with pytest.raises(ValueError, match=field):
            compression.make(**kwargs)
