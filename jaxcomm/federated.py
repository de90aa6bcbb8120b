"""Federated learning: M clients, a cohort of K of them per round trained in the kit's K slots, methods as values.

A federated run holds more clients than its compiled step has nodes. Its data holds the shards of all M clients
(any partition of the config: IID or Dirichlet, unequal sizes); its population is K slots (``num_nodes`` = K).
Every round (H = ``local_steps`` ticks):

1. a cohort of K distinct clients is drawn (:func:`draw_cohort`: uniformly, or by weight, proportional to each
   client's sample count; ids ascending, so K = M is exactly ``arange(M)``) from the stream
   :data:`COHORT_STREAM` (:func:`jaxcomm.streams.named`: the draw changes no other draw of the run), at the previous
   round's close (the first round's at the run's first tick, when its sizes are first read) and kept in
   ``state.extra.cohort``; slot i draws its minibatches from client ``cohort[i]``'s shard with slot i's own keys (the
   kit's ``shards`` hook, :class:`jaxcomm.kit.Communicator`);
2. every slot starts from the global model (a fresh client optimiser state) and takes H steps of the client
   optimiser (default plain SGD at the config's learning rate, data of the step so a sweep varies it);
3. at the round's close the server averages the clients (by sample count, or uniformly), takes the pseudo-gradient
   ``Delta = x - mean_i y_i`` and steps the global model with the server optimiser (``optax.sgd(1.0)``: FedAvg's
   ``x = mean_i y_i``; momentum SGD: FedAvgM; Adam or Yogi: FedAdam / FedYogi, Reddi et al. 2021, as DiLoCo's
   outer step in :mod:`jaxcomm.local_sgd`), then draws the next cohort.

Clients that come and go: with ``available`` (``[R, M] bool``, which clients are on through round r, e.g.
:func:`jaxcomm.pace.on_through` of a cluster's :class:`jaxcomm.clock.Availability` at the rounds' virtual times:
:func:`available_clients`) the cohort is drawn among the clients on in its round. A round with fewer than K on
fills its other slots with clients that are off: they train (the compiled step keeps its K slots) but weigh 0 in
the server's mean and keep their own state; a round with none on leaves the global model and the server state as
they were. The ledger books the clients that were on, ``min(K, on)`` uploads in a round (the draw takes every
client on first: :func:`draw_cohort`), and the lockstep clock times each round's uploads and downloads for those
clients (:func:`jaxcomm.clock.seconds`; at its own pace every round is still timed for K, an upper bound).

How M reaches the data: a :class:`FederatedConfig` extends :class:`jaxcomm.kit.RunConfig` with ``num_clients`` (M);
its :attr:`~FederatedConfig.num_shards` is M, so :func:`jaxcomm.classifier.shards_of` (and
:func:`jaxcomm.methods.shard_data`, a sweep's :func:`jaxcomm.classifier.run_data`) partition the training split over
the M clients, while ``num_nodes`` = K sizes the population, the timeline, the cluster and the ledger. A method's
``configure`` (:func:`clients_config`) makes one from any config: a plain config's ``num_nodes`` counts the clients
(M) and the method's ``cohort`` is K (default all M); a :class:`FederatedConfig` keeps its M.

Per-client state across rounds (:class:`FederatedState`): a ``[M, ...]`` table in ``state.extra``, outside the K
slots, whose cohort's rows are gathered into ``slots [K, ...]`` at a round's start and scattered back at its close.
Its memory per client: FedAvg, FedAvgM, FedAdam, FedYogi and FedProx keep none (0 bytes; a client's shard is data:
``4 x S + 4`` bytes of indices and size, S its padded size); SCAFFOLD keeps its control variate ``c_i``, float32 like
the parameters: ``4 x P`` bytes per client (M = 10,000 clients of a 100,000-parameter model: 4 GB; of the tests'
172-parameter MLP: 6.9 MB).

Traffic: each cohort client uploads its P float32 parameters and downloads the global model once per round (a
``"server"`` :class:`jaxcomm.ledger.Round`: ``K x 4 P`` bytes booked per round, ``min(K, on) x 4 P`` with
``available`` (its ``takers``), timed through the server's link by :func:`jaxcomm.clock.server_seconds`);
SCAFFOLD sends its variates too, twice the bytes. Evaluation reads the global model (``score="model"``).

Methods (each a :class:`jaxcomm.methods.Method`, built from one :class:`Algorithm`): :func:`fedavg`, :func:`fedavgm`,
:func:`fedadam`, :func:`fedyogi`, :func:`fedprox` (the proximal term's gradient ``mu (w - x)`` added to the clients'
gradients; ``mu`` swept as data), :func:`scaffold` (the clients' gradients corrected by ``- c_i + c``, option II's
variates), :func:`fednova` (unequal local work, ``tau_i`` steps a client, normalised by the server). At their own
pace (``methods.train(..., own_pace=True)``) the cluster's N = K speeds are the slots':
every slot takes H steps and waits for the others; the kit holds a slot that is not due.

References:
  McMahan et al. (2017), "Communication-Efficient Learning of Deep Networks from Decentralized Data" (FedAvg);
  Hsu et al. (2019), "Measuring the Effects of Non-Identical Data Distribution" (FedAvgM); Reddi et al. (2021),
  "Adaptive Federated Optimization", Algorithm 2 (FedAdam, FedYogi); Li et al. (2020), "Federated Optimization in
  Heterogeneous Networks" (FedProx); Karimireddy et al. (2020), "SCAFFOLD", Algorithm 1; Wang et al. (2020),
  "Tackling the Objective Inconsistency Problem in Heterogeneous Federated Optimization" (FedNova); Efraimidis &
  Spirakis (2006) (weighted sampling without replacement; the Gumbel top-k form, Kool et al. 2019).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from typing import Any, NamedTuple

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import optax

from jaxcomm import clock, kit, ledger, methods, pace, population, streams
from jaxcomm.validation import is_int, is_real, named_fields, require

WEIGHTINGS = ("samples", "uniform")
"""How the server averages the cohort: by each client's sample count (FedAvg's ``n_i / n``) or uniformly."""
SAMPLINGS = ("uniform", "weight")
"""How a cohort is drawn: uniformly without replacement, or by weight (proportional to the sample count)."""
COHORT_STREAM = "federated/cohort"
"""The stream the cohorts are drawn from (:func:`jaxcomm.streams.named` of a tick's key)."""


@named_fields
@dataclasses.dataclass(frozen=True)
class FederatedConfig(kit.RunConfig):
    """A :class:`jaxcomm.kit.RunConfig` of clients: the data holds M clients' shards, the population K slots.

    Attributes:
      num_nodes: K, the cohort: the slots the compiled step trains, one client each per round.
      num_clients: M >= K, the clients the training split is partitioned over (``partition``,
        ``dirichlet_alpha``, ``seed`` as for nodes); None: M = K.
    """

    num_clients: int | None = None

    def __post_init__(self):
        super().__post_init__()
        if self.num_clients is None:
            object.__setattr__(self, "num_clients", self.num_nodes)
        require(is_int(self.num_clients) and self.num_clients >= self.num_nodes, "num_clients",
                f"an integer >= num_nodes = {self.num_nodes} (a cohort of num_nodes of the num_clients clients)",
                self.num_clients)

    @property
    def num_shards(self) -> int:
        """M: the data holds a shard per client."""
        return self.num_clients


def clients_config(config: kit.RunConfig, cohort: int | None = None) -> FederatedConfig:
    """The config a federated run trains by (its method's ``configure``; applying it twice changes nothing).

    Args:
      config: a :class:`FederatedConfig` (its ``num_clients`` is M; its ``num_nodes`` the default K) or any
        :class:`jaxcomm.kit.RunConfig` (its ``num_nodes`` counts the clients: M).
      cohort: K (default: a FederatedConfig's ``num_nodes``, a plain config's every client).

    The graph is unread (clients talk to the server): the config's topology becomes "full", valid for any K.
    Raises ValueError naming ``cohort`` when K > M, before anything is built.
    """
    clients = config.num_clients if isinstance(config, FederatedConfig) else config.num_nodes
    k = config.num_nodes if cohort is None else cohort
    require(is_int(k) and 1 <= k <= clients, "cohort", f"an integer in [1, num_clients = {clients}]", k)
    fields = {name: getattr(config, name) for name in kit.RUN_FIELDS}
    return FederatedConfig(**fields | {"num_nodes": k, "num_clients": clients, "topology": "full",
                                       "num_neighbours": None})


class FederatedState(NamedTuple):
    """``state.extra`` of a federated run.

    Attributes:
      model: the global model x, a population of one (leaves ``[1, ...]``): parameters, model state (BatchNorm's,
        averaged like the parameters) and ``opt_state`` the server optimiser's.
      cohort: ``[K] int32`` the clients in the slots this round, ascending; -1 before the run's first tick, which
        draws the first cohort from the data's sizes.
      clients: ``[M, ...]`` every client's own state across rounds (SCAFFOLD's ``c_i``, like the parameters);
        ``()`` for a method that keeps none.
      slots: ``[K, ...]`` the cohort's rows of ``clients``, gathered at the round's start, scattered back at its
        close.
      control: the server's own state beside its model (SCAFFOLD's ``c``, like the parameters); ``()`` for none.
    """

    model: population.NodeState
    cohort: jax.Array
    clients: Any = ()
    slots: Any = ()
    control: Any = ()


class FederatedInfo(NamedTuple):
    """What one tick did. Attributes: loss: ``[K]``; indices: ``[K, B] int32`` rows drawn; synced: ``[] bool`` a round
    closed after it; cohort: ``[K] int32`` the clients the slots drew from (-1 where a slot's client was off, with
    :attr:`Algorithm.available`)."""

    loss: jax.Array
    indices: jax.Array
    synced: jax.Array
    cohort: jax.Array


@dataclasses.dataclass(frozen=True)
class Algorithm:
    """A federated method as a value: FedAvg's round, and what the method changes in it.

    Attributes:
      local_steps: H >= 1, client steps per round.
      cohort: K (None: the config's, :func:`clients_config`).
      client_optimizer: each client's optimiser: a function of the learning rate (default ``optax.sgd``: the
        config's rate and schedule, data of the step), or a transformation used as it is; its state starts afresh
        every round.
      server_optimizer: steps the global model with the pseudo-gradient ``x - mean_i y_i`` (default
        ``optax.sgd(1.0)``: plain FedAvg).
      weighting: one of :data:`WEIGHTINGS`; sampling: one of :data:`SAMPLINGS`.
      gradients: ``gradients(grads [K, ...], state, ctx) -> grads`` between the clients' backward pass and their
        update (FedProx's proximal gradient, SCAFFOLD's correction); None: the plain gradients.
      client_state: ``client_state(params) -> one client's own state`` at the start (SCAFFOLD's ``c_i = 0``),
        kept for all M clients; None: none.
      control: ``control(params) -> the server's own state`` at the start (SCAFFOLD's ``c = 0``); None: none.
      close: ``close(x, y [K, ...], extra, ctx, fraction) -> (slots, control)`` at a round's close, before the
        server step: the cohort's new own states and the server's (SCAFFOLD's option II); ``x`` the global
        parameters the round started from, ``fraction`` = K / M. None: unchanged.
      copies: the P-float vectors a client uploads (and downloads) per round: 1, SCAFFOLD 2.
      client_steps: ``[M]`` the steps each client takes per round, each in ``[1, H]`` (unequal local work:
        :func:`steps_from_speeds`); a slot whose client has taken its steps holds still for the rest of the round.
        None: every client takes H.
      normalized: FedNova's aggregation (Wang et al. 2020): each client's update divided by its steps,
        ``Delta = tau_eff sum_i p_i (x - y_i) / tau_i``, ``tau_eff = sum_i p_i tau_i``; False: FedAvg's
        ``x - sum_i p_i y_i``, which weighs a client by the steps it took.
      available: ``[R, M] bool`` which clients are on in round r (:func:`available_clients`), at least as many rounds
        as the run takes; the cohort is drawn among them (see the module's docstring). None: every client always.
        Not with a ``close`` hook (SCAFFOLD's variates would average the absent slots).
    """

    local_steps: int
    cohort: int | None = None
    client_optimizer: optax.GradientTransformation | Callable | None = None
    server_optimizer: optax.GradientTransformation | None = None
    weighting: str = "samples"
    sampling: str = "uniform"
    gradients: Callable | None = None
    client_state: Callable | None = None
    control: Callable | None = None
    close: Callable | None = None
    copies: int = 1
    client_steps: tuple[int, ...] | None = None
    normalized: bool = False
    available: Any = dataclasses.field(default=None, compare=False)  # an array: compared and hashed by identity

    def __post_init__(self):
        require(is_int(self.local_steps) and self.local_steps >= 1, "local_steps", "an integer >= 1",
                self.local_steps)
        require(self.cohort is None or (is_int(self.cohort) and self.cohort >= 1), "cohort",
                "None (the config's) or an integer >= 1", self.cohort)
        require(self.client_optimizer is None or callable(self.client_optimizer)
                or isinstance(self.client_optimizer, optax.GradientTransformation), "client_optimizer",
                "None, a function of the learning rate (optax.sgd) or an optax transformation", self.client_optimizer)
        require(self.server_optimizer is None or isinstance(self.server_optimizer, optax.GradientTransformation),
                "server_optimizer", "None or an optax transformation (optax.adam(1e-2))", self.server_optimizer)
        require(self.weighting in WEIGHTINGS, "weighting", f"one of {WEIGHTINGS}", self.weighting)
        require(self.sampling in SAMPLINGS, "sampling", f"one of {SAMPLINGS}", self.sampling)
        require(self.client_steps is None or (isinstance(self.client_steps, tuple) and all(
            is_int(t) and 1 <= t <= self.local_steps for t in self.client_steps)), "client_steps",
            f"None or a tuple of integers in [1, local_steps = {self.local_steps}], one per client",
            self.client_steps)
        if self.available is not None:
            table = np.asarray(self.available)
            require(table.ndim == 2 and table.shape[0] >= 1 and table.dtype == bool, "available",
                    "a [rounds, clients] bool array (federated.available_clients)", table.shape)
            require(self.close is None, "available", "None for a method with a close hook (SCAFFOLD)", "a table")


def steps_from_speeds(speeds, local_steps: int) -> tuple[int, ...]:
    """The steps each client takes in a round that lasts the fastest client's H steps: ``max(1, floor(H s_i /
    max s))`` (``speeds [M]`` relative speeds > 0; a client cannot count a step it has not finished).

    Example: ``steps_from_speeds((1.0, 0.5, 0.26), 4) == (4, 2, 1)``.
    """
    speeds = [float(v) for v in speeds]
    require(speeds and all(math.isfinite(v) and v > 0 for v in speeds), "speeds", "finite numbers > 0, one per "
            "client", speeds)
    fastest = max(speeds)
    return tuple(max(1, math.floor(local_steps * v / fastest + 1e-9)) for v in speeds)


# --------------------------------------------------------------------------- cohorts and per-client tables


def draw_cohort(key: jax.Array, sizes: jax.Array, cohort: int, sampling: str = "uniform",
                available: jax.Array | None = None) -> jax.Array:
    """K distinct clients of M, ascending (``[K] int32``; K = M: ``arange(M)``).

    Args:
      key: the draw's key (:data:`COHORT_STREAM` of a tick's).
      sizes: ``[M] int32`` each client's sample count.
      cohort: K <= M.
      sampling: "uniform" (every K-subset alike) or "weight": successive sampling without replacement with
        probability proportional to ``sizes``, as the top K of ``log sizes + Gumbel`` noise (Kool et al. 2019).
      available: ``[M] bool`` the clients that may be drawn (None: all): the cohort is drawn among them, and where
        fewer than K are, it holds every one of them and fills its other places with clients that are not.
    """
    noise = jax.random.gumbel(key, sizes.shape)
    scores = noise if sampling == "uniform" else noise + jnp.log(sizes.astype(jnp.float32))
    if available is not None:
        scores = jnp.where(available, scores, -jnp.inf)
    _, ids = jax.lax.top_k(scores, cohort)
    return jnp.sort(ids).astype(jnp.int32)


def available_clients(availability: clock.Availability | None, num_clients: int, rounds: int, round_seconds: float,
                      *, seed: int = 0) -> np.ndarray:
    """``[R, M] bool``: the clients on through every moment of each of R rounds of ``round_seconds`` (round r spans
    ``[r T, (r + 1) T)``), under ``availability``: the off windows a cluster's nodes meet at their own pace with the
    same seed (:func:`jaxcomm.pace.on_through`). ``round_seconds`` is e.g. a lockstep round's virtual time
    (:func:`jaxcomm.clock.seconds` of H steps).

    Example: ``fedavg(5, cohort=10, available=available_clients(clock.Availability(60.0, 20.0), 100, 200, 1.5))``.
    """
    require(is_int(rounds) and rounds >= 1, "rounds", "an integer >= 1", rounds)
    require(is_real(round_seconds) and math.isfinite(round_seconds) and round_seconds > 0, "round_seconds",
            "finite seconds > 0", round_seconds)
    starts = np.arange(rounds) * float(round_seconds)
    return pace.on_through(availability, num_clients, starts, starts + float(round_seconds), seed=seed)


def table(one: Any, rows: int) -> Any:
    """``rows`` copies of one client's state (leaves ``[rows, ...]``): every client starts alike."""
    return jax.tree.map(lambda leaf: jnp.broadcast_to(leaf, (rows, *jnp.shape(leaf))), one)


def gather(clients: Any, ids: jax.Array) -> Any:
    """The rows ``ids [K]`` of a ``[M, ...]`` table: ``[K, ...]``."""
    return jax.tree.map(lambda leaf: leaf[ids], clients)


def scatter(clients: Any, ids: jax.Array, rows: Any) -> Any:
    """The ``[M, ...]`` table with rows ``ids [K]`` (distinct) replaced by ``rows [K, ...]``."""
    return jax.tree.map(lambda leaf, new: leaf.at[ids].set(new), clients, rows)


def aggregation_weights(sizes: jax.Array, weighting: str, present: jax.Array | None = None) -> jax.Array | None:
    """``[K]`` weights summing to 1 of the cohort's clients (``sizes [K]`` their sample counts), or None for the
    uniform mean (taken as ``jnp.mean``, local SGD's, so a cohort of all M is local SGD bit for bit).

    ``present [K] bool``: the slots whose client was on (None: all); the others weigh 0, and where none was on every
    weight is 0."""
    if present is None:
        if weighting == "uniform":
            return None
        counts = sizes.astype(jnp.float32)
        return counts / jnp.sum(counts)
    counts = present.astype(jnp.float32) * (1.0 if weighting == "uniform" else sizes.astype(jnp.float32))
    return counts / jnp.maximum(jnp.sum(counts), 1.0)


def cohort_mean(tree: Any, weights: jax.Array | None) -> Any:
    """The weighted mean over the cohort of a ``[K, ...]`` pytree (``weights [K]`` summing to 1; None: uniform)."""
    if weights is None:
        return jax.tree.map(lambda leaf: jnp.mean(leaf, axis=0), tree)
    return jax.tree.map(lambda leaf: jnp.tensordot(weights, leaf, 1), tree)


def broadcast(tree: Any, rows: int) -> Any:
    """``rows`` copies of a pytree on a new leading axis (the global model in every slot)."""
    return jax.tree.map(lambda leaf: jnp.broadcast_to(leaf, (rows, *jnp.shape(leaf))), tree)


def pseudo_gradient(x: Any, y: Any, weights: jax.Array | None, steps: jax.Array | None = None) -> Any:
    """The server's pseudo-gradient from the global parameters ``x`` and the cohort's ``y [K, ...]``: FedAvg's
    ``x - sum_i p_i y_i`` (``weights [K]``; None: the uniform mean), or with ``steps [K]`` (``tau_i``) FedNova's
    ``tau_eff sum_i p_i (x - y_i) / tau_i``, ``tau_eff = sum_i p_i tau_i``."""
    if steps is None:
        return jax.tree.map(jnp.subtract, x, cohort_mean(y, weights))
    p = jnp.full(steps.shape, 1.0 / steps.shape[0]) if weights is None else weights
    return jax.tree.map(lambda xi, yi: jnp.sum(p * steps) * jnp.tensordot(p / steps, xi[None] - yi, 1), x, y)


class _RoundsOn:
    """Which clients are on in each round (:attr:`Algorithm.available`), read inside the step; every method is a
    no-op (None, or what it is given) without a table."""

    def __init__(self, available: Any, num_clients: int, local_steps: int, num_steps: int):
        self.on, self.h = None if available is None else jnp.asarray(available), local_steps  # [R, M]
        if self.on is not None:
            rounds = -(-num_steps // local_steps)
            require(self.on.shape[1] == num_clients and self.on.shape[0] >= rounds, "available",
                    f"a [rounds >= {rounds}, clients = {num_clients}] bool array (num_steps {num_steps}, "
                    f"H = {local_steps})", tuple(self.on.shape))

    def clients(self, r: jax.Array) -> jax.Array | None:
        """``[M] bool`` the clients on in round r (None: every client, always)."""
        return None if self.on is None else self.on[jnp.minimum(r, self.on.shape[0] - 1)]

    def next_round(self, ctx: kit.Context) -> jax.Array:
        return jnp.max(ctx.tick.steps) // self.h  # at a close: the round the next cohort trains in

    def slots(self, ctx: kit.Context) -> jax.Array | None:
        """``[K] bool`` the slots whose client is on in the round this tick ends or is in (None: all)."""
        return None if self.on is None else self.clients((jnp.max(ctx.tick.steps) - 1) // self.h)[ctx.ids]

    def marked(self, ctx: kit.Context) -> jax.Array:
        """``[K]`` the slots' clients, -1 where one is off."""
        return ctx.ids if self.on is None else jnp.where(self.slots(ctx), ctx.ids, -1)

    def takers(self, cohort: int, rounds: int) -> tuple[int, ...]:
        """Each of ``rounds`` rounds' clients that are on in its cohort, ``min(K, on)`` (empty: all K, always)."""
        if self.on is None:
            return ()
        on = np.asarray(self.on[:rounds]).sum(axis=1)
        return tuple(int(c) for c in np.minimum(on, cohort))

    def unless_empty(self, ctx: kit.Context, new: Any, old: Any) -> Any:
        """``new``, or ``old`` where no slot's client was on (a round of nobody leaves the server as it was)."""
        return new if self.on is None else jax.tree.map(lambda a, b: jnp.where(jnp.any(self.slots(ctx)), a, b), new,
                                                         old)


# --------------------------------------------------------------------------- the method


def make_federated(config: kit.RunConfig, model: nn.Module, *, image_shape: tuple[int, ...], num_classes: int,
                   algorithm: Algorithm) -> kit.Built:
    """Builds a federated run of ``model`` (a Flax classifier returning ``(logits, features)``) on the kit.

    Args:
      config: a :class:`FederatedConfig` (any config is made one by :func:`clients_config`): K slots of M clients.
      model: every client's classifier.
      image_shape: ``(H, W, C)``; num_classes: C.
      algorithm: the method (:class:`Algorithm`).
    """
    a = algorithm
    config = clients_config(config, a.cohort)
    k, m, h = config.num_nodes, config.num_clients, a.local_steps
    pop = kit.nodes(config, model, image_shape=image_shape, num_classes=num_classes,
                    optimizer=a.client_optimizer or optax.sgd, waits=pace.rounds_of(h))
    server = a.server_optimizer or optax.sgd(1.0)
    weighting, sampling = a.weighting, a.sampling
    require(a.client_steps is None or len(a.client_steps) == m, "client_steps", f"one per client (M = {m})",
            a.client_steps)
    taus = None if a.client_steps is None else jnp.asarray(a.client_steps, jnp.int32)  # [M]
    on = _RoundsOn(a.available, m, h, config.num_steps)

    def init(nodes: population.NodeState, key: jax.Array) -> FederatedState:  # every slot starts from one model
        start = population.node(nodes, 0)
        one = None if a.client_state is None else a.client_state(start.params)
        return FederatedState(
            population.stack([population.NodeState(start.params, start.model_state, server.init(start.params))]),
            jnp.full((k,), -1, jnp.int32), () if one is None else table(one, m), () if one is None else table(one, k),
            () if a.control is None else a.control(start.params))

    def shards(state: kit.NodesState, ctx: kit.Context) -> jax.Array:
        # the cohort of this round; the first is drawn at the run's first tick, where the clients' sizes are read
        return jax.lax.cond(ctx.step == 0, lambda: draw_cohort(streams.named(ctx.key, COHORT_STREAM), ctx.sizes, k,
                                                               sampling, on.clients(jnp.int32(0))),
                            lambda: state.extra.cohort)

    def gradients(grads, state: kit.NodesState, ctx: kit.Context):
        return a.gradients(grads, state, ctx), state

    def communicate(state: kit.NodesState, ctx: kit.Context) -> kit.NodesState:
        extra = state.extra._replace(cohort=ctx.ids)  # the cohort the slots drew from (the first: drawn this tick)
        if taus is not None:  # a client past its steps this round keeps its model (and optimiser state) still
            working = (ctx.tick.steps - 1) % h < taus[ctx.ids]
            state = state._replace(nodes=population.where(working, state.nodes, ctx.before.nodes))

        def close(nodes: population.NodeState, extra: FederatedState):
            """The round's close: the server step from the cohort's mean, the cohort's own states scattered back, the
            next cohort drawn and its states gathered; every slot restarts from the new global model."""
            glob = population.node(extra.model, 0)
            weights = aggregation_weights(ctx.sizes[ctx.ids], weighting, on.slots(ctx))
            slots, control = (extra.slots, extra.control) if a.close is None else a.close(
                glob.params, nodes.params, extra, ctx, k / m)
            tau = None if not a.normalized else (  # FedNova's steps per client
                taus[ctx.ids].astype(jnp.float32) if taus is not None else jnp.full((k,), float(h)))
            delta = pseudo_gradient(glob.params, nodes.params, weights, tau)
            updates, server_state = server.update(delta, glob.opt_state, glob.params)
            glob = on.unless_empty(ctx, population.NodeState(optax.apply_updates(glob.params, updates),
                                                             cohort_mean(nodes.model_state, weights), server_state),
                                   glob)
            clients = scatter(extra.clients, ctx.ids, slots)
            cohort = draw_cohort(streams.named(ctx.key, COHORT_STREAM), ctx.sizes, k, sampling,
                                 on.clients(on.next_round(ctx)))
            params = broadcast(glob.params, k)
            fresh = jax.vmap(pop.node_step.step_for(ctx.settings.learning_rate).optimizer.init)(params)
            restart = population.NodeState(params, broadcast(glob.model_state, k), fresh)
            return restart, FederatedState(population.stack([glob]), cohort, clients, gather(clients, cohort), control)

        nodes, extra = population.when_due(ctx.tick.closes, close, state.nodes, extra)
        return state._replace(nodes=nodes, extra=extra)

    # each cohort client uploads its parameters (and SCAFFOLD its variates) and downloads the global model per round
    upload = ledger.Round("server", 4.0 * pop.num_params * a.copies, every=h,
                          takers=on.takers(k, -(-config.num_steps // h)))
    return pop.built_with(kit.Communicator(
        init=init, shards=shards, gradients=None if a.gradients is None else gradients, communicate=communicate,
        info=lambda info, ctx: FederatedInfo(*info, ctx.tick.closes, on.marked(ctx)), traffic=(upload,),
        same_start=True,
        models_of=lambda state: state.extra.model,
        stacked=a.gradients is not None or taus is not None))  # else the slots are read together only at a close


def method(algorithm: Algorithm, name: str, *, hyper: dict[str, float] | None = None) -> methods.Method:
    """``algorithm`` as a :class:`jaxcomm.methods.Method` named ``name``: its ``configure`` makes the config one of
    clients (:func:`clients_config`, K > M refused naming ``cohort``), scored by the global model."""

    def build(config, model, *, image_shape, num_classes):
        return make_federated(config, model, image_shape=image_shape, num_classes=num_classes, algorithm=algorithm)

    return methods.Method(name, build, family="federated", score="model", hyper=hyper,
                          configure=lambda config: clients_config(config, algorithm.cohort))


def _name(head: str, local_steps: int, cohort: int | None) -> str:
    return f"{head}_h{local_steps}" + ("" if cohort is None else f"_k{cohort}")


def fedavg(local_steps: int, *, cohort: int | None = None,
           client_optimizer: optax.GradientTransformation | Callable | None = None,
           server_optimizer: optax.GradientTransformation | None = None, weighting: str = "samples",
           sampling: str = "uniform", client_steps: tuple[int, ...] | None = None, available: Any = None,
           name: str | None = None) -> methods.Method:
    """FedAvg (McMahan et al. 2017): a cohort of K clients per round, H client steps from the global model, the
    server averages them by sample count (``weighting="uniform"``: uniformly).

    Args:
      local_steps: H >= 1.
      cohort: K (default: the config's, :func:`clients_config`).
      client_optimizer: a function of the learning rate (default ``optax.sgd``: the config's rate, swept as data) or
        a transformation used as it is.
      server_optimizer: on the pseudo-gradient ``x - mean_i y_i`` (default ``optax.sgd(1.0)``: plain FedAvg;
        :func:`fedavgm`, :func:`fedadam`, :func:`fedyogi`).
      weighting: one of :data:`WEIGHTINGS`; sampling: one of :data:`SAMPLINGS`.
      client_steps: ``[M]`` each client's steps per round (:attr:`Algorithm.client_steps`; None: H each); FedAvg
        averages the unequal work as it is (:func:`fednova` normalises it).
      available: ``[R, M] bool`` the clients on in each round (:attr:`Algorithm.available`,
        :func:`available_clients`); None: every client, always.
      name: default ``fedavg_h<H>[_k<K>]``.
    """
    algorithm = Algorithm(local_steps, cohort, client_optimizer, server_optimizer, weighting, sampling,
                          client_steps=None if client_steps is None else tuple(client_steps), available=available)
    return method(algorithm, name or _name("fedavg", local_steps, cohort))


def fednova(local_steps: int, client_steps: tuple[int, ...] | None = None, *, cohort: int | None = None,
            client_optimizer: optax.GradientTransformation | Callable | None = None,
            server_optimizer: optax.GradientTransformation | None = None, weighting: str = "samples",
            sampling: str = "uniform", available: Any = None, name: str | None = None) -> methods.Method:
    """FedNova (Wang et al. 2020, "Tackling the Objective Inconsistency Problem in Heterogeneous Federated
    Optimization"): clients do unequal local work, ``tau_i`` steps in a round (``client_steps``, e.g.
    :func:`steps_from_speeds`), and the server normalises it: ``x <- x - tau_eff sum_i p_i (x - y_i) / tau_i``,
    ``tau_eff = sum_i p_i tau_i``, ``p_i`` the cohort's weights (``weighting``). Plain FedAvg on the same work
    (:func:`fedavg` with ``client_steps``) weighs a client by its steps and converges to a mixture of the clients'
    objectives weighted by them; FedNova to the intended one.

    The normalisation is the paper's for plain-SGD clients (the default ``client_optimizer``: ``a_i`` a vector of
    ones, ``|a_i|_1 = tau_i``); with momentum or Adam clients it is this same division by the steps, not the
    paper's ``|a_i|_1`` of that optimiser. With every ``tau_i = H`` it is FedAvg up to rounding. The server step
    takes the normalised pseudo-gradient through ``server_optimizer`` (default ``optax.sgd(1.0)``).

    Args:
      local_steps: H, the round's ticks (the most steps a client takes).
      client_steps: ``[M]`` each client's steps per round, in ``[1, H]`` (None: H each).
      cohort, client_optimizer, server_optimizer, weighting, sampling, available: as :func:`fedavg`'s.
      name: default ``fednova_h<H>[_k<K>]``.
    """
    algorithm = Algorithm(local_steps, cohort, client_optimizer, server_optimizer, weighting, sampling,
                          client_steps=None if client_steps is None else tuple(client_steps), normalized=True,
                          available=available)
    return method(algorithm, name or _name("fednova", local_steps, cohort))


def fedavgm(local_steps: int, *, server_lr: float = 1.0, momentum: float = 0.9, name: str | None = None,
            **kwargs) -> methods.Method:
    """FedAvgM (Hsu et al. 2019): :func:`fedavg` with server SGD of rate ``server_lr`` and heavy-ball ``momentum``
    on the pseudo-gradient; ``kwargs`` as :func:`fedavg`'s."""
    _check_rate(server_lr)
    require(is_real(momentum) and 0 <= momentum < 1, "momentum", "a number in [0, 1)", momentum)
    return fedavg(local_steps, server_optimizer=optax.sgd(server_lr, momentum=momentum),
                  name=name or _name("fedavgm", local_steps, kwargs.get("cohort")), **kwargs)


def fedadam(local_steps: int, *, server_lr: float = 1e-2, b1: float = 0.9, b2: float = 0.99, eps: float = 1e-3,
            name: str | None = None, **kwargs) -> methods.Method:
    """FedAdam (Reddi et al. 2021, Algorithm 2): :func:`fedavg` with Adam as the server optimiser on the
    pseudo-gradient (the paper's beta_1 0.9, beta_2 0.99 and adaptivity tau = ``eps`` 1e-3; optax's bias correction);
    ``kwargs`` as :func:`fedavg`'s."""
    _check_rate(server_lr)
    return fedavg(local_steps, server_optimizer=optax.adam(server_lr, b1=b1, b2=b2, eps=eps),
                  name=name or _name("fedadam", local_steps, kwargs.get("cohort")), **kwargs)


def fedyogi(local_steps: int, *, server_lr: float = 1e-2, b1: float = 0.9, b2: float = 0.99, eps: float = 1e-3,
            name: str | None = None, **kwargs) -> methods.Method:
    """FedYogi (Reddi et al. 2021, Algorithm 2): :func:`fedavg` with Yogi as the server optimiser (its additive
    second-moment update); the paper's defaults as :func:`fedadam`'s; ``kwargs`` as :func:`fedavg`'s."""
    _check_rate(server_lr)
    return fedavg(local_steps, server_optimizer=optax.yogi(server_lr, b1=b1, b2=b2, eps=eps),
                  name=name or _name("fedyogi", local_steps, kwargs.get("cohort")), **kwargs)


def _check_rate(rate: float) -> None:
    require(is_real(rate) and 0 < rate < float("inf"), "server_lr", "a finite number > 0", rate)


def proximal_gradients(grads: Any, state: kit.NodesState, ctx: kit.Context) -> Any:
    """FedProx's clients' gradients (Li et al. 2020, eq. 2): ``g + mu (w - x)``, ``w`` each slot's parameters
    ``[K, ...]``, ``x`` the global model the round started from, ``mu = ctx.settings.hyper["mu"]``."""
    mu, glob = ctx.settings.hyper["mu"], state.extra.model.params  # [1, ...]: every slot's round-start model
    return jax.tree.map(lambda g, w, x: g + mu * (w - x), grads, state.nodes.params, glob)


def fedprox(local_steps: int, mu: float, *, cohort: int | None = None,
            client_optimizer: optax.GradientTransformation | Callable | None = None,
            server_optimizer: optax.GradientTransformation | None = None, weighting: str = "samples",
            sampling: str = "uniform", available: Any = None, name: str | None = None) -> methods.Method:
    """FedProx (Li et al. 2020): :func:`fedavg` whose clients minimise ``loss + mu / 2 |w - x|^2``: the proximal
    term's gradient ``mu (w - x)`` is added to every client gradient (:func:`proximal_gradients`). ``mu >= 0`` is
    data of the step (``hyper``), so a sweep varies it; mu = 0 is FedAvg. The other arguments as :func:`fedavg`'s
    (default name ``fedprox_h<H>_mu<mu>[_k<K>]``)."""
    require(is_real(mu) and 0 <= mu < float("inf"), "mu", "a finite number >= 0", mu)
    algorithm = Algorithm(local_steps, cohort, client_optimizer, server_optimizer, weighting, sampling,
                          gradients=proximal_gradients, available=available)
    label = f"fedprox_h{local_steps}_mu{mu:g}" + ("" if cohort is None else f"_k{cohort}")
    return method(algorithm, name or label, hyper={"mu": mu})


def scaffold(local_steps: int, *, cohort: int | None = None,
             client_optimizer: optax.GradientTransformation | Callable | None = None, server_lr: float = 1.0,
             weighting: str = "uniform", sampling: str = "uniform", name: str | None = None) -> methods.Method:
    """SCAFFOLD (Karimireddy et al. 2020, Algorithm 1, option II): control variates correct the clients' drift.

    Every client i keeps ``c_i`` across rounds (a ``[M, P]`` table: 4 x P bytes per client), the server ``c``. In a
    round client i steps with ``g - c_i + c``; at its close ``c_i+ = c_i - c + (x - y_i) / (H lr)`` (``lr`` the
    config's learning rate: exact for plain-SGD clients at a constant rate), the server ``x += server_lr x mean_i
    (y_i - x)`` (weighted as ``weighting``; the paper's uniform by default) and ``c += (K / M) mean_i (c_i+ - c_i)``.
    A client uploads ``(dy_i, dc_i)`` and downloads ``(x, c)``: twice FedAvg's bytes.

    Args:
      local_steps: H; cohort: K; client_optimizer, weighting, sampling, name: as :func:`fedavg`'s (default
        ``scaffold_h<H>[_k<K>]``).
      server_lr: eta_g, the global step size.
    """
    _check_rate(server_lr)
    zeros = lambda params: jax.tree.map(jnp.zeros_like, params)  # noqa: E731  c_i = c = 0 at the start

    def corrected(grads, state: kit.NodesState, ctx: kit.Context):  # g - c_i + c, c_i the slot's client's
        extra = state.extra
        return jax.tree.map(lambda g, ci, c: g - ci + c, grads, extra.slots, extra.control)

    def variates(x, y, extra: FederatedState, ctx: kit.Context, fraction: float):
        """Option II: ``c_i+ = c_i - c + (x - y_i) / (H lr)``; ``c += (K / M) mean_i (c_i+ - c_i)``."""
        scale = 1.0 / (local_steps * ctx.settings.learning_rate)
        new = jax.tree.map(lambda ci, c, x0, yi: ci - c + (x0 - yi) * scale, extra.slots, extra.control, x, y)
        control = jax.tree.map(lambda c, ci, old: c + fraction * jnp.mean(ci - old, axis=0), extra.control, new,
                               extra.slots)
        return new, control

    algorithm = Algorithm(local_steps, cohort, client_optimizer, optax.sgd(server_lr), weighting, sampling,
                          gradients=corrected, client_state=zeros, control=zeros, close=variates, copies=2)
    return method(algorithm, name or _name("scaffold", local_steps, cohort))
