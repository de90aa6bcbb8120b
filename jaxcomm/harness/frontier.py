"""The bandwidth frontier: every method on the same shards at one horizon, accuracy against bytes per node.

    from jaxcomm.harness import frontier
    summary = frontier.run(frontier.smoke_config(), methods=[my_method])   # research code's method beside the zoo

Every method trains on the same N disjoint shards with the CNN, batch, optimiser, schedule and step budget
of the chapter-2 recipe named by ``chapter2_preset`` (:data:`jaxcomm.recipes.PRESETS`): every method at ONE
horizon, the recipe's ``num_steps``. Each runs with seeds ``seed .. seed + num_seeds - 1``, trained as one sweep
(:func:`jaxcomm.methods.sweep`); a seed is the chapter-2 recipe's seed (shards, initialisations, and, by named
streams, the same minibatches for every method). A method is scored by its final test accuracy, mean ± sd over
seeds (the collective decision of node networks and codistillation, the one model of synchronous, compressed and
local SGD), against the bytes each node sent per step, read from the one byte ledger (:mod:`jaxcomm.ledger`).

Methods are values (:class:`jaxcomm.methods.Method`): the config's ``methods`` are specs of the zoo
(:func:`jaxcomm.zoo.parse`), and research code passes its own to :func:`run`. A row is named by its method's
name. Output sharing's bytes are counted under the private data model (exclusive shards, a message carries its
minibatch's images); where a method's bytes differ under the shared data model (every node holds the dataset:
int32 indices travel) the same runs fill a second row suffixed ``_shared``. A sweep whose loss diverges is
trained again seed by seed, and a seed that diverges is recorded as stopped in its row.

The Pareto front (:func:`pareto`): a row is on it if no row with fewer or equal bytes has a higher mean
accuracy, under the private data model (the ``_shared`` twins left out) and under the shared one (the twins
instead of their private rows). ``python -m experiments.bandwidth_frontier`` runs and reports it,
``python -m experiments.time_frontier`` reads it in time.
"""

from __future__ import annotations

import dataclasses
import math
import pathlib
import time
from collections.abc import Sequence

import jax
import numpy as np

from jaxcomm import bandwidth, clock, data, driver, recipes, stats, zoo
from jaxcomm import methods as methods_
from jaxcomm.checkpoint import Checkpoints
from jaxcomm.harness import cli as harness_cli
from jaxcomm.harness import results
from jaxcomm.validation import integer, one_of, require

EXPERIMENT = "bandwidth_frontier"
CPU_METHODS = (
    "outputs:none", "outputs:true_labels", "sync", "outputs:logits", "diloco:50", "top_k:0.01", "codistill:100",
    "powersgd:4", "gossip:100", "outputs:features", "sign", "qsgd:4:ef", "diloco:10", "diloco:250",
    "codistill:500", "powersgd:1",
)
"""Issue 19's frontier in priority order (a time budget cuts the last ones): one setting of every method first,
then the second settings. QSGD runs with error feedback, as the issue asks, though that diverged in a smoke test
(its residual is unbiased noise that accumulates): a seed that diverges is recorded as stopped in its row."""


@dataclasses.dataclass(frozen=True)
class FrontierConfig:
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
      methods: specs (:func:`jaxcomm.zoo.parse`), run in this order; the time budget cuts the last ones. Their
        rows (the methods' names) must differ.
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
        integer("gossip_neighbours", self.gossip_neighbours, low=1, high=self.num_nodes - 1)
        names = [method.name for method in self.parsed()]
        require(len(set(names)) == len(names), "methods", "specs of distinct rows (e.g. not top_k:0.01 and "
                "top_k:0.01:layer, both top_k_1pct)", self.methods)
        require(isinstance(self.time_budget_s, float | int) and self.time_budget_s >= 0, "time_budget_s",
                "a number of seconds >= 0", self.time_budget_s)
        integer("seed", self.seed)
        integer("num_seeds", self.num_seeds, low=1)

    def chapter2(self) -> recipes.Chapter2Recipe:
        """The chapter-2 recipe every method trains by: the preset, its overrides, this config's data and first
        seed."""
        preset = harness_cli.apply_overrides(recipes.PRESETS[self.chapter2_preset](), self.chapter2_overrides)
        return dataclasses.replace(preset, data_dir=self.data_dir, seed=self.seed)

    def parsed(self) -> list[methods_.Method]:
        """The methods of :attr:`methods`, output sharing with the chapter-2 recipe's sharing settings."""
        return [zoo.parse(spec, recipe=self.chapter2(), gossip_neighbours=self.gossip_neighbours)
                for spec in self.methods]

    def seeds(self) -> list[int]:
        """``seed .. seed + num_seeds - 1``."""
        return [self.seed + i for i in range(self.num_seeds)]


def cpu_config() -> FrontierConfig:
    """The current chapter-2 cpu recipe (:func:`jaxcomm.recipes.cpu`: CNN 16-32-64, BatchNorm, dense 128, no
    augmentation, Adam 3e-3 decaying to 0 over the run) at a 1,000-step horizon for every method, shorter than
    Table 2.1's 5,000 (the cosine decay ends at step 1,000), evaluated every 500 steps; 10 nodes, 3 seeds per
    method, the 16 methods of :data:`CPU_METHODS` in priority order. What was cut to fit about 2 hours on 2 CPU
    cores: the horizon; the 2-hour time budget skips the last methods if they would overrun (listed as skipped;
    run them afterwards with ``--out DIR/extra methods=...``)."""
    return FrontierConfig(chapter2_overrides=("num_steps=1000",))


def thesis_config() -> FrontierConfig:
    """The chapter-2 thesis preset (64-128-256 CNN, Adam 1e-3, 5,000 steps), every method, 3 seeds, no time
    budget, for an accelerator."""
    return FrontierConfig(chapter2_preset="thesis", time_budget_s=0.0)


def smoke_config() -> FrontierConfig:
    """Seconds: MLP nodes on the shipped MNIST sample, 4 nodes, 2 seeds, one method of each family."""
    return FrontierConfig(chapter2_preset="smoke", eval_every=10, time_budget_s=0.0, num_seeds=2,
                                   methods=("outputs:none", "outputs:true_labels", "sync", "gossip:5", "top_k:0.05",
                                            "diloco:5", "codistill:5", "powersgd:1"),
                                   num_nodes=4, gossip_neighbours=1)


PRESETS = {"smoke": smoke_config, "cpu": cpu_config, "thesis": thesis_config}


# --------------------------------------------------------------------------- measurements


def base_network(config: FrontierConfig, seed: int):
    """The network config every method starts from (its ``configure`` sets what it needs, e.g. output sharing's
    p_c and p_b): the chapter-2 rows' nodes, shards, batch, optimiser, schedule and horizon, sharing nothing, on
    the frontier's one stated graph, gossip's ring of ``gossip_neighbours``: every method that reads the config's
    graph (gossip, sparse averaging, a researcher's own) runs on it unless it sets its own (output sharing: the
    thesis' fully connected network)."""
    return config.chapter2().network(config.num_nodes, "none", eval_every=config.eval_every).replace(
        seed=seed, topology="ring", num_neighbours=config.gossip_neighbours)


def graph_name(config) -> str:
    """How a table names a run's graph: "full", "ring(p)", or the topology's name."""
    return f"ring({config.num_neighbours})" if config.topology == "ring" else config.topology


def uses_graph(method: methods_.Method, built) -> bool:
    """Whether a method's runs read the graph: output sharing, or a schedule that sends to neighbours."""
    traffic = built.traffic
    return method.family == "outputs" or (not callable(traffic) and any(r.pattern == "neighbours" for r in traffic))


def train_seeds(config: FrontierConfig, method: methods_.Method, dataset, model, *,
                checkpoints: Checkpoints | None, progress: bool, cluster: clock.Cluster | None = None) -> list[dict]:
    """Every seed of ``method``: one sweep (:func:`jaxcomm.methods.sweep`, under ``cluster`` if given); if its loss
    leaves its bounds, seed by seed, a stopped seed recorded as ``{"seed", "stopped"}``. Each result gains ``seed``
    and ``wall_seconds`` (a population sweep's training time shared out over its seeds)."""
    seeds, name = config.seeds(), method.name
    runs = [base_network(config, s) for s in seeds]
    try:
        outs = methods_.sweep(method, runs, model, dataset, progress=progress, desc=name, cluster=cluster,
                             checkpointer=checkpoints.run(name) if checkpoints else None)
    except driver.LossStop as stop:
        print(f"[{name}] the sweep stopped ({stop}); seed by seed", flush=True)
        outs = []
        for seed, run_config in zip(seeds, runs, strict=True):
            try:
                outs.append(methods_.train(method, run_config, model, dataset, progress=progress, cluster=cluster,
                                          desc=f"{name} seed {seed}", checkpointer=checkpoints.run(
                                              f"{name}_seed{seed}") if checkpoints else None))
            except driver.LossStop as seed_stop:
                print(f"[{name}] seed {seed} stopped: {seed_stop}", flush=True)
                outs.append({"stopped": str(seed_stop), "steps_done": seed_stop.step})
    return [out | {"seed": seed, "wall_seconds": 0.0 if "stopped" in out else float(
        out["train_seconds"] / (out["sweep"]["runs"] if out.get("sweep", {}).get("mode") == "population" else 1))}
        for seed, out in zip(seeds, outs, strict=True)]


def seed_row(per_seed: list[dict]) -> dict:
    """The numbers of a row over its seeds: ``seeds`` (how many), ``per_seed``, ``accuracy`` and ``avg_accuracy``
    (means; None if a seed stopped, listed in ``stopped``), their sample sds ``accuracy_sd``, ``avg_accuracy_sd``,
    ``steps`` (the horizon: the most a seed trained) and ``wall_seconds`` (training, summed over seeds)."""
    stopped = [f"seed {p['seed']}: {p['stopped']}" for p in per_seed if "stopped" in p]
    row = {"seeds": len(per_seed), "per_seed": per_seed, "steps": max(p["steps"] for p in per_seed),
           "wall_seconds": float(sum(p["wall_seconds"] for p in per_seed))}
    for key in ("accuracy", "avg_accuracy"):
        row[key], row[f"{key}_sd"] = (None, None) if stopped else stats.mean_sd([p[key] for p in per_seed])
    return row | ({"stopped": stopped} if stopped else {})


def curves_of(name: str, method: methods_.Method, seed: int, history: list[dict]) -> dict:
    """One seed's accuracy and loss at every evaluation (and its virtual seconds, trained under a cluster)."""
    return {"run": name, "spec": method.name, "family": method.family, "seed": seed,
            "steps": [h["step"] for h in history],
            "accuracy": [round(h["collective_accuracy"]["negentropy"], 3) for h in history],
            "avg_accuracy": [round(h["avg_accuracy"], 3) for h in history],
            "loss": [round(h["loss"], 4) for h in history],
            **({"readings": {key: [h["readings"][key] for h in history] for key in history[0]["readings"]}}
               if history and "readings" in history[0] else {}),
            **({"seconds": [h["clock"]["seconds"] for h in history],
                "counters": history[-1].get("counters")} if history and "clock" in history[0] else {})}


def run_method(config: FrontierConfig, method: methods_.Method, dataset, *, spec: str | None = None,
               checkpoints: Checkpoints | None, progress: bool, cluster: clock.Cluster | None = None) -> dict:
    """Trains one method with every seed; ``{"rows": {row: row}, "curves": [one per seed]}``.

    Every row: ``family``, ``spec``, :func:`seed_row`'s numbers, ``bytes_per_node_step`` (the ledger's, mean over
    seeds), ``bytes_by_kind``, ``total_bytes_per_node`` (over the horizon), ``fraction_of_dense_allreduce``,
    ``num_params``, ``data_model``, ``graph`` (the graph it ran on, "-" for a method that reads none), and where
    the dataset has a stored encoding ``bytes_per_node_step_stored`` and
    ``bytes_by_kind_stored`` (inputs as the dataset stores them); a ``<name>_shared`` twin where the bytes differ
    under the shared data model.
    """
    model = config.chapter2().model(dataset.num_classes)
    name = method.name
    outs = train_seeds(config, method, dataset, model, checkpoints=checkpoints, progress=progress, cluster=cluster)
    done = [out for out in outs if "stopped" not in out]
    if not done:  # bytes depend on the method, not on training: booked for an untrained run of the horizon
        built = methods_.build(method, base_network(config, config.seed), model, dataset)
        done_like = [{"built": built, "state": built.init(jax.random.PRNGKey(config.seed)),
                      "steps_done": built.config.num_steps}]
    ledgers = {model_: [methods_.bytes_of(out, data_model=model_) for out in done or done_like]
               for model_ in ("private", "shared")}
    stored = getattr(dataset, "name", None) in data.STORED_BYTES_PER_IMAGE  # inputs as the dataset stores them
    encoded = {model_: [methods_.bytes_of(out, data_model=model_, encoding="stored", dataset=dataset.name)
                        for out in done or done_like] for model_ in ("private", "shared")} if stored else None
    twin = any(a["total"] != b["total"] for a, b in zip(ledgers["private"], ledgers["shared"], strict=True))
    num_params = bandwidth.model_num_params(model, dataset.train.images.shape[1:])
    dense = bandwidth.allreduce_bytes(config.num_nodes, num_params)
    score = "avg_accuracy" if method.score == "model" else "collective"
    rows, curves = {}, [curves_of(name, method, out["seed"], out["history"]) for out in done]
    for data_model in ("private", "shared") if twin else ("private",):
        per_seed, records = [], iter(ledgers[data_model])
        for out in outs:
            if "stopped" in out:
                per_seed.append({"seed": out["seed"], "accuracy": None, "avg_accuracy": None,
                                 "steps": out["steps_done"], "wall_seconds": 0.0, "stopped": out["stopped"]})
                continue
            final, record = out["final"], next(records)
            per_seed.append({"seed": out["seed"], "accuracy": final["avg_accuracy"] if score == "avg_accuracy"
                             else final["collective_accuracy"]["negentropy"], "avg_accuracy": final["avg_accuracy"],
                             "steps": out["steps_done"], "wall_seconds": out["wall_seconds"],
                             "bytes_per_node_step": record["per_node_step"]})
        row = seed_row(per_seed)
        sent = float(np.mean([r["per_node_step"] for r in ledgers[data_model]]))
        by_kind = {k: float(np.mean([r["by_kind"][k] for r in ledgers[data_model]]))
                   for k in ledgers[data_model][0]["by_kind"]}
        built = (done or done_like)[0]["built"]
        rows[name + ("_shared" if data_model == "shared" else "")] = row | {
            "family": method.family, "spec": spec or name, "bytes_per_node_step": sent, "bytes_by_kind": by_kind,
            "graph": graph_name(built.config) if uses_graph(method, built) and sent > 0 else "-",  # isolated: none
            "data_model": data_model, "num_params": num_params,
            "total_bytes_per_node": sent * row["steps"], "fraction_of_dense_allreduce": sent / dense}
        if encoded:
            rows[name + ("_shared" if data_model == "shared" else "")] |= {
                "bytes_per_node_step_stored": float(np.mean([r["per_node_step"] for r in encoded[data_model]])),
                "bytes_by_kind_stored": {k: float(np.mean([r["by_kind"][k] for r in encoded[data_model]]))
                                         for k in encoded[data_model][0]["by_kind"]}}
    row = rows[name]
    accuracy = "stopped" if row["accuracy"] is None else f"{row['accuracy']:.1f} ± {row['accuracy_sd']:.1f}"
    print(f"[{name}] accuracy {accuracy} over {row['seeds']} seeds at "
          f"{row['bytes_per_node_step'] or 0:,.0f} B/node/step in {row['wall_seconds']:.0f} s", flush=True)
    return {"rows": rows, "curves": curves}
def load_run(out_dir: str | pathlib.Path, row: str, seed: int, *, methods: Sequence[methods_.Method] = ()) -> dict:
    """A run of a frontier experiment saved with ``--keep-checkpoints``, back from its checkpoints without a training
    step, with everything needed to use it.

    Args:
      out_dir: the experiment's folder (its ``summary.json`` and ``checkpoints/``).
      row: a row of its table (a ``_shared`` twin is the same run).
      seed: one of the run's seeds.
      methods: method values of research code the run trained (matched by name); the others are rebuilt from the
        row's spec (:func:`jaxcomm.zoo.parse`).

    Returns:
      :func:`jaxcomm.methods.sweep`'s dict of that seed (``state``: every node's model and optimiser state;
      ``history``; ``bytes``; ``built``) plus ``method`` (the value), ``config`` (the run's), ``model`` and
      ``dataset``.

    Raises:
      KeyError naming the rows, ValueError naming the seeds, FileNotFoundError where no checkpoint was kept.
    """
    out = pathlib.Path(out_dir)
    summary = results.read_run(out)[0]
    name = row.removesuffix("_shared")
    if name not in summary["rows"]:
        raise KeyError(f"no row {row!r} in {out / 'summary.json'}; its rows: {', '.join(summary['rows'])}")
    config = results.config_from(FrontierConfig, summary["config"])
    seeds = config.seeds()
    if seed not in seeds:
        raise ValueError(f"seed {seed} is not one of the run's seeds {seeds}")
    chapter2 = config.chapter2()
    method = {m.name: m for m in methods}.get(name) or zoo.parse(
        summary["rows"][name]["spec"], recipe=chapter2, gossip_neighbours=config.gossip_neighbours)
    dataset = chapter2.load()
    model = chapter2.model(dataset.num_classes)
    saved = Checkpoints(out / "checkpoints", every=1, resume=True)
    alone = out / "checkpoints" / f"{method.name}_seed{seed}"  # a sweep that stopped went on seed by seed
    if alone.is_dir():
        got = methods_.load(method, base_network(config, seed), model, dataset, str(alone))
    elif (out / "checkpoints" / method.name).is_dir():
        got = methods_.sweep(method, [base_network(config, s) for s in seeds], model, dataset, progress=False,
                             checkpointer=saved.run(method.name))[seeds.index(seed)]
    else:
        raise FileNotFoundError(f"no checkpoints of {method.name} in {out / 'checkpoints'}: run the experiment "
                                "with --keep-checkpoints")
    return got | {"method": method, "config": got["built"].config, "model": model, "dataset": dataset}


def pareto(rows: dict[str, dict]) -> list[str]:
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
    return {"frontier": pareto(under(rows, "private")), "frontier_shared": pareto(under(rows, "shared"))}


def add_paired(rows: dict[str, dict]) -> None:
    """Sets every row's ``paired_diff_vs_isolated`` (mean over seeds of its accuracy minus ``isolated``'s on the
    same seed), ``paired_diff_vs_isolated_ci95`` (Student-t 95 % interval, :func:`jaxcomm.stats.paired_ci95`;
    None for one seed) and ``paired_diff_vs_isolated_p`` (the paired t-test's p-value; None for one seed or a zero
    spread, which is not tested), where isolated nodes ran with every seed of the row and no seed stopped."""
    base = {p["seed"]: p["accuracy"] for p in rows.get("isolated", {}).get("per_seed", [])}
    for name, row in rows.items():
        pairs = [(p["accuracy"], base.get(p["seed"])) for p in row["per_seed"]]
        if name == "isolated" or not pairs or any(a is None or b is None for a, b in pairs):
            continue
        diffs = [a - b for a, b in pairs]
        row["paired_diff_vs_isolated"] = float(np.mean(diffs))
        row["paired_diff_vs_isolated_ci95"] = list(stats.paired_ci95(diffs, digits=None)) if len(diffs) > 1 else None
        row["paired_diff_vs_isolated_p"] = stats.paired_t_p_value(diffs) if len(set(diffs)) > 1 else None


def run(config: FrontierConfig, *, methods: Sequence[methods_.Method] = (),
        checkpoints: Checkpoints | None = None, progress: bool = True) -> dict:
    """Runs the config's methods, then ``methods`` (values, e.g. research code's own), in order until the time
    budget; returns ``rows``, ``frontier``, ``frontier_shared``, ``skipped``, ``curves``, ``seeds``, the dataset's
    name and the chapter-2 recipe.

    With ``checkpoints`` every sweep saves its state; resumed (``checkpoints.resume``), a finished one returns from
    its checkpoint without a training step (:func:`jaxcomm.driver.train`) and an unfinished one continues.
    """
    start = time.perf_counter()
    chapter2 = config.chapter2()
    dataset = chapter2.load()
    todo = [*zip(config.methods, config.parsed(), strict=True), *((m.name, m) for m in methods)]
    names = [m.name for _, m in todo]
    if len(set(names)) != len(names):
        raise ValueError(f"methods must have distinct names (rows): {names}")
    rows: dict[str, dict] = {}
    curves, skipped, spent = [], [], []
    restored = 0.0  # training seconds of a resumed run's earlier parts, which this process did not spend
    for spec, method in todo:
        estimate = float(np.mean(spent)) if spent else 0.0
        if config.time_budget_s and time.perf_counter() - start + restored + estimate > config.time_budget_s:
            skipped.append(f"{spec} (estimated {estimate:.0f} s, over the time budget)")
            print(f"skipped {spec}: estimated {estimate:.0f} s, over the time budget", flush=True)
            continue
        began = time.perf_counter()
        out = run_method(config, method, dataset, spec=spec, checkpoints=checkpoints, progress=progress)
        took, trained = time.perf_counter() - began, out["rows"][method.name]["wall_seconds"]
        restored += max(0.0, trained - took)
        spent.append(max(took, trained))
        rows |= out["rows"]
        curves += out["curves"]
    add_paired(rows)
    return {"rows": rows, **fronts(rows), "skipped": skipped, "curves": curves, "seeds": config.seeds(),
            "dataset": dataset.name, "chapter2_config": dataclasses.asdict(chapter2),
            "note": data.LOSSY_CIFAR10_NOTE if chapter2.dataset == "cifar10" else None}


MARKERS = {"outputs": "o", "sync": "s", "gossip": "^", "compressed": "D", "local_sgd": "v",
           "codistillation": "P", "sparse_averaging": "X"}  # other families: "*"


def multi_seed(summary: dict) -> bool:
    """Whether ``summary`` has this format: rows over seeds, named by their methods' names. Earlier runs (the
    superseded frontier) have one seed per method, rows named by their spec, output bytes under the shared
    data model (``experiments/bandwidth_frontier/report.py`` draws them as they were)."""
    return "num_seeds" in summary["config"]


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
        summary["frontier"] = pareto(summary["rows"])
    return summary
