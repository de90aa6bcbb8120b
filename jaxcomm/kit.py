"""The kit every method trains on: a run config that is no method's, and a node population.

A method (:mod:`jaxcomm.methods`) is what its nodes send and what they do with what they receive. What
every method on classifier nodes shares is here, written once:

* :class:`RunConfig`: nodes, graph, steps, batch, seed, shards, optimiser and schedule, augmentation,
  evaluation, data model, compute dtype, backend and step loop. The chapter-2 network's own fields live in
  :class:`jaxcomm.network.OutputSharingConfig`; :class:`jaxcomm.network.NetworkConfig` is both.
* :func:`nodes`: a node population, N nodes of a Flax classifier on their shards, the backend chosen once: ``init`` (an
  isolated network's, or every node from one model), the minibatch draw and the local step on each node's
  own shard (:meth:`Population.local_step`, an isolated network's draws), ``predict``, the stacked
  parameters; and :meth:`Population.built`, which makes a method's step a :class:`Built` for the driver.
* :func:`graph_of`: the config's graph, drawn from the run's graph stream.

Example, a method that averages every node with its in-neighbours after each local step (gossip)::

    def build(config, model, *, image_shape, num_classes):
        pop = kit.nodes(config, model, image_shape=image_shape, num_classes=num_classes, static_graph=True)

        def step(state, data):
            state, info = pop.local_step(state, data)
            weights = topology.mixing_matrix(state.graph)  # the run's own graph
            return pop.with_params(state, topology.mix(weights, pop.params(state))), info

        return pop.built(step, traffic=(ledger.Round("neighbours", 4.0 * pop.num_params, edges=pop.edges),))
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from typing import Any, NamedTuple

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax.core import FrozenDict
from jax.flatten_util import ravel_pytree

from jaxcomm import bandwidth, classifier, compiling, driver, ledger, pace, population, speed, streams, topology
from jaxcomm.exchange import DATA_MODELS
from jaxcomm.validation import is_int, is_real, named_fields, require

TOPOLOGIES = topology.NAMES
PARTITIONS = ("iid", "dirichlet")
LR_SCHEDULES = ("constant", "cosine")
COMPUTE_DTYPES = ("float32", "bfloat16")


@named_fields
@dataclasses.dataclass(frozen=True)
class RunConfig:
    """What every method reads: the nodes, their graph, shards, optimiser and schedule; validated on construction.

    Attributes:
      num_nodes: N.
      topology: one of :data:`TOPOLOGIES`, the graph of the methods that use one (output sharing, gossip, sparse
        averaging); "random" is a fixed random graph with ``num_neighbours`` out-neighbours per node,
        "time_varying" draws a new one every ``redraw_every`` steps. A graph passed by value replaces it.
      num_neighbours: p, out-neighbours per node (ignored by "full" and "exponential"); default
        ``min(2, num_nodes - 1)``.
      redraw_every: steps between graphs of the "time_varying" topology.
      batch_size: B, samples per minibatch (and per message).
      learning_rate: Adam's step size (thesis: Adam defaults, 1e-3).
      lr_schedule: one of :data:`LR_SCHEDULES`: "constant" (the thesis) or "cosine" (from ``learning_rate`` down
        to 0 at ``num_steps``, counted in each node's own updates).
      partition: one of :data:`PARTITIONS`; "iid" as the thesis.
      dirichlet_alpha: concentration of the "dirichlet" label skew.
      backend: how per-node code is lifted: one of :data:`jaxcomm.population.BACKENDS`, or "auto" for the backend
        measured fastest for this model family and N (:func:`jaxcomm.speed.choose`).
      step_loop: how a chunk of steps runs: "scan" (one ``lax.scan``), "dispatch" (one jitted call per step),
        "eager" (with the "loop" backend: one compiled call per node, the thesis' way) or "auto".
      compute_dtype: one of :data:`COMPUTE_DTYPES`: "bfloat16" runs classifier nodes' forward and backward passes
        in bfloat16 while parameters, model state and optimiser state stay float32 (:func:`classifier.in_dtype`).
      augment: random horizontal flips and 4-pixel-padded random crops of every training minibatch.
      data_model: one of :data:`jaxcomm.exchange.DATA_MODELS`, for the bytes a message of inputs costs:
        "private" (exclusive shards: the images travel) or "shared" (every node holds the dataset: indices
        travel). Training is the same.
      num_steps: training steps.
      eval_every: steps between evaluations (one jitted chunk).
      seed: seeds the partition, the initialisation and every draw.
    """

    num_nodes: int = 10
    topology: str = "ring"
    num_neighbours: int | None = None
    redraw_every: int = 100
    batch_size: int = 32
    learning_rate: float = 1e-3
    lr_schedule: str = "constant"
    partition: str = "iid"
    dirichlet_alpha: float = 0.5
    backend: str = "auto"
    step_loop: str = "auto"
    compute_dtype: str = "float32"
    augment: bool = False
    data_model: str = "private"
    num_steps: int = 1000
    eval_every: int = 100
    seed: int = 0

    def __post_init__(self):
        require(is_int(self.num_nodes) and self.num_nodes >= 1, "num_nodes", "an integer >= 1", self.num_nodes)
        if self.num_neighbours is None:
            object.__setattr__(self, "num_neighbours", min(2, self.num_nodes - 1))
        require(self.topology in TOPOLOGIES, "topology", f"one of {TOPOLOGIES}", self.topology)
        if self.topology not in ("full", "exponential"):
            require(is_int(self.num_neighbours) and 0 <= self.num_neighbours <= self.num_nodes - 1, "num_neighbours",
                    f"an integer in [0, num_nodes - 1] = [0, {self.num_nodes - 1}]", self.num_neighbours)
        require(is_int(self.redraw_every) and self.redraw_every >= 1, "redraw_every", "an integer >= 1",
                self.redraw_every)
        require(is_int(self.batch_size) and self.batch_size >= 1, "batch_size", "an integer >= 1", self.batch_size)
        require(is_real(self.learning_rate) and 0 < self.learning_rate < float("inf"), "learning_rate",
                "a finite number > 0", self.learning_rate)
        require(self.lr_schedule in LR_SCHEDULES, "lr_schedule", f"one of {LR_SCHEDULES}", self.lr_schedule)
        require(self.partition in PARTITIONS, "partition", f"one of {PARTITIONS}", self.partition)
        require(is_real(self.dirichlet_alpha) and self.dirichlet_alpha > 0, "dirichlet_alpha", "a number > 0",
                self.dirichlet_alpha)
        population.check_backend(self.backend, allow_auto=True)
        loops = (population.AUTO, *speed.STEP_LOOPS)
        require(self.step_loop in loops, "step_loop", f"one of {loops}", self.step_loop)
        require(self.compute_dtype in COMPUTE_DTYPES, "compute_dtype", f"one of {COMPUTE_DTYPES}", self.compute_dtype)
        require(isinstance(self.augment, bool), "augment", "True or False", self.augment)
        require(self.data_model in DATA_MODELS, "data_model", f"one of {DATA_MODELS}", self.data_model)
        require(is_int(self.num_steps) and self.num_steps >= 0, "num_steps", "an integer >= 0", self.num_steps)
        require(is_int(self.eval_every) and self.eval_every >= 1, "eval_every", "an integer >= 1", self.eval_every)
        require(is_int(self.seed), "seed", "an integer", self.seed)
        # the device count of backend "sharded" is checked when a population is built (check_devices), not here:
        # building a config starts no JAX backend (a multi-host program builds its configs before
        # jax.distributed.initialize)

    def check_devices(self) -> None:
        """Raises ValueError naming ``num_nodes`` when backend "sharded" cannot lay it over the devices."""
        if self.backend == "sharded":
            devices = jax.device_count()
            require(self.num_nodes % devices == 0, "num_nodes",
                    f"a multiple of the {devices} devices for backend 'sharded'", self.num_nodes)

    def replace(self, **changes) -> RunConfig:
        """A copy with ``changes`` applied (and validated)."""
        return dataclasses.replace(self, **changes)

    @property
    def num_shards(self) -> int:
        """The shards the run's data holds (:func:`jaxcomm.classifier.shards_of`): one per node. A config of clients
        (:class:`jaxcomm.federated.FederatedConfig`) holds one per client, M, while its ``num_nodes`` = K are the
        compiled slots a cohort trains in (a :class:`Communicator`'s ``shards`` hook says which client each slot
        draws from)."""
        return self.num_nodes


RUN_FIELDS = tuple(f.name for f in dataclasses.fields(RunConfig))
"""The fields of :class:`RunConfig`: what a config of any method holds for the kit."""


def run_config(config: RunConfig) -> RunConfig:
    """The kit's part of ``config`` (a :class:`RunConfig` or any config that extends it)."""
    return RunConfig(**{name: getattr(config, name) for name in RUN_FIELDS})


class RunSettings(NamedTuple):
    """The numbers of a run that the step reads as data (``[R]`` arrays in a sweep): one compiled step serves every
    value, so a sweep may vary them run by run.

    Attributes:
      learning_rate: the nodes' Adam step size (the peak of a cosine schedule), float32.
      hyper: the method's own values, ``{name: float32}`` (:attr:`jaxcomm.methods.Method.hyper`: SPARTA's
        fraction, DiLoCo's outer learning rate).
    """

    learning_rate: jax.Array
    hyper: FrozenDict  # hashable, so a sweep's data axes key its compiled step


def settings(config: RunConfig, hyper: Mapping[str, float] | None = None) -> RunSettings:
    """A config's :class:`RunSettings` with a method's ``hyper`` values, float32 scalars."""
    return RunSettings(np.float32(config.learning_rate),
                       FrozenDict({k: np.float32(v) for k, v in sorted((hyper or {}).items())}))


def graph_of(config: RunConfig, graph: np.ndarray | jax.Array | topology.GraphFn | None = None
             ) -> tuple[topology.GraphFn, bool]:
    """``(graph_fn(key, step) -> bool [N, N], dynamic)`` of ``graph`` (a bool ``[N, N]`` array or a function of
    ``(key, step)``), or of the config's named topology when ``graph`` is None; validated before anything
    compiles."""
    if graph is None:
        return topology.named(config.topology, config.num_nodes, num_neighbours=config.num_neighbours,
                              redraw_every=config.redraw_every)
    return topology.as_graph_fn(graph, config.num_nodes)


def first_graph(config: RunConfig, graph: np.ndarray | jax.Array | topology.GraphFn | None = None) -> np.ndarray:
    """The run's graph at step 0, ``bool [N, N]`` on the host, from the run's graph stream (what
    :meth:`Population.init` puts in the state, and the network's of the same seed)."""
    graph_fn, _ = graph_of(config, graph)
    key = streams.init_keys(jax.random.PRNGKey(config.seed)).graph
    return np.asarray(graph_fn(key, jnp.zeros((), jnp.int32)), bool)


# --------------------------------------------------------------------------- the node population


class NodesState(NamedTuple):
    """A population's training state.

    Attributes:
      nodes: every node's :class:`jaxcomm.population.NodeState` (leaves ``[N, ...]``).
      step: ``[] int32`` steps taken.
      key: the PRNG key of the next step (:func:`jaxcomm.streams.step_keys`).
      graph: ``[N, N] bool`` the run's graph (``adj[i, j]``: i sends to j), drawn at step 0 from the run's graph
        stream: a random topology differs between seeds and equals the network's of the same seed.
      extra: the method's own state (error-feedback memories, a global model, peers' copies; any pytree).
      pace: the timeline's rows (:class:`jaxcomm.pace.Rows`) of a run at its own pace, within its step only: they
        are the run's data (``ShardData.pace``), put here for the tick the step takes and never carried between steps,
        checkpointed or mapped by a sweep; ``step`` counts ticks and the nodes not due hold. None: every node steps
        every step (lockstep), and in every state a step returns.
    """

    nodes: population.NodeState
    step: jax.Array
    key: jax.Array
    graph: jax.Array
    extra: Any = None
    pace: pace.Rows | None = None


class Tick(NamedTuple):
    """The current tick's row (:meth:`Population.tick`). Attributes: due: ``[N] bool`` the nodes that step; closes:
    ``[] bool`` a round closes after the step; members: ``[N] bool`` its members; steps: ``[N] int32`` each node's
    steps after this one."""

    due: jax.Array
    closes: jax.Array
    members: jax.Array
    steps: jax.Array


class LocalInfo(NamedTuple):
    """What a local step did. Attributes: loss: ``[N]``; indices: ``[N, B] int32`` rows drawn."""

    loss: jax.Array
    indices: jax.Array


class Context(NamedTuple):
    """What a :class:`Communicator`'s hooks read of the tick they run in.

    Attributes:
      tick: the tick's row (:class:`Tick`): the nodes due, whether a round closes, its members, each node's steps.
      key: the state's key before the tick: a method's own draws come from it by name
        (:func:`jaxcomm.streams.named`), so they change no other draw.
      step: ``[] int32`` ticks taken before this one.
      settings: the run's :class:`RunSettings` (``settings.hyper[name]``: the method's swept values).
      info: in ``communicate``, the tick's :class:`LocalInfo` (``loss [N]``, 0 where a node held); None before.
      before: in ``communicate``, the state the tick started from (the nodes before their update: SGP's push-sum
        numerator moves by the update alone); None before.
      sizes: ``[M] int32`` the real size of every shard of the run's data (``data.shard_sizes``: one per node, or one
        per client of a run of clients, :attr:`RunConfig.num_shards`): FedAvg's sample counts, a cohort drawn by
        weight.
      ids: ``[N] int32`` the shard each node (slot) draws from this tick, as the communicator's ``shards`` hook said;
        None without one (node n draws from shard n).
    """

    tick: Tick
    key: jax.Array
    step: jax.Array
    settings: RunSettings
    info: LocalInfo | None = None
    sizes: jax.Array | None = None
    ids: jax.Array | None = None
    before: NodesState | None = None


@dataclasses.dataclass(frozen=True)
class Communicator:
    """What a method does beyond an isolated network's step, as a value: :meth:`Population.built_with` writes the
    step once from it (tick, draw, targets, gradients, update, communicate) and, at their own pace, holds every
    node that is neither due nor in a closing round, whatever the hooks did (:meth:`Population.hold`).

    Every hook is optional; a communicator of no hooks is an isolated network.

    Attributes:
      init: ``init(nodes, key) -> extra``: the method's own state (``state.extra``) from the initial nodes and the
        run's initialisation key (draw from it by name, :func:`jaxcomm.streams.named`).
      targets: ``targets(state, batch, ctx) -> tuple`` of per-node arguments ``[N, ...]`` of the nodes' loss, given
        after the targets (the loss given to :func:`nodes`; codistillation's peers' predictions), computed before
        the update.
      gradients: ``gradients(grads, state, ctx) -> (grads, state)``: between backward and update, the nodes'
        gradients (leaves ``[N, ...]``; an all-reduce, a compressor with its memory in ``state.extra``).
      communicate: ``communicate(state, ctx) -> state``: after the update (gossip, sparse averaging, a round's
        outer step). ``state.step`` counts the tick just taken.
      info: ``info(local_info, ctx) -> info``: the step's info (default the :class:`LocalInfo`, ``loss [N]`` and
        ``indices [N, B]``).
      shards: ``shards(state, ctx) -> ids [N] int32``: which shard of the run's data each of the N compiled nodes
        (slots) draws its minibatch from this tick (a cohort of K of M clients, :mod:`jaxcomm.federated`); the kit
        gathers those rows of ``data.shard_indices`` and ``data.shard_sizes`` before the draw, so slot i draws from
        shard ``ids[i]`` with its own keys, and every later hook reads the ids in ``ctx.ids``. None: node n draws
        from shard n (bit for bit the step without the hook).
      traffic: what the method sends (:class:`jaxcomm.ledger.Round` values), or a function of the run's ``hyper``.
      models_of: the models evaluated, ``models_of(state)`` (default every node's).
      readings: ``readings(state) -> {name: [] array}``: the method's own scalars, read at every evaluation into the
        record's ``readings`` (LGC's reconstruction error); None: none.
      same_start: every node starts from one model (synchronous SGD's, local SGD's).
      stacked: as :meth:`Population.built`.
      extra_per_node: ``state.extra`` is every node's own (leaves ``[N, ...]``: a node's public copy, its
        error-feedback memory), held with the nodes (:meth:`Population.hold`).
    """

    init: Callable | None = None
    targets: Callable | None = None
    gradients: Callable | None = None
    communicate: Callable | None = None
    info: Callable | None = None
    shards: Callable | None = None
    traffic: Sequence[ledger.Round] | Callable = ()
    models_of: Callable | None = None
    readings: Callable | None = None
    same_start: bool = False
    stacked: bool = True
    extra_per_node: bool = False


def mean_of_nodes(tree):
    """Leaves ``[N, ...] -> [...]``: the nodes' mean (what an all-reduce averages)."""
    return jax.tree.map(lambda leaf: jnp.mean(leaf, axis=0), tree)


def one_model(n: int, *, init, reduce, traffic, readings=None) -> Communicator:
    """The communicator of one model shared by the kit's ``n`` nodes (:mod:`jaxcomm.data_parallel`, :mod:`jaxcomm.lgc`):
    ``reduce(grads, state, ctx) -> (grad, state)`` turns the nodes' gradients (leaves ``[N, ...]``) into the one
    gradient every node applies; BatchNorm statistics are averaged after the update, like the gradients; every node
    starts from the same model, and the first node's is evaluated."""
    everyone = lambda tree: jax.tree.map(lambda leaf: jnp.broadcast_to(leaf, (n, *leaf.shape)), tree)  # noqa: E731

    def gradients(grads, state: NodesState, ctx: Context):
        grad, state = reduce(grads, state, ctx)
        return everyone(grad), state

    def batch_statistics(state: NodesState, ctx: Context):
        return state._replace(nodes=state.nodes._replace(model_state=everyone(mean_of_nodes(state.nodes.model_state))))

    return Communicator(init=init, gradients=gradients, communicate=batch_statistics, same_start=True,
                        traffic=traffic, readings=readings,
                        models_of=lambda state: jax.tree.map(lambda leaf: leaf[:1], state.nodes))  # once


@dataclasses.dataclass(frozen=True)
class Built:
    """One run's pure functions, what a method's ``build`` returns (:class:`jaxcomm.methods.Built`).

    Attributes:
      config: the run's config.
      init, step, predict, backend, step_loop, layout: as the driver reads them.
      schedule: what the method sends, as :class:`jaxcomm.ledger.Round` values, or a function of the run's
        ``hyper`` returning them (bytes that depend on a swept value); :attr:`traffic` reads it.
      evaluate_models: ``models_of(state)``, the models evaluated (None: every node's).
      family: the speed family the backend was chosen for.
      hyper: the run's own values of the method's hyperparameters (set by :func:`jaxcomm.methods.train` and
        :func:`jaxcomm.methods.sweep`).
      waits: what the nodes wait for (:class:`jaxcomm.pace.Waits`), for a run at its own pace.
      readings: as :class:`Communicator`.
      divergence: the driver's divergence watch (:data:`jaxcomm.driver.DIVERGENCE`).
      sample_bytes: 0: the kit's methods send parameters, gradients or logits, no inputs.
      sweep_mode: what a sweep runs under ``mode="auto"`` (:class:`jaxcomm.methods.Built`): "auto", or the mode a
        method measured faster for its runs.
    """

    config: RunConfig
    init: Callable
    step: Callable
    predict: Callable
    backend: str
    step_loop: str
    layout: driver.Layout | None
    schedule: tuple[ledger.Round, ...] | Callable = ()
    evaluate_models: Callable | None = None
    family: str | None = None
    hyper: Mapping[str, float] = dataclasses.field(default_factory=dict)
    waits: pace.Waits = pace.NOTHING
    readings: Callable | None = None
    divergence: float | None = driver.DIVERGENCE
    sample_bytes: int = 0
    sweep_mode: str = "auto"

    @property
    def traffic(self) -> tuple[ledger.Round, ...]:
        """The run's schedule, booked in the ledger and priced by the clock (:mod:`jaxcomm.clock`)."""
        return tuple(self.schedule(self.hyper) if callable(self.schedule) else self.schedule)

    def bytes_per_node_step(self) -> float:
        """Bytes each node sends per step in lockstep, on average over a round (:func:`jaxcomm.ledger.per_node_step`
        of :attr:`traffic`; a run's record, :func:`jaxcomm.methods.bytes_record`, counts what it actually sent)."""
        return ledger.per_node_step(self.traffic, self.config.num_nodes)

    def models_of(self, state: NodesState) -> Any:
        return state.nodes if self.evaluate_models is None else self.evaluate_models(state)

    def uplink_bytes(self, state: NodesState) -> None:
        """None: no asynchronous copies (the rounds' bytes are :attr:`traffic`'s)."""
        return None

    def booking(self, state, steps_done: int, data_model: str | None = None) -> ledger.Booking:
        """What the schedule has sent after ``steps_done`` steps (:func:`jaxcomm.ledger.book`); at its own pace, from
        the timeline: the rounds that closed, with their members, and each node's own steps
        (:func:`jaxcomm.ledger.book_at_own_pace`)."""
        rows = state.pace
        if rows is None or not steps_done:
            return ledger.book(self.traffic, self.config.num_nodes, steps_done)
        closes, members, steps = population.to_host((rows.closes[:steps_done], rows.members[:steps_done],
                                                     rows.steps[steps_done - 1]))
        return ledger.book_at_own_pace(self.traffic, steps, members[closes], waited_every=self.waits.every)

    def extended(self, cls: type, **fields) -> Built:
        """This value as ``cls`` (a subclass that adds a method's own fields), with ``fields`` set."""
        return cls(**{f.name: getattr(self, f.name) for f in dataclasses.fields(self)} | fields)


@dataclasses.dataclass(frozen=True)
class Population:
    """N classifier nodes on their shards, the backend chosen once; build with :func:`nodes`.

    Attributes:
      config: the run config.
      num_classes: C.
      init_node: ``init_node(key) -> NodeState`` of one node.
      train_nodes: the lifted train step ``(learning_rate [], nodes, images [N, B, ...], targets [N, B, C], *extra,
        keys [N]) -> (nodes, (loss [N], aux))`` (:class:`TunedStep`).
      predict: ``predict(nodes, images uint8 [M, H, W, C]) -> probs [N, M, C]``, jitted.
      backend, step_loop, family: the chosen lift, step loop and speed family.
      num_params: P of one node's parameters.
      node_values: parameters and model state of one node (what a copy of a node's model holds).
      graph_fn: the config's graph as a function of ``(key, step)`` (:func:`graph_of`).
      edges: directed edges of the graph of the config's seed at step 0 (of every seed's, for the named
        topologies but "random" with a varying out-degree: none has one).
      waits: what the method's nodes wait for (:class:`jaxcomm.pace.Waits`): the rounds of a lockstep run's
        :meth:`tick`, and of a run at its own pace (:func:`jaxcomm.pace.timeline`).
      held_nodes: ``train_nodes`` at its own pace, ``(due [N], *train_nodes' arguments)``: the nodes not due held
        and, where the lift allows, not computed (:func:`jaxcomm.population.lift_held`).
      node_step: one node's step in halves (:class:`TunedStep`): a :class:`Communicator`'s ``gradients`` hook runs
        between them.
    """

    config: RunConfig
    num_classes: int
    init_node: Callable
    train_nodes: Callable
    predict: Callable
    backend: str
    step_loop: str
    family: str
    num_params: int
    node_values: int
    graph_fn: topology.GraphFn
    edges: int
    waits: pace.Waits = pace.NOTHING
    held_nodes: Callable | None = None
    node_step: TunedStep | None = None

    @property
    def layout(self) -> driver.Layout | None:
        """How the "eager" and "dispatch" step loops hold node states (:func:`jaxcomm.classifier.layout_for`)."""
        return classifier.layout_for(self.backend)

    def init(self, key: jax.Array, *, extra: Callable | None = None, same_start: bool = False) -> NodesState:
        """The initial state from a run's key: every node its own model (an isolated network's initialisation), or
        with ``same_start`` every node the same one (synchronous SGD's); ``extra(nodes) -> pytree``: the method's
        own state."""
        keys = streams.init_keys(key)
        if same_start:
            nodes = population.stack([self.init_node(keys.nodes)] * self.config.num_nodes)
        else:
            nodes = population.init_population(self.init_node, keys.nodes, self.config.num_nodes,
                                               backend=self.backend)
        graph = jnp.asarray(self.graph_fn(keys.graph, jnp.zeros((), jnp.int32)), bool)
        return NodesState(nodes, jnp.zeros((), jnp.int32), keys.run, graph, None if extra is None else extra(nodes))

    def draw(self, state: NodesState, data: classifier.ShardData) -> tuple[streams.StepKeys, classifier.Minibatch]:
        """A step's named keys and every node's minibatch from its own shard (:func:`jaxcomm.classifier.minibatch`)."""
        keys = streams.step_keys(state.key, augment=self.config.augment)
        return keys, classifier.minibatch(keys, data, self.config.batch_size, self.num_classes)

    def tick(self, state: NodesState) -> Tick:
        """This step's row: the nodes due and the round that closes (read before the step). At its own pace, the
        timeline's; in lockstep, every node, and a round of every node each ``waits.every`` steps."""
        if state.pace is not None:
            rows = state.pace
            return Tick(rows.due[state.step], rows.closes[state.step], rows.members[state.step],
                        rows.steps[state.step])
        n, every = self.config.num_nodes, self.waits.every
        closes = (state.step + 1) % every == 0 if every else jnp.zeros((), bool)
        return Tick(jnp.ones(n, bool), closes, jnp.broadcast_to(closes, (n,)), jnp.broadcast_to(state.step + 1, (n,)))

    def train(self, state: NodesState, data: classifier.ShardData, keys: streams.StepKeys,
              batch: classifier.Minibatch, *extra: jax.Array) -> tuple[NodesState, LocalInfo]:
        """Every node's gradient step on ``batch`` at the run's learning rate (``data.settings``; ``extra``:
        per-node arguments of a method's own loss, between the targets and the key); the step counted and the key
        advanced. At its own pace (``state.pace``) only the nodes due change: the others hold."""
        args = self._train_args(state, data, keys, batch, extra)
        nodes, (loss, _) = population.state_and_aux(  # at its own pace the nodes not due hold (their loss 0)
            self.train_nodes(*args) if state.pace is None else self.held_nodes(state.pace.due[state.step], *args))
        return state._replace(nodes=nodes, step=state.step + 1, key=keys.next), LocalInfo(loss, batch.indices)

    def _train_args(self, state: NodesState, data: classifier.ShardData, keys: streams.StepKeys,
                    batch: classifier.Minibatch, extra: tuple) -> tuple:
        """The lifted train step's arguments: the learning rate, the nodes, the batch, ``extra``, a key per node."""
        return (data.settings.learning_rate, state.nodes, batch.images, batch.targets, *extra,
                jax.random.split(keys.nodes, self.config.num_nodes))

    def local_step(self, state: NodesState, data: classifier.ShardData) -> tuple[NodesState, LocalInfo]:
        """Every node's step on a minibatch of its own shard: an isolated network's draws and update."""
        keys, batch = self.draw(state, data)
        return self.train(state, data, keys, batch)

    @staticmethod
    def params(state: NodesState) -> Any:
        """The stacked parameters (leaves ``[N, ...]``)."""
        return state.nodes.params

    @staticmethod
    def flat_params(state: NodesState) -> jax.Array:
        """Every node's parameters as one float32 vector: ``[N, P]`` (the order of
        :func:`jax.flatten_util.ravel_pytree`); the nodes stacked (the default of :meth:`built`)."""
        return jax.vmap(lambda params: ravel_pytree(params)[0])(state.nodes.params)

    def with_flat_params(self, state: NodesState, flat: jax.Array) -> NodesState:
        """``state`` with the nodes' parameters replaced by ``flat [N, P]`` (:meth:`flat_params`'s layout)."""
        unravel = ravel_pytree(population.node(state.nodes.params, 0))[1]
        return self.with_params(state, jax.vmap(unravel)(flat))

    @staticmethod
    def with_params(state: NodesState, params: Any, model_state: Any = None) -> NodesState:
        """``state`` with the nodes' parameters (and model state) replaced."""
        nodes = state.nodes._replace(params=params)
        return state._replace(nodes=nodes if model_state is None else nodes._replace(model_state=model_state))

    def hold(self, before: NodesState, after: NodesState, tick: Tick, *, extra_per_node: bool = False
             ) -> NodesState:
        """``after`` with every node that is neither due nor in a round closing at ``tick`` as it was in ``before``
        (and its own ``extra``, with ``extra_per_node``), at its own pace; in lockstep every node is due and
        ``after`` is returned as it is. The kit's guarantee: a method cannot move a node that is not stepping,
        whatever its step did."""
        if after.pace is None:
            return after
        keep = tick.due | (tick.closes & tick.members)
        held = after._replace(nodes=population.where(keep, after.nodes, before.nodes))
        return held._replace(extra=population.where(keep, after.extra, before.extra)) if extra_per_node else held

    def context(self, state: NodesState, data: classifier.ShardData) -> Context:
        """The :class:`Context` of the tick ``state`` is about to take."""
        return Context(self.tick(state), state.key, state.step, data.settings, sizes=data.shard_sizes)

    @staticmethod
    def slots_data(data: classifier.ShardData, ids: jax.Array) -> classifier.ShardData:
        """``data`` whose N shards are the rows ``ids [N] int32`` of its M (``shard_indices [N, S]``, ``shard_sizes
        [N]``): slot i draws from shard ``ids[i]`` (a :class:`Communicator`'s ``shards`` hook)."""
        return data._replace(shard_indices=data.shard_indices[ids], shard_sizes=data.shard_sizes[ids])

    def train_with(self, gradients: Callable, state: NodesState, data: classifier.ShardData, keys: streams.StepKeys,
                   batch: classifier.Minibatch, ctx: Context, *extra: jax.Array) -> tuple[NodesState, LocalInfo]:
        """:meth:`train` with ``gradients(grads, state, ctx) -> (grads, state)`` between every node's backward pass
        and its update (a :class:`Communicator`'s hook): every node is computed; at its own pace the kit's
        :meth:`hold` keeps the ones not due."""
        args = self._train_args(state, data, keys, batch, extra)
        axes = (None, *([0] * (len(args) - 1)))
        grads, model_state, (loss, _) = population.lift(self.node_step.gradients, backend=self.backend,
                                                        in_axes=axes)(*args)
        grads, state = gradients(grads, state, ctx)
        args = (args[0], state.nodes, *args[2:])
        nodes = jax.vmap(self.node_step.update, in_axes=(axes, 0, 0))(args, grads, model_state)
        return state._replace(nodes=nodes, step=state.step + 1, key=keys.next), LocalInfo(loss, batch.indices)

    def built_with(self, communicator: Communicator) -> Built:
        """A method's :class:`Built` from its :class:`Communicator`: the step written once here.

        One tick: its :class:`Context` (read before the step), every node's minibatch from its own shard (an
        isolated network's draws; with a ``shards`` hook, slot i's from shard ``ids[i]``), the communicator's
        ``targets``, every node's backward pass, its ``gradients``,
        the update (the nodes not due held), its ``communicate``; then the kit holds every node that is neither due
        nor in a closing round (:meth:`hold`)."""
        c = communicator

        def step(state: NodesState, data: classifier.ShardData):
            ctx, before = self.context(state, data), state
            if c.shards is not None:  # the slots draw from the shards the communicator names (a cohort of clients)
                ctx = ctx._replace(ids=c.shards(state, ctx))
                data = self.slots_data(data, ctx.ids)
            keys, batch = self.draw(state, data)
            extra = () if c.targets is None else tuple(c.targets(state, batch, ctx))
            if c.gradients is None:
                state, info = self.train(state, data, keys, batch, *extra)
            else:
                state, info = self.train_with(c.gradients, state, data, keys, batch, ctx, *extra)
            if c.communicate is not None:
                state = c.communicate(state, ctx._replace(info=info, before=before))
            return state, info if c.info is None else c.info(info, ctx)

        def init(key: jax.Array) -> NodesState:
            state = self.init(key, same_start=c.same_start)
            return state if c.init is None else state._replace(extra=c.init(state.nodes, streams.init_keys(key).nodes))

        return self._built(step, init, traffic=c.traffic, models_of=c.models_of, stacked=c.stacked,
                           extra_per_node=c.extra_per_node, readings=c.readings)

    def built(self, step: Callable, *, traffic: Sequence[ledger.Round] | Callable = (), extra: Callable | None = None,
              same_start: bool = False, models_of: Callable | None = None, stacked: bool = True,
              extra_per_node: bool = False) -> Built:
        """A method's :class:`Built` from its ``step(state, data) -> (state, info)``: the escape hatch beside
        :meth:`built_with`, for a step of its own. At its own pace the kit still holds every node that is neither
        due nor in a closing round after ``step`` (:meth:`hold`).

        Args:
          step: the method's step; ``info`` has ``loss [N]`` and ``indices [N, B]``.
          traffic: what it sends, as :class:`jaxcomm.ledger.Round` values, or a function of the run's ``hyper``
            returning them.
          extra, same_start: as :meth:`init`.
          models_of: the models evaluated (default every node's).
          stacked: keep node states stacked in the "eager" and "dispatch" step loops, as a step that reads all nodes
            together every step needs (averaging, peers' predictions, flat parameters); False lets the "loop" and
            "unrolled" lifts hold them apart between steps, faster for a step that reads them together only now
            and then (local SGD's round ends).
          extra_per_node: as :class:`Communicator`.
        """
        return self._built(step, lambda key: self.init(key, extra=extra, same_start=same_start), traffic=traffic,
                           models_of=models_of, stacked=stacked, extra_per_node=extra_per_node)

    def _built(self, step: Callable, init: Callable, *, traffic: Sequence[ledger.Round] | Callable,
               models_of: Callable | None, stacked: bool, extra_per_node: bool,
               readings: Callable | None = None) -> Built:
        def held_step(state: NodesState, data: classifier.ShardData):
            if state.pace is None:  # lockstep: every node steps
                return step(state, data)
            after, info = step(state, data)
            return self.hold(state, after, self.tick(state), extra_per_node=extra_per_node), info

        return Built(self.config, init, held_step, self.predict, self.backend, self.step_loop,
                     None if stacked else self.layout, traffic if callable(traffic) else tuple(traffic), models_of,
                     self.family, waits=self.waits, readings=readings)


@dataclasses.dataclass(frozen=True)
class TunedStep:
    """One node's :class:`jaxcomm.population.TrainStep` at a run's traced learning rate, in the halves
    :func:`jaxcomm.population.lift_train` takes: ``(learning_rate, node, *batch)``.

    Attributes:
      step_for: ``step_for(learning_rate) -> TrainStep`` (its optimiser built with the traced value).
    """

    step_for: Callable[[jax.Array], population.TrainStep]

    def gradients(self, learning_rate: jax.Array, node, *batch):
        return self.step_for(learning_rate).gradients(node, *batch)

    def update(self, args: tuple, grads, model_state):
        learning_rate, node, *batch = args
        return self.step_for(learning_rate).update((node, *batch), grads, model_state)

    def __call__(self, *args):
        grads, model_state, out = self.gradients(*args)
        return self.update(args, grads, model_state), out


def nodes(config: RunConfig, model: nn.Module, *, image_shape: tuple[int, ...], num_classes: int,
               optimizer: optax.GradientTransformation | Callable | None = None, loss: Callable | None = None,
               extra_args: Sequence[jax.ShapeDtypeStruct] = (), static_graph: bool = False,
               waits: pace.Waits = pace.NOTHING) -> Population:
    """N nodes of ``model`` (a Flax classifier returning ``(logits, features)``) on the config's shards.

    Args:
      config: a :class:`RunConfig` (or a config that extends it).
      model: every node's classifier.
      image_shape: ``(H, W, C)``; num_classes: C.
      optimizer: each node's optimiser (default Adam at the run's learning rate, data of the step so a sweep may
        vary it, and the config's schedule); a function of the learning rate (``optax.sgd``, ``functools.partial(
        optax.sgd, momentum=0.9)``) is given the run's rate and schedule the same way; a transformation is used as
        it is (the config's learning rate unread).
      loss: one node's ``loss(params, model_state, images uint8 [B, ...], targets [B, C], *extra, key) -> (loss [],
        (model_state, aux))`` (default the cross-entropy, :func:`jaxcomm.classifier.classifier_loss`, in the
        config's compute dtype).
      extra_args: shapes of one node's ``extra`` arguments of ``loss``, for the backend chooser.
      static_graph: the method reads one graph for the whole run (``state.graph``): a topology that changes over
        time is refused, naming the field.
      waits: what the nodes wait for (:class:`jaxcomm.pace.Waits`): the rounds :meth:`Population.tick` reports.
    """
    config.check_devices()
    waits.check(config.num_nodes)
    node_loss = loss or classifier.classifier_loss(model, config.compute_dtype)
    make = optimizer if callable(optimizer) else optax.adam  # a transformation (not callable) is used as it is
    optimizer_for = ((lambda lr: optimizer) if optimizer is not None and not callable(optimizer)
                     else (lambda lr: make(classifier.learning_rate(config, lr))))
    tuned = TunedStep(lambda lr: population.make_train_step(node_loss, optimizer_for(lr)))
    init_node = classifier.classifier_init(model, optimizer_for(config.learning_rate), image_shape)
    backend, step_loop, family = classifier.choose_backend(
        config, tuned.step_for(config.learning_rate), init_node,
        classifier.node_args(config.batch_size, image_shape, num_classes, *extra_args))
    abstract = jax.eval_shape(init_node, jax.random.PRNGKey(0))
    graph_fn, dynamic = graph_of(config)
    if static_graph:
        require(not dynamic, "topology", "a static graph (this method reads one graph for the whole run)",
                config.topology)
    node_predict = classifier.classifier_predict(model, config.compute_dtype)
    predict = compiling.nestable(population.lift(node_predict, backend=backend, in_axes=(0, None)))
    in_axes = (None, *([0] * (4 + len(extra_args))))  # the learning rate, the node, images, targets, extra, key
    train_nodes = population.lift_train(tuned, backend=backend, in_axes=in_axes)
    return Population(config, num_classes, init_node, train_nodes, predict,
                      backend, step_loop, family, bandwidth.num_params(abstract.params),
                      bandwidth.num_params((abstract.params, abstract.model_state)), graph_fn,
                      int(first_graph(config).sum()), waits,
                      population.lift_held(tuned, backend=backend, in_axes=in_axes, held=1, lifted=train_nodes),
                      tuned)
