"""AdaComp, natural compression and the induced compressor: hand examples, unbiasedness, bytes by hand."""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxcomm import compression

KEY = jax.random.PRNGKey(0)

# two bins of 5 (L_T = 5): G = r + g, H = G + g
G1 = np.array([0.5, -1.0, 0.2, 0.1, 0.3, 2.0, -0.4, 0.1, 0.0, 0.5], np.float32)
R0 = np.array([0.3, 0.2, -0.1, 0.0, 0.6, -1.0, -0.2, 0.0, 0.0, -1.6], np.float32)
# G = [0.8, -0.8, 0.1, 0.1, 0.9 | 1.0, -0.6, 0.1, 0.0, -1.1]: g_max 0.9 and 1.1
# H = [1.3, -1.8, 0.3, 0.2, 1.2 | 3.0, -1.0, 0.2, 0.0, -0.6]
# bin 1 sends 0, 1, 4 (|H| >= 0.9); bin 2 sends 5 only: 6 has |H| = 1.0 < 1.1, and 9, the bin's largest |G|,
# stays because the new gradient (+0.5) turns it back (|H| = 0.6)
G = R0 + G1
SENT = np.isin(np.arange(10), [0, 1, 4, 5])


def with_residual(compressor, residual):
    state = compressor.init({"w": jnp.zeros(10)})
    return state._replace(residual={"w": jnp.asarray(residual)})


def test_adacomp_sends_by_bin_and_keeps_the_rest_exactly():
    exact = compression.adacomp(5, quantize=False)
    sent, state = exact.update({"w": jnp.asarray(G1)}, with_residual(exact, R0), KEY)
    np.testing.assert_allclose(sent["w"], np.where(SENT, G, 0), rtol=1e-6)
    np.testing.assert_allclose(state.residual["w"], np.where(SENT, 0, G), rtol=1e-6, atol=1e-7)
    assert int(state.inner.last) == 4 + min(8 * 4, 4 * 10)  # count + 4 (value, index) pairs
    # quantised: sign(G) x the mean of the bin maxima, (0.9 + 1.1) / 2 = 1; the rest of G stays
    quantised = compression.adacomp(5)
    sent, state = quantised.update({"w": jnp.asarray(G1)}, with_residual(quantised, R0), KEY)
    np.testing.assert_allclose(sent["w"], [1, -1, 0, 0, 1, 1, 0, 0, 0, 0], rtol=1e-6)
    np.testing.assert_allclose(state.residual["w"], G - np.asarray(sent["w"]), rtol=1e-6, atol=1e-7)
    np.testing.assert_allclose(state.residual["w"], [-0.2, 0.2, 0.1, 0.1, -0.1, 0, -0.6, 0.1, 0, -1.1],
                               atol=1e-6)
    assert int(state.inner.last) == 4 + 4 + min(4 * 4 + 1, math.ceil(10 / 4))  # the 2-bit layout is smaller
    # nothing is lost: what was sent over two steps plus what is kept is every gradient plus the first residual
    g2 = jnp.full(10, 0.05)
    sent2, state2 = quantised.update({"w": g2}, state, KEY)
    np.testing.assert_allclose(np.asarray(sent["w"]) + np.asarray(sent2["w"]) + np.asarray(state2.residual["w"]),
                               R0 + G1 + 0.05, rtol=1e-5, atol=1e-6)
    assert float(state2.inner.total) == int(state.inner.last) + int(state2.inner.last)


def test_adacomp_without_memory_sends_half_the_bin_maximum_and_up():
    plain = compression.make("adacomp", bin_size=5, feedback=False)
    state = plain.init({"w": jnp.zeros(10)})
    assert isinstance(state, compression.SentBytes) and compression.sent_bytes(state) is state
    sent, state = plain.update({"w": jnp.asarray(G1)}, state, KEY)
    # G = g, H = 2 g: |g| >= max |g| / 2 of the bin: 0.5 and -1.0 (max 1.0); 2.0 (max 2.0)
    scale = (1.0 + 2.0) / 2
    np.testing.assert_allclose(sent["w"], scale * np.array([1, -1, 0, 0, 0, 1, 0, 0, 0, 0]), rtol=1e-6)
    with pytest.raises(ValueError, match="bin_size"):
        compression.make("adacomp", bin_size=0)
    with pytest.raises(ValueError, match="vector code"):
        compression.vector_compressor("adacomp")


def test_adacomp_bins_by_layer_kind_and_counts_bytes_by_hand():
    params = {"conv": jnp.zeros((3, 3, 2, 4)), "dense": jnp.zeros((10, 100)), "bias": jnp.zeros(4)}  # 72, 1000, 4
    assert [compression.adacomp_bin_size(p.shape) for p in params.values()] == [50, 500, 500]
    per_layer = compression.make("adacomp")
    # the largest message: every value sent, so the 2-bit ternary layout: count + scale + ceil(d / 4) per tensor
    assert per_layer.message_bytes(params) == (8 + 18) + (8 + 250) + (8 + 1)
    assert compression.make("adacomp", per_layer=False).message_bytes(params) == 8 + math.ceil(1076 / 4)
    assert compression.adacomp(quantize=False).message_bytes(params) == (4 + 288) + (4 + 4000) + (4 + 16)
    # one nonzero value per bin of the dense kernel (bins 0-499, 500-999), nothing elsewhere: each is its bin's
    # g_max, |H| = 2 |g| >= g_max, so 2 values go; the zero tensors send nothing (G = 0)
    grads = {k: jnp.zeros_like(v) for k, v in params.items()}
    grads["dense"] = grads["dense"].at[0, 7].set(0.3).at[9, 99].set(-0.2)  # flat 7 and 999
    sent, state = jax.jit(per_layer.update)(grads, per_layer.init(params), KEY)
    scale = (0.3 + 0.2) / 2  # the dense kernel's two bin maxima
    np.testing.assert_allclose([sent["dense"][0, 7], sent["dense"][9, 99]], [scale, -scale], rtol=1e-6)
    assert int(jnp.sum(sent["dense"] != 0)) == 2 and not np.any(sent["conv"]) and not np.any(sent["bias"])
    nothing = 4 + 4 + 0  # count + scale, no index
    assert int(state.inner.last) == nothing + (4 + 4 + 4 * 2 + 1) + nothing
    assert int(compression.sent_bytes(state).last) == compression.adacomp_bytes(0, 72) + compression.adacomp_bytes(
        2, 1000) + compression.adacomp_bytes(0, 4)
    # the whole model as one message: one count, one scale (the mean of all 2 + 2 + 1 bin maxima)
    one = compression.make("adacomp", per_layer=False)
    sent, state = one.update(grads, one.init(params), KEY)
    np.testing.assert_allclose(sent["dense"][0, 7], 0.5 / 5, rtol=1e-6)
    assert int(state.inner.last) == 4 + 4 + 4 * 2 + 1


def test_natural_compression_rounds_to_powers_of_two():
    v = jnp.array([3.0, -0.75, 5.0, 4.0, 0.0, -6.0])
    draws = np.asarray(jax.vmap(lambda k: compression.natural().apply(k, v))(jax.random.split(KEY, 20_000)))
    assert set(np.unique(draws[:, 0])) == {2.0, 4.0} and set(np.unique(draws[:, 1])) == {-0.5, -1.0}
    assert set(np.unique(draws[:, 2])) == {4.0, 8.0} and np.all(draws[:, 3] == 4.0) and np.all(draws[:, 4] == 0)
    np.testing.assert_allclose(np.mean(draws[:, 2] == 8.0), 0.25, atol=5 * math.sqrt(0.25 * 0.75 / 20_000))
    # unbiased: Var of coordinate i is (hi - |v|)(|v| - lo); 5 standard errors of the mean
    var = np.array([(4 - 3) * (3 - 2), (1 - 0.75) * (0.75 - 0.5), (8 - 5) * (5 - 4), 0, 0, (8 - 6) * (6 - 4)])
    assert np.all(np.abs(draws.mean(axis=0) - np.asarray(v)) <= 5 * np.sqrt(var / 20_000) + 1e-6)
    # the deterministic rounding: the nearer power, up at the midpoint
    np.testing.assert_array_equal(compression.natural(stochastic=False).apply(KEY, v), [4, -1, 4, 4, 0, -8])
    assert compression.natural().num_bytes(16) == 18 and compression.natural().num_bytes(17) == 20  # 9 bits each


X = jnp.array([4.0, -0.5, 0.25, 3.0, -2.0, 0.1, 0.0, 1.5, -0.75, 0.6, -3.5, 0.05, 2.5, -0.2, 0.3, -1.0])  # d = 16


def test_induced_compressor_is_unbiased_and_top_k_alone_is_not():
    top, rand = compression.top_k(0.25), compression.random_k(0.25, rescale=True)  # k = 4 each
    c_ind = compression.induced(top, rand)
    m = 20_000
    draws = np.asarray(jax.vmap(lambda k: c_ind.apply(k, X))(jax.random.split(KEY, m)))
    kept = np.asarray(top.apply(KEY, X))  # 4.0, 3.0, -3.5, 2.5
    np.testing.assert_array_equal(np.flatnonzero(kept), [0, 3, 10, 12])
    rest = np.asarray(X) - kept
    # C2 = (d / k) rest_i with probability k / d, else 0: Var = rest_i^2 (d / k - 1); 5 standard errors
    tolerance = 5 * np.abs(rest) * math.sqrt((16 / 4 - 1) / m) + 1e-6
    assert np.all(np.abs(draws.mean(axis=0) - np.asarray(X)) <= tolerance)
    assert np.all(draws[:, [0, 3, 10, 12]] == kept[[0, 3, 10, 12]])  # the top-k part is always sent as is
    # C2 replaced by zero: C_ind = top-k, whose mean misses every value it dropped by far more than the tolerance
    zero = compression.VectorCompressor(lambda key, v: jnp.zeros_like(v), lambda d: 0)
    alone = np.asarray(jax.vmap(lambda k: compression.induced(top, zero).apply(k, X))(jax.random.split(KEY, 100)))
    missed = np.abs(alone.mean(axis=0) - np.asarray(X))
    dropped = rest != 0
    assert np.all(missed[dropped] > tolerance[dropped]) and np.all(missed[~dropped] == 0)
    # a biased C1 beside top-k: the deterministic natural rounding, made unbiased by the same construction
    rounded = compression.induced(compression.natural(stochastic=False), rand)
    draws = np.asarray(jax.vmap(lambda k: rounded.apply(k, X))(jax.random.split(KEY, m)))
    rest = np.asarray(X) - np.asarray(compression.natural(stochastic=False).apply(KEY, X))
    assert np.any(rest != 0)
    assert np.all(np.abs(draws.mean(axis=0) - np.asarray(X)) <= 5 * np.abs(rest) * math.sqrt(3 / m) + 1e-6)


def test_induced_bytes_by_hand_and_make_with_and_without_feedback():
    grads = {"w": X}
    # top-k: 4 x (4 value + 4 index); rescaled random-k: 4 x 4 values + a 4-byte seed
    assert compression.make("induced", fraction=0.25).message_bytes(grads) == 4 * 8 + 4 * 4 + 4 == 52
    assert compression.make("natural").message_bytes(grads) == math.ceil(9 * 16 / 8)
    per_tensor = {"a": jnp.zeros((4, 5)), "b": jnp.zeros(3)}  # k = 5 and 1 (at least one)
    assert compression.make("induced", fraction=0.25).message_bytes(per_tensor) == (5 * 12 + 4) + (1 * 12 + 4)
    for method in ("induced", "natural", "natural_det", "adacomp"):
        for feedback in (True, False):
            c = compression.make(method, fraction=0.25, feedback=feedback)
            state = c.init(grads)
            assert isinstance(state, compression.ErrorFeedbackState) == feedback
            sent, state = jax.jit(c.update)(grads, state, KEY)
            assert sent["w"].shape == (16,) and np.all(np.isfinite(np.asarray(sent["w"])))
            if feedback:  # what was not sent is kept
                np.testing.assert_allclose(np.asarray(sent["w"]) + np.asarray(state.residual["w"]), X, rtol=1e-6,
                                           atol=1e-6)
    assert compression.sent_bytes(compression.make("top_k").init(grads)) is None
    assert set(compression.METHODS) >= {"natural", "natural_det", "induced", "adacomp"}


def test_adacomp_and_induced_run_in_synchronous_sgd(tiny_dataset):
    from jaxcomm import data_parallel, models, network  # noqa: PLC0415

    config = network.NetworkConfig(num_nodes=2, batch_size=4, num_steps=2, eval_every=2)
    for compressor in (compression.make("adacomp"), compression.make("induced", fraction=0.1, feedback=False)):
        system = data_parallel.make_data_parallel(config, models.MLP(hidden=(6,), num_classes=4),
                                                  image_shape=tiny_dataset.train.images.shape[1:], num_classes=4,
                                                  compressor=compressor)
        data, step = network.network_data(tiny_dataset, config), jax.jit(system.step)
        state = system.init(jax.random.PRNGKey(0))
        for _ in range(2):
            state, _ = step(state, data)
        params = jax.tree_util.tree_leaves(state.nodes.params)
        assert all(np.all(np.isfinite(np.asarray(p))) for p in params)
        counter = compression.sent_bytes(state.extra)
        if counter is not None:  # AdaComp: every node counted what it sent, at most the static bound a step
            assert counter.last.shape == (2,) and np.all(np.asarray(counter.last) <= system.message_bytes)
            assert np.all(np.asarray(counter.total) >= np.asarray(counter.last))
