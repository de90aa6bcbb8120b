"""Unsupervised nodes (thesis §2.2.4): VAE and BiGAN node programs, feature exchange, linear probes.

Two families of feature learners run on the chapter's network engine (:mod:`jaxcomm.network`) as
node programs (:class:`jaxcomm.network.NodeProgram`): ``init``, one node's ``train`` step and
``predict`` (the node's encoder features).

- **VAE** (:class:`jaxcomm.models.vae.VAE`): the local objective is the negative ELBO, a Bernoulli
  reconstruction term on pixels in [0, 1] plus ``KL(q(z|x) || N(0, I))``, in nats per image. A
  message carries the sender's posterior ``(mu, logvar)`` of the minibatch it trained on; a
  receiver pulls its posterior toward the sender's with ``KL(q_sender || q_receiver)`` between
  the two diagonal Gaussians (§2.2.4.2, :func:`gaussian_kl`).
- **BiGAN** (:class:`jaxcomm.models.bigan.BiGAN`): the discriminator separates real pairs
  ``(x, E(x))`` from fake pairs ``(G(z), z)``; generator and encoder are trained to fool it
  (non-saturating losses, one simultaneous step of all three parts per training step). A message
  carries the sender's ``E(x)``; a receiver matches it with the MSE of eq. 2.2.3.

What a consumed step trains is ``consumed_objective``: "replace" (Algorithm 2 as printed: a
consumed minibatch is a "consumed data training objective step", only the exchange loss, so only
the encoder moves and the decoder / generator / discriminator, their optimiser states and
BatchNorm statistics are left as they were) or "add" (the local objective on the consumed images
plus ``exchange_weight`` x the exchange loss).

Evaluation (§2.2.4.1): every node's frozen encoder features feed a linear softmax classifier
trained on the whole labelled training split, with early stopping on the validation split
(:func:`jaxcomm.probe.train_probe`, all nodes at once); the per-node accuracy and the collective decision of
the probes' probabilities are measured on the test split (:func:`probe_accuracies`).

:class:`UnsupervisedConfig` holds every setting the library reads and builds the node program of a
family (:meth:`UnsupervisedConfig.program`), the probes' :class:`ProbeConfig` and the
:class:`jaxcomm.network.NetworkConfig` of isolated or fully connected nodes.

References:
  Lacaille (2018), §2.2.4, Algorithm 2, eq. 2.2.3, Table 2.3.
"""

from __future__ import annotations

import dataclasses
import functools
import time
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import optax

from jaxcomm import inbox, network, population
from jaxcomm.exchange import feature_mse
from jaxcomm.models import to_unit_float
from jaxcomm.models.bigan import BiGAN
from jaxcomm.models.vae import VAE
from jaxcomm.network import NodeProgram
from jaxcomm.probe import DEFAULT_PROBE, ProbeConfig, fit_probes
from jaxcomm.validation import integer, named_fields, one_of, positive, probability, require, widths

CONSUMED_OBJECTIVES = ("replace", "add")
FAMILIES = ("vae", "bigan")
VAE_GROUPS = ("encoder", "decoder")
BIGAN_GROUPS = ("encoder", "generator", "discriminator")

PyTree = Any


# --------------------------------------------------------------------------- losses


def gaussian_kl(mu_p: jax.Array, logvar_p: jax.Array, mu_q: jax.Array, logvar_q: jax.Array) -> jax.Array:
    """``KL(N(mu_p, diag e^logvar_p) || N(mu_q, diag e^logvar_q))``, summed over the last axis.

    Closed form per dimension: ``(logvar_q - logvar_p + (e^logvar_p + (mu_p - mu_q)^2) / e^logvar_q - 1) / 2``.

    Args:
      mu_p, logvar_p: ``[..., Z]`` the first Gaussian (the target: the sender's posterior).
      mu_q, logvar_q: ``[..., Z]`` the second (the receiver's).

    Returns:
      ``[...]`` the divergence in nats.

    References:
      Lacaille (2018), §2.2.4.2 ("minimizing the KL divergence between the sender's and the
      receiver's features ... pulling the latter features distribution towards the former's").
    """
    per_dim = logvar_q - logvar_p + (jnp.exp(logvar_p) + jnp.square(mu_p - mu_q)) * jnp.exp(-logvar_q) - 1.0
    return 0.5 * jnp.sum(per_dim, axis=-1)


def prior_kl(mu: jax.Array, logvar: jax.Array) -> jax.Array:
    """``KL(N(mu, diag e^logvar) || N(0, I))`` summed over the last axis: the VAE's regulariser."""
    return gaussian_kl(mu, logvar, jnp.zeros_like(mu), jnp.zeros_like(logvar))


def bernoulli_nll(logits: jax.Array, x: jax.Array) -> jax.Array:
    """``-log p(x | logits)`` of a Bernoulli per pixel, summed over ``[H, W, C]``: ``[B, H, W, C] -> [B]``.

    ``x`` in [0, 1] (continuous intensities, the usual relaxation on natural images).
    """
    return jnp.sum(optax.sigmoid_binary_cross_entropy(logits, x), axis=(1, 2, 3))


def to_signed(images: jax.Array) -> jax.Array:
    """uint8 images -> float32 in [-1, 1] (the BiGAN's range, that of the generator's ``tanh``)."""
    return images.astype(jnp.float32) / 127.5 - 1.0


def _check_objective(consumed_objective: str, exchange_weight: float) -> None:
    require(consumed_objective in CONSUMED_OBJECTIVES, "consumed_objective", f"one of {CONSUMED_OBJECTIVES}",
            consumed_objective)
    require(isinstance(exchange_weight, int | float) and exchange_weight >= 0, "exchange_weight", "a number >= 0",
            exchange_weight)


def initializer(abstract: PyTree) -> Callable[[jax.Array], PyTree]:
    """``draw(key)``: Flax variables shaped like ``abstract`` (``jax.eval_shape`` of ``model.init``), in one draw.

    The distributions of Flax's defaults for Dense, Conv and BatchNorm: kernels LeCun normal (std
    ``1 / sqrt(fan_in)``, not truncated), biases and running means 0, scales and running variances 1;
    spectral norm's power-iteration vectors ``.../u`` standard normal and its ``.../sigma`` 1.
    One normal draw sliced into every kernel compiles about 10x faster than ``model.init`` (a
    random-number graph per parameter), which matters because the engine initialises nodes
    under ``vmap`` eagerly, once per model and number of nodes.

    Raises:
      ValueError: a variable whose name is none of kernel, bias, scale, mean, var, .../u, .../sigma.
    """
    leaves, treedef = jax.tree_util.tree_flatten_with_path(abstract)
    kinds = []
    for path, leaf in leaves:
        name = str(getattr(path[-1], "key", "")).rsplit("/", 1)[-1]  # SpectralNorm names "Conv_0/kernel/u"
        if name not in ("kernel", "bias", "scale", "mean", "var", "u", "sigma"):
            raise ValueError(f"no initializer for variable {jax.tree_util.keystr(path)}")
        kinds.append((name, leaf.shape, leaf.dtype))
    sizes = [int(np.prod(shape)) if name in ("kernel", "u") else 0 for name, shape, _ in kinds]
    total = max(sum(sizes), 1)

    def draw(key: jax.Array) -> PyTree:
        flat = jax.random.normal(key, (total,))
        out, at = [], 0
        for (name, shape, dtype), size in zip(kinds, sizes, strict=True):
            if name in ("kernel", "u"):
                scale = np.sqrt(np.prod(shape[:-1])) if name == "kernel" else 1.0  # LeCun: 1 / sqrt(fan_in)
                out.append((flat[at:at + size].reshape(shape) / scale).astype(dtype))
                at += size
            else:
                out.append(jnp.full(shape, 0.0 if name in ("bias", "mean") else 1.0, dtype))
        return jax.tree_util.tree_unflatten(treedef, out)

    return draw


def _grouped_step(optimizers: dict[str, optax.GradientTransformation], params: dict, opt_state: dict, grads: dict,
                  active: dict) -> tuple[dict, dict]:
    """One step of each group's optimiser; a group whose ``active`` flag is False keeps its params and state."""
    new_params, new_state = {}, {}
    for name in params:
        updates, state = optimizers[name].update(grads[name], opt_state[name], params[name])
        stepped = optax.apply_updates(params[name], updates)
        keep = jnp.logical_not(active[name])
        new_params[name] = jax.tree_util.tree_map(lambda old, new, k=keep: jnp.where(k, old, new), params[name],
                                                  stepped)
        new_state[name] = jax.tree_util.tree_map(lambda old, new, k=keep: jnp.where(k, old, new), opt_state[name],
                                                 state)
    return new_params, new_state


# --------------------------------------------------------------------------- VAE


class VAETerms(NamedTuple):
    """One VAE pass on a minibatch, per sample.

    Attributes:
      reconstruction: ``[B]`` Bernoulli negative log-likelihood (nats).
      kl: ``[B]`` ``KL(q(z|x) || N(0, I))`` (nats).
      mu: ``[B, Z]`` posterior means.
      logvar: ``[B, Z]`` posterior log-variances.
    """

    reconstruction: jax.Array
    kl: jax.Array
    mu: jax.Array
    logvar: jax.Array


def vae_terms(model: VAE, params: PyTree, images: jax.Array, eps: jax.Array) -> VAETerms:
    """The ELBO's two terms on uint8 ``images [B, H, W, C]`` with reparameterisation noise ``eps [B, Z]``."""
    x = to_unit_float(images)
    logits, mu, logvar = model.apply({"params": params}, x, eps)
    return VAETerms(bernoulli_nll(logits, x), prior_kl(mu, logvar), mu, logvar)


def vae_program(model: VAE, *, learning_rate: float = 1e-3, exchange_weight: float = 1.0,
                consumed_objective: str = "replace") -> NodeProgram:
    """A VAE node for :func:`jaxcomm.network.make_network`.

    Args:
      model: the VAE (its ``image_shape`` must match the data).
      learning_rate: Adam's step size (the thesis: Adam defaults).
      exchange_weight: scale of ``KL(q_sender || q_receiver)`` on consumed minibatches.
      consumed_objective: "replace" or "add" (module docstring).

    Returns:
      A :class:`jaxcomm.network.NodeProgram`: payload = the posterior ``[mu, logvar]``, ``D = 2Z``;
      ``predict`` gives the posterior means ``[M, Z]``; ``loss`` is what the step minimised (the
      negative ELBO in nats per image on local steps).
    """
    _check_objective(consumed_objective, exchange_weight)
    optimizer = optax.adam(learning_rate)
    optimizers = dict.fromkeys(VAE_GROUPS, optimizer)
    latent = model.latent
    replace = consumed_objective == "replace"

    draw = initializer(jax.eval_shape(lambda: model.init(jax.random.PRNGKey(0), jnp.zeros((1, *model.image_shape)),
                                                         jnp.zeros((1, latent)))))

    def init(key: jax.Array) -> population.NodeState:
        params = draw(key)["params"]
        return population.NodeState(params, {}, {g: optimizer.init(params[g]) for g in VAE_GROUPS})

    def train(state, images, local_targets, payload, consumed, key):
        del local_targets  # unsupervised: labels are never read
        eps = jax.random.normal(key, (images.shape[0], latent))
        sender_mu, sender_logvar = jnp.split(payload, 2, axis=-1)

        def loss_fn(params):
            terms = vae_terms(model, params, images, eps)
            local = jnp.mean(terms.reconstruction + terms.kl)
            exchange = exchange_weight * jnp.mean(gaussian_kl(sender_mu, sender_logvar, terms.mu, terms.logvar))
            loss = jnp.where(consumed, exchange, local) if replace else local + jnp.where(consumed, exchange, 0.0)
            return loss, jnp.concatenate([terms.mu, terms.logvar], axis=-1)

        (loss, outgoing), grads = jax.value_and_grad(loss_fn, has_aux=True)(state.params)
        active = {"encoder": True, "decoder": jnp.logical_not(consumed) if replace else True}
        params, opt_state = _grouped_step(optimizers, state.params, state.opt_state, grads, active)
        return population.NodeState(params, state.model_state, opt_state), (loss, jax.lax.stop_gradient(outgoing))

    def predict(state, images):
        return model.apply({"params": state.params}, to_unit_float(images), method=VAE.encode)[0]

    # init is jitted: the engine calls it eagerly (vmapped or in a loop), where it would run op by op.
    return NodeProgram(init=jax.jit(init), train=train, predict=predict, payload_dim=2 * latent)


def vae_metrics(model: VAE) -> Callable[[population.NodeState, jax.Array, jax.Array], dict]:
    """``metrics(state, images uint8 [B, ...], key) -> {"neg_elbo", "reconstruction", "kl"}`` (nats per image)."""

    def metrics(state, images, key):
        eps = jax.random.normal(key, (images.shape[0], model.latent))
        terms = vae_terms(model, state.params, images, eps)
        return {"neg_elbo": jnp.mean(terms.reconstruction + terms.kl),
                "reconstruction": jnp.mean(terms.reconstruction), "kl": jnp.mean(terms.kl)}

    return metrics


def vae_pictures(model: VAE) -> Callable[[population.NodeState, jax.Array, jax.Array], tuple[jax.Array, jax.Array]]:
    """``pictures(state, images, key) -> (reconstructions, samples)``, uint8 like ``images``.

    Reconstructions decode the posterior mean; samples decode ``z ~ N(0, I)``; both are the
    decoder's mean image ``sigmoid(logits)``.
    """

    def pictures(state, images, key):
        variables = {"params": state.params}
        mu, _ = model.apply(variables, to_unit_float(images), method=VAE.encode)
        z = jax.random.normal(key, mu.shape)
        decode = lambda code: model.apply(variables, code, method=VAE.decode)
        to_uint8 = lambda logits: jnp.round(jax.nn.sigmoid(logits) * 255).astype(jnp.uint8)
        return to_uint8(decode(mu)), to_uint8(decode(z))

    return pictures


# --------------------------------------------------------------------------- BiGAN


class BiGANTerms(NamedTuple):
    """One BiGAN pass on a minibatch.

    Attributes:
      d_loss: ``[]`` the discriminator's loss, ``-log D(x, E(x)) - log(1 - D(G(z), z))`` (means).
      ge_loss: ``[]`` the generator's and encoder's non-saturating loss, the labels swapped.
      real_logits: ``[B]`` ``D(x, E(x))``.
      fake_logits: ``[B]`` ``D(G(z), z)``.
      features: ``[B, Z]`` ``E(x)``.
      fakes: ``[B, H, W, C]`` ``G(z)`` in [-1, 1].
      model_state: the generator's BatchNorm statistics after the pass.
    """

    d_loss: jax.Array
    ge_loss: jax.Array
    real_logits: jax.Array
    fake_logits: jax.Array
    features: jax.Array
    fakes: jax.Array
    model_state: PyTree


def bigan_terms(model: BiGAN, params: PyTree, model_state: PyTree, x: jax.Array, z: jax.Array, *, train: bool,
                key: jax.Array | None = None, real_label: float = 1.0) -> BiGANTerms:
    """The BiGAN's losses: one discriminator call on the real pairs ``(x, E(x))`` stacked over the fake ``(G(z), z)``.

    Args:
      model: the BiGAN.
      params, model_state: its variables (``model_state`` = ``{"batch_stats": ...}``).
      x: ``[B, H, W, C]`` real images in [-1, 1].
      z: ``[B, Z]`` prior samples.
      train: BatchNorm on batch statistics (updated) and dropout on; else running statistics, no dropout.
      key: the dropout key (``train`` only).
      real_label: the discriminator's target on real pairs; below 1 is one-sided label smoothing
        (Salimans et al., 2016): D is never rewarded for certainty on real pairs.

    Returns:
      :class:`BiGANTerms`.

    References:
      Lacaille (2018), §2.2.4.1; Donahue et al. (2017), eq. 3 (with the non-saturating generator loss).
    """

    def forward(module, x, z):
        features = module.encode(x)
        fakes = module.generate(z, train=train)
        logits = module.discriminate(jnp.concatenate([x, fakes]), jnp.concatenate([features, z]), train=train)
        return features, fakes, logits

    variables = {"params": params, **model_state}
    rngs = {"dropout": key} if train and key is not None else None
    if train:
        (features, fakes, logits), new_state = model.apply(variables, x, z, method=forward, rngs=rngs,
                                                           mutable=list(model_state))
    else:
        (features, fakes, logits), new_state = model.apply(variables, x, z, method=forward), model_state
    real, fake = jnp.split(logits, 2)
    d_loss = (real_label * jnp.mean(jax.nn.softplus(-real)) + (1.0 - real_label) * jnp.mean(jax.nn.softplus(real))
              + jnp.mean(jax.nn.softplus(fake)))
    ge_loss = jnp.mean(jax.nn.softplus(real)) + jnp.mean(jax.nn.softplus(-fake))
    return BiGANTerms(d_loss, ge_loss, real, fake, features, fakes, dict(new_state))


def _bigan_grads(model: BiGAN, state: population.NodeState, x: jax.Array, z: jax.Array, key: jax.Array,
                 real_label: float, matching: Callable, consumed: jax.Array, replace: bool):
    """Both players' losses and gradients from one forward pass: ``(d_loss, ge_loss, grads by group, terms)``.
    On a consumed minibatch the generator and encoder minimise ``matching(E(x))`` instead of (``replace``) or
    besides their game loss."""

    def losses(params):
        terms = bigan_terms(model, params, state.model_state, x, z, train=True, key=key, real_label=real_label)
        if replace:
            ge = jnp.where(consumed, matching(terms.features), terms.ge_loss)
        else:
            ge = terms.ge_loss + jnp.where(consumed, matching(terms.features), 0.0)
        return (terms.d_loss, ge), terms

    (d_loss, ge_loss), pullback, terms = jax.vjp(losses, state.params, has_aux=True)
    one, zero = jnp.ones_like(d_loss), jnp.zeros_like(d_loss)
    (d_grads,) = pullback((one, zero))  # one pullback per player: each steps on its own loss only
    (ge_grads,) = pullback((zero, one))
    grads = {"discriminator": d_grads["discriminator"], "encoder": ge_grads["encoder"],
             "generator": ge_grads["generator"]}
    return d_loss, ge_loss, grads, terms


def bigan_program(model: BiGAN, *, learning_rate: float = 2e-4, beta1: float = 0.5, exchange_weight: float = 1.0,
                  consumed_objective: str = "replace", disc_learning_rate: float | None = None,
                  real_label: float = 1.0) -> NodeProgram:
    """A BiGAN node for :func:`jaxcomm.network.make_network`.

    One training step updates all three parts simultaneously from one forward pass: the
    discriminator with the gradient of ``d_loss``, the generator and the encoder with that of
    ``ge_loss`` (plus, on consumed minibatches, ``exchange_weight`` x the MSE between ``E(x)`` and
    the sender's features, eq. 2.2.3).

    Args:
      model: the BiGAN (its ``image_shape`` must match the data).
      learning_rate, beta1: Adam's step size and first-moment decay (DCGAN: 2e-4, 0.5).
      exchange_weight: scale of the feature MSE on consumed minibatches.
      consumed_objective: "replace" or "add" (module docstring).
      disc_learning_rate: the discriminator's own Adam step size (None: ``learning_rate``); two
        time scales (Heusel et al., 2017) slow a discriminator that wins.
      real_label: the discriminator's target on real pairs (:func:`bigan_terms`).

    Returns:
      A :class:`jaxcomm.network.NodeProgram`: payload = ``E(x)``, ``D = Z``; ``predict`` gives
      ``E(x) [M, Z]``; ``loss`` is what the step minimised (``d_loss + ge_loss`` on local steps).
      That loss scores a game, not progress: a discriminator that wins drives ``ge_loss`` of one
      minibatch into the hundreds while training goes on, so the program's ``divergence`` is None
      (only non-finite losses stop its runs).
    """
    _check_objective(consumed_objective, exchange_weight)
    if not 0.0 < real_label <= 1.0:
        raise ValueError(f"real_label must be in (0, 1], got {real_label!r}")
    optimizer = optax.adam(learning_rate, b1=beta1)
    optimizers = {"encoder": optimizer, "generator": optimizer,
                  "discriminator": optax.adam(disc_learning_rate or learning_rate, b1=beta1)}
    latent = model.latent
    replace = consumed_objective == "replace"

    draw = initializer(jax.eval_shape(lambda: model.init(
        {"params": jax.random.PRNGKey(0), "dropout": jax.random.PRNGKey(1)}, jnp.zeros((1, *model.image_shape)),
        jnp.zeros((1, latent)))))

    def init(key: jax.Array) -> population.NodeState:
        variables = dict(draw(key))
        params = variables.pop("params")
        return population.NodeState(params, variables, {g: optimizers[g].init(params[g]) for g in BIGAN_GROUPS})

    def train(state, images, local_targets, payload, consumed, key):
        del local_targets  # unsupervised: labels are never read
        k_z, k_dropout = jax.random.split(key)
        x = to_signed(images)
        z = jax.random.normal(k_z, (images.shape[0], latent))
        matching = lambda features: exchange_weight * feature_mse(features, payload)
        d_loss, ge_loss, grads, terms = _bigan_grads(model, state, x, z, k_dropout, real_label, matching, consumed,
                                                     replace)
        local = jnp.logical_not(consumed) if replace else True
        active = {"discriminator": local, "encoder": True, "generator": local}
        params, opt_state = _grouped_step(optimizers, state.params, state.opt_state, grads, active)
        model_state = jax.tree_util.tree_map(lambda old, new: jnp.where(local, new, old), state.model_state,
                                             terms.model_state)
        loss = jnp.where(consumed, ge_loss, d_loss + ge_loss) if replace else d_loss + ge_loss
        return (population.NodeState(params, model_state, opt_state),
                (loss, jax.lax.stop_gradient(terms.features)))

    def predict(state, images):
        return model.apply({"params": state.params, **state.model_state}, to_signed(images), method=BiGAN.encode)

    # No divergence watch: at step 405 of a cpu-preset run with full communication one node's d_loss + ge_loss
    # reached 1,093 against 2.8 at step 0, nothing non-finite; the same row's one-seed run, from before the watch
    # existed, trained its 1,200 steps to a validation ge_loss of 17.
    return NodeProgram(init=jax.jit(init), train=train, predict=predict, payload_dim=latent, divergence=None)


def bigan_metrics(model: BiGAN) -> Callable[[population.NodeState, jax.Array, jax.Array], dict]:
    """``metrics(state, images uint8, key) -> dict`` of the local objective on a fixed batch (no dropout).

    ``d_loss`` and ``ge_loss`` as trained; ``d_real`` / ``d_fake``: mean ``sigmoid D`` on real and
    fake pairs; ``reconstruction_mse``: mean squared error per pixel (in [-1, 1] units) of
    ``G(E(x))`` against ``x``, how well the encoder inverts the generator.
    """

    def metrics(state, images, key):
        x = to_signed(images)
        z = jax.random.normal(key, (images.shape[0], model.latent))
        terms = bigan_terms(model, state.params, state.model_state, x, z, train=False)
        variables = {"params": state.params, **state.model_state}
        again = model.apply(variables, terms.features, method=BiGAN.generate)
        return {"d_loss": terms.d_loss, "ge_loss": terms.ge_loss, "d_real": jnp.mean(jax.nn.sigmoid(terms.real_logits)),
                "d_fake": jnp.mean(jax.nn.sigmoid(terms.fake_logits)),
                "reconstruction_mse": jnp.mean(jnp.square(again - x))}

    return metrics


def bigan_pictures(model: BiGAN) -> Callable[[population.NodeState, jax.Array, jax.Array],
                                             tuple[jax.Array, jax.Array]]:
    """``pictures(state, images, key) -> (G(E(x)), G(z))``, uint8 like ``images``."""

    def pictures(state, images, key):
        variables = {"params": state.params, **state.model_state}
        features = model.apply(variables, to_signed(images), method=BiGAN.encode)
        z = jax.random.normal(key, features.shape)
        generate = lambda code: model.apply(variables, code, method=BiGAN.generate)
        to_uint8 = lambda x: jnp.round((x + 1.0) * 127.5).astype(jnp.uint8)
        return to_uint8(generate(features)), to_uint8(generate(z))

    return pictures


def probe_accuracies(key: jax.Array, train: tuple[np.ndarray, np.ndarray], validation: tuple[np.ndarray, np.ndarray],
                     test: tuple[np.ndarray, np.ndarray], *, num_classes: int,
                     config: ProbeConfig = DEFAULT_PROBE) -> dict:
    """Trains every node's probe and measures the nodes and their collective decision.

    Args:
      key: the probes' shuffling key (shared by the nodes).
      train: ``(features [N, M, F], labels [M])`` of the labelled training split.
      validation: ``(features [N, V, F], labels [V])``: early stopping, and the stage selection.
      test: ``(features [N, T, F], labels [T])``: what is reported.
      num_classes: C.
      config: :class:`ProbeConfig`.

    Returns:
      ``avg_accuracy`` and ``collective_accuracy`` (per weighting of :data:`jaxcomm.decision.WEIGHTINGS`)
      on test and ``val_avg_accuracy`` / ``val_collective_accuracy`` (negentropy) on validation, all
      in %, with ``node_accuracies``, ``val_node_accuracies`` and each probe's ``best_epochs``.
    """
    probes, val_probs, test_probs = fit_probes(key, jnp.asarray(train[0]), jnp.asarray(train[1]),
                                            jnp.asarray(validation[0]), jnp.asarray(validation[1]),
                                            jnp.asarray(test[0]), num_classes=num_classes, config=config)
    on_test = network.evaluate(test_probs, test[1])
    on_val = network.evaluate(val_probs, validation[1])
    return {"avg_accuracy": on_test["avg_accuracy"], "collective_accuracy": on_test["collective_accuracy"],
            "node_accuracies": on_test["node_accuracies"], "val_avg_accuracy": on_val["avg_accuracy"],
            "val_collective_accuracy": on_val["collective_accuracy"]["negentropy"],
            "val_node_accuracies": on_val["node_accuracies"],
            "best_epochs": np.asarray(probes.best_epoch).tolist()}


# --------------------------------------------------------------------------- evaluation during training


def make_evaluator(dataset, *, metrics: Callable, probe_steps: Sequence[int], probe: ProbeConfig = DEFAULT_PROBE,
                   metric_batch: int = 256, feature_batch: int = 1000, seed: int | None = None) -> Callable:
    """The evaluator :func:`jaxcomm.network.train_network` calls between chunks.

    Every call measures the local objective (``metrics`` of every node on the same fixed batch of
    validation images and noise, averaged over nodes, plus the per-node list). At the steps of
    ``probe_steps`` it also extracts every node's features of the train, validation and test
    splits once and trains all the nodes' probes together (:func:`probe_accuracies`).

    Args:
      dataset: an :class:`jaxcomm.data.ImageDataset` with a non-empty validation split.
      metrics: one node's ``metrics(state, images, key) -> {name: []}`` (:func:`vae_metrics`,
        :func:`bigan_metrics`).
      probe_steps: the steps (``steps_done``) at which the probes run: the evaluation stages.
      probe: the probes' :class:`ProbeConfig`.
      metric_batch: images of the fixed objective batch (the first of the validation split).
      feature_batch: images per feature-extraction call.
      seed: of the fixed noise and the probes' shuffling; None: the evaluated run's own seed
        (``network.config.seed``), so every run of a sweep is evaluated as it would be alone.

    Returns:
      ``evaluator(network, state, steps_done, *, probe_now=None) -> dict`` with ``objective``
      (``{name: mean}``), ``objective_nodes`` (``{name: [N]}``) and, at a probe step (or whenever
      ``probe_now`` is True; never if False), ``probe`` (:func:`probe_accuracies` plus ``seconds``).
    """
    require(len(dataset.validation.labels) > 0, "dataset.validation", "a non-empty split (early stopping)",
            len(dataset.validation.labels))
    images = jnp.asarray(dataset.validation.images[:metric_batch])
    probe_steps = frozenset(int(s) for s in probe_steps)

    def evaluator(net, state, steps_done: int, *, probe_now: bool | None = None) -> dict:
        metric_key, probe_key = _evaluation_keys(net.config.seed if seed is None else seed)
        values = population.to_host(_lifted(metrics, net.backend)(state.nodes, images, metric_key))
        out = {"objective": {k: float(np.mean(v)) for k, v in values.items()},
               "objective_nodes": {k: np.asarray(v, np.float64).tolist() for k, v in values.items()}}
        if steps_done in probe_steps if probe_now is None else probe_now:
            start = time.perf_counter()
            features = lambda split: network.predict_in_batches(net, state.nodes, split.images,
                                                                batch_size=feature_batch)
            result = probe_accuracies(
                probe_key, (features(dataset.train), dataset.train.labels),
                (features(dataset.validation), dataset.validation.labels),
                (features(dataset.test), dataset.test.labels), num_classes=dataset.num_classes, config=probe)
            out["probe"] = {**result, "seconds": time.perf_counter() - start}
        return out

    return evaluator


@functools.lru_cache(maxsize=64)
def _evaluation_keys(seed: int) -> tuple[jax.Array, jax.Array]:
    """The fixed noise's and the probes' keys of a run seeded ``seed``."""
    return tuple(jax.random.split(jax.random.PRNGKey(seed)))


@functools.cache
def _lifted(metrics: Callable, backend: str) -> Callable:
    """``metrics`` of every node, jitted; one per (function, backend), so evaluators of one model share compilations."""
    return jax.jit(population.lift(metrics, backend=backend, in_axes=(0, None, None)))


def best_stage(history: Sequence[dict], key: str = "val_avg_accuracy") -> dict | None:
    """The history record whose probe has the highest validation ``key`` (earliest on ties), or None."""
    staged = [h for h in history if "probe" in h]
    if not staged:
        return None
    return max(staged, key=lambda h: (h["probe"][key], -h["step"]))


def pictures_of(fn: Callable, state: population.NodeState, images: np.ndarray, key: jax.Array) -> dict:
    """``{"originals", "reconstructions", "samples"}``: uint8 numpy arrays of one node's ``fn`` (``*_pictures``)."""
    recon, samples = jax.jit(fn)(state, jnp.asarray(images), key)
    return {"originals": np.asarray(images), "reconstructions": np.asarray(recon), "samples": np.asarray(samples)}



# --------------------------------------------------------------------------- config


@named_fields
@dataclasses.dataclass(frozen=True)
class UnsupervisedConfig:
    """Every setting the library reads for a network of unsupervised nodes; validated on construction.

    The node programs' models and hyperparameters (:meth:`program`), the linear probes (:attr:`probe`)
    and the network that runs them (:meth:`network`).

    Attributes:
      widths: channels of the encoders' (and the discriminator's) stride-2 convolutions; decoders
        and generators mirror them.
      latent: Z, the VAE posterior's and the BiGAN code's dimension (the exchanged features: 2Z
        floats for the VAE, Z for the BiGAN).
      disc_hidden: the BiGAN discriminator's dense width.
      disc_dropout: its dropout.
      disc_learning_rate: its Adam step size (0: ``bigan_learning_rate``; two time scales otherwise).
      disc_real_label: its target on real pairs (below 1: one-sided label smoothing).
      disc_spectral_norm: spectrally normalise its layers.
      batch_size: B, per node and per message.
      vae_learning_rate: Adam's step size of the VAE (Adam defaults, as the thesis' chapter 2).
      bigan_learning_rate: Adam's step size of the BiGAN (DCGAN's 2e-4) ...
      bigan_beta1: ... and first-moment decay (DCGAN's 0.5).
      exchange_weight: scale of the exchange loss (KL or MSE) on consumed minibatches.
      consumed_objective: "replace" (Algorithm 2: a consumed minibatch trains the exchange loss only)
        or "add" (local objective + exchange loss); see the module docstring.
      consume_prob: p_c of communicating networks; they broadcast with ``broadcast_factor x p_c / (N - 1)``.
      broadcast_factor: 1 keeps the inboxes in equilibrium (§2.3.1.2).
      inbox_capacity: K messages per inbox.
      num_steps: training steps (each node takes this many).
      eval_every: steps between measurements of the local objective (the curves' resolution).
      probe_epochs, probe_batch_size, probe_learning_rate: the linear probes' training (:class:`ProbeConfig`).
      backend: the node lift's backend ("auto": measured fastest for conv nets and N).
      seed: seeds the network (partitions, initialisations, every draw).
    """

    widths: tuple[int, ...] = (16, 32, 64)
    latent: int = 64
    disc_hidden: int = 256
    disc_dropout: float = 0.2
    disc_learning_rate: float = 0.0
    disc_real_label: float = 1.0
    disc_spectral_norm: bool = False
    batch_size: int = 32
    vae_learning_rate: float = 1e-3
    bigan_learning_rate: float = 2e-4
    bigan_beta1: float = 0.5
    exchange_weight: float = 1.0
    consumed_objective: str = "replace"
    consume_prob: float = 0.5
    broadcast_factor: float = 1.0
    inbox_capacity: int = 16
    num_steps: int = 1200
    eval_every: int = 100
    probe_epochs: int = 40
    probe_batch_size: int = 512
    probe_learning_rate: float = 1e-2
    backend: str = "auto"
    seed: int = 0

    def __post_init__(self):
        widths("widths", self.widths)
        for name in ("latent", "disc_hidden", "batch_size", "inbox_capacity", "num_steps", "eval_every",
                     "probe_epochs", "probe_batch_size"):
            integer(name, getattr(self, name), low=1)
        probability("disc_dropout", self.disc_dropout, below_one=True)
        require(isinstance(self.disc_spectral_norm, bool), "disc_spectral_norm", "True or False",
                self.disc_spectral_norm)
        require(isinstance(self.disc_learning_rate, float | int) and self.disc_learning_rate >= 0,
                "disc_learning_rate", "a number >= 0 (0: bigan_learning_rate)", self.disc_learning_rate)
        require(isinstance(self.disc_real_label, float | int) and 0 < self.disc_real_label <= 1,
                "disc_real_label", "a number in (0, 1]", self.disc_real_label)
        for name in ("vae_learning_rate", "bigan_learning_rate", "probe_learning_rate", "broadcast_factor"):
            positive(name, getattr(self, name))
        probability("bigan_beta1", self.bigan_beta1, below_one=True)
        require(isinstance(self.exchange_weight, float | int) and not isinstance(self.exchange_weight, bool)
                and self.exchange_weight >= 0, "exchange_weight", "a number >= 0", self.exchange_weight)
        one_of("consumed_objective", self.consumed_objective, CONSUMED_OBJECTIVES)
        require(isinstance(self.consume_prob, float | int) and 0 < self.consume_prob <= 1, "consume_prob",
                "a probability in (0, 1]", self.consume_prob)
        one_of("backend", self.backend, ("auto", *population.BACKENDS))
        integer("seed", self.seed)

    def model(self, family: str, image_shape: Sequence[int]) -> VAE | BiGAN:
        """The ``family`` ("vae" or "bigan") model for images of ``image_shape``."""
        one_of("family", family, FAMILIES)
        if family == "vae":
            return VAE(widths=self.widths, latent=self.latent, image_shape=tuple(image_shape))
        return BiGAN(widths=self.widths, latent=self.latent, image_shape=tuple(image_shape), hidden=self.disc_hidden,
                     dropout=self.disc_dropout, spectral_norm=self.disc_spectral_norm)

    def program(self, family: str, image_shape: Sequence[int]) -> NodeProgram:
        """The node program of ``family`` on :meth:`model`: :func:`vae_program` or :func:`bigan_program`."""
        model = self.model(family, image_shape)
        if family == "vae":
            return vae_program(model, learning_rate=self.vae_learning_rate, exchange_weight=self.exchange_weight,
                               consumed_objective=self.consumed_objective)
        return bigan_program(model, learning_rate=self.bigan_learning_rate, beta1=self.bigan_beta1,
                             disc_learning_rate=self.disc_learning_rate or None, real_label=self.disc_real_label,
                             exchange_weight=self.exchange_weight, consumed_objective=self.consumed_objective)

    @property
    def probe(self) -> ProbeConfig:
        return ProbeConfig(self.probe_epochs, self.probe_batch_size, self.probe_learning_rate)

    def network(self, num_nodes: int, communicate: bool) -> network.NetworkConfig:
        """Isolated nodes, or fully connected ones consuming p_c and broadcasting ``broadcast_factor x p_c/(N-1)``."""
        sharing = communicate and num_nodes > 1
        p_c = self.consume_prob
        return network.NetworkConfig(
            num_nodes=num_nodes, topology="full", content="features" if sharing else "none",
            consume_prob=p_c if sharing else 0.0,
            broadcast_prob=inbox.equilibrium_broadcast_prob(p_c, num_nodes - 1, self.broadcast_factor) if sharing
            else 0.0,
            inbox_capacity=self.inbox_capacity, batch_size=self.batch_size, backend=self.backend,
            num_steps=self.num_steps, eval_every=self.eval_every, seed=self.seed)
