"""A learned discrete language between two agents (thesis ch. 4): the pieces and the agent population.

Each agent turns its partial view of an image into a message of ``L`` symbols from a
vocabulary of ``V = 2`` (bits). The message generator is a ReLU MLP whose top layer has
``L`` heads of ``V`` logits (§4.2.2.2); in training a message is a Gumbel-softmax sample
(relaxed, or straight-through hard), at evaluation the hard one-hot argmax (Fig. 4.2).
The language is trained to maximise the mutual information I(X_A; S_A) between an
agent's view and its message (§4.2.2.3): a critic (discriminator) separates positive
pairs ``(x_A, s_A)`` from the joint from negative pairs ``(x_A, s'_A)`` whose message was
generated from another sample ``x'_A``, and the generator maximises the SAME quantity
(max-max, not min-max). The critic objective is the thesis' vanilla GAN by default;
InfoNCE (van den Oord et al. 2018) and Deep-InfoMax JSD (Hjelm et al. 2019) are options.

Communication (§4.2.2.5) adds cross-entropy "likelihood" terms between the two agents'
messages with level-dependent gradient paths (:class:`Level`, eqs. 4.2.6-4.2.8).

The engine at the bottom trains a population of S pairs of agents as one jitted step
(:func:`train_agents`, through :func:`jaxcomm.driver.train`): each :class:`Member` has its
own level, seed, views and normalisation as per-member arrays, and a linear probe on B's
last hidden layer measures what B's features say about the digit (§4.2.2.5, Table 4.1)::

    dataset = jaxcomm.data.load_mnist_sample()
    members = [language.Member(level, seed) for level in ("baseline", "both_feedback") for seed in range(3)]
    result = language.train_agents(language.AgentsConfig(), members, dataset, length=32, num_steps=2000)
    result["members"][0]["test_accuracy"]  # the probe's test accuracy at its best validation step

Shapes use named dimensions: ``B`` batch, ``L`` message length, ``V`` vocabulary,
``P`` pixels (784 for MNIST), ``H`` hidden width, ``S`` members of a population.

References:
  Lacaille (2018), §4.2-4.3, Algorithm 4, eqs. 4.2.1-4.2.8, Fig. 4.2, Table 4.1.
  Jang et al. (2017), "Categorical reparameterization with Gumbel-softmax".
  Williams (1992), REINFORCE (the thesis' suggested future work, §4.3).
"""

from __future__ import annotations

import dataclasses
import functools
import math
import time
from collections.abc import Sequence
from typing import Any, NamedTuple

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import optax

from jaxcomm import driver, population
from jaxcomm.checkpoint import Checkpointer
from jaxcomm.data import ImageDataset, ImageSplit, accuracy_in_batches
from jaxcomm.models import to_unit_float
from jaxcomm.probe import ProbeConfig, fit_probes
from jaxcomm.validation import integer, is_int, is_real, named_fields, positive, require, widths

CRITICS = ("gan", "jsd", "infonce")
ESTIMATORS = ("gumbel", "reinforce")
NORMALISATIONS = ("mean", "sum")
VIEWS = ("full", "halves")


# --------------------------------------------------------------------------- Gumbel-softmax


def temperature(step, *, init: float = 4.0, decay: float = 0.9, every: int = 100, floor: float = 0.5):
    """Annealed Gumbel-softmax temperature: ``max(init * decay ** (step // every), floor)``.

    Args:
      step: training step (int or a traced int scalar).
      init, decay, every, floor: the thesis' schedule (§4.3: 4.0, x0.9 every 100 steps, >= 0.5).

    Returns:
      A float32 scalar (a jax array; ``float()`` it outside jit).
    """
    exponent = jnp.floor_divide(jnp.asarray(step, jnp.int32), every).astype(jnp.float32)
    return jnp.maximum(init * jnp.power(jnp.float32(decay), exponent), floor).astype(jnp.float32)


def gumbel_noise(key: jax.Array, shape: Sequence[int]) -> jax.Array:
    """Standard Gumbel samples ``-log(-log U)`` of ``shape`` (float32)."""
    return jax.random.gumbel(key, tuple(shape), jnp.float32)


def log_relaxed(logits: jax.Array, noise: jax.Array, temperature) -> jax.Array:
    """Log of a relaxed Gumbel-softmax sample, ``log_softmax((logits + g) / tau)`` over the last axis.

    Computed in log space so cross-entropies between samples stay finite at low temperature.
    """
    return jax.nn.log_softmax((logits + noise) / temperature, axis=-1)


def straight_through(soft: jax.Array) -> jax.Array:
    """One-hot of the argmax in the forward pass, the gradient of ``soft`` in the backward pass."""
    hard = jax.nn.one_hot(jnp.argmax(soft, axis=-1), soft.shape[-1], dtype=soft.dtype)
    return hard + soft - jax.lax.stop_gradient(soft)


def gumbel_softmax(key: jax.Array, logits: jax.Array, temperature, *, hard: bool = False) -> jax.Array:
    """A Gumbel-softmax sample over the last axis of ``logits``.

    Args:
      key: PRNG key of the Gumbel noise.
      logits: ``[..., V]`` unnormalised log-probabilities.
      temperature: tau > 0; low tau gives near one-hot samples.
      hard: return the one-hot argmax, with the relaxed sample's gradient (straight-through).

    Returns:
      ``[..., V]``: rows on the simplex (relaxed), or one-hot rows (hard). The argmax of a
      sample is distributed as ``softmax(logits)`` whatever tau.
    """
    soft = jnp.exp(log_relaxed(logits, gumbel_noise(key, logits.shape), temperature))
    return straight_through(soft) if hard else soft


def hard_message(logits: jax.Array) -> jax.Array:
    """The evaluation message: one-hot argmax of each head, ``[..., L, V]`` (no noise, Fig. 4.2)."""
    return jax.nn.one_hot(jnp.argmax(logits, -1), logits.shape[-1], dtype=jnp.float32)


def sample_message(key: jax.Array, logits: jax.Array) -> tuple[jax.Array, jax.Array]:
    """A hard categorical sample per head and its log-probability (for REINFORCE).

    Args:
      key: PRNG key.
      logits: ``[B, L, V]``.

    Returns:
      ``(message [B, L, V] one-hot, no gradient; log_prob [B])`` where ``log_prob`` sums
      ``log softmax(logits)`` of the sampled symbols over the L heads (differentiable).
    """
    symbols = jax.random.categorical(key, logits, axis=-1)
    message = jax.nn.one_hot(symbols, logits.shape[-1], dtype=jnp.float32)
    log_prob = jnp.sum(message * jax.nn.log_softmax(logits, -1), axis=(-2, -1))
    return message, log_prob


def reinforce_surrogate(log_prob: jax.Array, cost: jax.Array) -> jax.Array:
    """Score-function surrogate: its gradient is an unbiased estimate of ``grad E[cost]``.

    ``mean_b stop_grad(cost_b - mean(cost)) * log_prob_b``; the batch mean of the cost is
    the baseline (variance reduction). Its value is not the cost; only its gradient matters.

    Args:
      log_prob: ``[B]`` log-probability of each sampled message (differentiable).
      cost: ``[B]`` per-sample cost of that message (gradient stopped here).
    """
    advantage = jax.lax.stop_gradient(cost - jnp.mean(cost))
    return jnp.mean(advantage * log_prob)


# --------------------------------------------------------------------------- models


class MessageGenerator(nn.Module):
    """ReLU MLP from a view to ``L`` heads of ``V`` logits (§4.2.2.2).

    Attributes:
      hidden: hidden widths, e.g. ``(128, 32)``; the last one is the feature layer the
        linear probe reads (§4.2.2.5).
      length: L, symbols per message (32 in the thesis).
      vocab: V, symbols in the vocabulary (2: bits).
    """

    hidden: Sequence[int] = (128, 32)
    length: int = 32
    vocab: int = 2

    @nn.compact
    def __call__(self, x: jax.Array) -> tuple[jax.Array, jax.Array]:
        """Args: x ``[B, P]`` float views. Returns ``(logits [B, L, V], features [B, hidden[-1]])``."""
        h = x.reshape(x.shape[0], -1)
        for width in self.hidden:
            h = nn.relu(nn.Dense(width)(h))
        logits = nn.Dense(self.length * self.vocab)(h)
        return logits.reshape(x.shape[0], self.length, self.vocab), h


class Critic(nn.Module):
    """Discriminator ``T(x, s)`` of the mutual-information objective: MLP on ``[x, flatten(s)]``.

    The first layer of an MLP on a concatenation is a sum ``W_x x + W_s s``, so scores of
    all ``B x B`` pairs (InfoNCE, JSD, the MI estimate) cost one pass over x and one over s
    plus a cheap broadcast; :meth:`__call__` and :meth:`pairs` share parameters.

    Attributes:
      hidden: width of the hidden layer (one ReLU layer: P + L*V -> hidden -> 1).
    """

    hidden: int = 128

    def setup(self):
        self.from_x = nn.Dense(self.hidden)
        self.from_s = nn.Dense(self.hidden, use_bias=False)
        self.out = nn.Dense(1)

    def __call__(self, x: jax.Array, s: jax.Array) -> jax.Array:
        """Args: x ``[B, P]``, s ``[B, L, V]``. Returns scores ``[B]`` of the pairs ``(x_b, s_b)``."""
        h = nn.relu(self.from_x(x) + self.from_s(s.reshape(s.shape[0], -1)))
        return self.out(h)[:, 0]

    def pairs(self, x: jax.Array, s: jax.Array) -> jax.Array:
        """Args: x ``[B, P]``, s ``[B, L, V]``. Returns ``[B, B]``: entry ``[i, j]`` scores ``(x_i, s_j)``."""
        hx = self.from_x(x)
        hs = self.from_s(s.reshape(s.shape[0], -1))
        return self.out(nn.relu(hx[:, None, :] + hs[None, :, :]))[..., 0]

    def split(self, x: jax.Array, s: jax.Array, s_neg: jax.Array) -> tuple[jax.Array, jax.Array]:
        """Scores of positives ``(x_b, s_b)`` and negatives ``(x_b, s'_b)``, ``[B]`` each, one pass over x."""
        hx = self.from_x(x)
        flat = lambda m: m.reshape(m.shape[0], -1)
        pos = self.out(nn.relu(hx + self.from_s(flat(s))))[:, 0]
        neg = self.out(nn.relu(hx + self.from_s(flat(s_neg))))[:, 0]
        return pos, neg


# --------------------------------------------------------------------------- MI objectives


def negatives(messages: jax.Array) -> jax.Array:
    """Negative messages ``s'_b = s_{b+1}`` (cyclic): generated from another sample ``x'_b = x_{b+1}``.

    Pairing ``x_b`` with it draws ``(x, s')`` from the product of marginals p(x)p(s)
    (MINE-style shuffling within the batch, §4.2.2.3).
    """
    return jnp.roll(messages, -1, axis=0)


def gan_loss(pos: jax.Array, neg: jax.Array) -> jax.Array:
    """Vanilla-GAN discriminator loss ``-E log D(pos) - E log(1 - D(neg))``, ``D = sigmoid``.

    The discriminator AND the generator minimise it (max-max, §4.2.2.3): both maximise
    ``E log D(x, s) + E log(1 - D(x, s'))``, a Jensen-Shannon proxy of I(X; S).

    Args:
      pos: ``[B]`` critic logits of joint pairs.
      neg: ``[B]`` critic logits of product-of-marginals pairs.

    Returns:
      A scalar; ``2 log 2 ~ 1.386`` at chance (all logits 0).
    """
    return jnp.mean(jax.nn.softplus(-pos)) + jnp.mean(jax.nn.softplus(neg))


def jsd_loss(scores: jax.Array) -> jax.Array:
    """Deep-InfoMax JSD loss on a ``[B, B]`` score matrix: diagonal = joint, off-diagonal = marginals."""
    b = scores.shape[0]
    eye = jnp.eye(b, dtype=bool)
    pos = jnp.mean(jax.nn.softplus(-jnp.diagonal(scores)))
    neg = jnp.sum(jnp.where(eye, 0.0, jax.nn.softplus(scores))) / (b * (b - 1))
    return pos + neg


def infonce_loss(scores: jax.Array) -> jax.Array:
    """InfoNCE loss on a ``[B, B]`` score matrix: classify each x_i's own message s_i among the B."""
    return jnp.mean(optax.softmax_cross_entropy_with_integer_labels(scores, jnp.arange(scores.shape[0])))


def infonce_bits(scores: jax.Array) -> jax.Array:
    """InfoNCE lower bound on I(X; S) in bits from a ``[B, B]`` score matrix.

    ``I >= log B - L_InfoNCE`` holds for ANY critic, so the scores of a GAN-trained critic
    give a valid (if loose) bound. It can never exceed ``log2 B`` bits: with B = 128 the
    estimate is capped at 7 bits, far below the 32 bits a 32-bit message could carry.
    """
    b = scores.shape[0]
    return (math.log(b) - infonce_loss(scores)) / math.log(2.0)


def info_loss(kind: str, critic_apply, x: jax.Array, messages: jax.Array) -> tuple[jax.Array, jax.Array,
                                                                                   jax.Array]:
    """The informativeness objective of one agent, minimised by its critic AND its generator.

    Args:
      kind: one of :data:`CRITICS`: "gan" (thesis: one negative ``(x_b, s_{b+1})`` per
        positive), "jsd" (all B(B-1) negatives), "infonce".
      critic_apply: ``critic_apply(method, x, s)`` with method in {"split", "pairs"} (a
        bound :class:`Critic`).
      x: ``[B, P]`` views.
      messages: ``[B, L, V]`` messages generated from ``x`` (relaxed or hard).

    Returns:
      ``(loss [], pos [B], neg [B])``: positive and negative logits for diagnostics
      (the negatives are ``(x_b, s_{b+1})`` for every kind).
    """
    if kind == "gan":
        pos, neg = critic_apply("split", x, messages, negatives(messages))
        return gan_loss(pos, neg), pos, neg
    scores = critic_apply("pairs", x, messages)
    pos, neg = jnp.diagonal(scores), jnp.diagonal(jnp.roll(scores, -1, axis=1))
    if kind == "jsd":
        return jsd_loss(scores), pos, neg
    if kind == "infonce":
        return infonce_loss(scores), pos, neg
    raise ValueError(f"critic kind must be one of {CRITICS}, got {kind!r}")


def info_cost_per_sample(pos: jax.Array, neg: jax.Array) -> jax.Array:
    """Per-message share of the GAN loss, ``[B]``: message b is the positive of x_b and the negative of x_{b-1}.

    The REINFORCE cost of the generator (it cannot differentiate through hard samples).
    """
    return jax.nn.softplus(-pos) + jnp.roll(jax.nn.softplus(neg), 1)


def discriminator_accuracy(pos: jax.Array, neg: jax.Array) -> jax.Array:
    """Fraction of pairs the critic classifies right (pos > 0, neg < 0); 0.5 is chance."""
    return 0.5 * (jnp.mean(pos > 0) + jnp.mean(neg < 0))


# --------------------------------------------------------------------------- communication levels


class Level(NamedTuple):
    """The likelihood terms of one communication level (§4.2.2.5) as numbers, so levels stack.

    ``ab`` is the term where B predicts A's message: ``-sum_t s_A^t log s_B^t``; ``ba`` the
    term where A predicts B's. The predictor always receives its gradient; the sender of the
    target message receives one only when ``*_to_sender`` is 1.

    Attributes:
      weight_ab: weight of the ``ab`` term (0 disables it).
      ab_to_sender: 1.0: gradient flows into A through ``s_A`` (feedback); 0.0: ``s_A`` is a
        constant target.
      weight_ba: weight of the ``ba`` term.
      ba_to_sender: 1.0: gradient flows into B through ``s_B``.
    """

    weight_ab: float | jax.Array
    ab_to_sender: float | jax.Array
    weight_ba: float | jax.Array
    ba_to_sender: float | jax.Array


LEVEL_NAMES = ("baseline", "student_receiving_only", "student_feedback_to_teacher", "both_feedback")


def level(name: str, *, one_way: float = 0.01, two_way: float = 0.005) -> Level:
    """The thesis' four levels (weights of Fig. 4.3: one-way 0.01, two-way 0.005).

    * ``baseline``: no likelihood term, each agent only maximises its own I(X; S).
    * ``student_receiving_only`` (eq. 4.2.6): B predicts s_A; no gradient into A.
    * ``student_feedback_to_teacher`` (eq. 4.2.7): the same term, its gradient also flows into A.
    * ``both_feedback`` (eq. 4.2.8): each predicts the other's message, gradients into both senders.
    """
    table = {"baseline": Level(0.0, 0.0, 0.0, 0.0),
             "student_receiving_only": Level(one_way, 0.0, 0.0, 0.0),
             "student_feedback_to_teacher": Level(two_way, 1.0, 0.0, 0.0),
             "both_feedback": Level(two_way, 1.0, two_way, 1.0)}
    if name not in table:
        raise ValueError(f"level must be one of {LEVEL_NAMES}, got {name!r}")
    return table[name]


def message_cross_entropy(target: jax.Array, log_pred: jax.Array, normalisation: str = "mean") -> jax.Array:
    """``-sum_v target log pred`` per head, summed or averaged over the L heads, mean over the batch.

    Args:
      target: ``[B, L, V]`` the received message (relaxed sample, eq. 4.2.6's ``s_A^t``).
      log_pred: ``[B, L, V]`` log of the receiver's own message (its prediction ``log s_B^t``).
      normalisation: "sum" over heads (eq. 4.2.6 read literally) or "mean" (x 1/L).

    Returns:
      A scalar.
    """
    per_head = -jnp.sum(target * log_pred, axis=-1)  # [B, L]
    if normalisation == "sum":
        return jnp.mean(jnp.sum(per_head, axis=-1))
    if normalisation == "mean":
        return jnp.mean(per_head)
    raise ValueError(f"normalisation must be one of {NORMALISATIONS}, got {normalisation!r}")


def _gate(x: jax.Array, flow) -> jax.Array:
    """``x`` in the forward pass; its gradient times ``flow`` (exactly 0 when flow == 0)."""
    return flow * x + (1.0 - flow) * jax.lax.stop_gradient(x)


def communication_loss(lvl: Level, msg_a: jax.Array, log_a: jax.Array, msg_b: jax.Array, log_b: jax.Array,
                       normalisation: str = "mean") -> jax.Array:
    """The likelihood loss of eqs. 4.2.6-4.2.8 with the level's gradient paths.

    Args:
      lvl: a :class:`Level` (floats or traced scalars).
      msg_a, msg_b: ``[B, L, V]`` the messages as targets (relaxed samples, or hard samples
        under REINFORCE).
      log_a, log_b: ``[B, L, V]`` each agent's log-prediction of a message (log of its own
        relaxed sample; ``log_softmax`` of its logits under REINFORCE).
      normalisation: see :func:`message_cross_entropy`.

    Returns:
      ``weight_ab * CE(s_A -> B) + weight_ba * CE(s_B -> A)``, a scalar.
    """
    ab = message_cross_entropy(_gate(msg_a, lvl.ab_to_sender), log_b, normalisation)
    ba = message_cross_entropy(_gate(msg_b, lvl.ba_to_sender), log_a, normalisation)
    return lvl.weight_ab * ab + lvl.weight_ba * ba


def per_sample_cross_entropy(target: jax.Array, log_pred: jax.Array, normalisation: str = "mean") -> jax.Array:
    """``[B]`` cross-entropy of each sample (the REINFORCE cost of a message as a target)."""
    per_head = -jnp.sum(target * log_pred, axis=-1)
    return jnp.sum(per_head, -1) if normalisation == "sum" else jnp.mean(per_head, -1)


# --------------------------------------------------------------------------- partial views


def inversion_mask(key: jax.Array, num_pixels: int, fraction: float = 0.1, *, exact: bool = False) -> jax.Array:
    """One agent's fixed noisy mask: which pixels its view inverts (§4.2.1.2, Algorithm 4 line 1).

    Args:
      key: PRNG key (draw once per agent from the seed; the mask never changes).
      num_pixels: P.
      fraction: noise level, the probability that a pixel is inverted (thesis: 0.1).
      exact: invert exactly ``round(fraction * P)`` pixels instead of a Bernoulli draw per pixel.

    Returns:
      ``[P]`` bool.
    """
    if exact:
        count = int(round(fraction * num_pixels))
        order = jax.random.permutation(key, num_pixels)
        return jnp.zeros(num_pixels, bool).at[order[:count]].set(True)
    return jax.random.bernoulli(key, fraction, (num_pixels,))


def half_masks(height: int = 28, width: int = 28) -> tuple[jax.Array, jax.Array]:
    """Complementary views: A keeps the top half of the image, B the bottom half. ``[P]`` float32 each."""
    rows = jnp.arange(height)[:, None] < height // 2
    top = jnp.broadcast_to(rows, (height, width)).reshape(-1).astype(jnp.float32)
    return top, 1.0 - top


def apply_view(x: jax.Array, invert: jax.Array, keep: jax.Array | None = None) -> jax.Array:
    """An agent's partial observation: invert masked pixels, then zero the pixels it cannot see.

    Args:
      x: ``[B, P]`` float images in [0, 1].
      invert: ``[P]`` bool, pixels turned into ``1 - x``.
      keep: ``[P]`` float, 1 where the agent sees the pixel (None: it sees all).

    Returns:
      ``[B, P]`` float32 views (Algorithm 4, lines 5-6).
    """
    view = jnp.where(invert, 1.0 - x, x)
    return view if keep is None else view * keep


# --------------------------------------------------------------------------- diagnostics


def message_agreement(msg_a: jax.Array, msg_b: jax.Array) -> jax.Array:
    """Fraction of symbols on which two hard messages ``[B, L, V]`` agree (0.5 for independent bits)."""
    return jnp.mean(jnp.argmax(msg_a, -1) == jnp.argmax(msg_b, -1))


def detect_collapse(disc_accuracy, agreement, *, chance_tolerance: float = 0.05, min_agreement: float = 0.95):
    """True where a run has collapsed to one shared, uninformative message.

    The two-way levels can degenerate (issue 4, hazard (a)): both agents emit the same
    constant message, which satisfies the likelihood terms perfectly and carries no
    information, so the discriminator sits at chance and the agents' messages agree.

    Args:
      disc_accuracy: discriminator accuracy in [0, 1] (any shape).
      agreement: A/B message agreement in [0, 1] (same shape).
      chance_tolerance: "at chance" means ``|disc_accuracy - 0.5| <= chance_tolerance``.
      min_agreement: "agreement near 1" means ``agreement >= min_agreement``.

    Returns:
      Bool array of the broadcast shape.
    """
    disc_accuracy, agreement = jnp.asarray(disc_accuracy), jnp.asarray(agreement)
    return (jnp.abs(disc_accuracy - 0.5) <= chance_tolerance) & (agreement >= min_agreement)


def collapse_over_run(curve: dict, *, chance_tolerance: float = 0.05, min_agreement: float = 0.8,
                      max_distinct: float = 0.25) -> list[bool]:
    """Per evaluation of a run, whether the two agents had collapsed onto a shared, poor code.

    :func:`detect_collapse` reads the final evaluation only and misses a run that collapses
    for a while and recovers, or collapses partially (few distinct messages, critic still above
    chance). Here an evaluation is collapsed when the messages are shared (A/B agreement >=
    ``min_agreement``) and either uninformative (either critic within ``chance_tolerance`` of
    chance) or few (either agent's distinct-message fraction <= ``max_distinct``). Sharing is
    required because agents that do not communicate also start near chance and, on very noisy
    views, emit few distinct messages, independently of each other (agreement ~0.5).

    Args:
      curve: a member's curve: equal-length lists ``disc_a``, ``disc_b``, ``agreement``,
        ``distinct_a``, ``distinct_b`` (one value per evaluation).
      chance_tolerance, min_agreement, max_distinct: the thresholds above.

    Returns:
      One bool per evaluation.
    """
    disc = np.minimum(np.abs(np.asarray(curve["disc_a"]) - 0.5), np.abs(np.asarray(curve["disc_b"]) - 0.5))
    few = np.minimum(np.asarray(curve["distinct_a"]), np.asarray(curve["distinct_b"])) <= max_distinct
    shared = np.asarray(curve["agreement"]) >= min_agreement
    return (shared & ((disc <= chance_tolerance) | few)).tolist()


# --------------------------------------------------------------------------- the agent population


@named_fields
@dataclasses.dataclass(frozen=True)
class AgentsConfig:
    """How a population of agent pairs and their probes train (thesis ch. 4); validated on construction.

    Where the thesis is silent (widths, batch, learning rates), the defaults are ours.

    Attributes:
      hidden: hidden widths of each message generator; the probe reads the last.
      critic_hidden: hidden width of each critic ``P + L*V -> critic_hidden -> 1``.
      batch_size: minibatch of both agents, drawn uniformly with replacement.
      learning_rate: Adam step of generators and critics (one optimiser over both agents).
      probe_learning_rate: Adam step of the linear probe (stopped features of B, from step 0).
      critic: one of :data:`CRITICS` ("gan" = thesis).
      estimator: one of :data:`ESTIMATORS`: "gumbel" (thesis) or "reinforce" (its suggested
        future work; needs critic "gan").
      tau_init, tau_decay, tau_every, tau_floor: Gumbel temperature schedule
        (:func:`temperature`; thesis: 4, 0.9, 100, 0.5).
      one_way_weight: weight of the likelihood term at level "student_receiving_only" (thesis: 0.01).
      two_way_weight: weight of each likelihood term at the feedback levels (thesis: 0.005).
      eval_every: steps between validation evaluations (one jitted chunk).
      diag_batch: validation images of the diagnostics (critic accuracy, agreement, distinct
        messages, MI bound capped at ``log2(diag_batch)`` bits).
      backend: how per-member code is lifted (:data:`jaxcomm.population.BACKENDS`).
      seed: base seed; member seed s uses ``fold_in(PRNGKey(seed), s)`` whatever its level and views.
    """

    hidden: tuple[int, ...] = (128, 32)
    critic_hidden: int = 128
    batch_size: int = 64
    learning_rate: float = 1e-3
    probe_learning_rate: float = 1e-3
    critic: str = "gan"
    estimator: str = "gumbel"
    tau_init: float = 4.0
    tau_decay: float = 0.9
    tau_every: int = 100
    tau_floor: float = 0.5
    one_way_weight: float = 0.01
    two_way_weight: float = 0.005
    eval_every: int = 100
    diag_batch: int = 128
    backend: str = "vmap"
    seed: int = 0

    def __post_init__(self):
        widths("hidden", self.hidden)
        for name in ("critic_hidden", "batch_size", "eval_every", "tau_every"):
            integer(name, getattr(self, name), low=1)
        integer("diag_batch", self.diag_batch, low=2)
        for name in ("learning_rate", "probe_learning_rate", "tau_init", "tau_floor"):
            positive(name, getattr(self, name))
        for name in ("one_way_weight", "two_way_weight"):
            value = getattr(self, name)
            require(is_real(value) and value >= 0, name, "a number >= 0", value)
        require(is_real(self.tau_decay) and 0 < self.tau_decay <= 1, "tau_decay", "a number in (0, 1]",
                self.tau_decay)
        require(self.critic in CRITICS, "critic", f"one of {CRITICS}", self.critic)
        require(self.estimator in ESTIMATORS, "estimator", f"one of {ESTIMATORS}", self.estimator)
        require(self.estimator == "gumbel" or self.critic == "gan", "critic",
                "'gan' with estimator 'reinforce' (its per-message cost is the GAN loss)", self.critic)
        population.check_backend(self.backend)
        require(is_int(self.seed), "seed", "an integer", self.seed)

    def replace(self, **changes: Any) -> AgentsConfig:
        """A copy with ``changes`` (validated again)."""
        return dataclasses.replace(self, **changes)


class Member(NamedTuple):
    """One pair of agents (teacher A, student B) and B's probe: its level, seed and views.

    Members of any level, seed, views or normalisation train as one population (those
    become per-member arrays); a population shares the message length and the steps.
    Seed s has the same initialisation, masks, minibatches and Gumbel noise whatever the
    level, so levels compare paired by seed.
    """

    level: str  # a name of LEVEL_NAMES
    seed: int  # paired seed
    noise: float = 0.1  # fraction of pixels each agent's fixed mask inverts (thesis: 0.1)
    view: str = "full"  # one of VIEWS: "full", or "halves" (A sees the top half, B the bottom half)
    frozen: bool = False  # untrained agents (the random-init probe): only the probe learns
    normalisation: str = "mean"  # cross-entropy over the L heads, one of NORMALISATIONS
    temperature: float = 0.0  # > 0: a fixed Gumbel-softmax temperature; 0: the config's annealed schedule
    probe_delay: int = 0  # the probe's first step (the thesis' delayed probe); the agents train from step 0


class MemberArrays(NamedTuple):
    """Per-member constants as arrays, so one jitted step serves every level and view."""

    key: jax.Array  # [S, 2] uint32 run key of the member's seed (batches and Gumbel noise)
    level: Level  # fields [S] float32
    invert_a: jax.Array  # [S, P] bool, A's fixed inverted pixels
    keep_a: jax.Array  # [S, P] float32, 1 where A sees the pixel
    invert_b: jax.Array  # [S, P] bool
    keep_b: jax.Array  # [S, P] float32
    frozen: jax.Array  # [S] float32, 1: agents' parameters never move
    tau_fixed: jax.Array  # [S] float32, > 0: fixed temperature; 0: the annealed schedule
    probe_start: jax.Array  # [S] int32, the probe's first step


class Agents(NamedTuple):
    """Training state of one pair of agents and the student's probe (in a population: leaves [S, ...])."""

    params: dict  # {"gen_a", "gen_b", "critic_a", "critic_b"}: Flax params
    opt_state: optax.OptState  # Adam state of params
    probe: dict  # linear probe on B's last hidden layer: {"kernel" [H, C], "bias" [C]}
    probe_opt: optax.OptState  # Adam state of the probe


class AgentsState(NamedTuple):
    """A population's training state."""

    agents: Agents  # leaves [S, ...]
    step: jax.Array  # [] int32, steps done (shared)


class TrainData(NamedTuple):
    """The training split, on the device once."""

    images: jax.Array  # [M, H, W, 1] uint8
    labels: jax.Array  # [M] int32


class AgentFunctions(NamedTuple):
    """The pure functions of a population of S members (:func:`make_agents`).

    Attributes:
      init: ``init(keys [S, 2]) -> AgentsState``.
      step: ``step(state, (TrainData, MemberArrays)) -> (state, info)``, pure; ``info`` holds ``[S]`` scalars.
      evaluate: ``evaluate(gen_b, probe, images, labels, weight, arrays) -> [S]`` weighted correct answers of B's
        probe, jitted.
      diagnose: ``diagnose(params, images, arrays) -> dict`` of ``[S]`` diagnostics (critic accuracy, agreement,
        mutual information, distinct messages), jitted.
      features: ``features(gen_b, images uint8 [B, H, W, 1], arrays) -> [S, B, hidden[-1]]``, the student's last
        hidden layer on its own views (what the probe reads), jitted.
      symbols: ``symbols(params, images uint8 [B, H, W, 1], arrays) -> {"a": [S, B, L], "b": [S, B, L]}``, each
        agent's hard message (the argmax symbol of each of the L heads) for every member on its own view of the
        images, jitted: what :func:`jaxcomm.language_metrics.language_report` reads.
    """

    init: Any
    step: Any
    evaluate: Any
    diagnose: Any
    features: Any
    symbols: Any


def seed_key(config: AgentsConfig, seed: int) -> jax.Array:
    """Seed s: the same key in every level and view (paired comparisons)."""
    return jax.random.fold_in(jax.random.PRNGKey(config.seed), seed)


def check_members(members: Sequence[Member]) -> None:
    """Raises ``ValueError`` naming the first member whose level, seed, noise, view or normalisation is wrong."""
    require(len(members) >= 1, "members", "a non-empty sequence of Member", members)
    for i, m in enumerate(members):
        require(isinstance(m, Member), f"members[{i}]", "a language.Member", m)
        require(m.level in LEVEL_NAMES, f"members[{i}].level", f"one of {LEVEL_NAMES}", m.level)
        require(is_int(m.seed), f"members[{i}].seed", "an integer", m.seed)
        require(is_real(m.noise) and 0.0 <= m.noise <= 1.0, f"members[{i}].noise", "a fraction in [0, 1]", m.noise)
        require(m.view in VIEWS, f"members[{i}].view", f"one of {VIEWS}", m.view)
        require(m.normalisation in NORMALISATIONS, f"members[{i}].normalisation", f"one of {NORMALISATIONS}",
                m.normalisation)
        require(is_real(m.temperature) and m.temperature >= 0, f"members[{i}].temperature",
                "a number >= 0 (0: the annealed schedule)", m.temperature)
        require(is_int(m.probe_delay) and m.probe_delay >= 0, f"members[{i}].probe_delay", "an integer >= 0",
                m.probe_delay)


def member_arrays(config: AgentsConfig, members: Sequence[Member], *, length: int, num_pixels: int,
                  side: int) -> MemberArrays:
    """Masks, views, levels and keys of each member.

    A mask is drawn from the seed's key alone (``fold_in(key, 1)`` for A, ``2`` for B) as
    ``uniform < noise``, so a seed's 10 % mask is contained in its 30 % and 50 % masks.
    The population computes the cross-entropy averaged over heads; a member with
    normalisation "sum" has its weights multiplied by L, which is exactly the summed reading.

    Args:
      config: the agents' config (level weights, base seed).
      members: the S members.
      length: L of every member.
      num_pixels: P.
      side: image side (``P = side * side``), for the halves views.
    """
    check_members(members)
    keys, levels, inv_a, keep_a, inv_b, keep_b = [], [], [], [], [], []
    top, bottom = half_masks(side, side)
    full = jnp.ones(num_pixels, jnp.float32)
    for m in members:
        key = seed_key(config, m.seed)
        keys.append(jax.random.fold_in(key, 3))
        lvl = level(m.level, one_way=config.one_way_weight, two_way=config.two_way_weight)
        scale = float(length) if m.normalisation == "sum" else 1.0
        levels.append(lvl._replace(weight_ab=lvl.weight_ab * scale, weight_ba=lvl.weight_ba * scale))
        inv_a.append(inversion_mask(jax.random.fold_in(key, 1), num_pixels, m.noise))
        inv_b.append(inversion_mask(jax.random.fold_in(key, 2), num_pixels, m.noise))
        halves = m.view == "halves"
        keep_a.append(top if halves else full)
        keep_b.append(bottom if halves else full)
    lvl = Level(*(jnp.asarray(col, jnp.float32) for col in zip(*levels, strict=True)))
    return MemberArrays(jnp.stack(keys), lvl, jnp.stack(inv_a), jnp.stack(keep_a), jnp.stack(inv_b),
                        jnp.stack(keep_b), jnp.asarray([m.frozen for m in members], jnp.float32),
                        jnp.asarray([m.temperature for m in members], jnp.float32),
                        jnp.asarray([m.probe_delay for m in members], jnp.int32))


@functools.cache
def _member_init(hidden: tuple[int, ...], critic_hidden: int, length: int, num_pixels: int, num_classes: int):
    """``init_member(key) -> Agents`` of one member (one function object per architecture, so jit caches it).

    Adam's initial state does not depend on its step size, so the optimisers here only shape the state.
    """
    gen = MessageGenerator(hidden=hidden, length=length)
    critic = Critic(hidden=critic_hidden)
    adam = optax.adam(1e-3)
    x0, s0 = jnp.zeros((1, num_pixels)), jnp.zeros((1, length, 2))

    def init_member(key):
        ka, kb, kca, kcb = jax.random.split(key, 4)
        params = {"gen_a": gen.init(ka, x0)["params"], "gen_b": gen.init(kb, x0)["params"],
                  "critic_a": critic.init(kca, x0, s0)["params"], "critic_b": critic.init(kcb, x0, s0)["params"]}
        probe = {"kernel": jnp.zeros((hidden[-1], num_classes)), "bias": jnp.zeros((num_classes,))}
        return Agents(params, adam.init(params), probe, adam.init(probe))

    return init_member


class _Parts(NamedTuple):
    """The modules and optimisers every member of a population shares (fixed by the config and L)."""

    gen: MessageGenerator
    critic: Critic
    optimizer: optax.GradientTransformation  # Adam of the generators and critics
    probe_opt: optax.GradientTransformation  # Adam of the probe


class _Batch(NamedTuple):
    """One member's minibatch as its two agents see it, with the step's message noise."""

    x_a: jax.Array  # [B, P] A's views
    x_b: jax.Array  # [B, P] B's views
    key_a: jax.Array  # A's Gumbel noise (or REINFORCE sample)
    key_b: jax.Array  # B's
    temp: jax.Array  # [] Gumbel-softmax temperature


class _Sent(NamedTuple):
    """Both agents' training messages (:func:`_training_messages`)."""

    msg_a: jax.Array  # [B, L, V] A's message, as a target
    log_a: jax.Array  # [B, L, V] A's log-prediction of a message
    lp_a: jax.Array | None  # [B] log-probability of A's sampled message (REINFORCE only)
    msg_b: jax.Array
    log_b: jax.Array
    lp_b: jax.Array | None


def _bound_critic(critic: Critic, params: dict):
    """``critic_apply(method, x, *s)`` of :func:`info_loss`, with the critic's ``params``."""
    return lambda method, x, *s: critic.apply({"params": params}, x, *s, method=method)


def _training_messages(logits_a: jax.Array, logits_b: jax.Array, key_a: jax.Array, key_b: jax.Array, temp,
                       reinforce: bool) -> _Sent:
    """Both agents' messages from their logits ``[B, L, V]``: relaxed Gumbel-softmax samples, or hard samples.

    A hard sample's log is 0 or -inf, so under REINFORCE the log-prediction is ``log_softmax`` of the logits.
    """
    if reinforce:
        msg_a, lp_a = sample_message(key_a, logits_a)
        msg_b, lp_b = sample_message(key_b, logits_b)
        return _Sent(msg_a, jax.nn.log_softmax(logits_a, -1), lp_a, msg_b, jax.nn.log_softmax(logits_b, -1), lp_b)
    log_a = log_relaxed(logits_a, gumbel_noise(key_a, logits_a.shape), temp)
    log_b = log_relaxed(logits_b, gumbel_noise(key_b, logits_b.shape), temp)
    return _Sent(jnp.exp(log_a), log_a, None, jnp.exp(log_b), log_b, None)


def _reinforce_cost(pos: jax.Array, neg: jax.Array, msg: jax.Array, log_receiver: jax.Array, to_sender, weight,
                    normalisation: str) -> jax.Array:
    """``[B]`` cost of each message a sender sampled: its share of its critic's GAN loss plus, where the level
    feeds the likelihood back to the sender (``to_sender`` 1), the receiver's weighted cross-entropy on it."""
    return info_cost_per_sample(pos, neg) + to_sender * weight * per_sample_cross_entropy(msg, log_receiver,
                                                                                           normalisation)


def _agents_loss(params: dict, parts: _Parts, config: AgentsConfig, batch: _Batch, lvl: Level):
    """Both agents' MI losses, the level's likelihood terms and, under REINFORCE, the senders' surrogates.

    Returns:
      ``(total [], (info, features [B, hidden[-1]] of B))``; ``info`` holds the scalars a step records.
    """
    norm = "mean"  # over the heads; member_arrays scales the weights of "sum" members by L
    reinforce = config.estimator == "reinforce"
    logits_a, _ = parts.gen.apply({"params": params["gen_a"]}, batch.x_a)
    logits_b, feat_b = parts.gen.apply({"params": params["gen_b"]}, batch.x_b)
    sent = _training_messages(logits_a, logits_b, batch.key_a, batch.key_b, batch.temp, reinforce)
    critic_a = _bound_critic(parts.critic, params["critic_a"])
    critic_b = _bound_critic(parts.critic, params["critic_b"])
    info_a, pos_a, neg_a = info_loss(config.critic, critic_a, batch.x_a, sent.msg_a)
    info_b, pos_b, neg_b = info_loss(config.critic, critic_b, batch.x_b, sent.msg_b)
    comm = communication_loss(lvl, sent.msg_a, sent.log_a, sent.msg_b, sent.log_b, norm)
    total = info_a + info_b + comm
    if reinforce:  # no gradient reaches a sender through its hard sample: it gets the score-function one
        cost_a = _reinforce_cost(pos_a, neg_a, sent.msg_a, sent.log_b, lvl.ab_to_sender, lvl.weight_ab, norm)
        cost_b = _reinforce_cost(pos_b, neg_b, sent.msg_b, sent.log_a, lvl.ba_to_sender, lvl.weight_ba, norm)
        total = total + reinforce_surrogate(sent.lp_a, cost_a) + reinforce_surrogate(sent.lp_b, cost_b)
    info = {"info_a": info_a, "info_b": info_b, "comm": comm, "disc_a": discriminator_accuracy(pos_a, neg_a)}
    return total, (info, feat_b)


def _agents_update(optimizer: optax.GradientTransformation, agents: Agents, grads: dict,
                   frozen: jax.Array) -> tuple[dict, optax.OptState]:
    """One Adam step of both generators and critics: ``(params, Adam state)``; ``frozen`` 1.0 keeps the params."""
    updates, opt_state = optimizer.update(grads, agents.opt_state, agents.params)
    updates = jax.tree_util.tree_map(lambda u: u * (1.0 - frozen), updates)
    return optax.apply_updates(agents.params, updates), opt_state


def _probe_loss(probe: dict, features: jax.Array, labels: jax.Array, idx: jax.Array) -> jax.Array:
    """Cross-entropy of the linear probe on B's features ``[B, H]`` of the images ``idx [B]`` (labels ``[M]``).

    The features are stopped: the probe measures them and must not shape them.
    """
    logits = jax.lax.stop_gradient(features) @ probe["kernel"] + probe["bias"]
    return optax.softmax_cross_entropy_with_integer_labels(logits, labels[idx]).mean()


def _probe_update(probe_opt: optax.GradientTransformation, agents: Agents, features: jax.Array, labels: jax.Array,
                  idx: jax.Array, t, start) -> tuple[dict, optax.OptState, jax.Array]:
    """One Adam step of the probe (:func:`_probe_loss`'s arguments) if step ``t`` is at least ``start``.

    Returns:
      ``(probe, its Adam state, loss [])``.
    """
    loss, grads = jax.value_and_grad(_probe_loss)(agents.probe, features, labels, idx)
    updates, state = probe_opt.update(grads, agents.probe_opt, agents.probe)
    # A delayed probe (and its Adam moments) stays at its initial value until its first step.
    started = t >= start
    probe, state = jax.tree_util.tree_map(lambda new, old: jnp.where(started, new, old),
                                          (optax.apply_updates(agents.probe, updates), state),
                                          (agents.probe, agents.probe_opt))
    return probe, state, loss


def _member_step(config: AgentsConfig, parts: _Parts, agents: Agents, arrays: MemberArrays, t,
                 data: TrainData) -> tuple[Agents, dict]:
    """One training step of one member (Algorithm 4) at step ``t`` ([] int32): ``(agents, info of scalars)``.

    Its draws come from ``fold_in(arrays.key, t)`` alone, so a seed sees the same minibatches and noise at every
    level and view.
    """
    k_batch, k_a, k_b = jax.random.split(jax.random.fold_in(arrays.key, t), 3)
    idx = jax.random.randint(k_batch, (config.batch_size,), 0, data.labels.shape[0])
    x = to_unit_float(data.images[idx]).reshape(config.batch_size, -1)
    xa = apply_view(x, arrays.invert_a, arrays.keep_a)
    xb = apply_view(x, arrays.invert_b, arrays.keep_b)
    temp = jnp.where(arrays.tau_fixed > 0, arrays.tau_fixed,
                     temperature(t, init=config.tau_init, decay=config.tau_decay, every=config.tau_every,
                                 floor=config.tau_floor))
    batch = _Batch(xa, xb, k_a, k_b, temp)
    grads, (info, feat_b) = jax.grad(_agents_loss, has_aux=True)(agents.params, parts, config, batch, arrays.level)
    params, opt_state = _agents_update(parts.optimizer, agents, grads, arrays.frozen)
    probe, probe_state, probe_loss = _probe_update(parts.probe_opt, agents, feat_b, data.labels, idx, t,
                                                   arrays.probe_start)
    return Agents(params, opt_state, probe, probe_state), {**info, "probe": probe_loss}


def _generate(gen: MessageGenerator, gen_params: dict, images: jax.Array, invert: jax.Array,
              keep: jax.Array) -> tuple[jax.Array, jax.Array]:
    """``(logits [B, L, V], features [B, hidden[-1]])`` of one agent's view of uint8 ``images [B, H, W, 1]``."""
    x = apply_view(to_unit_float(images).reshape(images.shape[0], -1), invert, keep)
    return gen.apply({"params": gen_params}, x)


def _features_b(gen: MessageGenerator, gen_b: dict, images: jax.Array, invert_b: jax.Array,
                keep_b: jax.Array) -> jax.Array:
    """``[B, hidden[-1]]`` B's last hidden layer on its views of ``images``: what the probe reads."""
    return _generate(gen, gen_b, images, invert_b, keep_b)[1]


def _symbols(gen: MessageGenerator, params: dict, images: jax.Array, invert_a: jax.Array, keep_a: jax.Array,
             invert_b: jax.Array, keep_b: jax.Array) -> dict:
    """``{"a": [B, L], "b": [B, L]}``: each agent's argmax symbol of each head on its own views of ``images``."""
    return {"a": jnp.argmax(_generate(gen, params["gen_a"], images, invert_a, keep_a)[0], -1),
            "b": jnp.argmax(_generate(gen, params["gen_b"], images, invert_b, keep_b)[0], -1)}


def _correct(gen: MessageGenerator, gen_b: dict, probe: dict, images: jax.Array, labels: jax.Array,
             weight: jax.Array, invert_b: jax.Array, keep_b: jax.Array) -> jax.Array:
    """``[]`` the probe's correct answers on B's views of ``images``, each weighted by ``weight [B]``."""
    logits = _features_b(gen, gen_b, images, invert_b, keep_b) @ probe["kernel"] + probe["bias"]
    return jnp.sum((jnp.argmax(logits, -1) == labels) * weight)


def _diagnose(gen: MessageGenerator, critic: Critic, params: dict, images: jax.Array, invert_a: jax.Array,
              keep_a: jax.Array, invert_b: jax.Array, keep_b: jax.Array) -> dict:
    """Scalar diagnostics of one member's hard messages on ``images [B, H, W, 1]``.

    Per agent, ``disc_*`` (its critic's accuracy), ``mi_bits_*`` (:func:`infonce_bits`) and ``distinct_*``
    (:func:`distinct_fraction`); ``agreement`` of the two agents' messages.
    """
    x = to_unit_float(images).reshape(images.shape[0], -1)
    out = {}
    hard = {}
    for agent, inv, keep in (("a", invert_a, keep_a), ("b", invert_b, keep_b)):
        view = apply_view(x, inv, keep)
        logits, _ = gen.apply({"params": params[f"gen_{agent}"]}, view)
        msg = hard_message(logits)
        scores = critic.apply({"params": params[f"critic_{agent}"]}, view, msg, method="pairs")
        pos, neg = jnp.diagonal(scores), jnp.diagonal(jnp.roll(scores, -1, axis=1))
        out[f"disc_{agent}"] = discriminator_accuracy(pos, neg)
        out[f"mi_bits_{agent}"] = infonce_bits(scores)
        out[f"distinct_{agent}"] = distinct_fraction(msg)
        hard[agent] = msg
    out["agreement"] = message_agreement(hard["a"], hard["b"])
    return out


def make_agents(config: AgentsConfig, length: int, num_pixels: int, num_classes: int) -> AgentFunctions:
    """The pure functions of a population whose members all send messages of ``length`` symbols.

    One step of a member (Algorithm 4): a minibatch, each agent's view of it, relaxed
    Gumbel-softmax messages (or hard samples under REINFORCE), each agent's MI loss with its
    critic, the level's likelihood terms, one Adam step on generators and critics (none
    for frozen members), one Adam step of the probe on B's stopped features. The step is
    written for one member (:func:`_member_step`) and lifted to S by :func:`jaxcomm.population.lift`.

    Args:
      config: the agents' config.
      length: L of every member.
      num_pixels: P.
      num_classes: C of the probe.

    The cross-entropy is averaged over heads here; :func:`member_arrays` scales the weights
    of "sum" members by L.
    """
    parts = _Parts(MessageGenerator(hidden=config.hidden, length=length), Critic(hidden=config.critic_hidden),
                   optax.adam(config.learning_rate), optax.adam(config.probe_learning_rate))
    gen = parts.gen
    init_member = _member_init(tuple(config.hidden), config.critic_hidden, length, num_pixels, num_classes)
    lifted_step = population.lift(functools.partial(_member_step, config, parts), backend=config.backend,
                                  in_axes=(0, 0, None, None))

    def init(keys):
        # "loop": one compiled single-member init, shared by every population of the same architecture
        # (compiling the initialisers costs seconds on CPU; running them costs milliseconds).
        agents = population.lift(init_member, backend="loop")(keys)
        return AgentsState(agents, jnp.zeros((), jnp.int32))

    def step(state: AgentsState, data):
        train, arrays = data
        agents, info = lifted_step(state.agents, arrays, state.step, train)
        return AgentsState(agents, state.step + 1), info

    lifted_features = population.lift(functools.partial(_features_b, gen), backend=config.backend,
                                      in_axes=(0, None, 0, 0))
    features = jax.jit(lambda gen_b, images, arrays: lifted_features(gen_b, images, arrays.invert_b, arrays.keep_b))
    lifted_symbols = population.lift(functools.partial(_symbols, gen), backend=config.backend,
                                     in_axes=(0, None, 0, 0, 0, 0))
    symbols = jax.jit(lambda params, images, arrays: lifted_symbols(params, images, arrays.invert_a, arrays.keep_a,
                                                                    arrays.invert_b, arrays.keep_b))

    lifted_correct = population.lift(functools.partial(_correct, gen), backend=config.backend,
                                     in_axes=(0, 0, None, None, None, 0, 0))
    evaluate = jax.jit(lambda gen_b, probe, images, labels, weight, arrays: lifted_correct(
        gen_b, probe, images, labels, weight, arrays.invert_b, arrays.keep_b))

    # lax.map over members: the [B, B, hidden] pair activations of every member at once would not fit.
    lifted_diag = population.lift(functools.partial(_diagnose, gen, parts.critic), backend="map",
                                  in_axes=(0, None, 0, 0, 0, 0), map_batch_size=4)
    diagnose = jax.jit(lambda params, images, arrays: lifted_diag(params, images, arrays.invert_a, arrays.keep_a,
                                                                  arrays.invert_b, arrays.keep_b))
    return AgentFunctions(init, step, evaluate, diagnose, features, symbols)


def distinct_fraction(msg: jax.Array) -> jax.Array:
    """Fraction of distinct hard messages in a batch ``[B, L, V]`` (1/B: one constant message)."""
    bits = jnp.argmax(msg, -1)  # [B, L]
    same = jnp.all(bits[:, None, :] == bits[None, :, :], axis=-1)  # [B, B]
    first = ~jnp.any(jnp.tril(same, k=-1), axis=1)  # no earlier identical message
    return jnp.mean(first)


def probe_accuracy(fns: AgentFunctions, gen_b, probe, split: ImageSplit, arrays: MemberArrays) -> np.ndarray:
    """``[S]`` accuracy (%) of each member's probe on ``split``, through B's view and generator."""
    return accuracy_in_batches(lambda *batch: fns.evaluate(gen_b, probe, *batch, arrays), split, 2500)


def split_features(fns: AgentFunctions, gen_b, split: ImageSplit, arrays: MemberArrays, batch: int = 2500) -> jax.Array:
    """``[S, M, hidden[-1]]`` B's features of every image of ``split`` (its own view), per member."""
    images = jnp.asarray(split.images)
    return jnp.concatenate([fns.features(gen_b, images[i:i + batch], arrays)
                            for i in range(0, images.shape[0], batch)], axis=1)


def refit_probes(fns: AgentFunctions, gen_b, dataset: ImageDataset, arrays: MemberArrays, config: ProbeConfig,
                 key: jax.Array) -> dict:
    """A fresh linear probe per member on B's frozen features, trained to convergence (early-stopped).

    The probe trained online beside the agents sees features that move, and stops with them;
    this one measures what fixed features say about the digit (the thesis' ch. 2 protocol:
    fully trained with early stopping on validation, :func:`jaxcomm.probe.train_probe`).

    Args:
      fns: the population's functions.
      gen_b: B's generator parameters, leaves ``[S, ...]`` (final agents; initial ones for frozen members).
      dataset: train, validation and test splits.
      arrays: the members' views.
      config: the probe's epochs, batch and step size.
      key: the minibatches' shuffling key (shared by the members).

    Returns:
      ``{"val_accuracy", "test_accuracy"}`` ``[S]`` in %, ``best_epoch`` ``[S]`` and
      ``converged`` ``[S]`` bool: the last quarter of the epochs raised the best validation
      accuracy by less than 0.2 points.
    """
    feats = [split_features(fns, gen_b, split, arrays) for split in (dataset.train, dataset.validation, dataset.test)]
    probes, _, test_probs = fit_probes(key, feats[0], jnp.asarray(dataset.train.labels), feats[1],
                                       jnp.asarray(dataset.validation.labels), feats[2],
                                       num_classes=dataset.num_classes, config=config)
    test = 100.0 * np.mean(np.argmax(np.asarray(test_probs), -1) == dataset.test.labels, axis=1)
    curve = 100.0 * np.asarray(probes.val_curve)  # [S, epochs]
    cut = max(1, (3 * config.epochs) // 4)
    gain = curve.max(1) - curve[:, :cut].max(1)
    return {"val_accuracy": 100.0 * np.asarray(probes.val_accuracy), "test_accuracy": test,
            "best_epoch": np.asarray(probes.best_epoch), "converged": gain < 0.2}


def _evaluate_agents(fns: AgentFunctions, validation: ImageSplit, diag_images: jax.Array, arrays: MemberArrays,
                     state: AgentsState, infos: dict, steps_done: int) -> dict:
    """The driver's evaluation record: per member, the probe's validation accuracy, the diagnostics on
    ``diag_images`` and the chunk's mean training losses (``infos`` leaves ``[steps, S]``), as lists over S."""
    agents = state.agents
    val = probe_accuracy(fns, agents.params["gen_b"], agents.probe, validation, arrays)
    diagnostics = fns.diagnose(agents.params, diag_images, arrays)
    return {"val_accuracy": val.tolist(),
            "diagnostics": {k: np.asarray(v).tolist() for k, v in diagnostics.items()},
            "train": {k: np.asarray(v).mean(0).tolist() for k, v in infos.items()}}


def _member_curve(history: list[dict], i: int) -> dict:
    """Member ``i``'s curve from the driver's history: ``steps``, ``val_accuracy``, the diagnostics and the
    training losses ``train_*``, one rounded value per evaluation."""
    curve = {"steps": [r["step"] for r in history],
             "val_accuracy": [round(float(r["val_accuracy"][i]), 3) for r in history]}
    for key in history[0]["diagnostics"] if history else ():
        curve[key] = [round(float(r["diagnostics"][key][i]), 4) for r in history]
    for key in history[0]["train"] if history else ():
        curve[f"train_{key}"] = [round(float(r["train"][key][i]), 5) for r in history]
    return curve


def _collapse(curve: dict) -> dict:
    """A member's ``collapsed`` (:func:`detect_collapse` on its last diagnostics) and ``collapsed_steps`` (the
    evaluations :func:`collapse_over_run` flags); with no evaluation, not collapsed."""
    final = {k: v[-1] for k, v in curve.items() if k not in ("steps", "val_accuracy") and v}
    collapsed = bool(detect_collapse(0.5 * (final.get("disc_a", 1.0) + final.get("disc_b", 1.0)),
                                     final.get("agreement", 0.0))) if final else False
    flags = collapse_over_run(curve) if final else []
    return {"collapsed": collapsed,
            "collapsed_steps": [step for step, flag in zip(curve["steps"], flags, strict=True) if flag]}


def _member_results(members: Sequence[Member], length: int, history: list[dict], best: driver.Best,
                    test: np.ndarray, refitted: dict | None) -> list[dict]:
    """:func:`train_agents`' dict per member: its fields, ``length``, its curve (:func:`_member_curve`), ``best_val``,
    ``best_step``, ``test_accuracy`` (``test [S]``, at the best validation step), :func:`_collapse`'s entries and,
    with ``refitted`` (:func:`refit_probes`), ``refit_*``."""
    out = []
    for i, m in enumerate(members):
        curve = _member_curve(history, i)
        member = {**m._asdict(), "length": length, **curve, "best_val": float(best.score[i]),
                  "best_step": int(best.step[i]), "test_accuracy": float(test[i]), **_collapse(curve)}
        if refitted is not None:
            member.update({f"refit_{k}": v[i].item() for k, v in refitted.items()})
        out.append(member)
    return out


@driver.interruptible
def train_agents(config: AgentsConfig, members: Sequence[Member], dataset: ImageDataset, *, length: int,
                 num_steps: int, progress: bool = True, desc: str | None = None,
                 checkpointer: Checkpointer | None = None, refit: ProbeConfig | None = None) -> dict:
    """Trains every member together (one population, :func:`jaxcomm.driver.train`) and tests its best probe.

    Every ``config.eval_every`` steps the driver records each member's probe validation
    accuracy, the diagnostics on ``config.diag_batch`` validation images and the chunk's
    mean training losses; its tracker keeps each member's B generator and probe at the best
    validation accuracy, whose test accuracy is reported (never chosen on).

    Args:
      config: the agents' config.
      members: the S members (any levels, seeds, views, normalisations).
      dataset: images ``[M, side, side, 1]`` uint8 with train, validation and test splits.
      length: L, symbols per message of every member.
      num_steps: training steps.
      progress: draw a progress bar.
      desc: its label.
      checkpointer: save every ``checkpointer.every`` steps and on SIGINT/SIGTERM; resumes
        bit-identically with ``checkpointer.resume``.
      refit: after training, also fit a fresh probe per member on the final agents' frozen
        features to convergence (:func:`refit_probes`); None: skip.

    Returns:
      ``{"members", "seconds", "train_seconds", "steps_done", "status", "interrupted",
      "final_params", "arrays", "functions"}``. Each member dict holds the member's fields,
      ``length``, its curve (``steps``, ``val_accuracy``, diagnostics ``disc_a/b``,
      ``mi_bits_a/b``, ``distinct_a/b``, ``agreement``, training losses ``train_*``),
      ``best_val``, ``best_step``, ``test_accuracy`` at the best validation step and
      ``collapsed`` (:func:`detect_collapse` on the final diagnostics), ``collapsed_steps``
      (the evaluations :func:`collapse_over_run` flags) and, with ``refit``, ``refit_val_accuracy``,
      ``refit_test_accuracy``, ``refit_best_epoch``, ``refit_converged``. ``final_params`` and
      ``arrays`` have leaves ``[S, ...]``.

    Raises:
      jaxcomm.driver.NonFiniteLoss, jaxcomm.driver.Diverged: a probe loss left its bounds
        (naming the member as the node).
      jaxcomm.driver.Interrupted: a checkpointed run was stopped by a signal (after saving).
    """
    require(is_int(length) and length >= 1, "length", "an integer >= 1", length)
    require(is_int(num_steps) and num_steps >= 1, "num_steps", "an integer >= 1", num_steps)
    side = dataset.train.images.shape[1]
    num_pixels = int(np.prod(dataset.train.images.shape[1:]))
    fns = make_agents(config, length, num_pixels, dataset.num_classes)
    arrays = member_arrays(config, members, length=length, num_pixels=num_pixels, side=side)
    diag_images = jnp.asarray(dataset.validation.images[:config.diag_batch])
    data = (TrainData(jnp.asarray(dataset.train.images), jnp.asarray(dataset.train.labels)), arrays)

    def init(key):  # key = PRNGKey(config.seed): member s starts from fold_in(seed_key(s), 0) at every level
        return fns.init(jnp.stack([jax.random.fold_in(jax.random.fold_in(key, m.seed), 0) for m in members]))

    evaluate = functools.partial(_evaluate_agents, fns, dataset.validation, diag_images, arrays)
    # The stops watch the probe's cross-entropy [steps, S] (positive, log C at the start): a probe
    # loss 100x its first value means diverged features. The MI and likelihood losses are left out.
    system = driver.System(init, fns.step, evaluate, losses=lambda infos: infos["probe"],
                           postfix=lambda record: {"val": f"{np.median(record['val_accuracy']):.1f}"})
    tracker = driver.Tracker(score=lambda record: record["val_accuracy"],
                             keep=lambda state: (state.agents.params["gen_b"], state.agents.probe))
    start = time.perf_counter()
    result = driver.train(system, data, num_steps=num_steps, eval_every=config.eval_every,
                          key=jax.random.PRNGKey(config.seed), tracker=tracker, progress=progress, desc=desc,
                          checkpointer=checkpointer)
    seconds = time.perf_counter() - start
    best = result["best"]
    test = probe_accuracy(fns, *best.kept, dataset.test, arrays)
    final_params = result["state"].agents.params
    refitted = None
    if refit is not None and not result["interrupted"]:
        refitted = refit_probes(fns, final_params["gen_b"], dataset, arrays, refit,
                                jax.random.fold_in(jax.random.PRNGKey(config.seed), 7))
    out = _member_results(members, length, result["history"], best, test, refitted)
    return {"members": out, "seconds": seconds, "train_seconds": result["train_seconds"],
            "steps_done": result["steps_done"], "status": result["status"], "interrupted": result["interrupted"],
            "final_params": final_params, "arrays": arrays, "functions": fns}
