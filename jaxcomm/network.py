"""A network of classifier nodes exchanging outputs: the engine of thesis ch. 2.

One jitted :func:`Network.step` advances all N nodes by one training step of
Algorithm 2:

1. every node draws ``consume ~ Bernoulli(p_c)`` and ``broadcast ~ Bernoulli(p_b)``;
2. consuming nodes pop their oldest inbox message (an empty inbox falls back to
   a local minibatch and is counted), the others sample a local minibatch from
   their own shard;
3. every node takes one gradient step (per-node code lifted to N by
   :func:`jaxcomm.population.lift`): cross-entropy on true labels for local
   data; for consumed data, ``consumed_weight`` x the loss of the content
   exchanged — cross-entropy against received true labels or soft labels
   ``softmax(logits / tau)`` (eq. 2.2.1-2.2.2), or MSE to received top-level
   features (eq. 2.2.3);
4. broadcasting nodes push what they just trained on (indices + their payload)
   to their out-neighbours' inboxes, consumed data included unless
   ``rebroadcast=False``.

Nodes only ever gather images of their own shard or of a message they popped.

The extension points are values:

* the graph: a bool ``[N, N]`` array (``adj[i, j]``: i sends to j) or a function
  ``(key, step) -> [N, N]`` (:mod:`jaxcomm.topology`), or the config's named topology;
* the message content: an :class:`jaxcomm.exchange.Exchange`, or the config's named content;
* the node: any Flax classifier returning ``(logits, features)``, or a
  :class:`NodeProgram` (init, train step, predict) written for ONE node, such as
  the unsupervised nodes of :mod:`jaxcomm.unsupervised`.

The step is composed of small parts (:func:`failure_process`, :func:`augmentation`,
:func:`gossip`, the inbox's pop and push) and :func:`train_network` runs it with
the one driver, :func:`jaxcomm.driver.train`.

References:
  Lacaille (2018), §2.2.2-2.2.3, Algorithm 2.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable, Mapping, Sequence
from typing import Any, NamedTuple

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import optax

from jaxcomm import (
    bandwidth,
    classifier,
    clock,
    compiling,
    driver,
    inbox,
    kit,
    ledger,
    methods,
    pace,
    population,
    streams,
    topology,
    validation,
)
from jaxcomm import exchange as exchanges
from jaxcomm.checkpoint import Checkpointer
from jaxcomm.classifier import (  # noqa: F401  the kit's names, re-exported where research code found them
    NODES_APART,
    apply_classifier,
    augmentation,
    classifier_init,
    classifier_predict,
    evaluate,
    feature_dim,
    flip_and_crop,
    in_dtype,
    layout_for,
    learning_rate,
    local_batches,
    predict_in_batches,
    progress_postfix,
    shards_of,
    summarize_info,
)
from jaxcomm.data import ImageDataset
from jaxcomm.exchange import CONTENTS, cross_entropy
from jaxcomm.models import to_unit_float
from jaxcomm.validation import is_int, is_real, named_fields, require

INBOX_ON_FAILURE = ("keep", "lose")
TOPOLOGIES, PARTITIONS, LR_SCHEDULES = kit.TOPOLOGIES, kit.PARTITIONS, kit.LR_SCHEDULES
COMPUTE_DTYPES = kit.COMPUTE_DTYPES
graph_of = kit.graph_of  # the kit's, where research code found it


@named_fields
@dataclasses.dataclass(frozen=True)
class OutputSharingConfig:
    """Output sharing's own fields (Algorithm 2, its inbox, failures and gossip); :class:`NetworkConfig` is these
    and a :class:`jaxcomm.kit.RunConfig`.

    Attributes:
      broadcast_prob: p_b, chance a node broadcasts each step.
      consume_prob: p_c, chance a node trains on its inbox instead of local data.
      rebroadcast: whether consumed data may be broadcast again (the thesis: yes);
        if False, a node only broadcasts minibatches of its own shard.
      content: what a message carries, one of :data:`jaxcomm.exchange.CONTENTS`
        (:func:`jaxcomm.exchange.named`); an exchange passed to
        :func:`make_network` by value replaces it.
      temperature: tau of the soft labels made from received logits.
      consumed_weight: scale of the loss on consumed data.
      inbox_capacity: K, messages an inbox holds.
      overflow: one of :data:`jaxcomm.inbox.OVERFLOW_POLICIES`.
      failure_prob: q, chance per step that an up node goes down (no training,
        no sending, no receiving until it comes back).
      failure_steps: mean steps a failed node stays down (it comes back with
        probability ``1 / failure_steps`` each step); a node is down a fraction
        ``q D / (1 + q D)`` of the time.
      failure_schedule: fixed outages ``((node, first_step, end_step), ...)``, down
        for ``first_step <= step < end_step``, on top of the random ones.
      inbox_on_failure: "keep" (a failed node finds its inbox as it left it) or
        "lose" (its pending messages are dropped and counted as such).
      gossip_every: k > 0 makes every node replace its parameters and model state,
        every k steps, by the average of its own and its in-neighbours' (gossip
        averaging over the same graph, :func:`jaxcomm.topology.mixing_matrix`);
        0 never averages. Optimiser states stay local.
    """

    broadcast_prob: float = 0.5
    consume_prob: float = 0.5
    rebroadcast: bool = True
    content: str = "true_labels"
    temperature: float = 1.0
    consumed_weight: float = 1.0
    inbox_capacity: int = 16
    overflow: str = "drop_oldest"
    failure_prob: float = 0.0
    failure_steps: float = 100.0
    failure_schedule: tuple = ()
    inbox_on_failure: str = "keep"
    gossip_every: int = 0

    def __post_init__(self):
        for name in ("broadcast_prob", "consume_prob"):
            value = getattr(self, name)
            require(is_real(value) and 0.0 <= value <= 1.0, name, "a probability in [0, 1]", value)
        require(isinstance(self.rebroadcast, bool), "rebroadcast", "True or False", self.rebroadcast)
        require(self.content in CONTENTS, "content", f"one of {CONTENTS}", self.content)
        require(is_real(self.temperature) and self.temperature > 0, "temperature", "a number > 0", self.temperature)
        require(is_real(self.consumed_weight) and self.consumed_weight >= 0, "consumed_weight", "a number >= 0",
                self.consumed_weight)
        inbox.validate(self.inbox_capacity, self.overflow)
        require(is_real(self.failure_prob) and 0.0 <= self.failure_prob < 1.0, "failure_prob",
                "a probability in [0, 1)", self.failure_prob)
        require(is_real(self.failure_steps) and self.failure_steps >= 1, "failure_steps", "a number >= 1",
                self.failure_steps)
        self.check_schedule(None)
        require(self.inbox_on_failure in INBOX_ON_FAILURE, "inbox_on_failure", f"one of {INBOX_ON_FAILURE}",
                self.inbox_on_failure)
        require(is_int(self.gossip_every) and self.gossip_every >= 0, "gossip_every",
                "an integer >= 0 (0: no gossip averaging)", self.gossip_every)

    def check_schedule(self, num_nodes: int | None) -> None:
        """Raises ValueError naming ``failure_schedule`` unless it is integer triples of a node (below
        ``num_nodes`` where given), a first step and an end step >= the first."""
        top = "N - 1" if num_nodes is None else num_nodes - 1
        require(isinstance(self.failure_schedule, tuple) and all(
            isinstance(o, tuple) and len(o) == 3 and all(is_int(v) for v in o)
            and 0 <= o[0] < (num_nodes or o[0] + 1) and 0 <= o[1] <= o[2] for o in self.failure_schedule),
            "failure_schedule", f"a tuple of (node in [0, {top}], first_step, end_step >= first_step) integer triples",
            self.failure_schedule)

    @property
    def has_failures(self) -> bool:
        return self.failure_prob > 0 or bool(self.failure_schedule)


SHARING_FIELDS = tuple(f.name for f in dataclasses.fields(OutputSharingConfig))


@named_fields
@dataclasses.dataclass(frozen=True)
class NetworkConfig(OutputSharingConfig, kit.RunConfig):
    """A network of communicating classifier nodes: the kit's :class:`jaxcomm.kit.RunConfig` (nodes, graph, batch,
    optimiser, schedule, shards, backend, steps, seed) and output sharing's own :class:`OutputSharingConfig`
    (p_b, p_c, content, inbox, failures, gossip), one flat value validated on construction; every field is
    documented on the class it comes from. :attr:`run` and :attr:`sharing` give the two parts apart, and
    :func:`as_network_config` makes one from a run config."""

    def __post_init__(self):
        kit.RunConfig.__post_init__(self)
        OutputSharingConfig.__post_init__(self)
        self.check_schedule(self.num_nodes)

    @property
    def run(self) -> kit.RunConfig:
        """The kit's part: what every method reads."""
        return kit.run_config(self)

    @property
    def sharing(self) -> OutputSharingConfig:
        """Output sharing's own part."""
        return OutputSharingConfig(**{name: getattr(self, name) for name in SHARING_FIELDS})


def as_network_config(config: kit.RunConfig, **sharing) -> NetworkConfig:
    """``config`` as a :class:`NetworkConfig` (its own fields kept), with ``sharing`` fields replaced; a run config
    gets output sharing's defaults."""
    if isinstance(config, NetworkConfig):
        return config.replace(**sharing) if sharing else config
    return NetworkConfig(**{name: getattr(config, name) for name in kit.RUN_FIELDS}, **sharing)


SHARING_SETTINGS = ("broadcast_prob", "consume_prob", "consumed_weight", "failure_prob", "failure_steps", "temperature")
"""Output sharing's numbers that its step reads as data (``settings.hyper[name]``, under their config names), so a
sweep may vary them run by run under one compiled step: p_b, p_c, the scale of the loss on consumed data, q, D (mean
steps a failed node stays down) and tau of the soft labels of the named content "logits"."""


def settings(config: NetworkConfig) -> kit.RunSettings:
    """A config's :class:`jaxcomm.kit.RunSettings`, float32 scalars: the kit's one type of the numbers a step reads
    as data, the learning rate and, as ``hyper``, :data:`SHARING_SETTINGS`."""
    return kit.settings(config, {name: getattr(config, name) for name in SHARING_SETTINGS})


NetworkData = classifier.ShardData  # the arrays a network step reads (images, labels, shards, RunSettings)


class NetworkState(NamedTuple):
    """Everything that changes during training.

    Attributes:
      nodes: stacked :class:`jaxcomm.population.NodeState`, leaves ``[N, ...]``
        (within a chunk of the "eager" step loop, :class:`jaxcomm.population.Unstacked`:
        see :data:`NODES_APART`).
      inbox: :class:`jaxcomm.inbox.InboxState`, or None for content "none".
      adj: ``[N, N] bool`` current graph, ``adj[i, j]`` = i sends to j.
      step: ``[] int32`` steps taken.
      key: PRNG key of the next step.
      graph_key: PRNG key of the time-varying graph.
      up: ``[N] bool`` nodes not down by a random failure.
      alive: ``[N] bool`` nodes that took part in the last step (up and not
        scheduled down): the reachable nodes of a collective decision.
      param_copies: ``[] int32`` parameter messages gossip averaging has sent (one per live edge and
        round), booked in the byte ledger (:func:`booking`).
      transit: messages in flight (:class:`jaxcomm.inbox.Transit`) of a network built for a cluster
        (``make_network(cluster=)``); None: messages arrive at once.
      payload_sent: ``[] int32`` payload bytes of every message copy sent, each counted from what it carried, for
        an exchange with ``content_bytes`` (:class:`jaxcomm.exchange.Exchange`); None otherwise.
      pace: the timeline's rows of a run at its own pace (:class:`jaxcomm.pace.Rows`), within its step only (the run's
        data, ``ShardData.pace``: never carried, checkpointed or swept): ``step`` counts ticks, and a
        node not due neither trains, consumes nor broadcasts (it still receives); None: lockstep.
      copies_per_tick: ``[T] int32`` message copies sent at each tick, on a cluster with a shared bottleneck at its
        own pace (they share its bandwidth); None otherwise.
    """

    nodes: population.NodeState
    inbox: inbox.InboxState | None
    adj: jax.Array
    step: jax.Array
    key: jax.Array
    graph_key: jax.Array
    up: jax.Array
    alive: jax.Array
    param_copies: jax.Array
    transit: inbox.Transit | None = None
    payload_sent: jax.Array | None = None
    pace: pace.Rows | None = None
    copies_per_tick: jax.Array | None = None


class StepInfo(NamedTuple):
    """What one network step did, per node.

    Attributes:
      loss: ``[N]`` the loss each node minimised.
      consumed: ``[N] bool`` trained on a popped message.
      broadcast: ``[N] bool`` pushed to its neighbours.
      indices: ``[N, B] int32`` sample indices each node trained on.
      source: ``[N] int32`` sender of the consumed message, -1 for local data.
      alive: ``[N] bool`` took part in the step (not failed).
    """

    loss: jax.Array
    consumed: jax.Array
    broadcast: jax.Array
    indices: jax.Array
    source: jax.Array
    alive: jax.Array


class NodeProgram(NamedTuple):
    """ONE node's code, written once; :func:`make_network` lifts it to N nodes.

    Attributes:
      init: ``init(key) -> NodeState`` of one node (any pytrees as params, model
        state and optimiser state).
      train: ``train(state, images [B, H, W, C] uint8, local_targets [B, C],
        payload [B, D], consumed [] bool, key) -> (state, (loss [], outgoing
        [B, D]))``: one training step. ``consumed`` says the images came from a
        popped message whose sender's payload is ``payload``; ``outgoing`` is
        what the node broadcasts about the batch it just trained on. Programs
        without labels ignore ``local_targets``.
      predict: ``predict(state, images [M, H, W, C] uint8) -> [M, ...]``: class
        probabilities of a classifier, features of an unsupervised model.
      payload_dim: D, the width of a message's payload.
      family: the speed family of :func:`jaxcomm.speed.choose`; None measures it
        from what ``train`` computes (:func:`jaxcomm.speed.family_of`).
      divergence: the driver's divergence watch for this program's loss, a multiple of the
        mean loss at a run's first step (None: only non-finite losses stop a run). A loss that
        scores a game rather than progress, as a GAN's does, should not be watched.
    """

    init: Callable[[jax.Array], population.NodeState]
    train: Callable[..., tuple[population.NodeState, tuple[jax.Array, jax.Array]]]
    predict: Callable[[population.NodeState, jax.Array], jax.Array]
    payload_dim: int
    family: str | None = None
    divergence: float | None = driver.DIVERGENCE


def classifier_program(config: NetworkConfig, model: nn.Module, *, image_shape: tuple[int, ...], num_classes: int,
                       exchange: exchanges.Exchange | None = None, tuned: kit.RunSettings | None = None) -> NodeProgram:
    """The thesis' supervised node: cross-entropy on local labels, the exchange's loss on consumed data.

    Args:
      config: reads ``consumed_weight``, ``learning_rate``, ``lr_schedule``, ``compute_dtype``
        and (for its horizon) ``num_steps``; and ``content``/``temperature`` if no exchange is given.
      model: a Flax classifier ``model(x [B, H, W, C], train=bool) -> (logits
        [B, C], features [B, F])``; dropout, if any, uses the "dropout" rng.
      image_shape: ``(H, W, C)`` of one image.
      num_classes: C.
      exchange: what messages carry (default :func:`jaxcomm.exchange.named` of the config).
      tuned: :func:`settings` whose ``learning_rate`` and ``hyper`` ``consumed_weight`` and ``temperature``
        replace the config's (traced values inside a step).
    """
    tuned = tuned or settings(config)
    exchange = exchange or exchanges.named(config.content, temperature=tuned.hyper["temperature"])
    optimizer = optax.adam(learning_rate(config, tuned.learning_rate))
    payload_dim = int(exchange.payload_dim(num_classes, feature_dim(model, image_shape)))
    apply = in_dtype(functools.partial(apply_classifier, model), config.compute_dtype)
    keyed = exchange.sends and validation.takes_keyword(exchange.outgoing, "key")

    def loss_fn(params, model_state, images, local_targets, payload, consumed, key):
        (logits, features), model_state = apply(params, model_state, to_unit_float(images), train=True, key=key)
        loss = cross_entropy(logits, local_targets)
        if not exchange.sends:
            return loss, (model_state, payload)
        received = tuned.hyper["consumed_weight"] * exchange.loss(logits, features, payload)
        loss = jnp.where(consumed, received, loss)
        # What this node would broadcast about the batch it just trained on.
        outgoing = exchange.outgoing(logits, features, local_targets, payload, consumed,
                                     **({"key": streams.named(key, "outgoing")} if keyed else {}))
        return loss, (model_state, jax.lax.stop_gradient(outgoing))

    return NodeProgram(classifier_init(model, optimizer, image_shape), population.make_train_step(loss_fn, optimizer),
                       classifier_predict(model, config.compute_dtype), payload_dim,
                       divergence=driver.DIVERGENCE if exchange.watched else None)


@dataclasses.dataclass(frozen=True)
class _SettingsTrain:
    """A classifier node's :class:`jaxcomm.population.TrainStep` under a run's (traced) settings, in the halves
    :func:`jaxcomm.population.lift_train` takes: ``(settings, node, images, local_targets, payload, consumed, key[,
    alive])``, a failed node keeping its state."""

    program_for: Callable[[kit.RunSettings], NodeProgram]
    failures: bool

    def gradients(self, tuned: kit.RunSettings, node, *args):
        return self.program_for(tuned).train.gradients(node, *(args[:-1] if self.failures else args))

    def update(self, args: tuple, grads, model_state):
        tuned, node, *batch = args
        new = self.program_for(tuned).train.update((node, *batch), grads, model_state)
        if not self.failures:
            return new
        return jax.tree_util.tree_map(lambda a, b: jnp.where(batch[-1], a, b), new, node)

    def __call__(self, *args):
        grads, model_state, out = self.gradients(*args)
        return self.update(args, grads, model_state), out


@dataclasses.dataclass(frozen=True)
class Network:
    """Pure functions of a network of nodes; build with :func:`make_network`.

    Attributes:
      config: the validated configuration.
      init: ``init(key) -> NetworkState``.
      step: ``step(state, data) -> (state, StepInfo)``, pure; jit it (unless ``step_loop`` is "eager").
      predict: ``predict(nodes, images [M, H, W, C] uint8) -> [N, M, ...]`` (class
        probabilities of classifier nodes), compiled (under "eager", one node at a time).
      payload_dim: D, the width of a message's payload.
      backend: the lift's backend ("auto" resolved).
      step_loop: "scan", "dispatch" or "eager" ("auto" resolved).
      exchange: what messages carry.
      message_bytes: bytes of one message on the wire under the config's ``data_model``
        (:func:`jaxcomm.exchange.message_bytes`; uint8 images).
      family: the speed family the backend was chosen for.
      divergence: the node program's divergence watch (:attr:`NodeProgram.divergence`), what
        :func:`train_network` stops on unless told otherwise.
      sample_bytes: bytes of one input as held (a uint8 image), what a message's inputs cost.
      node_values: values a node holds (parameters and model state), what gossip sends per edge.
      delays: ``[N, N] int32`` receiver steps a message spends in flight on each edge, on the cluster the
        network was built for (:func:`jaxcomm.clock.delivery_steps`); at its own pace, ticks; None: none.
      own_pace: built to train at its own pace (:mod:`jaxcomm.pace`).
      waits: what its nodes wait for: nothing (Algorithm 2).
      link_seconds: at its own pace, ``[N, N] float32`` seconds a message takes on each edge
        (:func:`jaxcomm.clock.delivery_seconds`); None otherwise.
      bottleneck: at its own pace, the cluster's shared bottleneck (or None).
      hyper: no hyperparameters of a method (the network's are its config's).
      readings: None: no readings of its own.
      sweep_mode: "auto": a sweep of networks runs as the device decides (:func:`jaxcomm.sweep.choose_mode`).
    """

    config: NetworkConfig
    init: Callable[[jax.Array], NetworkState]
    step: Callable[[NetworkState, NetworkData], tuple[NetworkState, StepInfo]]
    predict: Callable[[population.NodeState, jax.Array], jax.Array]
    payload_dim: int
    backend: str
    step_loop: str
    exchange: exchanges.Exchange
    message_bytes: int
    family: str
    divergence: float | None
    sample_bytes: int = 0
    node_values: int = 0
    delays: np.ndarray | None = None
    own_pace: bool = False
    waits: pace.Waits = pace.NOTHING
    link_seconds: jax.Array | None = None
    bottleneck: Any = None
    hyper: Mapping[str, float] = dataclasses.field(default_factory=dict)
    readings: Callable | None = None
    sweep_mode: str = "auto"

    @property
    def layout(self) -> driver.Layout | None:
        """How the "eager" and "dispatch" step loops hold the state within a chunk (:func:`layout_for`)."""
        return layout_for(self.backend)

    def models_of(self, state: NetworkState) -> population.NodeState:
        """The models evaluated: every node's."""
        return state.nodes

    def booking(self, state: NetworkState, steps_done: int = 0, data_model: str | None = None) -> ledger.Booking:
        """What the network has sent so far (:func:`booking`)."""
        return booking(self, state, data_model=data_model)

    def traffic(self, state: NetworkState) -> tuple[ledger.Round, ...]:
        """Gossip averaging's schedule: a node's values to each out-neighbour every ``gossip_every`` steps (the
        messages are asynchronous: :meth:`uplink_bytes`)."""
        if not self.config.gossip_every:
            return ()
        return (ledger.Round("neighbours", 4.0 * self.node_values, every=self.config.gossip_every,
                             edges=int(np.sum(population.to_host(state.adj)))),)

    def uplink_bytes(self, state: NetworkState) -> np.ndarray:
        """``[N]`` bytes of the message copies each node has sent (under the config's data model)."""
        if state.inbox is None:
            return np.zeros(self.config.num_nodes)
        return population.to_host(state.inbox.counters.sent).astype(float) * self.message_bytes


def failure_process(config: NetworkConfig) -> Callable[..., tuple[jax.Array, jax.Array]]:
    """``failures(up [N], step [], key, tuned) -> (up, alive)``: random outages evolve, then the schedule applies.

    An up node goes down with probability ``tuned.hyper["failure_prob"]``, a down one comes back with
    ``1 / tuned.hyper["failure_steps"]`` (:func:`settings`); ``alive`` also removes the nodes of the config's
    ``failure_schedule`` for this step.
    """
    n = config.num_nodes
    schedule = np.asarray(config.failure_schedule, np.int32).reshape(-1, 3)

    def failures(up: jax.Array, step: jax.Array, key: jax.Array, tuned: kit.RunSettings) -> tuple[jax.Array, jax.Array]:
        k_down, k_back = jax.random.split(key)
        down = jax.random.bernoulli(k_down, tuned.hyper["failure_prob"], (n,))
        back = jax.random.bernoulli(k_back, 1.0 / tuned.hyper["failure_steps"], (n,))
        up = jnp.where(up, ~down, back)
        out = (schedule[:, 1] <= step) & (step < schedule[:, 2])  # [outages]
        scheduled = jnp.zeros((n,), bool).at[schedule[:, 0]].max(out)
        return up, up & ~scheduled

    return failures


def gossip_due(step, every: int):
    """Whether the gossip averaging runs after step ``step`` (0-based; a traced or a host integer)."""
    return (step + 1) % every == 0


def gossip(every: int) -> Callable[[jax.Array, jax.Array, population.NodeState], population.NodeState]:
    """``mix(step [], live_adj [N, N], nodes) -> nodes``: every ``every`` steps, each node's parameters and
    model state become the average of its own and its in-neighbours' (:func:`jaxcomm.topology.mixing_matrix`)."""

    def mix(step: jax.Array, live_adj: jax.Array, nodes: population.NodeState) -> population.NodeState:
        def average(nodes: population.NodeState) -> tuple[population.NodeState]:
            params, model_state = topology.mix(topology.mixing_matrix(live_adj), (nodes.params, nodes.model_state))
            return (nodes._replace(params=params, model_state=model_state),)

        return population.when_due(gossip_due(step, every), average, nodes)[0]

    return mix


def _check_network(config: NetworkConfig, model: nn.Module | NodeProgram, exchange: Any, own_pace: Any) -> None:
    """Raises unless :func:`make_network` can build ``model`` nodes sending what ``exchange`` (resolved) says
    under ``config``, at their own pace where ``own_pace`` asks."""
    if not isinstance(exchange, exchanges.Exchange):
        raise TypeError(f"exchange must be a jaxcomm.exchange.Exchange, got {type(exchange).__name__}")
    if own_pace and config.gossip_every:
        raise ValueError("gossip_every: gossip averaging inside output sharing runs in lockstep only (at its own pace "
                         "each node would average at its own steps; not built yet): set gossip_every=0")
    if isinstance(model, NodeProgram) and config.compute_dtype != "float32":
        raise ValueError(f"compute_dtype={config.compute_dtype!r} applies to Flax classifiers; a NodeProgram "
                         "sets its own precision (wrap its model's apply in jaxcomm.network.in_dtype)")


def _program_maker(config: NetworkConfig, model: nn.Module | NodeProgram, *, image_shape: tuple[int, ...],
                   num_classes: int, exchange: exchanges.Exchange | None) -> Callable[[kit.RunSettings], NodeProgram]:
    """``program_for(tuned) -> NodeProgram``: ``model``'s node program under a run's :func:`settings`, traced
    inside the step so that one compile serves a sweep. ``exchange`` None: the config's named content."""

    def program_for(tuned: kit.RunSettings) -> NodeProgram:
        if isinstance(model, NodeProgram):
            return model
        # By name, classifier_program builds the config's content at the run's (traced) temperature.
        return classifier_program(config, model, image_shape=image_shape, num_classes=num_classes,
                                  exchange=exchange, tuned=tuned)

    return program_for


def _choose_backend(config: NetworkConfig, program: NodeProgram, *, image_shape: tuple[int, ...],
                    num_classes: int) -> tuple[str, str, str]:
    """``(backend, step_loop, family)`` of :func:`jaxcomm.classifier.choose_backend`, timed on one node's train
    arguments: images ``[B, H, W, C]``, local targets ``[B, C]``, payload ``[B, D]``, consumed ``[]``, key."""
    b = config.batch_size
    node_args = classifier.node_args(b, image_shape, num_classes,
                                     jax.ShapeDtypeStruct((b, program.payload_dim), jnp.float32),
                                     jax.ShapeDtypeStruct((), bool))
    return classifier.choose_backend(config, program.train, program.init, node_args, family=program.family)


def _node_steps(program: NodeProgram, program_for: Callable[[kit.RunSettings], NodeProgram], *, failing: bool,
                backend: str, own_pace: Any, num_nodes: int) -> tuple[Callable[..., Any], Callable[..., Any] | None]:
    """``(node_step, held_step)``: ``program``'s train step lifted to N nodes, ``node_step(tuned, nodes, images
    [N, B, H, W, C], local_targets [N, B, C], payload [N, B, D], consumed [N], keys [N][, alive [N]])`` (``alive``
    where nodes fail: a failed node keeps its parameters and optimiser state); ``held_step(due [N], ...)``, the
    same for a run at its own pace (the nodes not due hold), None in lockstep."""

    def node_train(tuned: kit.RunSettings, node, *args):
        if not failing:
            return program_for(tuned).train(node, *args)
        *args, alive = args
        new, aux = program_for(tuned).train(node, *args)
        return jax.tree_util.tree_map(lambda a, b: jnp.where(alive, a, b), new, node), aux

    # Lifted once, not per step: an "eager" step calls the "loop" lift's compiled program again and again.
    in_axes = (None, 0, 0, 0, 0, 0, 0) + ((0,) if failing else ())
    # In halves ("unrolled" updates the stack at once) where the program's step is a TrainStep; a program's own
    # step lifts whole (lift_train lifts a plain function as lift does).
    whole = _SettingsTrain(program_for, failing) if isinstance(program.train, population.TrainStep) else node_train
    node_step = population.lift_train(whole, backend=backend, in_axes=in_axes)
    if not own_pace:
        return node_step, None
    # The nodes not due are not computed where the lift allows.
    return node_step, population.lift_held(whole, backend=backend, in_axes=in_axes, held=1, lifted=node_step,
                                           capacity=pace.own_pace_of(own_pace).capacity_for(num_nodes))


def _delivery(config: NetworkConfig, graph: Graph, cluster: Any, message_bytes: int,
              own_pace: Any) -> tuple[np.ndarray, jax.Array | None, Any]:
    """``(delays [N, N] int32, link_seconds [N, N] float32, bottleneck)`` of messages on ``cluster``, from the
    out-degrees of the run's graph at step 0. In lockstep, ``delays`` are the receiver steps a message spends in
    flight (:func:`jaxcomm.clock.delivery_steps`; no link seconds or bottleneck). At its own pace nothing waits
    in flight (delays 0): a message is read once it has arrived, timed on the host's timeline by the link's
    seconds (:func:`jaxcomm.clock.delivery_seconds`) and the cluster's shared bottleneck, if any."""
    n = config.num_nodes
    first = kit.first_graph(config, graph)
    everyone, out_degrees = np.ones_like(first) & ~np.eye(n, dtype=bool), first.sum(1)
    if not own_pace:
        return clock.delivery_steps(cluster, everyone, message_bytes, copies=out_degrees), None, None
    link_seconds = jnp.asarray(clock.delivery_seconds(cluster, everyone, message_bytes, copies=out_degrees),
                               jnp.float32)
    return np.zeros((n, n), np.int32), link_seconds, cluster.bottleneck


def _metered(exchange: exchanges.Exchange) -> bool:
    """Whether every message copy's payload is booked at the size of what it carries (``content_bytes``)."""
    return exchange.sends and exchange.content_bytes is not None


def _make_init(config: NetworkConfig, program_init: Callable[[jax.Array], population.NodeState],
               graph_fn: topology.GraphFn, exchange: exchanges.Exchange, *, backend: str, payload_dim: int,
               delays: np.ndarray | None, own_pace: Any, bottleneck: Any) -> Callable[[jax.Array], NetworkState]:
    """``init(key) -> NetworkState``: N fresh nodes, all up, on the graph at step 0; empty inboxes of K messages
    ``[B]`` indices and ``[B, D]`` payloads where messages are sent, nothing in flight where ``delays`` are given,
    and zeroed counters (per tick ``[T]`` where a ``bottleneck`` is shared)."""
    n, b = config.num_nodes, config.batch_size

    def init(key: jax.Array) -> NetworkState:
        keys = streams.init_keys(key)
        nodes = population.init_population(program_init, keys.nodes, n, backend=backend)
        box = inbox.init(n, config.inbox_capacity, b, payload_dim) if exchange.sends else None
        everyone = jnp.ones((n,), bool)
        return NetworkState(nodes, box, jnp.asarray(graph_fn(keys.graph, jnp.zeros((), jnp.int32)), bool),
                            jnp.zeros((), jnp.int32), keys.run, keys.graph, everyone, everyone,
                            jnp.zeros((), jnp.int32),
                            None if delays is None else inbox.transit_init(delays, b, payload_dim,
                                                                           timed=bool(own_pace)),
                            jnp.zeros((), jnp.int32) if _metered(exchange) else None, None,
                            None if bottleneck is None else jnp.zeros((config.num_steps,), jnp.int32))

    return init


def _arrived(state: NetworkState, first: inbox.Message, link_seconds: jax.Array, bottleneck: Any,
             message_bytes: int) -> jax.Array:
    """``[N] bool``: whether each node's oldest message ``first`` arrived before the node's step began, at its own
    pace: the sender's step end plus the link's seconds ``[N, N]``, and on a shared bottleneck its latency and the
    time the copies sent at that tick took to share its bandwidth."""
    mine = jnp.arange(first.sender.shape[0])
    arrival = state.pace.end[first.sent_step, first.sender] + link_seconds[first.sender, mine]
    if bottleneck is not None:
        arrival = arrival + bottleneck.latency + (
            state.copies_per_tick[first.sent_step] * message_bytes / bottleneck.bandwidth)
    return arrival <= state.pace.start[state.step, mine]


def _aged(transit: inbox.Transit, state: NetworkState, message: inbox.Message, got: jax.Array) -> inbox.Transit:
    """``transit`` with the ages of the messages just popped (``got [N]``) added: in ticks, and at its own pace
    also in seconds (the sender's step end to the receiver's step start) and in the receiver's own steps."""
    transit = transit._replace(age=transit.age + jnp.where(got, state.step - message.sent_step, 0))
    if state.pace is None:
        return transit
    rows, sent, mine = state.pace, message.sent_step, jnp.arange(got.shape[0])
    seconds = rows.start[state.step, mine] - rows.end[sent, message.sender]
    steps = rows.steps[state.step, mine] - rows.steps[sent, mine]  # 1: sent during my step before
    return transit._replace(age_seconds=transit.age_seconds + jnp.where(got, seconds, 0.0),
                            age_steps=transit.age_steps + jnp.where(got, steps, 0))


def _receive(state: NetworkState, box: inbox.InboxState, want: jax.Array, local: jax.Array, *,
             link_seconds: jax.Array | None, bottleneck: Any, message_bytes: int) -> tuple:
    """``(box, transit, indices [N, B], payload [N, B, D], got [N], source [N])``: the nodes of ``want [N]`` pop
    their oldest message (at their own pace, only one that has arrived); the others keep their local minibatch
    ``local [N, B]`` (source -1)."""
    ready = None
    if state.pace is not None and link_seconds is not None:
        ready = _arrived(state, inbox.oldest(box), link_seconds, bottleneck, message_bytes)
    box, message, got = inbox.pop(box, want, ready)
    indices = jnp.where(got[:, None], message.indices, local)
    transit = None if state.transit is None else _aged(state.transit, state, message, got)
    return box, transit, indices, message.payload, got, jnp.where(got, message.sender, -1)


def _make_step(config: NetworkConfig, exchange: exchanges.Exchange, graph_fn: topology.GraphFn, *, dynamic: bool,
               num_classes: int, payload_dim: int, failures: Callable[..., Any] | None,
               node_step: Callable[..., Any], held_step: Callable[..., Any] | None, delays: np.ndarray | None,
               link_seconds: jax.Array | None, bottleneck: Any,
               message_bytes: int) -> Callable[[NetworkState, NetworkData], tuple[NetworkState, StepInfo]]:
    """``step(state, data) -> (state, StepInfo)``: one step of Algorithm 2 for the N nodes (draws, failures,
    pop, train ``[N, B]`` minibatches, gossip, push), a node not due at its own pace holding."""
    n, b, sends = config.num_nodes, config.batch_size, exchange.sends
    mix = gossip(config.gossip_every) if config.gossip_every else None
    by_content = _metered(exchange)
    lose_inbox = sends and failures is not None and config.inbox_on_failure == "lose"

    def step(state: NetworkState, data: NetworkData) -> tuple[NetworkState, StepInfo]:
        tuned = data.settings
        keys = streams.step_keys(state.key, failures=failures is not None, augment=config.augment)
        want = jax.random.bernoulli(keys.consume, tuned.hyper["consume_prob"], (n,))
        broadcast = jax.random.bernoulli(keys.broadcast, tuned.hyper["broadcast_prob"], (n,))
        up, alive, box = state.up, state.alive, state.inbox
        if failures is not None:
            up, alive = failures(state.up, state.step, keys.failures, tuned)
            want, broadcast = want & alive, broadcast & alive
            if lose_inbox:
                box = inbox.clear(box, state.alive & ~alive)
        due = None if state.pace is None else state.pace.due[state.step]  # at its own pace: the nodes whose step ends
        if due is not None:
            want, broadcast = want & due, broadcast & due
        local = classifier.local_batches(keys.sample, data, b)  # [N, B]
        local_targets = jax.nn.one_hot(data.labels[local], num_classes)
        got, source = jnp.zeros((n,), bool), jnp.full((n,), -1, jnp.int32)
        payload = jnp.zeros((n, b, payload_dim), jnp.float32)
        indices, transit = local, state.transit
        if sends:
            box, transit, indices, payload, got, source = _receive(
                state, box, want & (tuned.hyper["consume_prob"] > 0), local, link_seconds=link_seconds,
                bottleneck=bottleneck, message_bytes=message_bytes)
        images = classifier.gather(data, indices, keys.augment)  # [N, B, H, W, C] uint8
        node_args = (tuned, state.nodes, images, local_targets, payload, got, jax.random.split(keys.nodes, n),
                     *((alive,) if failures is not None else ()))
        nodes, (loss, outgoing) = population.state_and_aux(
            node_step(*node_args) if due is None else held_step(due, *node_args))  # not due: held, loss 0
        param_copies = state.param_copies
        if mix is not None:
            live = state.adj & alive[:, None] & alive[None, :] if failures is not None else state.adj
            nodes = mix(state.step, live, nodes)
            param_copies = param_copies + jnp.where(gossip_due(state.step, config.gossip_every),
                                                    jnp.sum(live, dtype=jnp.int32), 0)
        adj = jnp.asarray(graph_fn(state.graph_key, state.step), bool) if dynamic else state.adj
        if not config.rebroadcast:
            broadcast = broadcast & ~got
        payload_sent, copies_per_tick = state.payload_sent, state.copies_per_tick
        if sends:
            sent = inbox.Message(indices, outgoing, jnp.arange(n, dtype=jnp.int32),
                                 jnp.full((n,), state.step, jnp.int32))
            receivers = adj & alive[None, :] if failures is not None else adj
            copies = broadcast[:, None] & receivers  # [N, N] sender to receiver
            if by_content:  # every copy's payload at the size of what it carries
                sizes = jnp.round(jax.vmap(exchange.content_bytes)(outgoing)).astype(jnp.int32)  # [N] whole bytes
                payload_sent = payload_sent + jnp.sum(jnp.sum(copies, axis=1, dtype=jnp.int32) * sizes)
            if transit is None:
                box = inbox.push(box, sent, broadcast, receivers, overflow=config.overflow)
            else:
                box, transit = inbox.send(box, transit, sent, copies, state.step, delays, overflow=config.overflow)
            if copies_per_tick is not None:  # on a shared bottleneck these copies share its bandwidth
                copies_per_tick = copies_per_tick.at[state.step].set(jnp.sum(copies, dtype=jnp.int32))
        new_state = state._replace(nodes=nodes, inbox=box, adj=adj, step=state.step + 1, key=keys.next, up=up,
                                   alive=alive, param_copies=param_copies, transit=transit,
                                   payload_sent=payload_sent, copies_per_tick=copies_per_tick)
        return new_state, StepInfo(loss, got, broadcast & sends, indices, source, alive)

    return step


def make_network(
    config: NetworkConfig,
    model: nn.Module | NodeProgram,
    *,
    image_shape: tuple[int, ...],
    num_classes: int,
    graph: np.ndarray | jax.Array | topology.GraphFn | None = None,
    exchange: exchanges.Exchange | None = None,
    cluster: Any = None,
    own_pace: Any = False,
) -> Network:
    """Builds the pure functions of a network of ``model`` nodes.

    Args:
      config: the network.
      model: a Flax classifier returning ``(logits, features)`` (made a node by
        :func:`classifier_program`), or a :class:`NodeProgram`.
      image_shape: ``(H, W, C)`` of one image.
      num_classes: C, the width of the one-hot local targets.
      graph: who sends to whom: a bool ``[N, N]`` array (``adj[i, j]``: i sends
        to j, no self-loops) or a function ``(key, step) -> bool [N, N]``
        evaluated at every step; None: the config's named topology.
      exchange: what messages carry (:class:`jaxcomm.exchange.Exchange`); None:
        the config's named content. A :class:`NodeProgram` makes its own payload;
        the exchange then only says whether messages are sent and their bytes.
      cluster: a :class:`jaxcomm.clock.Cluster`: messages spend the receiver steps their transfer takes in
        flight (:func:`jaxcomm.clock.delivery_steps`, from the out-degrees of the graph at step 0 of the
        config's seed); None: they arrive at once.
      own_pace: built for a run at its own pace on ``cluster`` (True or a :class:`jaxcomm.pace.OwnPace`): a node
        reads its oldest message only if it arrived (the sender's step end plus
        :func:`jaxcomm.clock.delivery_seconds`) before the reader's step began; until then it trains on local data
        (a fallback). Messages queue in order of sending: a later one from a nearer sender waits behind it.

    Returns:
      A :class:`Network`.

    Raises:
      ValueError: a graph of the wrong shape, or with self-loops; a ``compute_dtype`` other than
        float32 with a :class:`NodeProgram`.
    """
    config.check_devices()
    by_name = exchange is None
    exchange = exchange or exchanges.named(config.content, temperature=config.temperature)
    _check_network(config, model, exchange, own_pace)
    program_for = _program_maker(config, model, image_shape=image_shape, num_classes=num_classes,
                                 exchange=None if by_name else exchange)
    program = program_for(settings(config))
    payload_dim = program.payload_dim
    graph_fn, dynamic = graph_of(config, graph)
    backend, step_loop, family = _choose_backend(config, program, image_shape=image_shape, num_classes=num_classes)
    predict = population.lift(program.predict, backend=backend, in_axes=(0, None))
    predict = predict if step_loop == "eager" else compiling.nestable(predict)
    failures = failure_process(config) if config.has_failures else None
    node_step, held_step = _node_steps(program, program_for, failing=failures is not None, backend=backend,
                                       own_pace=own_pace, num_nodes=config.num_nodes)
    sample_bytes = int(np.prod(image_shape))
    message_bytes = exchanges.message_bytes(exchange, config.batch_size, payload_dim, sample_bytes=sample_bytes,
                                            data_model=config.data_model)
    delays, link_seconds, bottleneck = (_delivery(config, graph, cluster, message_bytes, own_pace)
                                        if cluster is not None and exchange.sends else (None, None, None))
    init = _make_init(config, program.init, graph_fn, exchange, backend=backend, payload_dim=payload_dim,
                      delays=delays, own_pace=own_pace, bottleneck=bottleneck)
    step = _make_step(config, exchange, graph_fn, dynamic=dynamic, num_classes=num_classes, payload_dim=payload_dim,
                      failures=failures, node_step=node_step, held_step=held_step, delays=delays,
                      link_seconds=link_seconds, bottleneck=bottleneck, message_bytes=message_bytes)
    abstract = jax.eval_shape(program.init, jax.random.PRNGKey(0))  # shapes only
    return Network(config, init, step, predict, payload_dim, backend, step_loop, exchange, message_bytes, family,
                   program.divergence, sample_bytes, bandwidth.num_params((abstract.params, abstract.model_state)),
                   delays, bool(own_pace), link_seconds=link_seconds, bottleneck=bottleneck)


def network_data(dataset: ImageDataset, config: NetworkConfig) -> NetworkData:
    """Partitions the training split into N shards and puts everything on the device (the run's
    :func:`settings` beside them)."""
    return classifier.shard_data(dataset, config, settings(config))


def counter_totals(state, network: Network | None = None, steps_done: int = 0) -> dict:
    """Inbox counters summed over nodes (zeros for a state without an inbox). At its own pace (``network`` built
    so, ``state.pace`` its rows), a message lands in its reader's inbox when sent but is read only once it has
    arrived: those not yet arrived after ``steps_done`` ticks are ``in_flight``, not ``received`` nor ``pending``
    (:func:`in_flight_at_own_pace`), so ``sent = received + in_flight`` as in lockstep."""
    box = getattr(state, "inbox", None)
    if box is None:
        return {field: 0 for field in inbox.InboxCounters._fields} | {"pending": 0}
    counters, pending = population.to_host((box.counters, box.count))
    totals = {field: int(np.sum(value)) for field, value in counters._asdict().items()}
    totals["pending"] = int(pending.sum())
    transit = getattr(state, "transit", None)
    if transit is not None:  # sent = received + in flight; the mean age of a consumed message, in steps
        in_flight, age = population.to_host((transit.in_flight, transit.age))
        mean = lambda total: float(np.sum(total) / totals["consumed"]) if totals["consumed"] else None  # noqa: E731
        totals |= {"in_flight": int(np.sum(in_flight)), "mean_age": mean(age)}
        if transit.age_seconds is not None:  # at its own pace: ticks, virtual seconds and the receiver's own steps
            seconds, steps = population.to_host((transit.age_seconds, transit.age_steps))
            totals |= {"mean_age_seconds": mean(seconds), "mean_age_receiver_steps": mean(steps)}
    if network is not None and network.link_seconds is not None and getattr(state, "pace", None) is not None:
        flying = in_flight_at_own_pace(network, state, steps_done)  # nothing waits in the transit at its own pace
        totals |= {"received": totals["received"] - flying, "pending": totals["pending"] - flying,
                   "in_flight": totals.get("in_flight", 0) + flying}
    return totals


def in_flight_at_own_pace(network: Network, state, steps_done: int) -> int:
    """Messages pending in the inboxes after ``steps_done`` ticks at its own pace that have not arrived: the
    sender's step end plus the link's seconds (and on a shared bottleneck its latency and share of its bandwidth,
    as :func:`_arrived` times a read) later than the end of the reader's last step, when its next step begins."""
    if not steps_done:
        return 0
    box, rows = state.inbox, state.pace
    sender, sent_step, head, count, end, link = population.to_host((
        box.messages.sender, box.messages.sent_step, box.head, box.count, rows.end, network.link_seconds))
    n, capacity = sender.shape
    reader = np.arange(n)[:, None]
    slot = (head[:, None] + np.arange(capacity)) % capacity  # [N, K] oldest first
    waiting = np.arange(capacity)[None] < count[:, None]
    source, sent = sender[reader, slot], sent_step[reader, slot]
    arrival = end[sent, source] + link[source, reader]
    bottleneck = network.bottleneck
    if bottleneck is not None:
        copies = population.to_host(state.copies_per_tick)[sent]
        arrival = arrival + bottleneck.latency + copies * network.message_bytes / bottleneck.bandwidth
    now = end[steps_done - 1][:, None]  # [N, 1]: each reader's last step end
    return int(np.sum(waiting & (arrival.astype(np.float32) > now)))


Evaluator = Callable[["Network", "NetworkState", int], dict]
"""``evaluator(network, state, steps_done) -> dict`` of metrics, called between training chunks."""


def accuracy_evaluator(split, *, also: Mapping[str, Any] | None = None) -> Evaluator:
    """The classifier metrics of :func:`jaxcomm.classifier.evaluate` on ``split`` (images, labels), over the
    reachable nodes.

    ``also``: further named splits (e.g. ``{"validation": dataset.validation}``), predicted in the same pass;
    their metrics go in the record under their name. Empty splits are left out.
    """
    images, records = classifier.split_images(split, also)

    def evaluator(network: Network, state: NetworkState, steps_done: int) -> dict:
        reachable = population.to_host(state.alive) if network.config.has_failures else None
        return records(classifier.predict_in_batches(network.predict, state.nodes, images), reachable)

    return evaluator


def split_evaluator(dataset: ImageDataset, eval_split: str | Sequence[str]) -> Evaluator:
    """:func:`accuracy_evaluator` on ``dataset``'s split ``eval_split``, or on the first of several split names
    with the others' metrics under their names (e.g. ``("test", "validation")``)."""
    first, others = classifier.splits_of(dataset, eval_split)
    return accuracy_evaluator(first, also=others)


def booking(network: Network, state: NetworkState, *, data_model: str | None = None) -> ledger.Booking:
    """What the network has sent so far (:mod:`jaxcomm.ledger`): every message copy (the inbox ``sent`` counter)
    under ``data_model`` (default the config's), and the parameters gossip averaging sent (one copy of a node's
    parameters and model state per live edge and round)."""
    data_model = data_model or network.config.data_model
    one = ledger.message(network.exchange, network.config.batch_size, network.payload_dim,
                         sample_bytes=network.sample_bytes, data_model=data_model)
    sent = ledger.messages(counter_totals(state)["sent"], one)
    if getattr(state, "payload_sent", None) is not None:  # each copy's payload as large as what it carried
        sent = sent._replace(payload=float(population.to_host(state.payload_sent)))
    return sent + ledger.to_neighbours(int(population.to_host(state.param_copies)), network.node_values)


def bytes_record(network: Network, state: NetworkState, steps_done: int, *, data_model: str | None = None) -> dict:
    """The network's ``bytes`` record (:func:`jaxcomm.ledger.record`) after ``steps_done`` steps."""
    data_model = data_model or network.config.data_model
    return ledger.record(booking(network, state, data_model=data_model), num_nodes=network.config.num_nodes,
                         steps=steps_done, data_model=data_model)


# --------------------------------------------------------------------------- the network's runs in a sweep

# Fields runs may vary: data of the one compiled step (see the module docstring).
PER_RUN = ("seed", "partition", "dirichlet_alpha", "learning_rate", *SHARING_SETTINGS)
# Graph fields, which may vary only while every run's graph is static (its adjacency then lives in the state).
GRAPH_FIELDS = ("topology", "num_neighbours", "redraw_every")

Graph = np.ndarray | jax.Array | topology.GraphFn | None


def check_structure(configs: Sequence[NetworkConfig], graphs: Sequence[Graph] | None = None) -> None:
    """Raises ValueError naming the first field on which the runs' structures disagree.

    Args:
      configs: the R runs.
      graphs: each run's graph argument (None: its config's named topology).
    """
    if not configs:
        raise ValueError("a sweep needs at least one network configuration")
    for r, config in enumerate(configs):
        if not isinstance(config, NetworkConfig):
            raise TypeError(f"configs[{r}] must be a jaxcomm.NetworkConfig, got {type(config).__name__}")
    graphs = list(graphs) if graphs is not None else [None] * len(configs)
    dynamic = [graph_of(c, g)[1] for c, g in zip(configs, graphs, strict=True)]
    free = set(PER_RUN) | (set(GRAPH_FIELDS) if not any(dynamic) else set())
    first = configs[0]
    for r, config in enumerate(configs[1:], start=1):
        for field in dataclasses.fields(NetworkConfig):
            a, b = getattr(first, field.name), getattr(config, field.name)
            if field.name not in free and a != b:
                raise ValueError(f"runs of a sweep must share {field.name} (structure of the one compiled step): "
                                 f"run 0 has {a!r}, run {r} has {b!r}")
        if config.has_failures != first.has_failures:
            raise ValueError(f"runs of a sweep must all have failures or none (failure_prob > 0 or a "
                             f"failure_schedule draws a separate key stream): run 0 has failure_prob="
                             f"{first.failure_prob!r}, run {r} has failure_prob={config.failure_prob!r}")
        if any(dynamic) and graphs[r] is not graphs[0]:
            raise ValueError(f"runs of a sweep with a time-varying graph must share its function: graph of run {r} "
                             "differs from run 0's")


def initial_state(net: Network, config: NetworkConfig, graph: Graph) -> NetworkState:
    """Run ``config``'s initial state, as its own :func:`make_network` would make it."""
    state = net.init(jax.random.PRNGKey(config.seed))
    graph_fn, _ = graph_of(config, graph)
    return state._replace(adj=jnp.asarray(graph_fn(state.graph_key, jnp.zeros((), jnp.int32)), bool))



def _per_run_graphs(graph, num_runs: int) -> list[Graph]:
    if isinstance(graph, (list, tuple)):
        if len(graph) != num_runs:
            raise ValueError(f"graph: a sequence needs one entry per run ({num_runs}), got {len(graph)}")
        return list(graph)
    return [graph] * num_runs


def output_sharing(exchange: exchanges.Exchange | None = None, *, graph: Graph | Sequence[Graph] = None,
                   name: str | None = None, evaluator: Evaluator | None = None) -> methods.Method:
    """Algorithm 2 as a method (:class:`jaxcomm.methods.Method`): nodes broadcast minibatches with what
    ``exchange`` says about them (None: the config's named content; :func:`jaxcomm.exchange.none`: isolated
    nodes) over ``graph`` (None: the config's topology; a list or tuple: one per run of a sweep, static graphs that
    share their structure). Its sweep varies p_c, p_b, q, D, tau, weights, learning rate and, between static graphs,
    the graph fields (:data:`PER_RUN`, :data:`GRAPH_FIELDS`). ``evaluator(network, state, steps_done) -> dict``
    replaces the accuracies on the run's ``eval_split`` (:func:`split_evaluator`). A :class:`jaxcomm.kit.RunConfig`
    is taken with output sharing's defaults (:func:`as_network_config`)."""
    first = graph[0] if isinstance(graph, (list, tuple)) and graph else graph

    def build(config, model, *, image_shape, num_classes, cluster=None, own_pace=False):
        return make_network(config, model, image_shape=image_shape, num_classes=num_classes, graph=first,
                            exchange=exchange, cluster=cluster, own_pace=own_pace)

    def check(configs):
        check_structure(configs, _per_run_graphs(graph, len(configs)))

    def initial(net, config, run):
        return initial_state(net, config, graph[run] if isinstance(graph, (list, tuple)) else graph)

    label = name or ("outputs" if exchange is None else exchange.name)
    return methods.Method(
        label, build, family="outputs", per_run=PER_RUN + GRAPH_FIELDS,
        configure=as_network_config, build_keywords=("cluster", "own_pace"),
        own=methods.OwnPopulation(
            system=lambda net, dataset, eval_split: system(net, evaluator or split_evaluator(dataset, eval_split)),
            initial=initial, check=check, settings=settings))


def system(network: Network, evaluator: Evaluator) -> driver.System:
    """The network as a :class:`jaxcomm.driver.System`: its step, and records of losses, evaluator metrics
    and inbox counters."""

    def evaluate_(state: NetworkState, infos: StepInfo, steps_done: int) -> dict:
        metrics = evaluator(network, state, steps_done)
        infos = population.to_host(infos)
        counters = counter_totals(state, network, steps_done)
        return {"loss": pace.taken_mean(infos.loss, state, steps_done),
                "consumed_fraction": float(np.mean(infos.consumed)),
                "alive_fraction": float(np.mean(infos.alive)), **metrics, "counters": counters,
                # every copy sent so far, under the config's data model
                "bytes_sent": counters["sent"] * network.message_bytes,
                "bytes": bytes_record(network, state, steps_done)}

    return driver.System(network.init, network.step, evaluate_, losses=lambda infos: infos.loss,
                         summarize=classifier.summarize_info,
                         step_loop=network.step_loop, postfix=classifier.progress_postfix, layout=network.layout)


def train_network(
    config: NetworkConfig,
    model: nn.Module | NodeProgram,
    dataset: ImageDataset,
    *,
    graph: np.ndarray | jax.Array | topology.GraphFn | None = None,
    exchange: exchanges.Exchange | None = None,
    eval_split: str | Sequence[str] = "test",
    progress: bool = True,
    desc: str | None = None,
    checkpointer: Checkpointer | None = None,
    evaluator: Evaluator | None = None,
    divergence: float | None | methods.BuiltsWatch = methods.BUILTS_WATCH,
    donate: bool | None = None,
    cluster: Any = None,
) -> dict:
    """Trains a network on ``dataset`` and evaluates it every ``eval_every`` steps: :func:`jaxcomm.methods.train` of
    :func:`output_sharing`, with the network's own arguments.

    Args:
      config: the network and its schedule.
      model: a Flax classifier returning ``(logits, features)``, or a :class:`NodeProgram`.
      dataset: images and labels; the training split is sharded over the nodes.
      graph: a bool ``[N, N]`` array or a function ``(key, step) -> bool [N, N]``
        (see :func:`make_network`); None: the config's topology.
      exchange: a :class:`jaxcomm.exchange.Exchange`; None: the config's content.
      eval_split: "test" or "validation", the split the default evaluator uses; or several names,
        e.g. ``("test", "validation")``: the first's metrics in the record, the others' under their
        names (:func:`split_evaluator`).
      progress: draw a progress bar.
      desc: its label.
      checkpointer: saves and resumes the run (bit-identical, see :func:`jaxcomm.driver.train`).
      evaluator: ``evaluator(network, state, steps_done) -> dict``; default
        :func:`accuracy_evaluator` on ``eval_split`` (classifier nodes).
      divergence: stop once a node's loss exceeds this multiple of the mean loss
        at the run's first step (None: only non-finite losses stop); by default the node
        program's own watch (:attr:`NodeProgram.divergence`, 100 for a Flax classifier).
      donate: give each chunk's state buffers to the next (one copy of the network on the
        device, see :func:`jaxcomm.driver.train`); None: in a single-process run (:func:`jaxcomm.driver.donation`).
      cluster: a :class:`jaxcomm.clock.Cluster`: messages spend their transfer time in flight
        (:func:`make_network`) and every record has the run's virtual ``clock``; None: they arrive at once.

    Raises:
      jaxcomm.driver.NonFiniteLoss, jaxcomm.driver.Diverged: a node's loss left its
        bounds (the error names the node and step).
      jaxcomm.driver.Interrupted: a checkpointed run was interrupted (after saving).

    Returns:
      :func:`jaxcomm.methods.train`'s dict: ``history`` (one record per evaluation:
      step, loss, consumed and alive fractions, the evaluator's metrics, inbox
      counters, bytes), ``final`` (the last record; None if interrupted before the first
      evaluation), ``status``, ``interrupted``, ``state``, ``steps_done``,
      ``train_seconds``, ``built``, ``bytes``; plus ``network`` (the :class:`Network`, ``built``) and
      ``unreachable_evaluations`` (evaluations at which every node was down:
      no collective decision, its accuracies None).
    """
    method = output_sharing(exchange, graph=graph, evaluator=evaluator)
    return with_network(methods.train(method, config, model, dataset, eval_split=eval_split, progress=progress,
                                      desc=desc, checkpointer=checkpointer, divergence=divergence, donate=donate,
                                      cluster=cluster))


def with_network(result: dict) -> dict:
    """A :func:`jaxcomm.methods.train` result of output sharing as :func:`train_network` returns it."""
    return result | {"network": result["built"], "unreachable_evaluations": unreachable_evaluations(result["history"])}


def unreachable_evaluations(history: list[dict]) -> int:
    """Evaluations of ``history`` at which every node was down (no collective decision)."""
    return sum(record.get("reachable") == 0 for record in history)
