"""Learned Gradient Compression (LGC): synchronous SGD whose gradients an autoencoder learns to code, in two instances.

Abrahamyan, Chen, Bekoulis, Deligiannis, "Learned Gradient Compression for Distributed Deep Learning", IEEE TNNLS
2021 (arXiv 2103.08870). Its premise (the introduction and the section on inter-node redundancy): the nodes of a
data-parallel job compute gradients of one model on data of one distribution, so their sparsified gradients share a
common part; an autoencoder trained during the first stages of training captures it, and afterwards a node sends a
short code instead of its values. The method section gives two instances, by communication protocol:

* **parameter server** (:func:`lgc_parameter_server`): one encoder and one decoder per node; one node (the
  *leader*) sends the code of its top-k values, every node sends its *innovation* (its own top-k' values,
  ``k' << k``), and node i's values are decoded from the leader's code and node i's innovation (the common
  information and what is node i's own). The autoencoder is trained on the nodes' top-k values with a
  reconstruction loss and a similarity loss that pulls the nodes' codes together, so any node's code serves as
  the common one (weights 0.5 and 0.5);
* **ring all-reduce** (:func:`lgc_ring`): one encoder, one decoder; every node encodes its values, the codes are
  summed on the way around the ring, and the sum is decoded once into the nodes' mean (trained so).

Both, like :func:`jaxcomm.data_parallel.sync_sgd`, hold one model on every node (``same_start``), average BatchNorm
statistics after the update, evaluate the first node's model and run on the gradients hook
(:class:`jaxcomm.kit.Communicator`). The steps before ``warmup`` (a per-run value, data of the step: ``hyper``) are
**stage one**: every node sends the top-k of its gradient plus its error-feedback memory, the whole model as one
vector (:func:`jaxcomm.compression.make` ``("top_k", per_layer=False)``), all-gathered and averaged; this is
exactly that compressed SGD, bit for bit (tested), and the autoencoder takes one Adam step (its own optimiser,
rate ``ae_lr``, parameters in ``state.extra``) on this step's messages. The steps from ``warmup`` on are **stage
two**: the code travels. Both stages are one compiled step (``lax.cond`` on the step count). With
``retrain_every`` R > 0 (an extension, not the paper's: ``hyper``) every step of stage two that R divides is a step
of stage one again, after which the retrained autoencoder is sent again. Every evaluation reads the step's
reconstruction error and the cosine between the applied and the nodes' mean gradient (``readings``).

Sources: the stored copies of the paper reachable when this was written held its abstract only (the method
section could not be read there); the details below were checked against a public PyTorch re-implementation that
cites the paper (an LGC server, client and autoencoder), called "the re-implementation" here.

Readings (the paper fixes the idea; these are the choices where it leaves the details open, or where it could not
be checked):

* stages: the paper (and its re-implementation) trains in three: dense gradients first (a warm-up), then top-k
  gradients while the autoencoder trains on them, then the code. Here stage one is the paper's second, from the
  first step; the dense warm-up is not modelled (``fraction=1`` makes stage one plain gradients, at the price of
  coding all P values in stage two);
* top-k: one k for the whole model (the paper's re-implementation keeps one ratio per layer and leaves the first
  and the last layers dense); error feedback keeps what a node did not send (the paper's local accumulation). In
  stage two a node's memory keeps the coordinates outside the leader's support (and, on a parameter server,
  outside its innovation): the node does not know the decoder's error, so it is not fed back;
* common support: codes of values at different coordinates cannot be combined, so in stage two every node takes
  its values at the leader's top-k coordinates (the leader sends them, sorted, ``4 k`` bytes), and the
  autoencoder trains on the messages restricted to the leader's coordinates. The leader is node ``step mod N``
  (the load rotates; the re-implementation fixes one node);
* the autoencoder (the paper's lightweight 1-D convolutional design, :mod:`jaxcomm.models.gradient_coder`):
  :class:`~jaxcomm.models.gradient_coder.Encoder`, four convolutions of kernel 3 and stride 2 of widths
  ``(w, 2w, 4w, w)`` with leaky ReLU and a 1x1 convolution to ``code_channels`` channels, so the code is
  ``code_channels x ceil(k / 16)`` floats (``k / 4`` for the paper's 4 channels);
  :class:`~jaxcomm.models.gradient_coder.Decoder`, four transposed convolutions of widths ``(w/2, w, 2w, w/2)`` and a
  1x1 convolution (on the parameter server with the innovation as one more input channel). ``w = 64`` is the
  re-implementation's;
* scale: every node's values are coded divided by the RMS of the leader's (one float32 the leader sends with its
  coordinates), so the codes of all nodes are in one unit and the ring's sum of codes is a sum of like terms;
* where it runs: the exchanges are all-gathers, every node decoding what it receives (as the kit's compressed SGD
  stands in for a parameter server); the autoencoder is trained by one node from the stage-one messages it
  received (one Adam step per step, its compute not in the clock) and sent once to the others at the switch,
  encoder and decoders, booked as parameters (on a real parameter server only the encoder would leave the server).

Traffic (:attr:`jaxcomm.lgc.LGC.stages`, exact per step: ``k`` values and ``k`` int32 coordinates of top-k;
``k'`` of the innovation; ``C`` floats of a code; ``A`` autoencoder parameters):

=========  ==================================================================================================
stage one  all-gather of ``4 k`` parameters and ``4 k`` coordinates from every node
PS, two    all-gather of every node's innovation (``4 k'`` + ``4 k'``); the leader's code and scale and its
           coordinates (``4 (C + 1)`` parameters, ``4 k`` coordinates) to the N - 1 others
ring, two  the leader's scale and coordinates (``4`` + ``4 k``) to the N - 1 others; an all-reduce of ``4 C``
           parameters
switch     once, and after every step of stage one again: ``4 A`` parameters to the N - 1 others
=========  ==================================================================================================

The ledger books rounds that recur every ``every`` steps from the first, so :attr:`jaxcomm.kit.Built.traffic` is
one round per pattern and kind whose bytes are the stages' average over ``config.num_steps``: the run's totals are
exact at its last step, and between they grow linearly (not stage by stage).
"""

from __future__ import annotations

import dataclasses
import functools
import math
from collections.abc import Mapping
from typing import Any, NamedTuple

import flax.linen as nn
import jax
import jax.numpy as jnp
import optax
from jax.flatten_util import ravel_pytree

from jaxcomm import bandwidth, compression, kit, ledger, methods, pace, population, streams
from jaxcomm.models.gradient_coder import Decoder, Encoder
from jaxcomm.validation import is_int, is_real, require

DOWNSAMPLE = 16  # the encoder's four stride-2 convolutions
SIMILARITY = 0.5  # the parameter server's loss: 0.5 reconstruction + 0.5 similarity of the nodes' codes
FLOAT_BYTES = INDEX_BYTES = 4


class LGCState(NamedTuple):
    """LGC's ``state.extra``.

    Attributes:
      memory: every node's error feedback (:class:`jaxcomm.compression.ErrorFeedbackState`, leaves ``[N, ...]``).
      ae: the autoencoder's parameters ``{"enc", "dec"}`` (the parameter server's N decoders stacked ``[N, ...]``).
      opt: its Adam state.
      error: ``[]`` this step's reconstruction error, mean squared in units of the leader's scale: of the messages
        in stage one, before the autoencoder's update; of the decoded values in stage two.
      cosine: ``[]`` this step's cosine between the gradient the nodes apply and the nodes' mean gradient (what
        uncompressed synchronous SGD would apply): how much of the descent direction the code keeps.
    """

    memory: compression.ErrorFeedbackState
    ae: Any
    opt: Any
    error: jax.Array
    cosine: jax.Array


@dataclasses.dataclass(frozen=True)
class LGC(kit.Built):
    """A built LGC run (a :class:`jaxcomm.kit.Built`).

    Attributes:
      stages: ``{"one", "two", "switch"}``: each stage's exact rounds (:class:`jaxcomm.ledger.Round`), per step
        ("switch": once).
      k: values top-k keeps; k_innovation: those of the parameter server's innovation (0 on the ring).
      code_floats: C, floats of one code; ae_params: A, the autoencoder's parameters; num_params: P, the model's.
    """

    stages: Mapping[str, tuple[ledger.Round, ...]] = dataclasses.field(default_factory=dict)
    k: int = 0
    k_innovation: int = 0
    code_floats: int = 0
    ae_params: int = 0
    num_params: int = 0


def _rms(v: jax.Array) -> jax.Array:
    """``[..., k] -> [...]``: the root mean square, 1 where it is 0."""
    r = jnp.sqrt(jnp.mean(v * v, axis=-1))
    return jnp.where(r > 0, r, 1.0)


def _cosine(a: jax.Array, b: jax.Array) -> jax.Array:
    """``[P], [P] -> []``: their cosine, 0 where either is 0."""
    norms = jnp.linalg.norm(a) * jnp.linalg.norm(b)
    return jnp.where(norms > 0, jnp.vdot(a, b) / jnp.where(norms > 0, norms, 1.0), 0.0)


def _mask(x: jax.Array, k: int) -> jax.Array:
    """``[P] -> bool [P]``: the k entries of largest magnitude."""
    return jnp.zeros(x.shape, bool).at[jax.lax.top_k(jnp.abs(x), k)[1]].set(True)


def _coder(ring: bool, n: int, k: int, k_inn: int, channels: int, width: int):
    """The autoencoder's ``init(key) -> params`` and ``code(params, x [N, P], leader) -> (mean [P], memory [N, P],
    error [], loss [])``: every node's values ``x`` coded at the leader's top-k coordinates and decoded."""
    enc = Encoder((width, 2 * width, 4 * width, width), channels)
    dec = Decoder((width // 2, width, 2 * width, width // 2), k)
    encode = jax.vmap(enc.apply, in_axes=(None, 0))
    length = -(-k // DOWNSAMPLE)

    def init(key):
        k_enc, k_dec = jax.random.split(key)
        code, values = jnp.zeros((length, channels)), jnp.zeros(k)
        decoders = (dec.init(k_dec, code) if ring else
                    jax.vmap(lambda kk: dec.init(kk, code, values))(jax.random.split(k_dec, n)))
        return {"enc": enc.init(k_enc, values), "dec": decoders}

    def code(ae, x, leader):
        where = jnp.sort(jax.lax.top_k(jnp.abs(x[leader]), k)[1])  # the common support, in coordinate order
        v, sent = x[:, where], jnp.zeros(x.shape[1], bool).at[where].set(True)
        s = _rms(v[leader])  # the leader's scale, sent with its coordinates
        if ring:  # every node's code summed on the ring, the sum decoded once
            out = dec.apply(ae["dec"], jnp.mean(encode(ae["enc"], v / s), axis=0))
            error = jnp.mean((out - jnp.mean(v, axis=0) / s) ** 2)
            return jnp.zeros(x.shape[1]).at[where].set(s * out), jnp.where(sent, 0.0, x), error, error
        own = jax.vmap(_mask, in_axes=(0, None))(x, k_inn)  # every node's innovation
        z = encode(ae["enc"], v / s)  # [N, L, C]: only the leader's travels; all of them for the similarity loss
        out = jax.vmap(dec.apply, in_axes=(0, None, 0))(ae["dec"], z[leader], jnp.where(own[:, where], v, 0.0) / s)
        error = jnp.mean((out - v / s) ** 2)
        similar = jnp.mean((z[:, None] - z[None]) ** 2) * n / max(n - 1, 1)  # over the pairs i != j
        rows = jnp.where(own, x, jnp.zeros_like(x).at[:, where].set(s * out))
        loss = (1 - SIMILARITY) * error + SIMILARITY * similar
        return jnp.mean(rows, axis=0), jnp.where(own | sent, 0.0, x), error, loss

    return init, code, length * channels


def _stages(ring: bool, n: int, k: int, k_inn: int, code_floats: int, ae_params: int) -> dict:
    """Each stage's exact rounds per step (module docstring): one node's message to the N - 1 others is an all-gather
    of ``bytes / N``."""
    gather = lambda nbytes, kind: ledger.Round("allgather", float(nbytes), kind=kind)
    code = FLOAT_BYTES * code_floats
    leader = (gather(INDEX_BYTES * k / n, "coordinates"), gather(FLOAT_BYTES / n, "parameters"))  # and its scale
    two = ((*leader, ledger.Round("allreduce", float(code))) if ring else
           (gather(FLOAT_BYTES * k_inn + (code + FLOAT_BYTES) / n, "parameters"),
            gather(INDEX_BYTES * (k_inn + k / n), "coordinates")))
    return {"one": (gather(FLOAT_BYTES * k, "parameters"), gather(INDEX_BYTES * k, "coordinates")), "two": two,
            "switch": (gather(FLOAT_BYTES * ae_params / n, "parameters"),)}


def retraining_steps(num_steps: int, first: int, every: float) -> int:
    """Steps of stage one again after the first ``first``: those of ``[first, num_steps)`` that ``every`` divides
    (0 where ``every`` is 0)."""
    r = int(round(every))
    return 0 if r <= 0 or first >= num_steps else -(-num_steps // r) - (-(-first // r))


def _traffic(stages: dict, num_steps: int, warmup: float, retrain_every: float):
    """``traffic(hyper)``: the stages averaged over the run (:func:`jaxcomm.ledger.averaged`); a step of stage one
    again (``retrain_every``) sends stage one's messages, then the retrained autoencoder (the switch)."""

    def traffic(hyper):
        first = min(num_steps, max(0, math.ceil(hyper.get("warmup", warmup))))
        again = retraining_steps(num_steps, first, hyper.get("retrain_every", retrain_every))
        steps = {"one": first + again, "two": num_steps - first - again, "switch": float(first < num_steps) + again}
        return ledger.averaged([(rounds, steps[stage]) for stage, rounds in stages.items()], num_steps)

    return traffic


def make_lgc(config: kit.RunConfig, model: nn.Module, *, image_shape: tuple[int, ...], num_classes: int,
             ring: bool, fraction: float, innovation: float, code_channels: int, width: int, warmup: float,
             retrain_every: float = 0.0) -> LGC:
    """Builds LGC of ``model`` on the kit's nodes (module docstring); the step reads ``hyper["warmup"]`` and
    ``hyper["ae_lr"]``.

    Args:
      config: a :class:`jaxcomm.kit.RunConfig`.
      model: the shared classifier, returning ``(logits, features)``.
      image_shape: ``(H, W, C)``; num_classes: its classes.
      ring: the ring all-reduce instance; False: the parameter server's.
      fraction: k / P of top-k; innovation: k' / P of the parameter server's innovation.
      code_channels: channels of the code; width: w of the autoencoder.
      warmup: stage one's steps where the run's ``hyper`` has none (for the traffic).
      retrain_every: R, where the run's ``hyper`` has none: after stage one, every step that R divides is a step of
        stage one again (the autoencoder learns from that step's messages and is sent again); 0: never.

    Returns:
      An :class:`LGC`.
    """
    n = config.num_nodes
    pop = kit.nodes(config, model, image_shape=image_shape, num_classes=num_classes, waits=pace.LOCKSTEP)
    shared = jax.tree.map(lambda s: jnp.zeros(s.shape, s.dtype),
                          jax.eval_shape(pop.init_node, jax.random.PRNGKey(0)).params)
    unravel, p = ravel_pytree(shared)[1], pop.num_params
    k, k_inn = compression.num_kept(fraction, p), compression.num_kept(innovation, p)
    top_k = compression.make("top_k", fraction=fraction, per_layer=False)  # with error feedback
    compress = population.lift(top_k.update, backend=pop.backend)
    ae_init, code, code_floats = _coder(ring, n, k, k_inn, code_channels, width)
    flat = jax.vmap(lambda tree: ravel_pytree(tree)[0])

    def init(nodes, key):
        memory = population.init_population(lambda _: top_k.init(shared), streams.named(key, "compressor"),
                                            n, backend="vmap")
        ae = ae_init(streams.named(key, "lgc"))
        return LGCState(memory, ae, optax.adam(1.0).init(ae), jnp.zeros(()), jnp.zeros(()))

    def gradients(grads, state: kit.NodesState, ctx: kit.Context):
        ex, hyper, leader = state.extra, ctx.settings.hyper, ctx.step % n

        def stage_one(_):  # top-k synchronous SGD; the autoencoder learns from the messages
            sent, memory = compress(grads, ex.memory, jax.random.split(streams.named(ctx.key, "compress"), n))
            received = flat(sent)
            loss = lambda ae: (lambda out: (out[3], out[2]))(code(ae, received, leader))  # (loss, error)
            (_, error), g = jax.value_and_grad(loss, has_aux=True)(ex.ae)
            updates, opt = optax.adam(hyper["ae_lr"]).update(g, ex.opt, ex.ae)
            return kit.mean_of_nodes(sent), memory, optax.apply_updates(ex.ae, updates), opt, error

        def stage_two(_):  # the code travels
            estimate, memory, error, _ = code(ex.ae, flat(grads) + flat(ex.memory.residual), leader)
            return (unravel(estimate), ex.memory._replace(residual=jax.vmap(unravel)(memory)), ex.ae, ex.opt,
                    error)

        every = hyper["retrain_every"]
        again = (every > 0) & (jnp.mod(ctx.step, jnp.maximum(jnp.round(every), 1.0)) == 0)
        grad, memory, ae, opt, error = jax.lax.cond((ctx.step < hyper["warmup"]) | again, stage_one, stage_two, None)
        cosine = _cosine(ravel_pytree(grad)[0], jnp.mean(flat(grads), axis=0))
        return grad, state._replace(extra=LGCState(memory, ae, opt, error, cosine))

    ae_params = bandwidth.num_params(jax.eval_shape(ae_init, jax.random.PRNGKey(0)))
    stages = _stages(ring, n, k, k_inn, code_floats, ae_params)
    built = pop.built_with(kit.one_model(
        n, init=init, reduce=gradients, traffic=_traffic(stages, config.num_steps, warmup, retrain_every),
        readings=lambda state: {"ae_error": state.extra.error, "cosine": state.extra.cosine}))
    return built.extended(LGC, stages=stages, k=k, k_innovation=0 if ring else k_inn, code_floats=code_floats,
                          ae_params=ae_params, num_params=p)


def _method(name: str | None, ring: bool, fraction: float, warmup: float, retrain_every: float, innovation: float,
            code_channels: int, width: int, ae_lr: float) -> methods.Method:
    require(is_real(fraction) and 0 < fraction <= 1, "fraction", "a number in (0, 1]", fraction)
    require(is_real(innovation) and 0 < innovation <= fraction, "innovation", f"a number in (0, {fraction}]",
            innovation)
    require(is_real(warmup) and warmup >= 0, "warmup", "a number of steps >= 0", warmup)
    require(is_int(retrain_every) and retrain_every >= 0, "retrain_every", "an integer >= 0", retrain_every)
    require(is_int(code_channels) and code_channels >= 1, "code_channels", "an integer >= 1", code_channels)
    require(is_int(width) and width >= 2, "width", "an integer >= 2", width)
    require(is_real(ae_lr) and ae_lr > 0, "ae_lr", "a number > 0", ae_lr)

    retrained = f"_r{retrain_every}" if retrain_every else ""
    label = name or f"lgc_{'ring' if ring else 'ps'}_{fraction * 100:g}pct{retrained}"
    build = functools.partial(make_lgc, ring=ring, fraction=fraction, innovation=innovation,
                              code_channels=code_channels, width=width, warmup=warmup, retrain_every=retrain_every)
    return methods.Method(label, build, family="compressed", score="model",
                          hyper={"warmup": float(warmup), "ae_lr": float(ae_lr), "retrain_every": float(retrain_every)})


def lgc_parameter_server(fraction: float = 0.01, warmup: float = 100, retrain_every: int = 0, *,
                         innovation: float | None = None, code_channels: int = 4, width: int = 64, ae_lr: float = 1e-3,
                         name: str | None = None) -> methods.Method:
    """LGC's parameter-server instance as a method (module docstring).

    Args:
      fraction: k / P of top-k (the paper's re-implementation: 0.001).
      warmup: stage one's steps (``hyper["warmup"]``, data of the step).
      retrain_every: R > 0: after stage one, every R-th step is a step of stage one again (its top-k messages
        travel, the autoencoder learns from them and is sent again: ``hyper["retrain_every"]``); 0 (default, the
        paper's): the autoencoder is frozen after stage one.
      innovation: k' / P of every node's innovation (default ``fraction / 100``, the re-implementation's).
      code_channels: channels of the code, ``code_channels x ceil(k / 16)`` floats (the paper's design: 4).
      width: w of the autoencoder's convolutions (the re-implementation's: 64).
      ae_lr: the autoencoder's Adam step size (``hyper["ae_lr"]``).
      name: the method's name (default ``lgc_ps_<100 fraction>pct``, ``_r<R>`` where it retrains).
    """
    innovation = fraction / 100 if innovation is None else innovation
    return _method(name, False, fraction, warmup, retrain_every, innovation, code_channels, width, ae_lr)


def lgc_ring(fraction: float = 0.01, warmup: float = 100, retrain_every: int = 0, *, code_channels: int = 4,
             width: int = 64, ae_lr: float = 1e-3, name: str | None = None) -> methods.Method:
    """LGC's ring all-reduce instance as a method (module docstring); arguments as :func:`lgc_parameter_server`
    (default name ``lgc_ring_<100 fraction>pct``)."""
    return _method(name, True, fraction, warmup, retrain_every, fraction, code_channels, width, ae_lr)
