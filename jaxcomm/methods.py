"""Methods as values: every way of communicating between classifier nodes on shards, one protocol.

A :class:`Method` is a value: a name and ``build(config, model, *, image_shape, num_classes)``, which
returns the method's pure functions for one run (a :class:`Built`: ``init``, ``step``, ``predict``,
``models_of``, and ``booking``, what it has sent so far in the one byte ledger, :mod:`jaxcomm.ledger`).
``config`` is a :class:`jaxcomm.kit.RunConfig` (or a config that extends it, as the network's does), and a
method built on the kit's node population (:func:`jaxcomm.kit.nodes`) writes only what it sends and what
it does with what it receives: :meth:`jaxcomm.kit.Population.built` makes the rest. Everything else comes from
the kit and the core, the same for every method:

* :func:`train`: one run under the one driver, evaluated every ``eval_every`` steps (test and
  validation; node average and collective decision of the models ``models_of`` names), every history
  record carrying the ledger's ``bytes``;
* :func:`sweep`: R runs differing in seed (and in the fields the method lists in ``per_run``) as one
  population of R x N nodes or run by run, the measured choice, each result equal to the run alone;
* :func:`bytes_of`: a result's bytes under either data model.

The built-in methods are made where their code lives: :func:`jaxcomm.network.output_sharing` and
:func:`jaxcomm.gossip.gossip_averaging` (Algorithm 2 with any exchange; gossip),
:func:`jaxcomm.data_parallel.sync_sgd` (with any compressor, or PowerSGD),
:func:`jaxcomm.local_sgd.local_sgd` / :func:`jaxcomm.local_sgd.diloco`,
:func:`jaxcomm.codistillation.codistillation` and :func:`jaxcomm.sparta.sparta`. A researcher's own
method is one more value: any object with the :class:`Built` attributes, from any ``build``.

Random draws come from named streams (:mod:`jaxcomm.streams`), so methods with the same seed draw the
same minibatches.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from typing import Any, NamedTuple, Protocol

import flax.linen as nn
import jax
import numpy as np

from jaxcomm import checkpoint, classifier, clock, data, driver, kit, ledger, pace, population, validation
from jaxcomm import sweep as sweeps
from jaxcomm.checkpoint import Checkpointer
from jaxcomm.data import ImageDataset

BASE_PER_RUN = ("seed", "partition", "dirichlet_alpha")
"""Config fields runs of any method's sweep may vary: the seed (initialisation, every draw) and the shards."""
KIT_PER_RUN = (*BASE_PER_RUN, "learning_rate")
"""Those of a method whose nodes are the kit's (:func:`jaxcomm.kit.nodes`): the learning rate is data of its step."""
BUILD_KEYWORDS = ("cluster", "own_pace")
"""What of a run a method's ``build`` may ask for (:attr:`Method.build_keywords`)."""


class BuiltsWatch:
    """The type of :data:`BUILTS_WATCH`."""

    def __repr__(self) -> str:
        return "BUILTS_WATCH"


# ``divergence=BUILTS_WATCH`` (the default of :func:`train` and :func:`sweep`): the built run's own divergence watch
# where it declares one (``built.divergence``: output sharing's node program, None for a game such as a GAN's, whose
# loss scores no progress), else :data:`jaxcomm.driver.DIVERGENCE`.
BUILTS_WATCH = BuiltsWatch()


def divergence_of(built: Built, divergence: float | None | BuiltsWatch) -> float | None:
    """The divergence watch a run of ``built`` uses: ``divergence``, or by default the built run's own."""
    return built.divergence if isinstance(divergence, BuiltsWatch) else divergence


class Built(Protocol):
    """One run's pure functions, what a :class:`Method` builds (a frozen dataclass or NamedTuple will do).

    Attributes:
      config: the run's :class:`jaxcomm.kit.RunConfig` (nodes, shards, batch, optimiser, schedule).
      init: ``init(key) -> state``, pure; draw from :func:`jaxcomm.streams.init_keys`.
      step: ``step(state, data: ShardData) -> (state, info)``, pure; ``info`` has ``loss [N]`` and ``indices
        [N, B]``; draw from :func:`jaxcomm.streams.step_keys` (and :func:`jaxcomm.streams.named`).
      predict: ``predict(models, images uint8 [M, H, W, C]) -> probs [K, M, C]``, compiled.
      step_loop: "scan", "dispatch" or "eager" (:func:`jaxcomm.classifier.choose_backend`).
      backend: the lift's backend (a sweep runs run by run under "unrolled" and "loop").
      layout: how the "eager" and "dispatch" step loops hold the state (None: as it is).
      models_of: ``models_of(state)``: the K models evaluated (every node's, or one shared model).
      booking: ``booking(state, steps_done, data_model) -> jaxcomm.ledger.Booking``: what was sent so far.
      divergence: the run's own divergence watch (:data:`BUILTS_WATCH`; the kit's: the driver's).
      readings: ``readings(state) -> {name: [] array}``, the method's own scalars in every evaluation's record
        (:class:`jaxcomm.kit.Communicator`); None: none.
      traffic: what the clock reads (:mod:`jaxcomm.clock`): the schedule as :class:`jaxcomm.ledger.Round` values
        (or a function of the state returning them); a method with one books its bytes from it
        (:func:`jaxcomm.ledger.book`).
      waits: what the nodes wait for at their own pace (:class:`jaxcomm.pace.Waits`).
      hyper: the run's values of the method's hyperparameters (set by :func:`train` and :func:`sweep`).
      uplink_bytes: ``uplink_bytes(state) -> [N] | None``: bytes of the asynchronous message copies each node has
        sent (output sharing's, with ``message_bytes`` the bytes of one), which its uplink's busy time prices;
        None: none (a method of rounds).
      family: the speed family its backend was chosen for (:func:`jaxcomm.speed.family_of`; None: none).
      sample_bytes: bytes of one input as held (a uint8 image), what a message's inputs cost; 0: it sends no inputs.
      sweep_mode: what :func:`sweep` runs under ``mode="auto"``: "auto" follows the device and the nodes
        (:func:`jaxcomm.sweep.choose_mode`: run by run on a CPU); "sequential" or "population" where measured
        faster for this method (synchronous SGD, one shared model per run, as one population:
        ``results/benchmark/sweep_arms/``).
    """

    config: kit.RunConfig
    init: Callable
    step: Callable
    predict: Callable
    step_loop: str
    backend: str
    layout: driver.Layout | None
    divergence: float | None
    readings: Callable | None
    traffic: tuple[ledger.Round, ...] | Callable
    waits: pace.Waits
    hyper: Mapping[str, float]
    family: str | None
    sample_bytes: int
    sweep_mode: str

    def models_of(self, state) -> Any: ...

    def booking(self, state, steps_done: int, data_model: str | None = None) -> ledger.Booking: ...

    def uplink_bytes(self, state) -> np.ndarray | None: ...


class OwnPopulation(NamedTuple):
    """How :func:`train` and :func:`sweep` train a method whose ``build`` returns a population of its own, not the
    kit's (output sharing's network, :func:`jaxcomm.network.output_sharing`): every field replaces what the door does
    for the kit's.

    Attributes:
      system: ``system(built, dataset, eval_split) -> driver.System``: how it evaluates (the network: reachable
        nodes, inbox counters); the kit's: :func:`system_of`.
      initial: ``initial(built, config, run) -> state`` of run ``run`` (its index) in a sweep (the network's
        per-run graph); the kit's: ``built.init(PRNGKey(config.seed))``.
      check: ``check(configs)``: raises ValueError naming a field the runs of a sweep may not vary; the kit's:
        :func:`check_runs` (only ``per_run`` fields).
      settings: ``settings(config)``: the numbers of a run its step reads as data (``data.settings``, ``[R]``
        arrays in a sweep); the kit's: :func:`jaxcomm.kit.settings` with the run's ``hyper``.
    """

    system: Callable
    initial: Callable
    check: Callable
    settings: Callable


class Method(NamedTuple):
    """A way of communicating, as a value.

    Attributes:
      name: how tables and plots call it (e.g. ``"diloco_h50"``).
      build: ``build(config, model, *, image_shape, num_classes) -> Built``.
      family: what kind of method it is, for tables and plot markers (e.g. "outputs", "local_sgd").
      score: which accuracy the method is scored by: "collective" (the N nodes' collective decision,
        negentropy) or "model" (one shared model: its accuracy).
      per_run: config fields the runs of a sweep may vary (data of the one compiled step); any other
        difference is refused, naming the field. Default :data:`KIT_PER_RUN`: the seed, the shards and the learning
        rate, data of the step of every method built on the kit's nodes (a ``Built`` of its own may vary the
        learning rate only where it declares ``per_run`` naming it).
      configure: ``configure(config) -> config``: what the method sets in the config it is given (gossip's ring
        and period); None: nothing.
      hyper: the method's own hyperparameters that are data of its step, with their values (``{"fraction": 0.01}``):
        the step reads ``data.settings.hyper[name]``, so :func:`train` and :func:`sweep` may set them per run
        (``hyper=``) under one compiled step.
      build_keywords: what of the run ``build`` is also given, by keyword, of :data:`BUILD_KEYWORDS`: "cluster"
        (the run's :class:`jaxcomm.clock.Cluster` or None: output sharing's messages in flight) and "own_pace"
        (whether it trains at its own pace: gossip keeps its last received copies).
      own: how the door trains a method whose ``build`` returns a population of its own (:class:`OwnPopulation`:
        output sharing's network); None: the kit's.
    """

    name: str
    build: Callable[..., Built]
    family: str = "other"
    score: str = "collective"
    per_run: tuple[str, ...] = KIT_PER_RUN
    configure: Callable | None = None
    hyper: Mapping[str, float] | None = None
    build_keywords: tuple[str, ...] = ()
    own: OwnPopulation | None = None

    def config_for(self, config: kit.RunConfig) -> kit.RunConfig:
        """The config a run of this method trains by."""
        return self.configure(config) if self.configure is not None else config


def bytes_record(built: Built, state, steps_done: int, *, data_model: str | None = None) -> dict:
    """The ``bytes`` record (:func:`jaxcomm.ledger.record`) of a run after ``steps_done`` steps, under
    ``data_model`` (default the config's)."""
    data_model = data_model or built.config.data_model
    rows = getattr(state, "pace", None)  # at its own pace: per each node's own steps, and per tick
    node_steps = None if rows is None else (int(population.to_host(rows.steps[steps_done - 1]).sum())
                                            if steps_done else 0)
    return ledger.record(built.booking(state, steps_done, data_model), num_nodes=built.config.num_nodes,
                         steps=steps_done, data_model=data_model, node_steps=node_steps)


def system_of(built: Built, dataset: ImageDataset, eval_split: str | Sequence[str] = "test") -> driver.System:
    """The kit's system of ``built``: mean loss, accuracies of ``models_of(state)`` on ``eval_split`` (the first
    split's in the record, the others' under their names), the ledger's ``bytes`` and the method's own
    ``readings`` (where ``built.readings`` declares them: floats by name)."""
    first, others = classifier.splits_of(dataset, eval_split)
    readings = built.readings

    def extra(state, steps_done: int) -> dict:
        record = {"bytes": bytes_record(built, state, steps_done)}
        if readings is None:
            return record
        return record | {"readings": {name: float(population.to_host(value))
                                      for name, value in readings(state).items()}}

    return classifier.evaluated_system(built, first, built.models_of, also=others, extra=extra)


def _system(method: Method, built: Built, dataset: ImageDataset, eval_split,
            cluster: clock.Cluster | None = None, timeline: pace.Timeline | None = None) -> driver.System:
    system = (method.own.system if method.own else system_of)(built, dataset, eval_split)
    if cluster is None:
        return system
    evaluate = system.evaluate
    if timeline is None:
        return system._replace(evaluate=lambda state, infos, steps_done: evaluate(state, infos, steps_done) | {
            "clock": clock.reading(cluster, built, state, steps_done)})
    rows = timeline.host_rows()

    def evaluate_at_own_pace(state, infos, steps_done: int) -> dict:
        # the evaluation reads the rows as the step does (the ledger: the rounds that closed), from the host
        record = timeline.record(steps_done)
        return evaluate(_with_rows(state, rows), infos, steps_done) | {
            "clock": {"seconds": record["seconds"], "cluster": cluster.label, "own_pace": True}, "pace": record}

    return system._replace(evaluate=evaluate_at_own_pace)


def _with_rows(state, rows: pace.Rows | None):
    return state._replace(pace=rows) if rows is not None and hasattr(state, "pace") else state


def at_own_pace(built: Built, cluster: clock.Cluster | None, own_pace: pace.OwnPace | bool) -> tuple[Built,
                                                                                                     pace.Timeline]:
    """``built`` trained at its own pace on ``cluster``, and its timeline (:func:`jaxcomm.pace.of_run`, the run's seed
    and ``config.num_steps`` ticks), whose rows its step reads from the data (``ShardData.pace``:
    :func:`shard_data` with ``timeline``; without them it steps in lockstep); raises before anything compiles
    where the method cannot (no cluster, or a ``Built`` not made on the kit's population)."""
    if cluster is None:
        raise ValueError("own_pace needs a cluster: the nodes' step times (jaxcomm.clock.Cluster)")
    if not hasattr(built, "waits"):
        raise TypeError(f"{type(built).__name__} cannot train at its own pace: a method trains so when its step "
                        "holds the nodes not due (state.pace) and it states what it waits for (waits), as every "
                        "method built on the kit's population (jaxcomm.kit.nodes) and output sharing do")
    config = built.config
    traffic = () if callable(built.traffic) else built.traffic  # the network's gossip: refused at its own pace
    timeline = pace.of_run(cluster, config.num_nodes, config.num_steps, seed=config.seed, waits=built.waits,
                           traffic=traffic, own_pace=own_pace)
    if built.waits == pace.LOCKSTEP:  # one compiled step per round: its timeline only tells the time
        return built, timeline
    step = built.step

    def paced_step(state, data: classifier.ShardData):  # the rows ride in the data, never in the carried state
        after, info = step(_with_rows(state, data.pace), data)
        return after._replace(pace=None), info

    return dataclasses.replace(built, step=paced_step), timeline


def check_horizon(seconds: float, cluster: clock.Cluster | None, own_pace: pace.OwnPace | bool) -> None:
    """Raises ValueError naming ``until_seconds`` unless it is a finite number > 0 of a run at its own pace."""
    validation.require(validation.is_real(seconds) and 0 < seconds < float("inf"), "until_seconds",
                       "a finite number of virtual seconds > 0", seconds)
    if not own_pace or cluster is None:
        raise ValueError("until_seconds: a horizon in virtual seconds needs own_pace=True and a cluster")


def ticks_until(built: Built, cluster: clock.Cluster | None, own_pace: pace.OwnPace | bool, seconds: float) -> int:
    """The ticks of ``built``'s run at its own pace on ``cluster`` whose virtual time is at or before ``seconds``
    (its timeline, :func:`jaxcomm.pace.of_run`, simulated until it passes them); ValueError before anything
    compiles for a horizon that is not a finite number > 0 or a run not at its own pace."""
    check_horizon(seconds, cluster, own_pace)
    config, traffic = built.config, () if callable(built.traffic) else built.traffic
    count = max(16, config.num_steps)
    while True:
        timeline = pace.of_run(cluster, config.num_nodes, count, seed=config.seed, waits=built.waits, traffic=traffic,
                               own_pace=own_pace)
        if timeline.num_ticks and timeline.time[-1] > seconds:
            return int(np.searchsorted(timeline.time, seconds, side="right"))
        if count >= 1 << 24:
            raise ValueError(f"until_seconds: {count} ticks reach {timeline.time[-1]:g} of {seconds:g} virtual "
                             "seconds: are the cluster's step times > 0?")
        count *= 2


def build(method: Method, config: kit.RunConfig, model: nn.Module, dataset: ImageDataset, *,
          cluster: clock.Cluster | None = None, hyper: Mapping[str, float] | None = None,
          own_pace: pace.OwnPace | bool = False) -> Built:
    """``method.build`` for ``dataset``'s image shape and classes, on the method's config; ``cluster`` and
    ``own_pace`` passed on where the method declares them (:attr:`Method.build_keywords`)."""
    if cluster is not None:  # a bad cluster fails here, naming its field, before the backend is timed
        cluster.check(method.config_for(config).num_nodes)
    values = hyper_of(method, hyper)  # and bad hyperparameters
    unknown = set(method.build_keywords) - set(BUILD_KEYWORDS)
    if unknown:
        raise ValueError(f"{method.name}: build_keywords {sorted(unknown)} are not of {BUILD_KEYWORDS}")
    passed = {"cluster": cluster, "own_pace": own_pace}
    built = method.build(method.config_for(config), model, image_shape=dataset.train.images.shape[1:],
                         num_classes=dataset.num_classes, **{k: passed[k] for k in method.build_keywords})
    return _with_hyper(built, values)


@driver.interruptible
def train(method: Method, config: kit.RunConfig, model: nn.Module, dataset: ImageDataset, *,
          eval_split: str | Sequence[str] = "test", progress: bool = True, desc: str | None = None,
          checkpointer: Checkpointer | None = None, divergence: float | None | BuiltsWatch = BUILTS_WATCH,
          donate: bool | None = None, cluster: clock.Cluster | None = None,
          hyper: Mapping[str, float] | None = None, own_pace: pace.OwnPace | bool = False,
          until_seconds: float | None = None) -> dict:
    """Trains one run of ``method`` under the one driver (:func:`jaxcomm.driver.train`).

    ``hyper``: values of the method's own hyperparameters (:attr:`Method.hyper`) for this run.

    ``cluster`` (a :class:`jaxcomm.clock.Cluster`): every record gets the run's virtual ``clock``
    (:func:`jaxcomm.clock.reading`), and a method whose ``build`` takes the cluster trains under its links
    (output sharing: messages in flight).

    ``own_pace`` (True, or a :class:`jaxcomm.pace.OwnPace`): every node steps at its own pace on ``cluster``
    (:mod:`jaxcomm.pace`): ``config.num_steps`` counts ticks, the nodes not due hold, a method that waits
    (``built.waits``) waits; every record's ``clock`` is the timeline's and its ``pace`` holds each node's steps
    and virtual time and the goodput (:meth:`jaxcomm.pace.Timeline.record`).

    ``until_seconds`` (at its own pace): a horizon in virtual seconds instead of ``config.num_steps``: the run takes
    every tick at or before it (:func:`ticks_until`), however many ticks that is for this method and cluster.

    Returns:
      The driver's dict (``history``: one record per evaluation with ``bytes``, and ``clock`` under a cluster;
      ``final``; ``state``; ...) plus ``built`` (the :class:`Built`), ``method`` (its name) and ``bytes`` (the
      final record's).
    """
    if until_seconds is not None:
        check_horizon(until_seconds, cluster, own_pace)
    built = build(method, checkpoint.pinned(checkpointer, config), model, dataset, cluster=cluster, hyper=hyper,
                  own_pace=own_pace)
    if until_seconds is not None:
        ticks = ticks_until(built, cluster, own_pace, until_seconds)
        if ticks != built.config.num_steps:  # the schedule (a cosine decay) is built for the run's steps
            built = build(method, checkpoint.pinned(checkpointer, config.replace(num_steps=ticks)), model, dataset,
                          cluster=cluster, hyper=hyper, own_pace=own_pace)
    timeline = None
    if own_pace:
        built, timeline = at_own_pace(built, cluster, own_pace)
    checkpoint.record_lift(checkpointer, built)
    config = built.config
    shards = shard_data(method, dataset, config, hyper, timeline=timeline)
    result = driver.train(_system(method, built, dataset, eval_split, cluster, timeline), shards,
                          num_steps=config.num_steps, eval_every=config.eval_every,
                          key=jax.random.PRNGKey(config.seed), progress=progress, desc=desc or method.name,
                          checkpointer=checkpointer, divergence=divergence_of(built, divergence),
                          donate=driver.donation(donate))
    return _finish(result, built, method, timeline)


def load(method: Method, config: kit.RunConfig, model: nn.Module, dataset: ImageDataset,
         directory: str, *, eval_split: str | Sequence[str] = "test", cluster: clock.Cluster | None = None,
         hyper: Mapping[str, float] | None = None, own_pace: pace.OwnPace | bool = False) -> dict:
    """A trained run back from its checkpoints in ``directory`` (a :class:`jaxcomm.checkpoint.Checkpointer`'s
    folder, e.g. ``<out>/checkpoints/<run>`` of an experiment run with ``--keep-checkpoints``), without a
    training step: :func:`train`'s dict at the latest checkpoint (``state``: every node's parameters, model and
    optimiser state; ``history``; ``best``: the best-by-validation values where the run kept them).

    ``config`` must build the run's structure (its nodes, model, method); its ``num_steps`` is read from the
    checkpoint; the state of a run at its own pace holds no timeline (its rows are data), so it loads with or without
    its ``cluster`` and ``own_pace`` (with them, its history's clock and pace records).
    Raises FileNotFoundError without a checkpoint, ValueError for one of another structure.
    """
    checkpointer = Checkpointer(directory, every=1, resume=True)
    steps = checkpointer.latest_step()
    if steps is None:
        raise FileNotFoundError(f"no checkpoint in {directory}")
    return train(method, config.replace(num_steps=steps), model, dataset, eval_split=eval_split, progress=False,
                 checkpointer=checkpointer, cluster=cluster, hyper=hyper, own_pace=own_pace)


def hyper_of(method: Method, hyper: Mapping[str, float] | None = None) -> dict[str, float]:
    """``method.hyper`` with ``hyper``'s values; raises ValueError naming a name the method does not have."""
    own = dict(method.hyper or {})
    for name in hyper or {}:
        if name not in own:
            raise ValueError(f"{method.name} has no hyperparameter {name!r}"
                             f"{validation.did_you_mean(name, list(own)) or '.'} Its own: {sorted(own) or 'none'}")
    values = own | dict(hyper or {})
    for name, value in values.items():  # data of the compiled step: a NaN would only show as a diverging loss
        validation.require(validation.is_real(value) and np.isfinite(value), f"hyper[{name!r}]", "a finite number",
                           value)
    return values


def _settings(method: Method, config: kit.RunConfig, hyper: Mapping[str, float]):
    return method.own.settings(config) if method.own else kit.settings(config, hyper)


def _with_hyper(built: Built, hyper: Mapping[str, float]) -> Built:
    """``built`` with the run's hyperparameters (a method without any keeps its ``Built`` as it is)."""
    return dataclasses.replace(built, hyper=dict(hyper)) if hyper else built


def shard_data(method: Method, dataset: ImageDataset, config: kit.RunConfig,
               hyper: Mapping[str, float] | None = None, *, timeline: pace.Timeline | None = None
               ) -> classifier.ShardData:
    """The data a run of ``method`` steps on: the config's shards on the device and the run's settings (the
    method's ``hyper`` values with ``hyper``'s), as :func:`train` gives them to ``built.step``; with ``timeline``
    (:func:`at_own_pace`'s) its rows, which a step at its own pace reads."""
    data = classifier.shard_data(dataset, config, _settings(method, config, hyper_of(method, hyper)))
    return data if timeline is None else data._replace(pace=timeline.rows())


def _finish(result: dict, built: Built, method: Method, timeline: pace.Timeline | None = None) -> dict:
    final = result["final"]
    out = result | {"built": built, "method": method.name, "bytes": final["bytes"] if final else None}
    if timeline is None:
        return out
    # at its own pace: the timeline, and the state with its rows as the step read them (what bytes_of books from)
    return out | {"timeline": timeline, "state": _with_rows(result["state"], timeline.host_rows())}


def check_runs(method: Method, configs: Sequence[kit.RunConfig]) -> None:
    """Raises ValueError naming the first field outside ``method.per_run`` on which the runs disagree."""
    if not configs:
        raise ValueError("a sweep needs at least one configuration")
    first = configs[0]
    for r, config in enumerate(configs[1:], start=1):
        for field in dataclasses.fields(first):
            a, b = getattr(first, field.name), getattr(config, field.name)
            if field.name not in method.per_run and a != b:
                raise ValueError(f"runs of a sweep of {method.name} must share {field.name} (structure of the one "
                                 f"compiled step): run 0 has {a!r}, run {r} has {b!r}")


@driver.interruptible
def sweep(method: Method, configs: Sequence[kit.RunConfig], model: nn.Module, dataset: ImageDataset, *,
          eval_split: str | Sequence[str] = "test", progress: bool = True, desc: str | None = None,
          checkpointer: Checkpointer | None = None, divergence: float | None | BuiltsWatch = BUILTS_WATCH,
          mode: str = "auto", donate: bool | None = None, cluster: clock.Cluster | None = None,
          hyper: Mapping[str, float] | Sequence[Mapping[str, float]] | None = None,
          own_pace: pace.OwnPace | bool = False, until_seconds: float | None = None) -> list[dict]:
    """Trains R runs of ``method`` as one sweep (:func:`jaxcomm.sweep.train_runs`); each result equals
    :func:`train`'s of the run alone.

    Args:
      method: the method.
      configs: the R runs; they may differ in ``method.per_run`` fields only (else ValueError naming the field).
      mode: "population" (one population of R x N nodes, the step vmapped over runs), "sequential" (run by run,
        one compiled step), or "auto": the built run's ``sweep_mode`` where it names one, else run by run on a CPU
        and one population on an accelerator (:func:`jaxcomm.sweep.choose_mode`).
      hyper: values of the method's own hyperparameters (:attr:`Method.hyper`): one mapping for every run, or one
        per run (e.g. SPARTA's fraction over 0.001-0.05 as one sweep).
      eval_split, progress, desc, checkpointer, divergence, donate, cluster, own_pace: as :func:`train` (at its
        own pace, every run its own timeline, from its seed).
      until_seconds: as :func:`train`: every run to the horizon on its own timeline. Runs of other seeds reach it
        after other numbers of ticks, and the ticks are the compiled step's (its schedule, its chunks), so the runs
        then train one after the other, each :func:`train`'s run alone (``sweep["mode"]`` "sequential").

    Returns:
      R dicts as :func:`train` returns, in the order of ``configs``, each with ``sweep`` = ``{"runs", "mode"}``.
    """
    configs = [method.config_for(checkpoint.pinned(checkpointer, c)) for c in configs]
    method.own.check(configs) if method.own else check_runs(method, configs)
    if hyper is not None and not isinstance(hyper, Mapping) and len(hyper) != len(configs):
        raise ValueError(f"hyper: one mapping for every run, or one per run ({len(configs)}), got {len(hyper)}")
    values = [hyper_of(method, hyper if hyper is None or isinstance(hyper, Mapping) else hyper[r])
              for r in range(len(configs))]
    if until_seconds is not None:
        check_horizon(until_seconds, cluster, own_pace)
        info = {"runs": len(configs), "mode": "sequential"}
        return [train(method, c, model, dataset, eval_split=eval_split, progress=progress,
                      desc=f"{desc or method.name} run {r + 1}" if len(configs) > 1 else desc,
                      checkpointer=None if checkpointer is None else checkpointer.sub(f"run_{r}"),
                      divergence=divergence, donate=donate, cluster=cluster, hyper=h, own_pace=own_pace,
                      until_seconds=until_seconds) | {"sweep": info}
                for r, (c, h) in enumerate(zip(configs, values, strict=True))]
    first = build(method, configs[0], model, dataset, cluster=cluster, own_pace=own_pace)
    if (method.per_run == KIT_PER_RUN and not isinstance(first, kit.Built)
            and len({c.learning_rate for c in configs}) > 1):
        raise ValueError(f"runs of a sweep of {method.name} must share learning_rate: its Built "
                         f"({type(first).__name__}) is not the kit's, whose step reads it as data; declare per_run "
                         "naming learning_rate if its step reads data.settings.learning_rate")
    checkpoint.record_lift(checkpointer, first)
    builts = [_with_hyper(dataclasses.replace(first, config=c) if dataclasses.is_dataclass(first)
                          else first._replace(config=c), h) for c, h in zip(configs, values, strict=True)]
    timelines = [None] * len(builts)
    if own_pace:
        builts, timelines = map(list, zip(*(at_own_pace(b, cluster, own_pace) for b in builts), strict=True))
    base = shard_data(method, dataset, configs[0], values[0])
    datas = [classifier.run_data(base, dataset.train.labels, c, _settings(method, c, h))._replace(
        pace=None if tl is None else tl.rows()) for c, h, tl in zip(configs, values, timelines, strict=True)]
    initial = method.own.initial if method.own else (lambda b, c, r: b.init(jax.random.PRNGKey(c.seed)))
    states = [initial(b, c, r) for r, (b, c) in enumerate(zip(builts, configs, strict=True))]
    mode = sweeps.choose_mode(first.backend, first.sweep_mode if mode == "auto" else mode, first.step_loop,
                              first.family)
    results = sweeps.train_runs([_system(method, b, dataset, eval_split, cluster, tl)
                                 for b, tl in zip(builts, timelines, strict=True)], states, datas,
                                [c.seed for c in configs], mode=mode,
                                num_steps=configs[0].num_steps, eval_every=configs[0].eval_every,
                                nodes_per_run=configs[0].num_nodes, progress=progress, desc=desc or method.name,
                                checkpointer=checkpointer, divergence=divergence_of(first, divergence),
                                donate=driver.donation(donate))
    return [_finish(result, b, method, tl) for result, b, tl in zip(results, builts, timelines, strict=True)]


def bytes_of(result: dict, *, data_model: str | None = None, encoding: str = "raw",
             dataset: str | None = None) -> dict:
    """The ``bytes`` record of a :func:`train` or :func:`sweep` result under ``data_model`` (default the config's):
    the same run counted as if every node held the dataset ("shared": indices travel) or not ("private"); and
    under ``encoding``: inputs as the uint8 arrays held ("raw") or as ``dataset`` (its name) stores them
    ("stored", :func:`jaxcomm.data.stored_bytes_per_image`)."""
    record = bytes_record(result["built"], result["state"], result["steps_done"], data_model=data_model)
    validation.require(encoding in ledger.ENCODINGS, "encoding", f"one of {ledger.ENCODINGS}", encoding)
    if encoding == "raw":
        return record
    raw = result["built"].sample_bytes or 1  # a method that sends no inputs books none
    return ledger.encoded(record, raw_per_input=raw, stored_per_input=data.stored_bytes_per_image(dataset))
