"""Chapter 4: Gumbel-softmax, temperature, MI critics, communication levels, masks, the agent population
(jaxcomm.language), then the experiment's config, presets, smoke run and report (experiments/language/)."""

from __future__ import annotations

import dataclasses
import json
import math
import pathlib
import shutil

import chex
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxcomm import driver, language

softplus = lambda v: math.log1p(math.exp(v))

# --------------------------------------------------------------------------- Gumbel-softmax and temperature


def test_gumbel_softmax_hard_sample_frequencies_match_softmax():
    logits = jnp.asarray([1.0, -0.5, 0.3, 2.0])
    n = 40_000
    samples = language.gumbel_softmax(jax.random.PRNGKey(0), jnp.broadcast_to(logits, (n, 4)), 0.7, hard=True)
    chex.assert_shape(samples, (n, 4))
    # One-hot rows up to the float32 rounding of hard + soft - stop_gradient(soft).
    np.testing.assert_allclose(np.asarray(samples).sum(-1), 1.0, atol=1e-6)
    assert np.all(np.minimum(np.abs(np.asarray(samples)), np.abs(np.asarray(samples) - 1)) < 1e-6)
    freq = np.round(np.asarray(samples)).mean(0)
    probs = np.asarray(jax.nn.softmax(logits))
    np.testing.assert_allclose(freq, probs, atol=4 * np.sqrt(probs * (1 - probs) / n).max())


def test_gumbel_softmax_relaxed_sums_to_one_and_hardens_at_low_temperature():
    logits = jax.random.normal(jax.random.PRNGKey(1), (64, 32, 2))
    key = jax.random.PRNGKey(2)
    hot = language.gumbel_softmax(key, logits, 4.0)
    cold = language.gumbel_softmax(key, logits, 0.05)
    np.testing.assert_allclose(np.asarray(hot).sum(-1), 1.0, rtol=1e-6)
    assert float(jnp.mean(jnp.max(cold, -1))) > 0.97 > float(jnp.mean(jnp.max(hot, -1)))
    np.testing.assert_array_equal(np.argmax(hot, -1), np.argmax(cold, -1))  # same noise, same argmax


def test_straight_through_gradient_is_the_relaxed_gradient():
    logits = jnp.asarray([[0.2, -0.4], [1.5, 0.1], [-0.3, 0.8]])
    weights = jnp.asarray([[1.0, -2.0], [0.5, 3.0], [-1.0, 0.25]])
    key = jax.random.PRNGKey(3)
    f = lambda hard: lambda lg: jnp.sum(weights * language.gumbel_softmax(key, lg, 0.9, hard=hard))
    hard_value = language.gumbel_softmax(key, logits, 0.9, hard=True)
    np.testing.assert_allclose(hard_value, jax.nn.one_hot(jnp.argmax(hard_value, -1), 2), atol=1e-6)
    g_hard, g_soft = jax.grad(f(True))(logits), jax.grad(f(False))(logits)
    assert float(jnp.abs(g_soft).sum()) > 0
    np.testing.assert_allclose(g_hard, g_soft, rtol=1e-6)


@pytest.mark.parametrize("step,expected", [(0, 4.0), (99, 4.0), (100, 3.6), (250, 3.24), (1000, 4.0 * 0.9 ** 10),
                                           (1900, 4.0 * 0.9 ** 19), (2000, 0.5), (50_000, 0.5)])
def test_temperature_schedule(step, expected):
    assert float(language.temperature(step)) == pytest.approx(expected, rel=1e-6)
    assert float(jax.jit(language.temperature)(step)) == pytest.approx(expected, rel=1e-6)


def test_temperature_schedule_options():
    assert float(language.temperature(300, init=2.0, decay=0.5, every=100, floor=0.1)) == pytest.approx(0.25)
    assert float(language.temperature(900, init=2.0, decay=0.5, every=100, floor=0.1)) == pytest.approx(0.1)


# --------------------------------------------------------------------------- critics and MI objectives


def test_gan_loss_on_hand_made_pairs():
    pos, neg = jnp.asarray([2.0, -1.0]), jnp.asarray([0.5, -3.0])
    expected = 0.5 * (softplus(-2.0) + softplus(1.0)) + 0.5 * (softplus(0.5) + softplus(-3.0))
    assert float(language.gan_loss(pos, neg)) == pytest.approx(expected, rel=1e-6)
    assert float(language.gan_loss(jnp.zeros(3), jnp.zeros(3))) == pytest.approx(2 * math.log(2), rel=1e-6)
    assert float(language.discriminator_accuracy(pos, neg)) == pytest.approx(0.5 * (0.5 + 0.5))


def test_discriminator_loss_of_a_hand_set_critic():
    """A critic with hidden width 1 and set weights: T(x, s) = 2 relu(x . u + s . v + 0.5) - 1."""
    x = jnp.asarray([[1.0, 0.0], [0.0, 1.0], [1.0, 1.0]])  # [B=3, P=2]
    s = jax.nn.one_hot(jnp.asarray([[0], [1], [1]]), 2)  # [B=3, L=1, V=2]
    critic = language.Critic(hidden=1)
    params = critic.init(jax.random.PRNGKey(0), x, s)["params"]
    params = {"from_x": {"kernel": jnp.asarray([[1.0], [-1.0]]), "bias": jnp.asarray([0.5])},
              "from_s": {"kernel": jnp.asarray([[-2.0], [1.0]])},
              "out": {"kernel": jnp.asarray([[2.0]]), "bias": jnp.asarray([-1.0])}}
    t = lambda xi, si: 2 * max(xi[0] - xi[1] + (-2.0 if si == 0 else 1.0) + 0.5, 0.0) - 1
    bits = [0, 1, 1]
    pos_hand = [t(x[b], bits[b]) for b in range(3)]
    neg_hand = [t(x[b], bits[(b + 1) % 3]) for b in range(3)]  # s' = message of the next sample
    apply = lambda method, xx, *ss: critic.apply({"params": params}, xx, *ss, method=method)
    loss, pos, neg = language.info_loss("gan", apply, x, s)
    np.testing.assert_allclose(pos, pos_hand, rtol=1e-6)
    np.testing.assert_allclose(neg, neg_hand, rtol=1e-6)
    expected = np.mean([softplus(-p) for p in pos_hand]) + np.mean([softplus(n) for n in neg_hand])
    assert float(loss) == pytest.approx(expected, rel=1e-6)
    pairs = apply("pairs", x, s)
    np.testing.assert_allclose(pairs, [[t(x[i], bits[j]) for j in range(3)] for i in range(3)], rtol=1e-6)
    _, pos_p, neg_p = language.info_loss("infonce", apply, x, s)  # same pairs from the matrix
    np.testing.assert_allclose(pos_p, pos_hand, rtol=1e-6)
    np.testing.assert_allclose(neg_p, neg_hand, rtol=1e-6)


def test_infonce_and_jsd_on_hand_made_score_matrices():
    b = 8
    perfect = 50.0 * jnp.eye(b)
    assert float(language.infonce_bits(perfect)) == pytest.approx(math.log2(b), abs=1e-4)  # capped at log2 B
    assert float(language.infonce_bits(jnp.zeros((b, b)))) == pytest.approx(0.0, abs=1e-6)
    scores = jnp.asarray([[1.0, 0.0], [2.0, -1.0]])
    nce = 0.5 * (-1.0 + math.log(math.e + 1) + 1.0 + math.log(math.exp(2) + math.exp(-1)))
    assert float(language.infonce_loss(scores)) == pytest.approx(nce, rel=1e-6)
    jsd = 0.5 * (softplus(-1.0) + softplus(1.0)) + 0.5 * (softplus(0.0) + softplus(2.0))
    assert float(language.jsd_loss(scores)) == pytest.approx(jsd, rel=1e-6)


def test_generator_maximises_the_same_quantity_as_the_critic():
    """Max-max: one gradient step of the generator on the GAN loss makes the critic's job easier."""
    gen, critic = language.MessageGenerator(hidden=(8,), length=4), language.Critic(hidden=8)
    x = jax.random.uniform(jax.random.PRNGKey(0), (32, 10))
    pg = gen.init(jax.random.PRNGKey(1), x)["params"]
    pc = critic.init(jax.random.PRNGKey(2), x, jnp.zeros((1, 4, 2)))["params"]
    noise = language.gumbel_noise(jax.random.PRNGKey(3), (32, 4, 2))

    def loss(pg, pc):
        msg = jnp.exp(language.log_relaxed(gen.apply({"params": pg}, x)[0], noise, 1.0))
        apply = lambda method, xx, *ss: critic.apply({"params": pc}, xx, *ss, method=method)
        return language.info_loss("gan", apply, x, msg)[0]

    value_and_grad = jax.jit(jax.value_and_grad(loss, argnums=(0, 1)))  # one compilation
    before, (g_gen, g_critic) = value_and_grad(pg, pc)
    step = lambda p, g: jax.tree_util.tree_map(lambda a, b: a - 0.05 * b, p, g)
    assert float(value_and_grad(step(pg, g_gen), pc)[0]) < float(before)
    assert float(value_and_grad(pg, step(pc, g_critic))[0]) < float(before)


def test_reinforce_surrogate_estimates_the_expected_cost_gradient():
    logits = jnp.asarray([[[0.3, -0.2], [1.0, 0.0]]])  # [1, L=2, V=2]
    cost_of = lambda msg: jnp.sum(msg[..., 1] * jnp.asarray([1.0, -2.0]), -1)  # cost of bit pattern
    n = 50_000

    def surrogate(lg):
        msg, lp = language.sample_message(jax.random.PRNGKey(0), jnp.broadcast_to(lg, (n, 2, 2)))
        return language.reinforce_surrogate(lp, cost_of(msg))

    exact = jax.grad(lambda lg: jnp.sum(jax.nn.softmax(lg, -1)[0, :, 1] * jnp.asarray([1.0, -2.0])))(logits)
    np.testing.assert_allclose(jax.grad(surrogate)(logits), exact, atol=0.01)


# --------------------------------------------------------------------------- communication levels


def _messages(params, x, key, tau=1.0):
    gen = language.MessageGenerator(hidden=(8,), length=5)
    logits = gen.apply({"params": params}, x)[0]
    log = language.log_relaxed(logits, language.gumbel_noise(key, logits.shape), tau)
    return jnp.exp(log), log


@pytest.fixture(scope="module")
def two_agents():
    gen = language.MessageGenerator(hidden=(8,), length=5)
    xa = jax.random.uniform(jax.random.PRNGKey(0), (16, 12))
    xb = jax.random.uniform(jax.random.PRNGKey(1), (16, 12))
    pa = gen.init(jax.random.PRNGKey(2), xa)["params"]
    pb = gen.init(jax.random.PRNGKey(3), xb)["params"]

    def grads(name, normalisation="mean"):
        def loss(pa, pb):
            ma, la = _messages(pa, xa, jax.random.PRNGKey(4))
            mb, lb = _messages(pb, xb, jax.random.PRNGKey(5))
            return language.communication_loss(language.level(name), ma, la, mb, lb, normalisation)

        return jax.grad(loss, argnums=(0, 1))(pa, pb)

    return grads


def _norm(tree) -> float:
    return float(sum(jnp.abs(leaf).sum() for leaf in jax.tree_util.tree_leaves(tree)))


def test_level_gradient_paths(two_agents):
    """Eqs. 4.2.6-4.2.8: a gradient that must not reach an agent is exactly zero."""
    ga, gb = two_agents("baseline")
    assert _norm(ga) == 0.0 and _norm(gb) == 0.0
    ga, gb = two_agents("student_receiving_only")  # eq. 4.2.6: no gradient into the teacher
    assert _norm(ga) == 0.0 and _norm(gb) > 0.0
    ga_fb, gb_fb = two_agents("student_feedback_to_teacher")  # eq. 4.2.7: the feedback reaches A
    assert _norm(ga_fb) > 0.0 and _norm(gb_fb) > 0.0
    # B's gradient is the receiving-only one at the two-way weight (0.005 / 0.01).
    chex.assert_trees_all_close(gb_fb, jax.tree_util.tree_map(lambda g: 0.5 * g, gb), rtol=1e-5)
    ga_both, gb_both = two_agents("both_feedback")  # eq. 4.2.8: each copies the other
    assert _norm(ga_both) > 0.0 and _norm(gb_both) > 0.0
    diff = lambda p, q: _norm(jax.tree_util.tree_map(jnp.subtract, p, q))
    assert diff(ga_both, ga_fb) > 1e-6 and diff(gb_both, gb_fb) > 1e-6  # the B -> A term adds to both


def test_levels_weights_and_normalisation():
    assert language.level("student_receiving_only") == language.Level(0.01, 0.0, 0.0, 0.0)
    assert language.level("student_feedback_to_teacher") == language.Level(0.005, 1.0, 0.0, 0.0)
    assert language.level("both_feedback") == language.Level(0.005, 1.0, 0.005, 1.0)
    with pytest.raises(ValueError, match="level must be one of"):
        language.level("telepathy")
    target = jax.nn.softmax(jax.random.normal(jax.random.PRNGKey(0), (4, 32, 2)))
    log_pred = jax.nn.log_softmax(jax.random.normal(jax.random.PRNGKey(1), (4, 32, 2)))
    summed = language.message_cross_entropy(target, log_pred, "sum")
    assert float(summed) == pytest.approx(32 * float(language.message_cross_entropy(target, log_pred, "mean")),
                                          rel=1e-6)
    hand = -float(jnp.mean(jnp.sum(target * log_pred, axis=(1, 2))))
    assert float(summed) == pytest.approx(hand, rel=1e-6)


# --------------------------------------------------------------------------- collapse detection


@pytest.mark.parametrize("disc,agreement,expected", [
    (0.5, 1.0, True), (0.53, 0.97, True), (0.46, 0.95, True),
    (0.9, 1.0, False),  # informative messages that agree: not a collapse
    (0.5, 0.5, False),  # an untrained critic with independent agents
    (0.56, 1.0, False), (0.5, 0.94, False),
])
def test_detect_collapse(disc, agreement, expected):
    assert bool(language.detect_collapse(disc, agreement)) is expected


def test_detect_collapse_on_messages():
    """One constant shared message: critic at chance (it cannot tell pairs apart), agreement 1."""
    const = jnp.broadcast_to(jax.nn.one_hot(jnp.asarray([0, 1, 1, 0]), 2), (64, 4, 2))
    assert float(language.message_agreement(const, const)) == 1.0
    scores = jnp.zeros((64, 64))  # any critic scores (x, s) and (x, s') alike when s == s'
    pos, neg = jnp.diagonal(scores), jnp.diagonal(jnp.roll(scores, -1, 1))
    assert bool(language.detect_collapse(language.discriminator_accuracy(pos, neg) * 0 + 0.5,
                                         language.message_agreement(const, const)))
    rand = jax.nn.one_hot(jax.random.bernoulli(jax.random.PRNGKey(0), 0.5, (64, 4)).astype(int), 2)
    assert not bool(language.detect_collapse(0.5, language.message_agreement(const, rand)))
    np.testing.assert_array_equal(language.detect_collapse(jnp.asarray([0.5, 0.8]), jnp.asarray([1.0, 1.0])),
                                  [True, False])
    assert float(language.distinct_fraction(const)) == pytest.approx(1 / 64)


# --------------------------------------------------------------------------- masks and views


def test_inversion_masks_invert_the_stated_fraction():
    key = jax.random.PRNGKey(0)
    exact = language.inversion_mask(key, 784, 0.1, exact=True)
    assert int(exact.sum()) == 78
    big = language.inversion_mask(key, 200_000, 0.3)
    assert abs(float(big.mean()) - 0.3) < 0.005
    np.testing.assert_array_equal(language.inversion_mask(key, 784, 0.1), language.inversion_mask(key, 784, 0.1))
    x = np.random.default_rng(1).random((5, 784), np.float32)
    view, mask = np.asarray(language.apply_view(jnp.asarray(x), exact)), np.asarray(exact)
    np.testing.assert_allclose(view[:, mask], 1.0 - x[:, mask])
    np.testing.assert_array_equal(view[:, ~mask], x[:, ~mask])
    top, bottom = map(np.asarray, language.half_masks())
    np.testing.assert_array_equal(top + bottom, 1.0)
    assert top[:392].min() == 1.0 and top[392:].max() == 0.0


def test_masks_are_fixed_per_agent_and_paired_across_levels():
    config = language.AgentsConfig()
    members = [language.Member(lv, s) for lv in language.LEVEL_NAMES for s in range(2)]
    arrays = language.member_arrays(config, members, length=8, num_pixels=784, side=28)
    for s in range(2):
        rows = [i for i, m in enumerate(members) if m.seed == s]
        for i in rows:  # the same masks and keys in every level for a seed
            np.testing.assert_array_equal(arrays.invert_a[i], arrays.invert_a[rows[0]])
            np.testing.assert_array_equal(arrays.invert_b[i], arrays.invert_b[rows[0]])
            np.testing.assert_array_equal(arrays.key[i], arrays.key[rows[0]])
    assert not np.array_equal(arrays.invert_a[0], arrays.invert_b[0])  # A and B see differently
    assert not np.array_equal(arrays.invert_a[0], arrays.invert_a[1])  # seeds differ
    frac = float(np.mean(np.asarray(arrays.invert_a)))
    assert abs(frac - 0.1) < 0.03
    more = language.member_arrays(config, [language.Member("baseline", 0, noise=0.3)], length=8, num_pixels=784,
                                  side=28)
    assert bool(jnp.all(more.invert_a[0] | ~arrays.invert_a[0]))  # 10 % mask inside the 30 % one
    halves = language.member_arrays(config, [language.Member("baseline", 0, view="halves")], length=8,
                                    num_pixels=784, side=28)
    np.testing.assert_array_equal(halves.keep_a[0] + halves.keep_b[0], 1.0)
    np.testing.assert_array_equal(arrays.keep_a, 1.0)


@pytest.mark.parametrize("member,message", [
    (language.Member("telepathy", 0), r"members\[0\].level must be one of"),
    (language.Member("baseline", 0, view="left"), r"members\[0\].view must be one of"),
    (language.Member("baseline", 0, noise=1.5), r"members\[0\].noise must be a fraction in \[0, 1\]"),
    (language.Member("baseline", 0, normalisation="max"), r"members\[0\].normalisation must be one of"),
])
def test_members_are_checked(member, message):
    with pytest.raises(ValueError, match=message):
        language.member_arrays(language.AgentsConfig(), [member], length=4, num_pixels=64, side=8)


# --------------------------------------------------------------------------- population == separate runs

LENGTH = 4


@pytest.fixture(scope="module")
def tiny_setup(tiny_dataset):
    config = language.AgentsConfig(hidden=(6,), critic_hidden=5, batch_size=8, eval_every=10, diag_batch=16)
    data = language.TrainData(jnp.asarray(tiny_dataset.train.images), jnp.asarray(tiny_dataset.train.labels))
    return config, data


def _trainer(config, data):
    """A jitted step compiled once per population size, reused across calls."""
    fns = language.make_agents(config, LENGTH, 64, 4)
    step, init = jax.jit(fns.step), fns.init  # init: one compiled member init, looped

    def train(members, steps=3):
        arrays = language.member_arrays(config, members, length=LENGTH, num_pixels=64, side=8)
        state = init(jnp.stack([jax.random.fold_in(language.seed_key(config, m.seed), 0) for m in members]))
        for _ in range(steps):
            state, _ = step(state, (data, arrays))
        chex.assert_tree_all_finite(state.agents.params)
        return state

    return train


MEMBERS = [language.Member(lv, s) for lv in language.LEVEL_NAMES for s in range(2)] + [
    language.Member("baseline", 0, frozen=True)]


@pytest.fixture(scope="module")
def trained(tiny_setup):
    config, data = tiny_setup
    train = _trainer(config, data)
    return train, train(MEMBERS)


def test_population_of_levels_and_seeds_equals_separate_runs(trained):
    train, together = trained
    for i in (1, 6, 8):  # a sample of members, each trained alone (a population of one)
        alone = train([MEMBERS[i]])
        mine = jax.tree_util.tree_map(lambda leaf, i=i: leaf[i], together.agents)
        chex.assert_trees_all_close(mine, jax.tree_util.tree_map(lambda leaf: leaf[0], alone.agents),
                                    rtol=2e-4, atol=2e-6)


def test_gradient_paths_in_the_population(trained):
    """Paired seeds: receiving-only leaves the teacher exactly where the baseline puts it; feedback moves it."""
    train, state = trained
    agents = state.agents
    get = lambda i, name: jax.tree_util.tree_map(lambda leaf: leaf[i], agents.params[name])
    diff = lambda p, q: _norm(jax.tree_util.tree_map(jnp.subtract, p, q))
    base, recv, feedback, both, frozen = 0, 2, 4, 6, 8  # seed 0 of each level, then the frozen member
    assert diff(get(recv, "gen_a"), get(base, "gen_a")) < 1e-5  # no gradient into A
    assert diff(get(recv, "gen_b"), get(base, "gen_b")) > 1e-4
    assert diff(get(feedback, "gen_a"), get(base, "gen_a")) > 1e-4
    assert diff(get(both, "gen_b"), get(feedback, "gen_b")) > 1e-4
    init = train(MEMBERS, steps=0).agents.params
    assert diff(get(frozen, "gen_b"), jax.tree_util.tree_map(lambda leaf: leaf[frozen], init["gen_b"])) == 0.0
    assert _norm(agents.probe["kernel"][frozen]) > 0.0  # the random-init probe still learns


def test_fixed_temperature_member_equals_a_constant_schedule(tiny_setup):
    """temperature=T in a mixed population trains exactly as a population whose schedule is constant at T."""
    config, data = tiny_setup
    mixed = _trainer(config, data)([language.Member("both_feedback", 0), language.Member("both_feedback", 1,
                                                                                         temperature=0.7)])
    constant = _trainer(config.replace(tau_init=0.7, tau_decay=1.0), data)([language.Member("both_feedback", 1)])
    chex.assert_trees_all_close(jax.tree_util.tree_map(lambda leaf: leaf[1], mixed.agents),
                                jax.tree_util.tree_map(lambda leaf: leaf[0], constant.agents), rtol=2e-4, atol=2e-6)


def test_delayed_probe_starts_late_and_leaves_the_agents_alone(tiny_setup):
    config, data = tiny_setup
    train = _trainer(config, data)
    members = [language.Member("baseline", 0), language.Member("baseline", 0, probe_delay=2)]
    for steps, moved in ((2, False), (3, True)):
        state = train(members, steps=steps)
        at = lambda tree, i: jax.tree_util.tree_map(lambda leaf: leaf[i], tree)
        chex.assert_trees_all_equal(at(state.agents.params, 0), at(state.agents.params, 1))  # stopped features
        assert (_norm(at(state.agents.probe, 1)) > 0.0) == moved
        assert int(state.agents.probe_opt[0].count[1]) == steps - 2 and int(state.agents.probe_opt[0].count[0]) == steps


def test_members_reject_bad_temperature_and_delay():
    with pytest.raises(ValueError, match=r"members\[0\].temperature must be a number >= 0"):
        language.check_members([language.Member("baseline", 0, temperature=-1.0)])
    with pytest.raises(ValueError, match=r"members\[0\].probe_delay must be an integer >= 0"):
        language.check_members([language.Member("baseline", 0, probe_delay=1.5)])


def test_collapse_over_run_on_a_hand_made_curve():
    curve = {"disc_a": [0.52, 0.9, 0.9, 0.53, 0.9], "disc_b": [0.9, 0.9, 0.9, 0.9, 0.9],
             "agreement": [0.5, 0.85, 0.99, 0.9, 0.79], "distinct_a": [0.1, 0.2, 0.8, 0.8, 0.1],
             "distinct_b": [0.9, 0.9, 0.26, 0.9, 0.1]}
    # 0: chance critic but independent messages; 1: shared and few (0.2 <= 0.25); 2: shared but many (0.26);
    # 3: shared with a critic at chance (|0.53 - 0.5| <= 0.05); 4: few but agreement 0.79 < 0.8.
    assert language.collapse_over_run(curve) == [False, True, False, True, False]


def test_symbols_are_each_members_argmax(trained, tiny_setup, tiny_dataset):
    config, _ = tiny_setup
    _, state = trained
    arrays = language.member_arrays(config, MEMBERS, length=LENGTH, num_pixels=64, side=8)
    images = tiny_dataset.test.images[:5]
    symbols = language.make_agents(config, LENGTH, 64, 4).symbols(state.agents.params, images, arrays)
    gen = language.MessageGenerator(hidden=config.hidden, length=LENGTH)
    x = np.asarray(images, np.float32).reshape(5, -1) / 255.0
    for i in (0, 5):
        view = language.apply_view(x, arrays.invert_b[i], arrays.keep_b[i])
        logits, _ = gen.apply({"params": jax.tree_util.tree_map(lambda leaf, i=i: leaf[i],
                                                                state.agents.params["gen_b"])}, view)
        np.testing.assert_array_equal(symbols["b"][i], np.argmax(logits, -1))
    assert symbols["a"].shape == (len(MEMBERS), 5, LENGTH)


def test_refit_probes_equal_each_members_probe_alone(trained, tiny_setup, tiny_dataset):
    """The refit is chapter 2's probe (jaxcomm.probe.train_probe) on each member's frozen features of B's view."""
    from jaxcomm import data, probe

    config, _ = tiny_setup
    _, state = trained
    dataset = data.ImageDataset("synthetic", tiny_dataset.train, tiny_dataset.test, tiny_dataset.test, 4)
    arrays = language.member_arrays(config, MEMBERS, length=LENGTH, num_pixels=64, side=8)
    fns = language.make_agents(config, LENGTH, 64, 4)
    probe_config = probe.ProbeConfig(epochs=4, batch_size=32, learning_rate=0.05)
    key = jax.random.PRNGKey(3)
    refit = language.refit_probes(fns, state.agents.params["gen_b"], dataset, arrays, probe_config, key)
    train_one = jax.jit(probe.train_probe, static_argnames=("num_classes", "config"))
    for i in (0, 8):  # a trained member and the frozen one
        feats = [language.split_features(fns, state.agents.params["gen_b"], split, arrays)[i]
                 for split in (dataset.train, dataset.test)]
        np.testing.assert_allclose(feats[1][:3], fns.features(state.agents.params["gen_b"],
                                                              dataset.test.images[:3], arrays)[i], rtol=1e-6)
        single = train_one(key, feats[0], dataset.train.labels, feats[1], dataset.test.labels, num_classes=4,
                           config=probe_config)
        test = 100 * float(np.mean(np.argmax(probe.probe_logits(single, feats[1]), -1) == dataset.test.labels))
        assert refit["test_accuracy"][i] == pytest.approx(test, abs=1e-3)
        assert refit["val_accuracy"][i] == pytest.approx(100 * float(single.val_accuracy), abs=1e-3)
        gain = 100 * (float(np.max(single.val_curve)) - float(np.max(single.val_curve[:3])))
        assert bool(refit["converged"][i]) == (gain < 0.2) and refit["best_epoch"][i] == int(single.best_epoch)


def test_summed_normalisation_scales_the_weights_by_length():
    members = [language.Member("both_feedback", 0, normalisation=norm) for norm in ("mean", "sum")]
    level = language.member_arrays(language.AgentsConfig(), members, length=8, num_pixels=784, side=28).level
    np.testing.assert_allclose(level.weight_ab, [0.005, 0.005 * 8], rtol=1e-6)
    np.testing.assert_allclose(level.ba_to_sender, [1.0, 1.0])


def test_reinforce_estimator_trains(tiny_setup):
    config, data = tiny_setup
    config = config.replace(estimator="reinforce")
    _trainer(config, data)([language.Member("both_feedback", 0)], steps=2)
    with pytest.raises(ValueError, match="critic must be 'gan' with estimator 'reinforce'"):
        config.replace(critic="infonce")


@pytest.mark.parametrize("field,value,message", [
    ("hidden", (), "hidden must be a non-empty tuple"),
    ("critic", "mine", "critic must be one of"),
    ("estimator", "vimco", "estimator must be one of"),
    ("tau_decay", 1.5, r"tau_decay must be a number in \(0, 1\]"),
    ("tau_floor", 0.0, "tau_floor must be a number > 0"),
    ("diag_batch", 1, "diag_batch must be an integer >= 2"),
    ("two_way_weight", -0.1, "two_way_weight must be a number >= 0"),
    ("backend", "pmap", "backend must be one of"),
])
def test_agents_config_rejects_bad_values(field, value, message):
    with pytest.raises(ValueError, match=message):
        language.AgentsConfig(**{field: value})


# --------------------------------------------------------------------------- train_agents (the driver)


def test_population_killed_by_sigterm_resumes_to_the_uninterrupted_result(tiny_dataset, tiny_setup, tmp_path,
                                                                         monkeypatch):
    import os
    import signal

    from jaxcomm import data
    from jaxcomm.checkpoint import Checkpointer

    config, _ = tiny_setup
    config = config.replace(eval_every=5, diag_batch=8)
    dataset = data.ImageDataset("synthetic", tiny_dataset.train, tiny_dataset.test, tiny_dataset.test, 4)
    members = MEMBERS[:3]
    train = lambda **kw: language.train_agents(config, members, dataset, length=LENGTH, num_steps=15,
                                               progress=False, **kw)
    straight = train()
    assert straight["status"] == "complete" and straight["steps_done"] == 15
    for m, member in zip(straight["members"], members, strict=True):
        assert {k: m[k] for k in member._fields} == member._asdict() and m["length"] == LENGTH
        assert m["steps"] == [5, 10, 15]
        for key in ("val_accuracy", "disc_a", "disc_b", "agreement", "mi_bits_a", "distinct_a", "train_probe",
                    "train_info_a", "train_comm"):
            assert len(m[key]) == 3, key
        first_max = int(np.argmax(m["val_accuracy"]))  # the tracker's best: the first maximum of the curve
        assert round(m["best_val"], 3) == m["val_accuracy"][first_max] and m["best_step"] == m["steps"][first_max]
        assert 0.0 <= m["test_accuracy"] <= 100.0 and isinstance(m["collapsed"], bool)
    accuracy, calls = language.probe_accuracy, []

    def kill_on_second(*args, **kwargs):
        calls.append(1)
        if len(calls) == 2:
            os.kill(os.getpid(), signal.SIGTERM)
        return accuracy(*args, **kwargs)

    monkeypatch.setattr(language, "probe_accuracy", kill_on_second)
    with pytest.raises(driver.Interrupted):
        train(checkpointer=Checkpointer(tmp_path, every=5))
    monkeypatch.setattr(language, "probe_accuracy", accuracy)
    resumed = train(checkpointer=Checkpointer(tmp_path, every=5, resume=True))
    assert resumed["members"] == straight["members"]
    chex.assert_trees_all_equal(resumed["final_params"], straight["final_params"])


def test_train_agents_refuses_bad_arguments(tiny_dataset, tiny_setup):
    config, _ = tiny_setup
    with pytest.raises(ValueError, match="num_steps must be an integer >= 1"):
        language.train_agents(config, MEMBERS, tiny_dataset, length=LENGTH, num_steps=0)
    with pytest.raises(ValueError, match="members must be a non-empty sequence"):
        language.train_agents(config, [], tiny_dataset, length=LENGTH, num_steps=5)


# --------------------------------------------------------------------------- the experiment


@pytest.fixture(scope="module")
def lx():
    from experiments import language as language_experiment  # noqa: PLC0415

    return language_experiment


@pytest.mark.parametrize("field,value,message", [
    ("dataset", "cifar10", "dataset must be one of"),
    ("hidden", (), "hidden must be a non-empty tuple"),  # an inherited field, checked by AgentsConfig
    ("ce_normalisation", "max", "ce_normalisation must be one of"),
    ("levels", ("both_feedback",), "levels must be distinct names"),
    ("noise", 1.5, r"noise must be a fraction in \[0, 1\]"),
    ("study_settings", ("noise70",), "study_settings must be distinct names"),
    ("seeds", 0, "seeds must be an integer >= 1"),
    ("backend", "pmap", "backend must be one of"),
    ("refit_learning_rate", 0.0, "refit_learning_rate must be a number > 0"),
    ("probe_delay", 20, r"probe_delay must be an integer below num_steps \(20\)"),
    ("ablation_levels", ("telepathy",), "ablation_levels must be distinct names from levels"),
    ("fixed_temperature", -1.0, "fixed_temperature must be a number >= 0"),
    ("reinforce", "yes", "reinforce must be True or False"),
])
def test_config_rejects_bad_values(lx, field, value, message):
    with pytest.raises(ValueError, match=message):
        dataclasses.replace(lx.smoke_config(), **{field: value})


def test_experiment_config_holds_the_library_config(lx):
    """LanguageConfig adds its own fields to AgentsConfig without restating any; overrides stay flat."""
    from jaxcomm.harness import cli as harness_cli  # noqa: PLC0415

    library = {f.name for f in dataclasses.fields(language.AgentsConfig)}
    assert issubclass(lx.LanguageConfig, language.AgentsConfig)
    assert not library & set(lx.LanguageConfig.__annotations__)  # nothing restated
    committed = pathlib.Path(__file__).resolve().parents[1] / "results" / "language" / "summary.json"
    fields = set(dataclasses.asdict(lx.cpu_config()))  # the committed run records every field of its preset
    assert fields == set(json.loads(committed.read_text())["config"])
    assert lx.cpu_config().confirm_cells == ()  # the committed presets train no confirmation member
    config = harness_cli.apply_overrides(lx.smoke_config(), ["learning_rate=0.01", "seeds=3"])
    assert (config.learning_rate, config.seeds, type(config)) == (0.01, 3, lx.LanguageConfig)


def test_presets_cover_table_4_1(lx):
    for make in lx.PRESETS.values():
        make()
    cpu = lx.cpu_config()
    assert cpu.levels == lx.LEVELS and cpu.seeds >= 10 and cpu.message_length == 32 and cpu.noise == 0.1
    assert (cpu.one_way_weight, cpu.two_way_weight, cpu.ce_normalisation) == (0.01, 0.005, "mean")
    assert set(cpu.study_settings) == set(lx.STUDY_SETTINGS)


def test_members_of_the_experiment(lx):
    """Every table / reading / study member as a library Member, grouped by (length, steps)."""
    config = lx.smoke_config()
    entries = lx.all_members(config)
    table = [e for e in entries if e.group == "table"]
    assert len(table) == len(config.levels) * config.seeds + config.random_init_seeds
    halves = [e.member for e in entries if e.setting == "halves"]
    assert halves and all(m.view == "halves" and m.noise == config.noise for m in halves)
    ablations = {g: [e for e in entries if e.group == g] for g in lx.ABLATIONS}
    for group, entries_of in ablations.items():  # the table's levels and seeds, one setting changed
        assert [(e.member.level, e.member.seed) for e in entries_of] == [
            (lv, s) for lv in config.ablation_levels for s in range(config.seeds)], group
    assert {e.member.temperature for e in ablations["fixed_temperature"]} == {config.fixed_temperature}
    assert {e.member.probe_delay for e in ablations["delayed_probe"]} == {config.probe_delay}
    assert {e.estimator for e in ablations["reinforce"]} == {"reinforce"}
    prereg = [e for e in entries if e.group == "prereg"]
    seeds = range(config.prereg_first_seed, config.prereg_first_seed + config.prereg_seeds)
    assert [(e.member.level, e.member.seed) for e in prereg] == [(lv, s) for lv in ("baseline", "both_feedback")
                                                                for s in seeds]
    assert {(e.member.view, e.member.normalisation) for e in prereg} == {("halves", "sum")}
    assert not set(seeds) & set(range(config.study_seeds))  # new seeds
    pops = lx.populations(config)
    assert sorted(pops) == [(8, 20, "gumbel"), (8, 20, "reinforce"), (64, 20, "gumbel")]
    assert sum(map(len, pops.values())) == len(entries) and pops[(8, 20, "reinforce")] == ablations["reinforce"]


def test_smoke_run_writes_summary(lx, tmp_path):
    out = tmp_path / "language"
    argv = ["--preset", "smoke", "--out", str(out), "study_settings=halves", "reinforce=False"]  # one population
    assert lx.main(argv) == 0
    summary = json.loads((out / "summary.json").read_text())
    for key in ("experiment", "preset", "command", "git_commit", "device", "wall_seconds", "rows"):
        assert key in summary
    rows = summary["rows"]
    for row in lx.LEVELS:
        for metric in ("test_accuracy", "test_accuracy_std", "seeds", "best_step", "collapsed_seeds",
                       "paired_diff_vs_baseline", "paired_diff_ci95"):
            assert metric in rows[row], (row, metric)
        assert rows[row]["seeds"] == 2 and 0 <= rows[row]["test_accuracy"] <= 100
    assert rows["baseline"]["paired_diff_vs_baseline"] == 0.0
    assert "random_init_probe" in rows and "ce_sum/both_feedback" in rows and "study/halves/both_feedback" in rows
    for name in ("fixed_temperature/both_feedback", "delayed_probe/baseline", "prereg/both_feedback"):
        assert rows[name]["seeds"] == 2 and "paired_diff_ci95" in rows[name], name
    for lv in lx.LEVELS:  # the refit probe, the whole-run collapse rule and the language metrics of every level
        assert 0 <= rows[lv]["refit_test_accuracy"] <= 100 and rows[lv]["refit_converged"] <= 2
        assert 0 <= rows[lv]["collapsed_runs"] <= 2 and rows[lv]["collapsed_evaluations"] >= rows[lv]["collapsed_runs"]
        assert 0.0 <= rows[lv]["lang_a_message_entropy"] <= math.log2(40) + 1e-9
    assert rows["delayed_probe/baseline"]["paired_seeds_vs_table"] == 2
    curves = [json.loads(line) for line in (out / "curves.jsonl").read_text().splitlines()]
    assert {c["group"] for c in curves} == {"table", "ce_sum", "study", "fixed_temperature", "delayed_probe",
                                            "prereg"}
    assert {c["population"] for c in curves} == {"L8_steps20"} and len(summary["populations"]) == 1
    for name in ("table.md", "fig4_3.png", "messages.png"):
        assert (out / name).stat().st_size > 0
    assert "64.4" in (out / "table.md").read_text()


def test_committed_table_redraws_unchanged(lx, tmp_path):
    committed = pathlib.Path(__file__).resolve().parents[1] / "results" / "language"
    for name in ("summary.json", "curves.jsonl"):
        shutil.copy(committed / name, tmp_path / name)
    lx.write_report(tmp_path, plots=False)
    assert (tmp_path / "table.md").read_text() == (committed / "table.md").read_text()


def test_confirm_preset_members(lx):
    """The pre-registered confirmation: baseline and both feedback in each cell on new seeds, the untrained agents
    of each view on the same seeds, nothing else, one population."""
    config = lx.confirm_config()
    entries = lx.all_members(config)
    seeds = list(range(10, 20))
    for name, cell in lx.CONFIRM_CELLS.items():
        mine = [e for e in entries if e.group == f"confirm/{name}"]
        assert [(e.member.level, e.member.seed) for e in mine] == [(lv, s) for lv in lx.CONFIRM_LEVELS for s in seeds]
        assert {(e.member.normalisation, e.member.temperature, e.member.frozen) for e in mine} == {
            (cell.normalisation, cell.temperature, False)}
    untrained = {e.group: e for e in entries if e.member.frozen}
    assert sorted(untrained) == ["confirm_untrained/full", "confirm_untrained/halves"]
    assert {e.member.view for e in entries if e.group == "confirm_untrained/halves"} == {"halves"}
    assert len(entries) == 80 and list(lx.populations(config)) == [(32, 10_000, "gumbel")]


def test_confirm_smoke_run_reports(lx, tmp_path):
    argv = ["--preset", "smoke", "--out", str(tmp_path), "--force", "seeds=0", "random_init_seeds=0",
            "collapse_seeds=0", "study_settings=", "fixed_temperature=0", "probe_delay=0", "reinforce=False",
            "prereg_seeds=0", "confirm_cells=fixed_temperature,halves_sum", "confirm_seeds=2", "confirm_steps=20"]
    assert lx.main(argv) == 0
    rows = json.loads((tmp_path / "summary.json").read_text())["rows"]
    assert sorted(rows) == ["confirm/fixed_temperature/baseline", "confirm/fixed_temperature/both_feedback",
                            "confirm/halves_sum/baseline", "confirm/halves_sum/both_feedback",
                            "confirm/untrained/full", "confirm/untrained/halves"]
    both = rows["confirm/halves_sum/both_feedback"]
    assert both["paired_seeds"] == 2 and both["seed_list"] == [10, 11] and both["view"] == "halves"
    untrained = rows["confirm/untrained/halves"]["test_accuracy"]
    assert both["paired_diff_vs_untrained"] == pytest.approx(both["test_accuracy"] - untrained, abs=1e-2)
    table = (tmp_path / "table.md").read_text()
    assert "Primary (pre-registered)" in table and table.count("| halves_sum |") >= 2
