"""A learned discrete language between two agents (thesis ch. 4): pure, jittable pieces.

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

Shapes use named dimensions: ``B`` batch, ``L`` message length, ``V`` vocabulary,
``P`` pixels (784 for MNIST), ``H`` hidden width.

References:
  Lacaille (2018), §4.2-4.3, Algorithm 4, eqs. 4.2.1-4.2.8, Fig. 4.2, Table 4.1.
  Jang et al. (2017), "Categorical reparameterization with Gumbel-softmax".
  Williams (1992), REINFORCE (the thesis' suggested future work, §4.3).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import NamedTuple

import flax.linen as nn
import jax
import jax.numpy as jnp
import optax

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
