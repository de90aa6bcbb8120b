"""Thesis ch. 2 unsupervised (§2.2.4): Gaussian KL, VAE / BiGAN node programs, linear probes, Table 2.3 smoke run."""

from __future__ import annotations

import json
import math

import chex
import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from experiments import unsupervised_exchange as ue
from experiments.unsupervised_exchange import report as ue_report
from jaxcomm import driver, probe, unsupervised
from jaxcomm.models.bigan import BiGAN, PairDiscriminator
from jaxcomm.models.vae import VAE, ConvDecoder, depth_to_space

SHAPE = (8, 8, 1)
B, Z = 4, 3


def _images(seed: int = 0, n: int = B) -> jax.Array:
    return jnp.asarray(np.random.default_rng(seed).integers(0, 256, (n, *SHAPE)), jnp.uint8)


def _tree_equal(a, b) -> bool:
    return all(bool(jnp.array_equal(x, y)) for x, y in zip(jax.tree_util.tree_leaves(a), jax.tree_util.tree_leaves(b),
                                                            strict=True))


# --------------------------------------------------------------------------- Gaussian KL


def test_gaussian_kl_matches_its_closed_form_by_hand():
    # KL(N(0, 1) || N(1, 4)) = log 2 + (1 + 1) / (2 * 4) - 1/2 = 0.443147...
    # KL(N(1, 4) || N(0, 1)) = (-log 4 + 4 + 1 - 1) / 2.
    forward = unsupervised.gaussian_kl(jnp.array([0.0]), jnp.array([0.0]), jnp.array([1.0]), jnp.array([math.log(4)]))
    backward = unsupervised.gaussian_kl(jnp.array([1.0]), jnp.array([math.log(4)]), jnp.array([0.0]), jnp.array([0.0]))
    assert float(forward) == pytest.approx(math.log(2) + 0.25 - 0.5, abs=1e-6)
    assert float(backward) == pytest.approx(0.5 * (-math.log(4) + 4 + 1 - 1), abs=1e-6)
    # Summed over the last axis, batched over the others; zero between equal Gaussians.
    mu, logvar = jnp.array([[0.0, 1.0], [2.0, -1.0]]), jnp.array([[0.0, math.log(4)], [0.5, 0.0]])
    both = unsupervised.gaussian_kl(mu, logvar, jnp.array([[1.0, 0.0]] * 2), jnp.array([[math.log(4), 0.0]] * 2))
    chex.assert_shape(both, (2,))
    assert float(both[0]) == pytest.approx(float(forward) + float(backward), abs=1e-5)
    np.testing.assert_allclose(unsupervised.gaussian_kl(mu, logvar, mu, logvar), 0.0, atol=1e-6)


def test_gaussian_kl_agrees_with_monte_carlo_and_the_prior_kl():
    rng = np.random.default_rng(0)
    mu_p, mu_q = rng.normal(size=3), rng.normal(size=3)
    logvar_p, logvar_q = rng.normal(scale=0.5, size=3), rng.normal(scale=0.5, size=3)
    x = mu_p + np.exp(0.5 * logvar_p) * rng.normal(size=(400_000, 3))
    log_density = lambda x, mu, logvar: -0.5 * (np.log(2 * np.pi) + logvar + (x - mu) ** 2 / np.exp(logvar))
    monte_carlo = np.mean(np.sum(log_density(x, mu_p, logvar_p) - log_density(x, mu_q, logvar_q), axis=-1))
    exact = float(unsupervised.gaussian_kl(*(jnp.asarray(v, jnp.float32) for v in (mu_p, logvar_p, mu_q, logvar_q))))
    assert exact == pytest.approx(monte_carlo, abs=0.02)
    prior = 0.5 * np.sum(mu_p ** 2 + np.exp(logvar_p) - 1 - logvar_p)
    assert float(unsupervised.prior_kl(jnp.asarray(mu_p), jnp.asarray(logvar_p))) == pytest.approx(prior, rel=1e-5)


# --------------------------------------------------------------------------- models


def test_decoder_mirrors_the_encoder_and_crops_to_the_image():
    z = jnp.ones((2, 5))
    for shape in ((32, 32, 3), (28, 28, 1)):
        decoder = ConvDecoder(widths=(2, 2, 2), image_shape=shape)
        out, _ = jax.eval_shape(lambda d=decoder: d.init_with_output(jax.random.PRNGKey(0), z))
        chex.assert_shape(out, (2, *shape))
    # depth-to-space: channel (i, j, c) of a low-resolution pixel lands at offset (i, j) of its 2x2 block.
    h = jnp.arange(8, dtype=jnp.float32).reshape(1, 1, 1, 8)  # one pixel, 2x2 blocks of 2 channels
    up = depth_to_space(h)
    chex.assert_shape(up, (1, 2, 2, 2))
    np.testing.assert_array_equal(up[0, :, :, 0], [[0, 2], [4, 6]])


def test_vae_posterior_shapes_and_parameter_count():
    model = VAE(widths=(4,), latent=Z, image_shape=SHAPE)
    params = jax.eval_shape(lambda: model.init(jax.random.PRNGKey(0), jnp.zeros((1, *SHAPE)), jnp.zeros((1, Z))))
    params = params["params"]
    logits, mu, logvar = jax.eval_shape(lambda p: model.apply({"params": p}, jnp.zeros((B, *SHAPE)),
                                                              jnp.zeros((B, Z))), params)
    chex.assert_shape([logits, mu, logvar], [(B, *SHAPE), (B, Z), (B, Z)])
    # encoder: conv 4x4x1x4 + 4, dense 4*4*4 -> 2Z; decoder: dense Z -> 4*4*4, conv 3x3x4 -> 4*1 (+ biases).
    count = sum(int(np.prod(p.shape)) for p in jax.tree_util.tree_leaves(params))
    assert count == (16 * 4 + 4) + (64 * 2 * Z + 2 * Z) + (Z * 64 + 64) + (9 * 4 * 4 + 4)


def test_initializer_draws_flax_default_distributions():
    model = BiGAN(widths=(8,), latent=Z, image_shape=SHAPE, hidden=64)
    abstract = jax.eval_shape(lambda: model.init({"params": jax.random.PRNGKey(0), "dropout": jax.random.PRNGKey(0)},
                                                 jnp.zeros((1, *SHAPE)), jnp.zeros((1, Z))))
    variables = unsupervised.initializer(abstract)(jax.random.PRNGKey(0))
    chex.assert_trees_all_equal_shapes_and_dtypes(variables, abstract)
    params = variables["params"]
    kernel = params["discriminator"]["Dense_1"]["kernel"]  # fan-in 8 * 4 * 4 + 64 = 192
    assert float(jnp.std(kernel)) == pytest.approx(1 / math.sqrt(192), rel=0.05)
    assert float(jnp.abs(params["encoder"]["Dense_0"]["bias"]).max()) == 0.0
    bn = params["generator"]["BatchNorm_0"]
    assert float(bn["scale"].min()) == 1.0 and float(bn["bias"].max()) == 0.0
    stats = variables["batch_stats"]["generator"]["BatchNorm_0"]
    assert float(stats["mean"].max()) == 0.0 and float(stats["var"].min()) == 1.0
    # Two keys, two nodes: different draws.
    other = unsupervised.initializer(abstract)(jax.random.PRNGKey(1))["params"]["discriminator"]["Dense_1"]["kernel"]
    assert not jnp.array_equal(kernel, other)


# --------------------------------------------------------------------------- BiGAN


@pytest.fixture(scope="module")
def bigan():
    """A tiny BiGAN node ("replace", exchange weight 0.5, Adam 1e-3), its jitted step and initial state."""
    model = BiGAN(widths=(4,), latent=Z, image_shape=SHAPE, hidden=8, dropout=0.0)
    program = unsupervised.bigan_program(model, learning_rate=1e-3, exchange_weight=0.5)
    return model, jax.jit(program.train), program.init(jax.random.PRNGKey(0))


@pytest.fixture(scope="module")
def vae():
    """A tiny VAE node ("replace", exchange weight 2, Adam 1e-2), its jitted step and initial state."""
    model = VAE(widths=(4,), latent=Z, image_shape=SHAPE)
    program = unsupervised.vae_program(model, learning_rate=1e-2, exchange_weight=2.0)
    return model, program, jax.jit(program.train), program.init(jax.random.PRNGKey(0))


def test_bigan_discriminator_sees_real_pairs_x_ex_and_fake_pairs_gz_z(bigan):
    model, _, state = bigan
    x = unsupervised.to_signed(_images())
    z = jax.random.normal(jax.random.PRNGKey(1), (B, Z))
    seen = []

    def record(next_fun, args, kwargs, context):
        if isinstance(context.module, PairDiscriminator) and context.method_name == "__call__":
            seen.append(args)
        return next_fun(*args, **kwargs)

    with nn.intercept_methods(record):
        terms = unsupervised.bigan_terms(model, state.params, state.model_state, x, z, train=False)
    assert len(seen) == 1  # one call on real pairs stacked over fake pairs
    images, codes = seen[0]
    variables = {"params": state.params, **state.model_state}

    @jax.jit
    def reference(v):
        encoded, generated = model.apply(v, x, method=BiGAN.encode), model.apply(v, z, method=BiGAN.generate)
        return (encoded, generated, model.apply(v, x, encoded, method=BiGAN.discriminate),
                model.apply(v, generated, z, method=BiGAN.discriminate))

    encoded, generated, real, fake = reference(variables)
    np.testing.assert_allclose(images[:B], x)                      # real: x ...
    np.testing.assert_allclose(codes[:B], encoded, atol=1e-6)      # ... with E(x)
    np.testing.assert_allclose(images[B:], generated, atol=1e-6)   # fake: G(z) ...
    np.testing.assert_allclose(codes[B:], z)                       # ... with z
    # The discriminator calls real "1" and fake "0"; generator and encoder get the swapped labels.
    softplus = jax.nn.softplus
    assert float(terms.d_loss) == pytest.approx(float(jnp.mean(softplus(-real)) + jnp.mean(softplus(fake))), rel=1e-5)
    assert float(terms.ge_loss) == pytest.approx(float(jnp.mean(softplus(real)) + jnp.mean(softplus(-fake))), rel=1e-5)


def test_bigan_step_moves_each_part_with_its_own_loss(bigan):
    model, step, state = bigan
    images, key = _images(), jax.random.PRNGKey(3)
    new, (loss, outgoing) = step(state, images, jnp.zeros((B, 10)), jnp.zeros((B, Z)), jnp.array(False), key)
    chex.assert_shape(outgoing, (B, Z))
    chex.assert_tree_all_finite((new, loss))
    # Expected: one Adam step of D on grad(d_loss), of G and E on grad(ge_loss), all at the same point.
    x = unsupervised.to_signed(images)
    k_z, k_dropout = jax.random.split(key)
    z = jax.random.normal(k_z, (B, Z))
    terms = lambda p: unsupervised.bigan_terms(model, p, state.model_state, x, z, train=True, key=k_dropout)
    d_grads, ge_grads, reference = jax.jit(lambda p: (jax.grad(lambda q: terms(q).d_loss)(p),
                                                      jax.grad(lambda q: terms(q).ge_loss)(p), terms(p)))(state.params)
    adam_first_step = lambda g: -1e-3 * g / (jnp.abs(g) + 1e-8)  # m_hat / sqrt(v_hat) = sign(g) at step 1
    expected = {"discriminator": d_grads["discriminator"], "encoder": ge_grads["encoder"],
                "generator": ge_grads["generator"]}
    for name, grad in expected.items():
        moved = jax.tree_util.tree_map(lambda a, b: a - b, new.params[name], state.params[name])
        chex.assert_trees_all_close(moved, jax.tree_util.tree_map(adam_first_step, grad), atol=1e-6)
    assert float(loss) == pytest.approx(float(reference.d_loss + reference.ge_loss), rel=1e-5)
    assert not _tree_equal(new.model_state, state.model_state)  # the generator's BatchNorm statistics moved


def test_consumed_bigan_step_matches_features_and_moves_only_the_encoder(bigan):
    model, step, state = bigan
    images = _images()
    sender = jax.random.normal(jax.random.PRNGKey(5), (B, Z))
    new, (loss, outgoing) = step(state, images, jnp.zeros((B, 10)), sender, jnp.array(True), jax.random.PRNGKey(1))
    encoded = jax.jit(lambda v: model.apply(v, unsupervised.to_signed(images), method=BiGAN.encode))(
        {"params": state.params, **state.model_state})
    mse = 0.5 * float(jnp.mean(jnp.sum((encoded - sender) ** 2, axis=-1)))  # eq. 2.2.3
    assert float(loss) == pytest.approx(0.5 * mse, rel=1e-5)  # weight 0.5, the exchange loss only ("replace")
    np.testing.assert_allclose(outgoing, encoded, atol=1e-6)  # a receiver re-broadcasts its own features
    assert not _tree_equal(new.params["encoder"], state.params["encoder"])
    for part in ("generator", "discriminator"):  # untouched, Adam moments included
        assert _tree_equal(new.params[part], state.params[part]) and _tree_equal(new.opt_state[part],
                                                                                 state.opt_state[part]), part
    assert _tree_equal(new.model_state, state.model_state)


def test_label_smoothing_moves_only_the_real_term_of_the_discriminator_loss(bigan):
    model, _, state = bigan
    x = unsupervised.to_signed(_images())
    z = jax.random.normal(jax.random.PRNGKey(1), (B, Z))
    terms = jax.jit(lambda r: unsupervised.bigan_terms(model, state.params, state.model_state, x, z, train=False,
                                                       real_label=r))
    sharp, smooth = terms(1.0), terms(0.9)
    softplus = jax.nn.softplus
    # 0.9 * -log D(real) + 0.1 * -log(1 - D(real)): the fake term and the generator's loss are unchanged
    shift = 0.1 * float(jnp.mean(softplus(sharp.real_logits)) - jnp.mean(softplus(-sharp.real_logits)))
    assert float(smooth.d_loss - sharp.d_loss) == pytest.approx(shift, rel=1e-4)
    assert float(smooth.ge_loss) == float(sharp.ge_loss)


def test_the_discriminator_takes_its_own_learning_rate(bigan):
    model = bigan[0]
    program = unsupervised.bigan_program(model, learning_rate=1e-3, disc_learning_rate=4e-3)
    state = program.init(jax.random.PRNGKey(0))
    new, _ = jax.jit(program.train)(state, _images(), jnp.zeros((B, 10)), jnp.zeros((B, Z)), jnp.array(False),
                                    jax.random.PRNGKey(3))
    largest = lambda part: max(float(jnp.abs(a - b).max()) for a, b in zip(
        jax.tree_util.tree_leaves(new.params[part]), jax.tree_util.tree_leaves(state.params[part]), strict=True))
    # Adam's first step moves every parameter by its learning rate times the sign of its gradient.
    assert largest("discriminator") == pytest.approx(4e-3, rel=1e-3)
    assert largest("encoder") == pytest.approx(1e-3, rel=1e-3)
    assert largest("generator") == pytest.approx(1e-3, rel=1e-3)
    with pytest.raises(ValueError, match="real_label"):
        unsupervised.bigan_program(model, real_label=1.5)


def test_spectral_norm_divides_each_discriminator_kernel_by_its_largest_singular_value():
    model = BiGAN(widths=(4,), latent=Z, image_shape=SHAPE, hidden=8, dropout=0.0, spectral_norm=True)
    program = unsupervised.bigan_program(model)
    state = program.init(jax.random.PRNGKey(0))
    stats = state.model_state["batch_stats"]["discriminator"]
    assert len(stats) == 4  # one conv, three dense layers, each with its power-iteration vector and sigma
    x = unsupervised.to_signed(_images())
    z = jax.random.normal(jax.random.PRNGKey(1), (B, Z))
    variables = {"params": state.params, **state.model_state}
    for _ in range(30):  # power iterations from the initializer's random u
        _, variables_state = jax.jit(lambda v: model.apply(v, x, z, train=True, method=BiGAN.discriminate,
                                                           mutable=["batch_stats"]))(variables)
        variables = {"params": state.params, **variables_state}
    sigmas = {key.split("/")[0]: value for stat in variables["batch_stats"]["discriminator"].values()
              for key, value in stat.items() if key.endswith("/sigma")}  # "Conv_0/kernel/sigma"
    assert set(sigmas) == set(state.params["discriminator"])
    for name, sigma in sigmas.items():
        kernel = state.params["discriminator"][name]["kernel"]
        largest = np.linalg.svd(np.asarray(kernel).reshape(-1, kernel.shape[-1]), compute_uv=False)[0]
        assert float(sigma) == pytest.approx(float(largest), rel=1e-3), name


# --------------------------------------------------------------------------- VAE


def test_vae_step_is_the_negative_elbo_and_ignores_labels(vae):
    model, _, step, state = vae
    images, key = _images(), jax.random.PRNGKey(2)
    args = (jnp.zeros((B, 2 * Z)), jnp.array(False), key)
    new, (loss, outgoing) = step(state, images, jnp.zeros((B, 10)), *args)
    other, (loss2, _) = step(state, images, jax.nn.one_hot(jnp.arange(B), 10), *args)
    assert _tree_equal(new, other) and float(loss) == float(loss2)  # labels are never read
    eps = jax.random.normal(key, (B, Z))
    terms = jax.jit(lambda p: unsupervised.vae_terms(model, p, images, eps))(state.params)
    assert float(loss) == pytest.approx(float(jnp.mean(terms.reconstruction + terms.kl)), rel=1e-6)
    np.testing.assert_allclose(outgoing, jnp.concatenate([terms.mu, terms.logvar], -1), atol=1e-6)
    assert not _tree_equal(new.params["decoder"], state.params["decoder"])
    # Bernoulli NLL by hand for one image: -sum x log s + (1 - x) log(1 - s).
    x = images[:1].astype(jnp.float32) / 255
    logits = jnp.linspace(-2, 2, x.size).reshape(x.shape)
    s = jax.nn.sigmoid(logits)
    by_hand = -jnp.sum(x * jnp.log(s) + (1 - x) * jnp.log(1 - s))
    assert float(unsupervised.bernoulli_nll(logits, x)[0]) == pytest.approx(float(by_hand), rel=1e-5)


def test_consumed_vae_step_pulls_the_posterior_toward_the_senders(vae):
    model, program, step, state = vae
    images = _images()
    sender = jnp.concatenate([jnp.full((B, Z), 1.5), jnp.full((B, Z), -1.0)], axis=-1)
    posterior = jax.jit(lambda p: model.apply({"params": p}, images.astype(jnp.float32) / 255, method=VAE.encode))
    kl = lambda s: float(jnp.mean(unsupervised.gaussian_kl(sender[:, :Z], sender[:, Z:], *posterior(s.params))))
    consumed = (jnp.zeros((B, 10)), sender, jnp.array(True), jax.random.PRNGKey(1))
    first = kl(state)
    new, (loss, _) = step(state, images, *consumed)
    assert float(loss) == pytest.approx(2.0 * first, rel=1e-5)  # weight 2, the exchange loss only ("replace")
    assert _tree_equal(new.params["decoder"], state.params["decoder"])
    assert _tree_equal(new.opt_state["decoder"], state.opt_state["decoder"])
    for _ in range(20):
        new, _ = step(new, images, *consumed)
    assert kl(new) < 0.5 * first
    # "add": the ELBO trains the decoder on the consumed images too.
    added = unsupervised.vae_program(model, learning_rate=1e-2, exchange_weight=2.0, consumed_objective="add")
    new, (loss, _) = jax.jit(added.train)(state, images, *consumed)
    assert not _tree_equal(new.params["decoder"], state.params["decoder"])
    assert float(loss) > 2.0 * first


# --------------------------------------------------------------------------- linear probe


def _separable(rng, n, f=6, c=3):
    labels = rng.integers(0, c, n)
    features = rng.normal(size=(n, f)) * 0.3 + 5.0
    features[np.arange(n), labels] += 3.0  # class k lifts feature k
    return features.astype(np.float32), labels.astype(np.int32)


def test_probe_learns_separable_features_and_keeps_its_best_epoch():
    rng = np.random.default_rng(0)
    (x, y), (vx, vy) = _separable(rng, 600), _separable(rng, 200)
    config = probe.ProbeConfig(epochs=8, batch_size=64, learning_rate=0.05)
    fitted = jax.jit(probe.train_probe, static_argnames=("num_classes", "config"))(
        jax.random.PRNGKey(0), x, y, vx, vy, num_classes=3, config=config)
    chex.assert_shape([fitted.weights, fitted.bias, fitted.val_curve], [(6, 3), (3,), (8,)])
    assert float(fitted.val_accuracy) > 0.97
    assert float(fitted.val_accuracy) == pytest.approx(float(jnp.max(fitted.val_curve)))
    assert int(fitted.best_epoch) == int(jnp.argmax(fitted.val_curve)) + 1  # the earliest best epoch, 1-based
    # The standardisation is folded in: the raw-feature classifier scores what early stopping measured.
    accuracy = jnp.mean(jnp.argmax(probe.probe_logits(fitted, vx), -1) == vy)
    assert float(accuracy) == pytest.approx(float(fitted.val_accuracy), abs=1e-6)


def test_probes_of_all_nodes_equal_single_node_probes_and_feed_the_collective():
    rng = np.random.default_rng(1)
    splits = [_separable(rng, n) for n in (300, 100, 100)]
    noise = rng.normal(size=(3, 500, 6)).astype(np.float32) * np.array([0.0, 2.0, 4.0])[:, None, None]
    feats = [np.stack([s[0] + noise[i, : len(s[0])] for i in range(3)]) for s in splits]  # 3 nodes, noisier and noisier
    config = probe.ProbeConfig(epochs=3, batch_size=50, learning_rate=0.05)
    key = jax.random.PRNGKey(0)
    result = unsupervised.probe_accuracies(key, (feats[0], splits[0][1]), (feats[1], splits[1][1]),
                                           (feats[2], splits[2][1]), num_classes=3, config=config)
    train_one = jax.jit(probe.train_probe, static_argnames=("num_classes", "config"))
    for i in range(3):
        single = train_one(key, feats[0][i], splits[0][1], feats[1][i], splits[1][1], num_classes=3, config=config)
        accuracy = 100 * float(jnp.mean(jnp.argmax(probe.probe_logits(single, feats[2][i]), -1)
                                        == splits[2][1]))
        assert result["node_accuracies"][i] == pytest.approx(accuracy, abs=1e-3), i
        assert result["best_epochs"][i] == int(single.best_epoch)
    assert result["avg_accuracy"] == pytest.approx(np.mean(result["node_accuracies"]))
    assert set(result["collective_accuracy"]) == {"negentropy", "entropy", "mean", "vote"}
    one = unsupervised.probe_accuracies(key, (feats[0][:1], splits[0][1]), (feats[1][:1], splits[1][1]),
                                        (feats[2][:1], splits[2][1]), num_classes=3, config=config)
    assert all(v == pytest.approx(one["avg_accuracy"]) for v in one["collective_accuracy"].values())


def test_best_stage_is_the_best_validation_and_the_earliest_on_ties():
    history = [{"step": 10}, {"step": 20, "probe": {"val_avg_accuracy": 30.0}},
               {"step": 30, "probe": {"val_avg_accuracy": 35.0}}, {"step": 40, "probe": {"val_avg_accuracy": 35.0}}]
    assert unsupervised.best_stage(history)["step"] == 30
    assert unsupervised.best_stage(history[:1]) is None


# --------------------------------------------------------------------------- the experiment


# Three of the six rows (VAE and BiGAN; 1 node without, 10 nodes with communication), to keep the suite fast:
# every row compiles its own network step. `--preset smoke` alone runs all six.
SMOKE_ROWS = ("vae_1_node", "vae_10_nodes_full_comm", "bigan_10_nodes_full_comm")


@pytest.fixture(scope="module")
def smoke(tmp_path_factory):
    out = tmp_path_factory.mktemp("unsupervised_exchange")
    watches, train = {}, driver.train

    def recorded(*args, **kwargs):  # each row's divergence watch, as the driver gets it
        watches[kwargs["desc"].split(" run ")[0]] = kwargs["divergence"]
        return train(*args, **kwargs)

    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("JAXCOMM_NO_REPORT", "1")  # drawn once, below
        patch.setattr(driver, "train", recorded)
        assert ue.main(["--preset", "smoke", "--out", str(out), "rows=" + ",".join(SMOKE_ROWS)]) == 0
    ue.write_report(out)
    return out, json.loads((out / "summary.json").read_text()), watches


def test_smoke_preset_runs_end_to_end_with_the_schema(smoke):
    out, summary, watches = smoke
    assert summary["experiment"] == "unsupervised_exchange" and summary["preset"] == "smoke"
    assert list(summary["rows"]) == list(SMOKE_ROWS) and ue.smoke_config().rows == tuple(ue_report.ROWS)
    # A BiGAN's loss scores a game: only non-finite losses stop it; a VAE's past 100x its untrained loss too.
    assert watches == {"vae_1_node": 100.0, "vae_10_nodes_full_comm": 100.0,
                       "bigan_10_nodes_full_comm": None}
    stages = list(ue.smoke_config().probe_steps)
    for name, row in summary["rows"].items():
        family, nodes, communicate = ue_report.ROWS[name]
        assert {"avg_accuracy", "collective_accuracy", "best_steps", "avg_accuracy_sd"} <= set(row), name
        # two seeds, one sweep: the row is their mean, each seed's row kept
        assert row["seeds"] == [0, 1] and len(row["per_seed"]) == 2 and set(row["best_steps"]) <= set(stages)
        assert row["avg_accuracy"] == pytest.approx(np.mean([p["avg_accuracy"] for p in row["per_seed"]]))
        assert 0 <= row["avg_accuracy"] <= 100
        assert (row["collective_accuracy"] is None) == (nodes == 1), name
        assert 0 <= row["untrained_avg_accuracy"] <= 100, name  # the control: probes of the untrained encoders
        assert (row["untrained_collective_accuracy"] is None) == (nodes == 1), name
        assert [s["step"] for s in row["stages"]] == stages
        assert row["family"] == family and row["nodes"] == nodes and row["communication"] == communicate
        assert (row["broadcast_prob"] > 0) == communicate and (row["consume_prob"] > 0) == communicate
        counters = row["counters"]
        assert counters["received"] == counters["consumed"] + counters["dropped"] + counters["pending"]
        assert all(np.isfinite(v) for v in row["final_objective"].values())
        if family == "vae":  # the ELBO rises from the untrained nodes' (4 steps: about 20 nats per image)
            assert row["final_objective"]["neg_elbo"] < row["initial_objective"]["neg_elbo"] - 5, name
    records = [json.loads(line) for line in (out / "curves.jsonl").read_text().splitlines()]
    pictures = [r for r in records if r["kind"] == "pictures"]
    assert [r["run"] for r in pictures] == list(SMOKE_ROWS)
    assert ue_report.decode_images(pictures[0]["samples"]).shape == (4, 28, 28, 1)
    for path in ("table.md", "probes.png", "objectives.png", "pictures.png"):
        assert (out / path).is_file(), path
    table = (out / "table.md").read_text()
    assert "Table 2.3" in table and "41.8" in table and "46.2" in table  # thesis numbers of the rows run
    # every seed's untrained encoders are probed: the control each row is paired with
    for name, row in summary["rows"].items():
        assert all(0 <= p["untrained_avg_accuracy"] <= 100 for p in row["per_seed"]), name
        assert row["consumed_objective"] == ("replace" if ue_report.ROWS[name][2] else None), name
    assert "| VAE: exchanging (replace) vs untrained encoders | avg |" in table


def test_paired_comparisons_read_the_untrained_encoders_of_each_seed_as_the_control():
    def row(nodes, avgs, untrained):
        pairs = zip(avgs, untrained, strict=True)
        return {"seeds": [0, 1, 2], "per_seed": [
            {"avg_accuracy": a, "collective_accuracy": None if nodes == 1 else a + 2, "untrained_avg_accuracy": u,
             "untrained_collective_accuracy": None if nodes == 1 else u + 1} for a, u in pairs]}

    rows = {"vae_1_node": row(1, (40, 41, 40), (35, 35, 36)),
            "vae_10_nodes_no_comm": row(10, (38, 38, 38), (34, 35, 33)),
            "vae_10_nodes_full_comm": row(10, (40, 41, 42), (34, 35, 33)),
            "vae_10_nodes_full_comm_add": row(10, (39, 40, 38), (34, 35, 33))}
    lines = ue_report.paired_markdown(rows)
    # full - isolated: 2, 3, 4 -> mean 3, half-width t(0.975, 2) x 1 / sqrt(3) = 2.48, t = 5.20, p = 1 - t / sqrt(t^2
    # + 2) = 0.035 (2 degrees of freedom); Holm over the table's 12 tests (two have zero spread): 0.211, not read
    assert ("| VAE: exchanging features (replace) vs isolated nodes | avg | +3.0 | [+0.5, +5.5] | 0.035 | 0.211 | no |"
            in lines)
    # add - replace: -1, -1, -4 -> mean -2, sd 1.73, half-width 4.30 -> [-6.3, +2.3], t = 2, p = 0.184
    assert "| VAE: add vs replace | avg | -2.0 | [-6.3, +2.3] | 0.184 | 0.734 | no |" in lines
    # against each seed's own untrained encoders: full collective (42, 43, 44) - (35, 36, 34) = 7, 7, 10
    assert ("| VAE: exchanging (replace) vs untrained encoders | collective | +8.0 | [+3.7, +12.3] | 0.015 | 0.157 "
            "| no |") in lines
    # one node: 5, 6, 4 -> [+2.5, +7.5], t = 8.66, p = 0.013; no collective to compare
    assert "| VAE: one node vs its untrained encoder | avg | +5.0 | [+2.5, +7.5] | 0.013 | 0.157 | no |" in lines
    assert not any(line.startswith("| VAE: one node vs its untrained encoder | collective") for line in lines)


def test_report_tables_the_runs_in_variants_by_their_overrides(smoke, tmp_path):
    import shutil

    out, summary, _ = smoke
    copy = tmp_path / "run"
    shutil.copytree(out, copy)
    shutil.copytree(out, copy / "variants" / "a")
    ue.write_report(copy)
    table = (copy / "table.md").read_text()
    assert "## Variants" in table
    variants = table.split("## Variants")[1]
    for name, row in summary["rows"].items():  # one line per row of the variant, its probe stages listed
        assert f"| {name} |" in variants and f"{row['avg_accuracy']:.1f} ({row['best_step']:,})" in variants
    assert ue_report.overrides_of("python e.py --preset cpu --out d rows=bigan_1_node probe_untrained=False "
                                  "num_steps=2400 disc_dropout=0.5") == "num_steps=2400 disc_dropout=0.5"


def test_the_reported_stage_is_the_best_by_validation(smoke):
    _, summary, _ = smoke
    for name, row in summary["rows"].items():
        for seed in row["per_seed"]:
            best = max(seed["stages"], key=lambda s: (s["val_avg_accuracy"], -s["step"]))
            assert seed["best_step"] == best["step"], name
            assert seed["avg_accuracy"] == pytest.approx(best["avg_accuracy"]), name


def test_a_seed_of_the_sweep_equals_its_run_alone(smoke, tmp_path):
    _, summary, _ = smoke
    name = "vae_10_nodes_full_comm"
    assert ue.main(["--preset", "smoke", "--out", str(tmp_path), f"rows={name}", "seed=1", "num_seeds=1"]) == 0
    alone = json.loads((tmp_path / "summary.json").read_text())["rows"][name]
    in_sweep = summary["rows"][name]["per_seed"][1]
    assert in_sweep["counters"] == alone["counters"]
    for key in ("avg_accuracy", "collective_accuracy", "val_avg_accuracy"):
        assert in_sweep[key] == pytest.approx(alone[key], abs=1e-3), key
    assert in_sweep["final_objective"] == pytest.approx(alone["final_objective"], rel=1e-4)


BAD = [
    ("dataset", {"dataset": "svhn"}),
    ("validation_size", {"validation_size": 0}),
    ("widths", {"widths": ()}),
    ("latent", {"latent": 0}),
    ("disc_dropout", {"disc_dropout": 1.0}),
    ("disc_learning_rate", {"disc_learning_rate": -1e-4}),
    ("disc_real_label", {"disc_real_label": 0.0}),
    ("disc_spectral_norm", {"disc_spectral_norm": 1}),
    ("batch_size", {"batch_size": 0}),
    ("vae_learning_rate", {"vae_learning_rate": 0.0}),
    ("bigan_beta1", {"bigan_beta1": 1.0}),
    ("exchange_weight", {"exchange_weight": -1.0}),
    ("consumed_objective", {"consumed_objective": "both"}),
    ("consume_prob", {"consume_prob": 0.0}),
    ("probe_every", {"eval_every": 300, "probe_every": 700}),
    ("num_steps", {"num_steps": 1000, "probe_every": 700}),
    ("probe_epochs", {"probe_epochs": 0}),
    ("backend", {"backend": "gpu"}),
    ("rows", {"rows": ("vae_20_nodes",)}),
    ("rows", {"rows": ()}),
    ("seed", {"seed": 0.5}),
]


@pytest.mark.parametrize("field, change", BAD, ids=[f"{f}-{i}" for i, (f, _) in enumerate(BAD)])
def test_bad_config_is_rejected_naming_the_field(field, change):
    with pytest.raises(ValueError, match=field) as error:
        ue.UnsupervisedExchangeConfig(**change)
    assert "must be" in str(error.value) and "got" in str(error.value)


def test_program_arguments_are_checked():
    model = VAE(widths=(4,), latent=Z, image_shape=SHAPE)
    with pytest.raises(ValueError, match="consumed_objective"):
        unsupervised.vae_program(model, consumed_objective="sometimes")
    with pytest.raises(ValueError, match="exchange_weight"):
        unsupervised.bigan_program(BiGAN(widths=(4,), latent=Z, image_shape=SHAPE), exchange_weight=-1)


def test_presets_are_valid_and_cpu_probes_three_stages():
    for build in ue.PRESETS.values():
        build()
    cpu = ue.cpu_config()
    assert cpu.dataset == "cifar10" and len(cpu.probe_steps) == 3 and cpu.probe_steps[-1] == cpu.num_steps
    thesis = ue.thesis_config()
    assert thesis.widths == (64, 128, 256) and thesis.consume_prob == 0.5


def test_experiment_config_holds_the_library_config():
    """UnsupervisedExchangeConfig adds its own fields to UnsupervisedConfig without restating any; the committed
    summaries' configs are the presets' (and the variants' overrides'), key for key; overrides stay flat."""
    import dataclasses  # noqa: PLC0415
    import pathlib  # noqa: PLC0415

    from jaxcomm.harness import cli as harness_cli  # noqa: PLC0415

    library = {f.name for f in dataclasses.fields(unsupervised.UnsupervisedConfig)}
    assert issubclass(ue.UnsupervisedExchangeConfig, unsupervised.UnsupervisedConfig)
    own = set(ue.UnsupervisedExchangeConfig.__annotations__)
    assert own == {"dataset", "data_dir", "validation_size", "probe_every", "probe_untrained", "objective_batch",
                   "num_pictures", "rows", "num_seeds"}
    assert not library & own  # nothing restated
    as_json = lambda config: json.loads(json.dumps(dataclasses.asdict(config)))
    committed = pathlib.Path(__file__).resolve().parents[1] / "results" / "unsupervised_exchange"
    cpu = as_json(ue.cpu_config())
    assert json.loads((committed / "summary.json").read_text())["config"] == cpu  # the table is the cpu preset's
    assert cpu.pop("rows") == list(ue_report.ROWS)
    # Every variant's config is the config rebuilt from it: the same keys and values.
    for summary in sorted(committed.glob("variants/*/summary.json")):
        config = json.loads(summary.read_text())["config"]
        fields = {k: tuple(v) if isinstance(v, list) else v for k, v in config.items()}
        assert as_json(ue.UnsupervisedExchangeConfig(**fields)) == config, summary
    config = harness_cli.apply_overrides(ue.smoke_config(), ["disc_hidden=16", "probe_every=4"])
    assert (config.disc_hidden, config.probe_every, type(config)) == (16, 4, ue.UnsupervisedExchangeConfig)


def test_the_library_config_builds_the_programs_probes_and_networks():
    config = ue.cpu_config()
    assert config.probe == unsupervised.ProbeConfig(40, 512, 1e-2)
    assert config.model("vae", [32, 32, 3]) == VAE(widths=(16, 32, 64), latent=64, image_shape=(32, 32, 3))
    assert config.model("bigan", (32, 32, 3)) == BiGAN(widths=(16, 32, 64), latent=64, image_shape=(32, 32, 3),
                                                       hidden=256, dropout=0.2, spectral_norm=False)
    vae, bigan = config.program("vae", SHAPE), config.program("bigan", SHAPE)
    assert (vae.payload_dim, bigan.payload_dim) == (2 * 64, 64)
    with pytest.raises(ValueError, match="family"):
        config.program("gan", SHAPE)
    alone, shared = config.network(10, False), config.network(10, True)
    assert (alone.content, alone.consume_prob, alone.broadcast_prob) == ("none", 0.0, 0.0)
    assert (shared.content, shared.consume_prob, shared.topology) == ("features", 0.5, "full")
    assert shared.broadcast_prob == pytest.approx(0.5 / 9)
    assert config.network(1, True).content == "none"
    assert (shared.batch_size, shared.inbox_capacity, shared.num_steps, shared.eval_every, shared.seed,
            shared.backend) == (32, 16, 1200, 100, 0, "auto")
    with pytest.raises(ValueError, match="disc_real_label"):
        unsupervised.UnsupervisedConfig(disc_real_label=0.0)
