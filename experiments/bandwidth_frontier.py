"""Accuracy against bytes moved: output sharing (thesis ch. 2) against the gradient exchanges it argues against.

    JAXCOMM_DATA_DIR=/work/shared-cifar python experiments/bandwidth_frontier.py --preset cpu
    python experiments/bandwidth_frontier.py --preset smoke --out /tmp/bf      # seconds, shipped MNIST sample
    python experiments/bandwidth_frontier.py report results/bandwidth_frontier  # redraw table.md and the plot

Every method trains on the same N disjoint shards with the CNN, batch, optimiser, schedule and step budget
of the chapter-2 recipe named by ``chapter2_preset`` (:data:`jaxcomm.recipes.PRESETS`, the recipe of
``experiments/outputs_exchange.py``'s preset of that name): every method at ONE horizon, the recipe's
``num_steps``. Each runs with seeds ``seed .. seed + num_seeds - 1``; a seed is the chapter-2 recipe's seed
(shards, initialisations, batches and every draw). A method is scored by its final test accuracy, mean ± sd
over seeds, against the bytes each node sent per step:

* ``outputs:<content>``: Algorithm 2 (:mod:`jaxcomm.network`) exchanging nothing (isolated nodes), true
  labels, logits (soft labels) or features, exactly the chapter-2 rows; accuracy = the collective decision
  (negentropy); bytes = the inbox's measured ``sent`` copies x message size.
* ``sync``: synchronous data-parallel SGD of one shared model (:mod:`jaxcomm.data_parallel`),
  gradients all-reduced densely every step: ring all-reduce bytes 2 (N-1)/N x 4 P.
* ``gossip:<k>``: every node trains its own model and every k steps averages its parameters (and
  BatchNorm statistics) with its in-neighbours on a ring of ``gossip_neighbours``
  (``NetworkConfig.gossip_every``); bytes = neighbours x 4 x (parameters + statistics) / k;
  accuracy = the collective decision.
* ``<compressor>:<setting>[:whole|:layer][:ef|:noef]``: synchronous SGD with each node's gradient
  compressed by :mod:`jaxcomm.compression` before an all-gather ((N-1) x message bytes):
  ``top_k:<fraction>``, ``random_k:<fraction>``, ``sign``, ``qsgd:<levels>`` (QSGD's setting is its number
  of quantisation levels s, not bits: a value costs a sign bit and ceil(log2(s + 1)) level bits); per tensor
  (default) or the whole model as one vector; error feedback by default for top-k and sign (biased), not for
  random-k and QSGD (QSGD with error feedback diverged in a smoke test: its residual is unbiased noise that
  accumulates).
* ``diloco:<H>`` / ``local_sgd:<H>``: every node takes H inner Adam steps from the global model, then
  the average of the nodes' moves steps it (:mod:`jaxcomm.local_sgd`: Nesterov outer SGD at 0.7 /
  0.9, or plain averaging); bytes = one ring all-reduce of the parameters every H steps; accuracy =
  the global model.
* ``codistill:<K>``: every node distils toward its peers' predictions from checkpoints refreshed every
  K steps (:mod:`jaxcomm.codistillation`); bytes = its checkpoint to N - 1 peers every K; accuracy =
  the collective decision.
* ``powersgd:<rank>``: synchronous SGD with rank-r PowerSGD factors all-reduced, error feedback
  (:mod:`jaxcomm.powersgd`).

Rows (:func:`row_name`) say the method and its setting: ``isolated``, ``true_labels``, ``logits``,
``features``, ``sync_sgd``, ``top_k_1pct``, ``sign``, ``qsgd_4lvl_ef``, ``gossip_100``, ``diloco_h50``,
``codistill_k100``, ``powersgd_r4``, ... Output-sharing bytes are counted under the private data model
(:data:`jaxcomm.exchange.DATA_MODELS`: exclusive shards, a message carries its minibatch's images); the same
runs counted under the shared data model (every node holds the dataset: int32 indices travel) are a second
row with the suffix ``_shared``. The data model changes what is counted, not training: no run is repeated.

Node networks (outputs, gossip) train their seeds as one sweep (:func:`jaxcomm.sweep.train_networks`), the
other methods seed after seed. A seed of sync, compressed, local or codistilled SGD whose loss diverges is
recorded as stopped in its row (no accuracy) and the run goes on; a diverging sweep stops the run.

The Pareto front: a row is on it if no row with fewer or equal bytes has a higher mean accuracy
(:func:`frontier`), under the private data model (the ``_shared`` twins left out) and under the shared one
(the twins instead of their private rows).

References:
  Lacaille (2018), §1.3.2.2, §2.1, §2.4; seeds 003 (learned gradient compression) and 004
  (layer-by-layer compression).
"""

from __future__ import annotations

import dataclasses
import math
import pathlib
import sys
import time
from collections.abc import Sequence

import numpy as np

from jaxcomm import (
    bandwidth,
    codistillation,
    compression,
    data,
    data_parallel,
    driver,
    local_sgd,
    network,
    powersgd,
    recipes,
    stats,
    sweep,
)
from jaxcomm.checkpoint import Checkpoints
from jaxcomm.harness import cli as harness_cli
from jaxcomm.harness import report, results
from jaxcomm.validation import integer, one_of, require

EXPERIMENT = "bandwidth_frontier"
FAMILIES = ("outputs", "sync", "gossip", "compressed", "local_sgd", "codistillation")
SWEPT = ("outputs", "gossip")  # node networks: their seeds train as one sweep
DEFAULT_FEEDBACK = {"top_k": True, "sign": True, "random_k": False, "qsgd": False}
CPU_METHODS = (
    "outputs:none", "outputs:true_labels", "sync", "outputs:logits", "diloco:50", "top_k:0.01", "codistill:100",
    "powersgd:4", "gossip:100", "outputs:features", "sign", "qsgd:4:ef", "diloco:10", "diloco:250",
    "codistill:500", "powersgd:1",
)
"""Issue 19's frontier in priority order (a time budget cuts the last ones): one setting of every method first,
then the second settings. QSGD runs with error feedback, as the issue asks, though that diverged in a smoke test
(its residual is unbiased noise that accumulates): a seed that diverges is recorded as stopped in its row."""


@dataclasses.dataclass(frozen=True)
class Method:
    """One parsed method spec (see the module docstring)."""

    name: str
    family: str
    content: str = "none"
    gossip_every: int = 0
    compression: str = "none"
    fraction: float = 0.01
    levels: int = 4
    per_layer: bool = True
    feedback: bool = False
    sync_every: int = 0
    outer: str = ""  # "diloco" (Nesterov, lr 0.7, momentum 0.9) or "average" (local SGD)
    refresh_every: int = 0
    rank: int = 0


def parse_method(spec: str) -> Method:
    """Parses ``spec``; ValueError naming what is wrong."""
    parts = spec.split(":")
    head, args = parts[0], parts[1:]
    bad = ValueError(f"method {spec!r}: expected outputs:<none|true_labels|logits|features>, sync, gossip:<k>, "
                     f"diloco:<H>, local_sgd:<H>, codistill:<K>, powersgd:<rank>, "
                     f"top_k:<fraction>, random_k:<fraction>, sign or qsgd:<levels>, the compressors optionally "
                     f"followed by :whole or :layer and :ef or :noef")
    if head in ("diloco", "local_sgd", "codistill", "powersgd"):
        if len(args) != 1 or not args[0].isdigit() or int(args[0]) < 1:
            raise bad
        value = int(args[0])
        return {"diloco": lambda: Method(spec, "local_sgd", sync_every=value, outer="diloco"),
                "local_sgd": lambda: Method(spec, "local_sgd", sync_every=value, outer="average"),
                "codistill": lambda: Method(spec, "codistillation", refresh_every=value),
                "powersgd": lambda: Method(spec, "compressed", compression="powersgd", rank=value,
                                           feedback=True)}[head]()
    if head == "outputs":
        if len(args) != 1 or args[0] not in ("none", "true_labels", "logits", "features"):
            raise bad
        return Method(spec, "outputs", content=args[0])
    if head == "sync":
        if args:
            raise bad
        return Method(spec, "sync")
    if head == "gossip":
        if len(args) != 1 or not args[0].isdigit() or int(args[0]) < 1:
            raise bad
        return Method(spec, "gossip", gossip_every=int(args[0]))
    if head not in DEFAULT_FEEDBACK:
        raise bad
    takes_setting = head != "sign"
    if takes_setting and not args:
        raise bad
    setting, flags = (args[0], args[1:]) if takes_setting else (None, args)
    if any(flag not in ("whole", "layer", "ef", "noef") for flag in flags) or len(set(flags)) != len(flags):
        raise bad
    kwargs = {"per_layer": "whole" not in flags,
              "feedback": "ef" in flags or (DEFAULT_FEEDBACK[head] and "noef" not in flags)}
    try:
        if head in ("top_k", "random_k"):
            kwargs["fraction"] = float(setting)
        elif head == "qsgd":
            kwargs["levels"] = int(setting)
        compression.check(head, fraction=kwargs.get("fraction", 0.01), levels=kwargs.get("levels", 4),
                          per_layer=kwargs["per_layer"], feedback=kwargs["feedback"])
    except ValueError as error:
        raise ValueError(f"method {spec!r}: {error}") from None
    return Method(spec, "compressed", compression=head, **kwargs)


def _percent(fraction: float) -> str:
    """``fraction`` x 100 without trailing zeros or an exponent: 0.01 -> "1", 0.001 -> "0.1"."""
    return np.format_float_positional(round(fraction * 100, 12), trim="-")


def row_name(method: Method, data_model: str | None = None) -> str:
    """The row of ``method`` in ``summary["rows"]``: the method and its setting.

    ``isolated`` (outputs:none), ``true_labels``, ``logits``, ``features``, ``sync_sgd``, ``gossip_<k>``,
    ``top_k_<percent>pct`` and ``random_k_<percent>pct`` (0.01 -> ``top_k_1pct``, 0.001 -> ``top_k_0.1pct``),
    ``sign``, ``qsgd_<levels>lvl`` (QSGD's setting is its number of levels s, not bits), ``diloco_h<H>``,
    ``local_sgd_h<H>``, ``codistill_k<K>``, ``powersgd_r<rank>``; a compressor adds ``_whole`` (the whole model
    as one vector) and ``_ef``/``_noef`` where its error feedback differs from :data:`DEFAULT_FEEDBACK`.

    Args:
      method: a parsed spec.
      data_model: None or "private": the row whose bytes are the method's own (under the private data model
        for output sharing); "shared": an output-sharing row's twin counted under the shared data model,
        suffixed ``_shared`` (ValueError for methods whose bytes do not depend on it, and for isolated nodes,
        which send nothing).
    """
    one_of("data_model", data_model, (None, "private", "shared"))
    if data_model == "shared" and (method.family != "outputs" or method.content == "none"):
        raise ValueError(f"method {method.name!r} has no row under the shared data model: its bytes do not "
                         "depend on it")
    if method.family == "outputs":
        return ("isolated" if method.content == "none" else method.content) + (
            "_shared" if data_model == "shared" else "")
    if method.family == "sync":
        return "sync_sgd"
    if method.family == "gossip":
        return f"gossip_{method.gossip_every}"
    if method.family == "local_sgd":
        return f"{'diloco' if method.outer == 'diloco' else 'local_sgd'}_h{method.sync_every}"
    if method.family == "codistillation":
        return f"codistill_k{method.refresh_every}"
    if method.compression == "powersgd":
        return f"powersgd_r{method.rank}"
    name = {"top_k": f"top_k_{_percent(method.fraction)}pct", "random_k": f"random_k_{_percent(method.fraction)}pct",
            "sign": "sign", "qsgd": f"qsgd_{method.levels}lvl"}[method.compression]
    if not method.per_layer:
        name += "_whole"
    if method.feedback != DEFAULT_FEEDBACK[method.compression]:
        name += "_ef" if method.feedback else "_noef"
    return name


def row_names(method: Method) -> list[str]:
    """Every row ``method`` fills: its own, then (output sharing but isolated nodes) its ``_shared`` twin."""
    shared = method.family == "outputs" and method.content != "none"
    return [row_name(method)] + ([row_name(method, "shared")] if shared else [])


@dataclasses.dataclass(frozen=True)
class BandwidthFrontierConfig:
    """The frontier of accuracy against bytes per node. The defaults are the cpu preset but its horizon
    (:func:`cpu_config`).

    Attributes:
      chapter2_preset: the chapter-2 recipe (:data:`jaxcomm.recipes.PRESETS`) whose data, CNN, batch,
        optimiser, sharing settings and ``num_steps`` every method uses.
      chapter2_overrides: ``field=value`` changes to that recipe (e.g. ``num_steps=1000``), applied as
        command-line overrides.
      data_dir: where the dataset lives ("" = ``JAXCOMM_DATA_DIR`` or tfds).
      num_nodes: N.
      eval_every: steps between test evaluations (every method is scored at the final step).
      methods: specs (module docstring), run in this order; the time budget cuts the last ones. Their rows
        (:func:`row_name`) must differ.
      gossip_neighbours: out-neighbours on the gossip ring.
      time_budget_s: wall seconds after which no method starts whose estimated time (the mean of the
        methods run so far, all their seeds) would overrun; skipped ones are listed in the summary. A resumed
        run counts the training seconds its checkpoints recorded. 0: no limit.
      seed: the first seed.
      num_seeds: every method runs with seeds ``seed .. seed + num_seeds - 1``, each the chapter-2 recipe's
        seed (shards, initialisations, batches, every draw).
    """

    chapter2_preset: str = "cpu"
    chapter2_overrides: tuple[str, ...] = ()
    data_dir: str = ""
    num_nodes: int = 10
    eval_every: int = 500
    methods: tuple[str, ...] = CPU_METHODS
    gossip_neighbours: int = 2
    time_budget_s: float = 7200.0
    seed: int = 0
    num_seeds: int = 3

    def __post_init__(self):
        one_of("chapter2_preset", self.chapter2_preset, tuple(recipes.PRESETS))
        self.chapter2()  # a bad override fails here, naming its field
        require(isinstance(self.data_dir, str), "data_dir", "a string", self.data_dir)
        integer("num_nodes", self.num_nodes, low=2)
        integer("eval_every", self.eval_every, low=1)
        require(isinstance(self.methods, tuple) and len(self.methods) >= 1
                and len(set(self.methods)) == len(self.methods), "methods", "a non-empty tuple of distinct specs",
                self.methods)
        names = [row_name(parse_method(spec)) for spec in self.methods]
        require(len(set(names)) == len(names), "methods", "specs of distinct rows (e.g. not top_k:0.01 and "
                "top_k:0.01:layer, both top_k_1pct)", self.methods)
        integer("gossip_neighbours", self.gossip_neighbours, low=1, high=self.num_nodes - 1)
        require(isinstance(self.time_budget_s, float | int) and self.time_budget_s >= 0, "time_budget_s",
                "a number of seconds >= 0", self.time_budget_s)
        integer("seed", self.seed)
        integer("num_seeds", self.num_seeds, low=1)

    def chapter2(self) -> recipes.Chapter2Recipe:
        """The chapter-2 recipe every method trains by: the preset, its overrides, this config's data and first
        seed."""
        preset = harness_cli.apply_overrides(recipes.PRESETS[self.chapter2_preset](), self.chapter2_overrides)
        return dataclasses.replace(preset, data_dir=self.data_dir, seed=self.seed)

    def seeds(self) -> list[int]:
        """``seed .. seed + num_seeds - 1``."""
        return [self.seed + i for i in range(self.num_seeds)]


def cpu_config() -> BandwidthFrontierConfig:
    """The current chapter-2 cpu recipe (:func:`jaxcomm.recipes.cpu`: CNN 16-32-64, BatchNorm, dense 128, no
    augmentation, Adam 3e-3 decaying to 0 over the run) at a 1,000-step horizon for every method, shorter than
    Table 2.1's 5,000 (the cosine decay ends at step 1,000), evaluated every 500 steps; 10 nodes, 3 seeds per
    method, the 16 methods of :data:`CPU_METHODS` in priority order. What was cut to fit about 2 hours on 2 CPU
    cores: the horizon; the 2-hour time budget skips the last methods if they would overrun (listed as skipped;
    run them afterwards with ``--out DIR/extra methods=...``)."""
    return BandwidthFrontierConfig(chapter2_overrides=("num_steps=1000",))


def thesis_config() -> BandwidthFrontierConfig:
    """The chapter-2 thesis preset (64-128-256 CNN, Adam 1e-3, 5,000 steps), every method, 3 seeds, no time
    budget, for an accelerator."""
    return BandwidthFrontierConfig(chapter2_preset="thesis", time_budget_s=0.0)


def smoke_config() -> BandwidthFrontierConfig:
    """Seconds: MLP nodes on the shipped MNIST sample, 4 nodes, 2 seeds, one method of each family."""
    return BandwidthFrontierConfig(chapter2_preset="smoke", eval_every=10, time_budget_s=0.0, num_seeds=2,
                                   methods=("outputs:none", "outputs:true_labels", "sync", "gossip:5", "top_k:0.05",
                                            "diloco:5", "codistill:5", "powersgd:1"),
                                   num_nodes=4, gossip_neighbours=1)


PRESETS = {"smoke": smoke_config, "cpu": cpu_config, "thesis": thesis_config}


# --------------------------------------------------------------------------- measurements


def node_network(config: BandwidthFrontierConfig, method: Method) -> network.NetworkConfig:
    """The network config ``method`` reads at the first seed: the chapter-2 rows' (nodes, shards, batch, optimiser,
    schedule, horizon), a ring of ``gossip_neighbours`` averaging every k steps for gossip."""
    net = config.chapter2().network(config.num_nodes, method.content, eval_every=config.eval_every)
    if method.family == "gossip":
        net = net.replace(topology="ring", num_neighbours=config.gossip_neighbours, gossip_every=method.gossip_every)
    return net


def train_sweep(config: BandwidthFrontierConfig, method: Method, dataset, model, *,
                checkpoints: Checkpoints | None, progress: bool) -> tuple[dict[str, dict], list[dict]]:
    """A node network (outputs, gossip) trained with every seed as one sweep; ``({row: row}, curves)``, its rows
    those of :func:`row_names`.

    Accuracy: the collective decision (negentropy). Bytes: :func:`jaxcomm.recipes.summarize`'s measured ones
    under the private data model (the ``_shared`` twin: under the shared one), averaged over seeds by
    :func:`jaxcomm.recipes.summarize_seeds`; gossip: all a node holds to each neighbour every k steps.
    """
    seeds, name = config.seeds(), row_name(method)
    net = node_network(config, method)
    outs = sweep.train_networks([net.replace(seed=s) for s in seeds], model, dataset, progress=progress, desc=name,
                                checkpointer=checkpoints.run(name) if checkpoints else None)
    image_shape = dataset.train.images.shape[1:]
    summaries = [recipes.summarize(out, num_params=bandwidth.model_num_params(model, image_shape)) for out in outs]
    both = recipes.summarize_seeds(summaries, seeds)
    # a population sweep's train_seconds is the whole sweep's: each seed is charged its share
    shares = [out["train_seconds"] / (out["sweep"]["runs"] if out["sweep"]["mode"] == "population" else 1)
              for out in outs]
    per_seed = [{"seed": seed, "accuracy": s["collective_accuracy"], "avg_accuracy": s["avg_accuracy"],
                 "steps": s["steps"], "wall_seconds": round(share, 1)}
                for seed, s, share in zip(seeds, summaries, shares, strict=True)]
    curves = [curves_of(name, method, seed, out["history"]) for seed, out in zip(seeds, outs, strict=True)]
    if method.family == "gossip":  # parameters plus statistics: all a node holds, what gossip averaging sends
        sent = bandwidth.gossip_bytes(config.gossip_neighbours,
                                      bandwidth.model_num_params(model, image_shape, all_variables=True),
                                      method.gossip_every)
        return {name: seed_row(per_seed) | {"bytes_per_node_step": sent, "num_params": both["num_params"]}}, curves
    rows = {}
    for data_model, suffix in (("private", ""), ("shared", "_shared"))[:len(row_names(method))]:
        key = "bytes_sent_per_node_step" + suffix
        rows[row_name(method, data_model)] = seed_row(
            [p | {"bytes_per_node_step": s[key]} for p, s in zip(per_seed, summaries, strict=True)]) | {
            "bytes_per_node_step": both[key], "data_model": data_model, "num_params": both["num_params"],
            "message_bytes": both["message_bytes" + suffix]}
    return rows, curves


def train_one(config: BandwidthFrontierConfig, method: Method, dataset, model, seed: int, *,
              checkpoints: Checkpoints | None, progress: bool) -> dict:
    """One seed of sync, compressed, local SGD or codistillation (one checkpoint folder per method and seed):
    the driver's result plus ``system`` (:func:`jaxcomm.data_parallel.train_evaluated`)."""
    name = f"{row_name(method)}_seed{seed}"
    kwargs = {"progress": progress, "desc": name.replace("_seed", " seed "),
              "checkpointer": checkpoints.run(name) if checkpoints else None}
    net = node_network(config, method).replace(seed=seed)
    if method.family == "local_sgd":
        outer = local_sgd.diloco_outer() if method.outer == "diloco" else local_sgd.local_sgd_outer()
        return local_sgd.train_local_sgd(net, model, dataset, sync_every=method.sync_every, outer=outer, **kwargs)
    if method.family == "codistillation":
        return codistillation.train_codistillation(net, model, dataset, refresh_every=method.refresh_every, **kwargs)
    return data_parallel.train_data_parallel(net, model, dataset, compressor=compressor_of(method), **kwargs)


def compressor_of(method: Method):
    """The gradient compressor of a synchronous or compressed method (None: dense gradients)."""
    if method.compression == "powersgd":
        return powersgd.power_sgd(method.rank)
    return None if method.compression == "none" else compression.make(
        method.compression, fraction=method.fraction, levels=method.levels, per_layer=method.per_layer,
        feedback=method.feedback)


def untrained_system(config: BandwidthFrontierConfig, method: Method, dataset, model):
    """A synchronous or compressed method's system built without training (shapes only): its byte counts,
    for a row whose every seed stopped. None for the other families."""
    if method.family not in ("sync", "compressed"):
        return None
    return data_parallel.make_data_parallel(node_network(config, method), model,
                                            image_shape=dataset.train.images.shape[1:],
                                            num_classes=dataset.num_classes, compressor=compressor_of(method))


def train_seeds(config: BandwidthFrontierConfig, method: Method, dataset, model, *,
                checkpoints: Checkpoints | None, progress: bool) -> tuple[dict[str, dict], list[dict]]:
    """A method without sweeps trained seed after seed; ``({row: row}, curves)``. Accuracy: the shared model's
    (sync, compressed, local SGD), the collective decision (codistillation). A seed whose loss leaves its bounds
    is recorded as ``stopped`` and the next one runs."""
    name, per_seed, curves, system = row_name(method), [], [], None
    for seed in config.seeds():
        try:
            out = train_one(config, method, dataset, model, seed, checkpoints=checkpoints, progress=progress)
        except driver.LossStop as stop:
            print(f"[{name}] seed {seed} stopped: {stop}", flush=True)
            per_seed.append({"seed": seed, "accuracy": None, "avg_accuracy": None, "steps": stop.step,
                             "wall_seconds": 0.0, "stopped": str(stop)})
            continue
        final = out["final"]
        accuracy = (final["collective_accuracy"]["negentropy"] if method.family == "codistillation"
                    else final["avg_accuracy"])
        per_seed.append({"seed": seed, "accuracy": accuracy, "avg_accuracy": final["avg_accuracy"],
                         "steps": out["steps_done"], "wall_seconds": round(out["train_seconds"], 1)})
        curves.append(curves_of(name, method, seed, out["history"]))
        system = out["system"]  # the same bytes and parameters whatever the seed
    # Bytes depend only on the method: a row whose every seed stopped still has them.
    system = system or untrained_system(config, method, dataset, model)
    row = seed_row(per_seed) | {
        "bytes_per_node_step": system.bytes_per_node_step() if system else None,
        "num_params": system.num_params if system else None,
        "message_bytes": getattr(system, "message_bytes", None)}
    return {name: row}, curves


def seed_row(per_seed: list[dict]) -> dict:
    """The numbers of a row over its seeds: ``seeds`` (how many), ``per_seed``, ``accuracy`` and ``avg_accuracy``
    (means; None if a seed stopped, listed in ``stopped``), their sample sds ``accuracy_sd``, ``avg_accuracy_sd``,
    ``steps`` (the horizon: the most a seed trained) and ``wall_seconds`` (training, summed over seeds)."""
    stopped = [f"seed {p['seed']}: {p['stopped']}" for p in per_seed if "stopped" in p]
    row = {"seeds": len(per_seed), "per_seed": per_seed, "steps": max(p["steps"] for p in per_seed),
           "wall_seconds": round(sum(p["wall_seconds"] for p in per_seed), 1)}
    for key in ("accuracy", "avg_accuracy"):
        row[key], row[f"{key}_sd"] = (None, None) if stopped else stats.mean_sd([p[key] for p in per_seed])
    return row | ({"stopped": stopped} if stopped else {})


def curves_of(name: str, method: Method, seed: int, history: list[dict]) -> dict:
    """One seed's accuracy and loss at every evaluation."""
    return {"run": name, "spec": method.name, "family": method.family, "seed": seed,
            "steps": [h["step"] for h in history],
            "accuracy": [round(h["collective_accuracy"]["negentropy"], 3) for h in history],
            "avg_accuracy": [round(h["avg_accuracy"], 3) for h in history],
            "loss": [round(h["loss"], 4) for h in history]}


def run_method(config: BandwidthFrontierConfig, method: Method, dataset, *, checkpoints: Checkpoints | None,
               progress: bool) -> dict:
    """Trains one method with every seed; ``{"rows": {row: row}, "curves": [one per seed]}``.

    Every row: ``family``, ``spec``, ``setting``, :func:`seed_row`'s numbers, ``bytes_per_node_step``,
    ``total_bytes_per_node`` (over the horizon), ``fraction_of_dense_allreduce``, ``num_params``; output
    sharing's ``data_model``.
    """
    model = config.chapter2().model(dataset.num_classes)
    name = row_name(method)
    train = train_sweep if method.family in SWEPT else train_seeds
    rows, curves = train(config, method, dataset, model, checkpoints=checkpoints, progress=progress)
    for row in rows.values():
        sent = row["bytes_per_node_step"]
        dense = bandwidth.allreduce_bytes(config.num_nodes, row["num_params"]) if row["num_params"] else None
        row |= {"family": method.family, "spec": method.name, "setting": dataclasses.asdict(method),
                "total_bytes_per_node": None if sent is None else sent * row["steps"],
                "fraction_of_dense_allreduce": None if sent is None or not dense else sent / dense}
    row = rows[name]
    accuracy = "stopped" if row["accuracy"] is None else f"{row['accuracy']:.1f} ± {row['accuracy_sd']:.1f}"
    print(f"[{name}] accuracy {accuracy} over {row['seeds']} seeds at "
          f"{row['bytes_per_node_step'] or 0:,.0f} B/node/step in {row['wall_seconds']:.0f} s", flush=True)
    return {"rows": rows, "curves": curves}


def frontier(rows: dict[str, dict]) -> list[str]:
    """Rows no row with fewer or equal bytes per node and step beats on (mean) accuracy, by bytes; rows without an
    accuracy (a seed stopped) or bytes are left out."""
    scored = {name: row for name, row in rows.items()
              if row.get("accuracy") is not None and row.get("bytes_per_node_step") is not None}
    names = sorted(scored, key=lambda name: (scored[name]["bytes_per_node_step"], -scored[name]["accuracy"]))
    on, best = [], -math.inf
    for name in names:
        if scored[name]["accuracy"] > best:
            on.append(name)
            best = scored[name]["accuracy"]
    return on


def under(rows: dict[str, dict], data_model: str) -> dict[str, dict]:
    """The rows compared under ``data_model``: "private" leaves the ``_shared`` twins out; "shared" puts each
    twin in place of its private row (every other row counts the same bytes under both)."""
    if data_model == "private":
        return {name: row for name, row in rows.items() if row.get("data_model") != "shared"}
    return {name: row for name, row in rows.items() if f"{name}_shared" not in rows}


def fronts(rows: dict[str, dict]) -> dict[str, list[str]]:
    """``frontier`` (the Pareto front under the private data model) and ``frontier_shared`` (under the shared)."""
    return {"frontier": frontier(under(rows, "private")), "frontier_shared": frontier(under(rows, "shared"))}


def add_paired(rows: dict[str, dict]) -> None:
    """Sets every row's ``paired_diff_vs_isolated`` (mean over seeds of its accuracy minus ``isolated``'s on the
    same seed) and ``paired_diff_vs_isolated_ci95`` (Student-t 95 % interval, :func:`jaxcomm.stats.paired_ci95`;
    None for one seed), where isolated nodes ran with every seed of the row and no seed stopped."""
    base = {p["seed"]: p["accuracy"] for p in rows.get("isolated", {}).get("per_seed", [])}
    for name, row in rows.items():
        pairs = [(p["accuracy"], base.get(p["seed"])) for p in row["per_seed"]]
        if name == "isolated" or not pairs or any(a is None or b is None for a, b in pairs):
            continue
        diffs = [a - b for a, b in pairs]
        row["paired_diff_vs_isolated"] = float(np.mean(diffs))
        row["paired_diff_vs_isolated_ci95"] = list(stats.paired_ci95(diffs, digits=None)) if len(diffs) > 1 else None


def run(config: BandwidthFrontierConfig, *, checkpoints: Checkpoints | None = None, progress: bool = True) -> dict:
    """Runs the methods in order until the time budget; returns ``rows``, ``frontier``, ``frontier_shared``,
    ``skipped``, ``curves``, ``seeds``, the dataset's name and the chapter-2 recipe.

    With ``checkpoints`` every sweep and every (method, seed) saves its state; resumed
    (``checkpoints.resume``), a finished one returns from its checkpoint without a training step
    (:func:`jaxcomm.driver.train`) and an unfinished one continues.
    """
    start = time.perf_counter()
    chapter2 = config.chapter2()
    dataset = chapter2.load()
    rows: dict[str, dict] = {}
    curves, skipped, spent = [], [], []
    restored = 0.0  # training seconds of a resumed run's earlier parts, which this process did not spend
    for spec in config.methods:
        method = parse_method(spec)
        estimate = float(np.mean(spent)) if spent else 0.0
        if config.time_budget_s and time.perf_counter() - start + restored + estimate > config.time_budget_s:
            skipped.append(f"{spec} (estimated {estimate:.0f} s, over the time budget)")
            print(f"skipped {spec}: estimated {estimate:.0f} s, over the time budget", flush=True)
            continue
        began = time.perf_counter()
        out = run_method(config, method, dataset, checkpoints=checkpoints, progress=progress)
        took, trained = time.perf_counter() - began, out["rows"][row_name(method)]["wall_seconds"]
        restored += max(0.0, trained - took)
        spent.append(max(took, trained))
        rows |= out["rows"]
        curves += out["curves"]
    add_paired(rows)
    return {"rows": rows, **fronts(rows), "skipped": skipped, "curves": curves, "seeds": config.seeds(),
            "dataset": dataset.name, "chapter2_config": dataclasses.asdict(chapter2),
            "note": data.LOSSY_CIFAR10_NOTE if chapter2.dataset == "cifar10" else None}


# --------------------------------------------------------------------------- report

MARKERS = {"outputs": "o", "sync": "s", "gossip": "^", "compressed": "D", "local_sgd": "v",
           "codistillation": "P"}


def multi_seed(summary: dict) -> bool:
    """Whether ``summary`` has this format: rows over seeds, named by :func:`row_name`. Earlier runs (the
    superseded frontier) have one seed per method, rows named by their spec, output bytes under the shared
    data model; :func:`single_seed_table` draws them as they were."""
    return "num_seeds" in summary["config"]


def plot_frontier(summary: dict, path: pathlib.Path) -> None:
    """Final accuracy (mean ± sd over seeds) against bytes per node and step (log axis) under the private data
    model, one marker per family, the Pareto front as a step line; rows sending nothing drawn as a line at
    their mean in a band of ± sd."""
    plt = report.pyplot()
    data_model = "private" if multi_seed(summary) else "shared"
    rows = {name: row for name, row in under(summary["rows"], "private").items()
            if row.get("accuracy") is not None and row.get("bytes_per_node_step") is not None}
    sd = {name: row.get("accuracy_sd") or 0.0 for name, row in rows.items()}
    fig, ax = plt.subplots(figsize=(9, 6))
    for family in FAMILIES:
        names = [n for n in rows if rows[n]["family"] == family and rows[n]["bytes_per_node_step"] > 0]
        if not names:
            continue
        ax.errorbar([rows[n]["bytes_per_node_step"] for n in names], [rows[n]["accuracy"] for n in names],
                    yerr=[sd[n] for n in names], fmt=MARKERS[family], capsize=3, markersize=6, label=family)
        for n in names:
            ax.annotate(n, (rows[n]["bytes_per_node_step"], rows[n]["accuracy"]), fontsize=7, xytext=(4, 3),
                        textcoords="offset points")
    for n in [n for n in rows if rows[n]["bytes_per_node_step"] == 0]:
        mean = rows[n]["accuracy"]
        ax.axhline(mean, color="grey", linestyle=":", label=f"{n} (0 bytes" + (", ± sd)" if sd[n] else ")"))
        if sd[n]:
            ax.axhspan(mean - sd[n], mean + sd[n], color="grey", alpha=0.15)
    on = [n for n in summary.get("frontier", []) if n in rows and rows[n]["bytes_per_node_step"] > 0]
    if on:
        ax.step([rows[n]["bytes_per_node_step"] for n in on], [rows[n]["accuracy"] for n in on], where="post",
                color="black", linewidth=0.8, label="Pareto front")
    seeds = len(summary.get("seeds") or ()) or 1
    steps = (summary.get("chapter2_config") or {}).get("num_steps", 0)
    ax.set_xscale("log")
    ax.set_xlabel(f"bytes sent per node and step ({data_model} data model, log scale)")
    ax.set_ylabel("final test accuracy (%)" + (f", mean ± sd over {seeds} seeds" if seeds > 1 else ""))
    ax.set_title(f"Accuracy against bandwidth: {summary['config']['num_nodes']} nodes, every method at {steps:,} "
                 f"steps, {data_model} data model\n(collective decision of node networks and codistillation, the "
                 "one model of synchronous, compressed and local SGD)", fontsize=9)
    ax.grid(alpha=0.3, which="both")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def _bytes(value: float | None) -> str:
    if value is None:
        return "-"
    for unit, size in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if value >= size:
            return f"{value / size:.3g} {unit}"
    return f"{value:.3g} B"


def _vs_isolated(row: dict) -> str:
    """The paired difference from isolated nodes and its 95 % interval, in points."""
    diff, ci = row.get("paired_diff_vs_isolated"), row.get("paired_diff_vs_isolated_ci95")
    if diff is None:
        return "-"
    return f"{diff:+.1f}" + (f" [{ci[0]:+.1f}, {ci[1]:+.1f}]" if ci else "")


def front_sentence(rows: dict[str, dict], on: list[str], data_model: str) -> str:
    """The Pareto front named in order of bytes, each point with its bytes and accuracy."""
    points = " → ".join(f"{n} ({_bytes(rows[n]['bytes_per_node_step'])}, {report.mean_sd_cell(rows[n], 'accuracy')})"
                        for n in on)
    return f"Pareto front under the {data_model} data model, by bytes per node and step: {points or 'none'}."


def _heading(summary: dict) -> list[str]:
    """The title, command, device and redraw lines every frontier table starts with."""
    return report.heading("Bandwidth frontier: output sharing against gradient exchange", summary,
                          "bandwidth_frontier.py")


def _data_line(summary: dict) -> str:
    """The data, the nodes and the chapter-2 recipe every method trains by."""
    config, chapter2 = summary["config"], summary.get("chapter2_config") or {}
    return (f"Data: {summary.get('dataset')}" + (f" ({summary['note']})" if summary.get("note") else "") + ". "
            f"{config['num_nodes']} nodes with disjoint IID shards; the chapter-2 `{config['chapter2_preset']}` "
            "preset" + (f" with `{' '.join(config['chapter2_overrides'])}`" if config.get("chapter2_overrides")
                        else "") + f": {recipes.describe(chapter2)}")


def table_markdown(summary: dict) -> str:
    """table.md of a run over seeds; a single-seed run's as it was drawn (:func:`single_seed_table`)."""
    if not multi_seed(summary):
        return single_seed_table(summary)
    rows, config = summary["rows"], summary["config"]
    chapter2 = summary.get("chapter2_config") or {}
    on = {model: set(summary.get(key, [])) for model, key in (("private", "frontier"), ("shared", "frontier_shared"))}
    lines = [
        *_heading(summary),
        f"{_data_line(summary)}. Every method at one horizon, {chapter2.get('num_steps', 0):,} steps, "
        f"evaluated every {config['eval_every']}; seeds {', '.join(map(str, summary.get('seeds') or []))} (a seed "
        "draws the shards, initialisations and batches; node networks train their seeds as one sweep).",
        "",
        "Accuracy: the final test accuracy, mean ± sd over seeds: the collective decision (negentropy) of node "
        "networks (outputs, gossip) and codistillation, the one model of synchronous, compressed and local SGD; "
        "node average beside it. vs isolated: the mean difference from `isolated` on the same seed, with its "
        "95 % interval (Student t); read a direction only where it excludes 0. Bytes: what each node sends per "
        "step under the private data model (a message carries its minibatch's images; see the module docstring "
        "for each count); 'of dense' = that over a dense ring all-reduce of the same gradients. Rows ending in "
        "`_shared` are the same runs as the row without the suffix, not trained again (the data model changes "
        "what is counted, not training), their messages counted under the shared data model (every node holds "
        "the dataset: int32 indices travel instead of images). Pareto front: no row with fewer or equal bytes "
        "has a higher mean accuracy; 'private' compares the rows without the `_shared` twins, 'shared' the twins "
        "in place of their private rows.",
        "",
        "| row | spec | family | accuracy | node avg | vs isolated [95 % CI] | bytes / node / step | total / node | "
        "of dense | wall s | Pareto front |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    ordered = sorted(rows.items(), key=lambda item: (item[1]["bytes_per_node_step"] is None,
                                                     item[1]["bytes_per_node_step"] or 0))
    for name, row in ordered:
        accuracy = "stopped" if row["accuracy"] is None else report.mean_sd_cell(row, "accuracy")
        of_dense = row["fraction_of_dense_allreduce"]
        lines.append(f"| {name} | `{row['spec']}` | {row['family']} | {accuracy} | "
                     f"{report.mean_sd_cell(row, 'avg_accuracy')} | {_vs_isolated(row)} | "
                     f"{_bytes(row['bytes_per_node_step'])} | {_bytes(row['total_bytes_per_node'])} | "
                     f"{'-' if of_dense is None else f'{of_dense:.2e}'} | {row['wall_seconds']:.0f} | "
                     f"{', '.join(model for model in on if name in on[model])} |")
    lines += ["", front_sentence(rows, summary.get("frontier", []), "private"), "",
              front_sentence(rows, summary.get("frontier_shared", []), "shared")]
    for name, row in rows.items():
        if row.get("stopped"):
            lines += ["", f"{name} stopped: " + "; ".join(row["stopped"]) + "."]
    for extra in summary.get("extra_runs", []):
        lines += ["", f"Rows {', '.join(extra['methods'])} come from a second run, with the same settings, of the "
                  f"methods the time budget skipped: `{extra['command']}` ({extra['wall_seconds']:.0f} s, commit "
                  f"`{extra['git_commit']}`)."]
    for other in summary.get("other_runs", []):
        folder = other["folder"]
        lines += ["", ("The superseded frontier is in `superseded/`" if folder == "superseded" else
                       f"`{folder}/` holds another run") + f" (`{other['command']}`), not merged: "
                  + "; ".join(other["reasons"]) + f". Its own table: `{folder}/table.md`."]
    if summary.get("skipped"):
        lines += ["", "Skipped by the time budget: " + "; ".join(summary["skipped"]) + "."]
    lines += ["", "![frontier](frontier.png)"]
    return "\n".join(lines) + "\n"


def single_seed_table(summary: dict) -> str:
    """table.md of a run from before the frontier had seeds (one per method, rows named by spec), byte for byte
    as it was drawn."""
    rows, config = summary["rows"], summary["config"]
    on = set(summary.get("frontier", []))
    chapter2 = summary.get("chapter2_config") or {}
    lines = [
        *_heading(summary),
        f"{_data_line(summary)}, {chapter2.get('num_steps', 0):,} steps, seed {config['seed']} "
        "(batches per node). "
        "Accuracy: the collective decision (negentropy) of the node networks, the shared model's for synchronous "
        "SGD; node average beside it. Bytes: what each node sends per step (see the module docstring for each "
        "count); 'of dense' = that over a dense ring all-reduce of the same gradients.",
        "",
        "| method | family | accuracy | node avg | bytes / node / step | total / node | of dense | wall s | "
        "frontier |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for name, row in sorted(rows.items(), key=lambda item: item[1]["bytes_per_node_step"]):
        lines.append(f"| {name} | {row['family']} | {row['accuracy']:.1f} | {row['avg_accuracy']:.1f} | "
                     f"{_bytes(row['bytes_per_node_step'])} | {_bytes(row['total_bytes_per_node'])} | "
                     f"{row['fraction_of_dense_allreduce']:.2e} | {row['wall_seconds']:.0f} | "
                     f"{'yes' if name in on else ''} |")
    for extra in summary.get("extra_runs", []):
        lines += ["", f"Rows {', '.join(extra['methods'])} come from a second run, with the same settings, of the "
                  f"methods the time budget skipped: `{extra['command']}` ({extra['wall_seconds']:.0f} s, commit "
                  f"`{extra['git_commit']}`)."]
    if summary.get("skipped"):
        lines += ["", "Skipped by the time budget: " + "; ".join(summary["skipped"]) + "."]
    lines += ["", "![frontier](frontier.png)"]
    return "\n".join(lines) + "\n"


CHAPTER2_SELECTION = ("data_dir", "backend")
"""Recipe fields a frontier run does not train by (where the data lives, how fast). Fields outside the recipe
(:class:`jaxcomm.recipes.Chapter2Recipe`), which older summaries' chapter-2 configs hold (the chapter-2
experiment's rows, studies, evaluations, target), are not compared either."""
RECIPE_FIELDS = frozenset(f.name for f in dataclasses.fields(recipes.Chapter2Recipe))
SELECTION = ("methods", "time_budget_s", "data_dir", "eval_every", "chapter2_overrides")
"""Fields of two frontier runs that may differ when one's rows join the other's (what ran, when evaluated;
the overrides are compared by their effect, the chapter-2 configs)."""


def _recipe(chapter2_config: dict) -> dict:
    return {k: v for k, v in chapter2_config.items() if k in RECIPE_FIELDS}


def merge_refusals(summary: dict, other: dict) -> list[str]:
    """Why ``other``'s rows may not join ``summary``'s (none: they may): another format (:func:`multi_seed`), or
    settings that train otherwise (:data:`SELECTION`, :data:`CHAPTER2_SELECTION`), named with ``other``'s values."""
    reasons = []
    if multi_seed(other) != multi_seed(summary):
        reasons.append("one seed per method, rows named by spec (the format before seeds)" if multi_seed(summary)
                       else "several seeds per method (a later format)")
    changed = (results.changed_settings(summary["config"], other["config"], selection=SELECTION)
               | results.changed_settings(_recipe(summary["chapter2_config"]), _recipe(other["chapter2_config"]),
                                          selection=CHAPTER2_SELECTION))
    if changed:
        reasons.append("trains with other settings: " + ", ".join(f"{k}={v}" for k, v in changed.items()))
    return reasons


def merge_runs(out_dir: pathlib.Path) -> dict:
    """The run in ``out_dir`` plus the rows of runs in its subfolders (e.g. methods a time budget skipped, run
    afterwards with ``--out DIR/extra methods=...``); the fronts and paired differences are recomputed over all
    rows. A subfolder run of another format or that trains otherwise (:func:`merge_refusals`; e.g.
    ``superseded/``) is left out, with a line saying so, and listed in ``other_runs``."""
    summary, _ = results.read_run(out_dir)
    summary["extra_runs"], summary["other_runs"] = [], []
    for extra, _ in results.read_runs_below(out_dir, experiment=EXPERIMENT):
        reasons = merge_refusals(summary, extra)
        if reasons:
            print(f"not merged: {extra['out_dir']} ({'; '.join(reasons)})", flush=True)
            summary["other_runs"].append({"folder": pathlib.Path(extra["out_dir"]).name, "command": extra["command"],
                                          "reasons": reasons})
            continue
        summary["rows"] |= extra["rows"]
        summary["extra_runs"].append({"command": extra["command"], "wall_seconds": extra["wall_seconds"],
                                      "git_commit": extra["git_commit"], "methods": list(extra["rows"])})
        specs = {row.get("spec", name) for name, row in extra["rows"].items()}
        summary["skipped"] = [s for s in summary.get("skipped", []) if s.split(" ")[0] not in specs]
    if multi_seed(summary):
        add_paired(summary["rows"])
        summary |= fronts(summary["rows"])
    else:
        summary["frontier"] = frontier(summary["rows"])
    return summary


def write_report(out_dir: pathlib.Path, *, plots: bool = True) -> None:
    """Writes table.md, then (with ``plots``) frontier.png, from the run in ``out_dir`` and the runs below it."""
    summary = merge_runs(out_dir)
    report.write_table(out_dir, table_markdown(summary))
    if plots:
        report.draw(frontier=lambda: plot_frontier(summary, pathlib.Path(out_dir) / "frontier.png"))


def cli(argv: Sequence[str] | None = None) -> int:
    """``report DIR`` redraws table.md and the plot; anything else runs the experiment."""
    return harness_cli.cli(argv, experiment=EXPERIMENT, presets=PRESETS, run=run, description=__doc__,
                          write_report=write_report)


if __name__ == "__main__":
    sys.exit(cli())
