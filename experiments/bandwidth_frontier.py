"""Accuracy against bytes moved: output sharing (thesis ch. 2) against the gradient exchanges it argues against.

    JAXCOMM_DATA_DIR=/work/shared-cifar python experiments/bandwidth_frontier.py --preset cpu
    python experiments/bandwidth_frontier.py --preset smoke --out /tmp/bf      # seconds, shipped MNIST sample
    python experiments/bandwidth_frontier.py report results/bandwidth_frontier  # redraw table.md and the plot

Every method trains the chapter-2 CNN on the same 10 disjoint CIFAR-10 shards, with the CNN, batch,
optimiser and step budget of the chapter-2 recipe named by ``chapter2_preset``
(:data:`jaxcomm.recipes.PRESETS`, the recipe of ``experiments/outputs_exchange.py``'s preset of that
name), and is scored by its final test accuracy against the bytes each node sent per step:

* ``outputs:<content>``: Algorithm 2 (:mod:`jaxcomm.network`) exchanging true labels, logits (soft
  labels) or features, exactly the chapter-2 rows; accuracy = the collective decision (negentropy);
  bytes = the inbox's measured ``sent`` copies x message size.
* ``sync``: synchronous data-parallel SGD of one shared model (:mod:`jaxcomm.data_parallel`),
  gradients all-reduced densely every step: ring all-reduce bytes 2 (N-1)/N x 4 P.
* ``gossip:<k>``: every node trains its own model and every k steps averages its parameters (and
  BatchNorm statistics) with its in-neighbours on a ring of ``gossip_neighbours``
  (``NetworkConfig.gossip_every``); bytes = neighbours x 4 x (parameters + statistics) / k;
  accuracy = the collective decision.
* ``<compressor>:<setting>[:whole|:layer][:ef|:noef]``: synchronous SGD with each node's gradient
  compressed by :mod:`jaxcomm.compression` before an all-gather ((N-1) x message bytes):
  ``top_k:<fraction>``, ``random_k:<fraction>``, ``sign``, ``qsgd:<levels>``; per tensor
  (default) or the whole model as one vector; error feedback by default for top-k and sign (biased),
  not for random-k and QSGD (QSGD with error feedback diverged in a smoke test: its residual is
  unbiased noise that accumulates).

* ``diloco:<H>`` / ``local_sgd:<H>``: every node takes H inner Adam steps from the global model, then
  the average of the nodes' moves steps it (:mod:`jaxcomm.local_sgd`: Nesterov outer SGD at 0.7 /
  0.9, or plain averaging); bytes = one ring all-reduce of the parameters every H steps; accuracy =
  the global model.
* ``codistill:<K>``: every node distils toward its peers' predictions from checkpoints refreshed every
  K steps (:mod:`jaxcomm.codistillation`); bytes = its checkpoint to N - 1 peers every K; accuracy =
  the collective decision.
* ``powersgd:<rank>``: synchronous SGD with rank-r PowerSGD factors all-reduced, error feedback
  (:mod:`jaxcomm.powersgd`).

Output-sharing bytes follow the network's data model (:data:`jaxcomm.exchange.DATA_MODELS`; runs from
before it existed counted indices, the "shared" model).

A method is on the frontier if no other method reached a higher accuracy with fewer bytes.

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

from jaxcomm import bandwidth, codistillation, compression, data, data_parallel, local_sgd, network, powersgd, recipes
from jaxcomm.checkpoint import Checkpoints
from jaxcomm.harness import cli as harness_cli
from jaxcomm.harness import report, results
from jaxcomm.validation import integer, one_of, require

EXPERIMENT = "bandwidth_frontier"
FAMILIES = ("outputs", "sync", "gossip", "compressed", "local_sgd", "codistillation")
DEFAULT_FEEDBACK = {"top_k": True, "sign": True, "random_k": False, "qsgd": False}
CPU_METHODS = (
    "sync", "outputs:true_labels", "outputs:logits", "outputs:features", "top_k:0.01", "sign", "qsgd:4",
    "gossip:10", "random_k:0.1", "top_k:0.001", "top_k:0.01:whole", "sign:whole", "qsgd:1", "outputs:none",
    "gossip:100", "random_k:0.01",
)


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


@dataclasses.dataclass(frozen=True)
class BandwidthFrontierConfig:
    """The frontier of accuracy against bytes per node.

    Attributes:
      chapter2_preset: the chapter-2 recipe (:data:`jaxcomm.recipes.PRESETS`) whose data, CNN, batch,
        optimiser, sharing settings and ``num_steps`` every method uses.
      chapter2_overrides: ``field=value`` changes to that recipe (e.g. ``num_steps=3000``), applied as
        command-line overrides.
      data_dir: where the dataset lives ("" = ``JAXCOMM_DATA_DIR`` or tfds).
      num_nodes: N.
      eval_every: steps between test evaluations (every method is scored at the final step).
      methods: specs (module docstring), run in this order; the time budget cuts the last ones.
      gossip_neighbours: out-neighbours on the gossip ring.
      time_budget_s: wall seconds after which no method starts whose estimated time (the mean of the
        methods run so far) would overrun; skipped ones are listed in the summary. 0: no limit.
      seed: seeds shards, initialisations and every draw.
    """

    chapter2_preset: str = "cpu"
    chapter2_overrides: tuple[str, ...] = ()
    data_dir: str = ""
    num_nodes: int = 10
    eval_every: int = 1000
    methods: tuple[str, ...] = CPU_METHODS
    gossip_neighbours: int = 2
    time_budget_s: float = 3240.0
    seed: int = 0

    def __post_init__(self):
        one_of("chapter2_preset", self.chapter2_preset, tuple(recipes.PRESETS))
        self.chapter2()  # a bad override fails here, naming its field
        require(isinstance(self.data_dir, str), "data_dir", "a string", self.data_dir)
        integer("num_nodes", self.num_nodes, low=2)
        integer("eval_every", self.eval_every, low=1)
        require(isinstance(self.methods, tuple) and len(self.methods) >= 1
                and len(set(self.methods)) == len(self.methods), "methods", "a non-empty tuple of distinct specs",
                self.methods)
        for spec in self.methods:
            parse_method(spec)
        integer("gossip_neighbours", self.gossip_neighbours, low=1, high=self.num_nodes - 1)
        require(isinstance(self.time_budget_s, float | int) and self.time_budget_s >= 0, "time_budget_s",
                "a number of seconds >= 0", self.time_budget_s)
        integer("seed", self.seed)

    def chapter2(self) -> recipes.Chapter2Recipe:
        """The chapter-2 recipe every method trains by: the preset, its overrides, this config's data and seed."""
        preset = harness_cli.apply_overrides(recipes.PRESETS[self.chapter2_preset](), self.chapter2_overrides)
        return dataclasses.replace(preset, data_dir=self.data_dir, seed=self.seed)


CPU_CHAPTER2_RECIPE = ("augment=True", "learning_rate=0.001", "lr_schedule=constant", "num_steps=3000")
"""The chapter-2 cpu recipe the committed frontier ran with (before that preset moved to Adam 3e-3 with a
cosine decay, no augmentation and 5,000 steps): flips and crops, Adam 1e-3 constant, 3,000 steps."""


def cpu_config() -> BandwidthFrontierConfig:
    """Under 60 minutes on 2 CPU cores: the chapter-2 cpu preset's CNN at :data:`CPU_CHAPTER2_RECIPE`
    (3,000 steps), 16 methods in priority order until the 54-minute budget."""
    return BandwidthFrontierConfig(chapter2_overrides=CPU_CHAPTER2_RECIPE)


def thesis_config() -> BandwidthFrontierConfig:
    """The chapter-2 thesis preset (64-128-256 CNN, 5,000 steps) and every method, for an accelerator."""
    return BandwidthFrontierConfig(chapter2_preset="thesis", eval_every=500, time_budget_s=0.0,
                                   methods=CPU_METHODS + ("top_k:0.1", "qsgd:16", "gossip:1"))


def smoke_config() -> BandwidthFrontierConfig:
    """Seconds: MLP nodes on the shipped MNIST sample, one method of each kind."""
    return BandwidthFrontierConfig(chapter2_preset="smoke", eval_every=10, time_budget_s=0.0,
                                   methods=("sync", "outputs:true_labels", "gossip:5", "top_k:0.05", "sign:whole",
                                            "qsgd:2", "random_k:0.1:ef", "diloco:5", "local_sgd:5", "codistill:5",
                                            "powersgd:1"), num_nodes=4, gossip_neighbours=1)


PRESETS = {"smoke": smoke_config, "cpu": cpu_config, "thesis": thesis_config}


# --------------------------------------------------------------------------- measurements


def run_method(config: BandwidthFrontierConfig, method: Method, dataset, *, checkpoints: Checkpoints | None,
               progress: bool) -> dict:
    """Trains one method; its row: accuracy, bytes per node and step, steps, wall seconds."""
    chapter2 = config.chapter2()
    model = chapter2.model(dataset.num_classes)
    image_shape = dataset.train.images.shape[1:]
    safe_name = method.name.replace(":", "_")  # a checkpoint folder name
    checkpointer = checkpoints.run(safe_name) if checkpoints else None
    # Every method reads the same network config as the chapter-2 rows (nodes, shards, batch, optimiser, schedule).
    net = chapter2.network(config.num_nodes, method.content, eval_every=config.eval_every)
    if method.family in ("outputs", "gossip"):
        if method.family == "gossip":
            net = net.replace(topology="ring", num_neighbours=config.gossip_neighbours,
                              gossip_every=method.gossip_every)
        out = network.train_network(net, model, dataset, progress=progress, desc=safe_name, checkpointer=checkpointer)
        summary = recipes.summarize(out, num_params=bandwidth.model_num_params(model, image_shape))
        sent = summary["bytes_sent_per_node_step"]
        if method.family == "gossip":  # parameters plus statistics: all a node holds, what gossip averaging sends
            sent = bandwidth.gossip_bytes(config.gossip_neighbours,
                                          bandwidth.model_num_params(model, image_shape, all_variables=True),
                                          method.gossip_every)
        row = {"accuracy": summary["collective_accuracy"], "avg_accuracy": summary["avg_accuracy"],
               "bytes_per_node_step": sent, "steps": summary["steps"], "wall_seconds": summary["seconds"],
               "num_params": summary["num_params"]}
    else:
        if method.family == "local_sgd":
            outer = local_sgd.diloco_outer() if method.outer == "diloco" else local_sgd.local_sgd_outer()
            out = local_sgd.train_local_sgd(net, model, dataset, sync_every=method.sync_every, outer=outer,
                                            progress=progress, desc=safe_name, checkpointer=checkpointer)
        elif method.family == "codistillation":
            out = codistillation.train_codistillation(net, model, dataset, refresh_every=method.refresh_every,
                                                      progress=progress, desc=safe_name, checkpointer=checkpointer)
        else:
            if method.compression == "powersgd":
                compressor = powersgd.power_sgd(method.rank)
            else:
                compressor = None if method.compression == "none" else compression.make(
                    method.compression, fraction=method.fraction, levels=method.levels, per_layer=method.per_layer,
                    feedback=method.feedback)
            out = data_parallel.train_data_parallel(net, model, dataset, compressor=compressor, progress=progress,
                                                    desc=method.name, checkpointer=checkpointer)
        system, final = out["system"], out["final"]
        # one shared model (sync, compressed, local SGD): its accuracy; N models (codistillation): the collective
        accuracy = (final["collective_accuracy"]["negentropy"] if method.family == "codistillation"
                    else final["avg_accuracy"])
        row = {"accuracy": accuracy, "avg_accuracy": final["avg_accuracy"],
               "bytes_per_node_step": system.bytes_per_node_step(), "steps": out["steps_done"],
               "wall_seconds": round(out["train_seconds"], 1), "num_params": system.num_params,
               "message_bytes": getattr(system, "message_bytes", None)}
    print(f"[{method.name}] accuracy {row['accuracy']:.1f} at {row['bytes_per_node_step']:,.0f} B/node/step "
          f"in {row['wall_seconds']:.0f} s", flush=True)
    history = out["history"]
    dense = bandwidth.allreduce_bytes(config.num_nodes, row["num_params"])
    row |= {"family": method.family, "setting": dataclasses.asdict(method),
            "total_bytes_per_node": row["bytes_per_node_step"] * row["steps"],
            "fraction_of_dense_allreduce": row["bytes_per_node_step"] / dense}
    curve = {"run": method.name, "family": method.family, "steps": [h["step"] for h in history],
             "accuracy": [round(h["collective_accuracy"]["negentropy"], 3) for h in history],
             "avg_accuracy": [round(h["avg_accuracy"], 3) for h in history],
             "loss": [round(h["loss"], 4) for h in history]}
    return {"row": row, "curve": curve}


def frontier(rows: dict[str, dict]) -> list[str]:
    """Methods no other method beats with fewer or equal bytes and a higher accuracy, by bytes."""
    names = sorted(rows, key=lambda name: (rows[name]["bytes_per_node_step"], -rows[name]["accuracy"]))
    on, best = [], -math.inf
    for name in names:
        if rows[name]["accuracy"] > best:
            on.append(name)
            best = rows[name]["accuracy"]
    return on


def run(config: BandwidthFrontierConfig, *, checkpoints: Checkpoints | None = None, progress: bool = True) -> dict:
    """Runs the methods in order until the time budget; returns ``rows``, ``frontier``, ``skipped``, ``curves``."""
    start = time.perf_counter()
    chapter2 = config.chapter2()
    dataset = chapter2.load()
    rows: dict[str, dict] = {}
    curves, skipped, spent = [], [], []
    for spec in config.methods:
        estimate = float(np.mean(spent)) if spent else 0.0
        if config.time_budget_s and time.perf_counter() - start + estimate > config.time_budget_s:
            skipped.append(f"{spec} (estimated {estimate:.0f} s, over the time budget)")
            print(f"skipped {spec}: estimated {estimate:.0f} s, over the time budget", flush=True)
            continue
        began = time.perf_counter()
        out = run_method(config, parse_method(spec), dataset, checkpoints=checkpoints, progress=progress)
        spent.append(time.perf_counter() - began)
        rows[spec] = out["row"]
        curves.append(out["curve"])
    return {"rows": rows, "frontier": frontier(rows), "skipped": skipped, "curves": curves,
            "dataset": dataset.name, "chapter2_config": dataclasses.asdict(chapter2),
            "note": data.LOSSY_CIFAR10_NOTE if chapter2.dataset == "cifar10" else None}


# --------------------------------------------------------------------------- report

MARKERS = {"outputs": "o", "sync": "s", "gossip": "^", "compressed": "D", "local_sgd": "v",
           "codistillation": "P"}


def plot_frontier(summary: dict, path: pathlib.Path) -> None:
    """Final accuracy against total bytes sent per node (log scale); the frontier as a step line."""
    plt = report.pyplot()
    rows = summary["rows"]
    fig, ax = plt.subplots(figsize=(8, 5.5))
    for family in FAMILIES:
        names = [n for n in rows if rows[n]["family"] == family and rows[n]["total_bytes_per_node"] > 0]
        ax.scatter([rows[n]["total_bytes_per_node"] for n in names], [rows[n]["accuracy"] for n in names],
                   marker=MARKERS[family], label=family, s=45)
        for n in names:
            ax.annotate(n, (rows[n]["total_bytes_per_node"], rows[n]["accuracy"]), fontsize=7,
                        xytext=(4, 3), textcoords="offset points")
    for n in [n for n in rows if rows[n]["total_bytes_per_node"] == 0]:
        ax.axhline(rows[n]["accuracy"], color="grey", linestyle=":", label=f"{n} (0 bytes)")
    on = [n for n in summary.get("frontier", []) if rows[n]["total_bytes_per_node"] > 0]
    if on:
        ax.step([rows[n]["total_bytes_per_node"] for n in on], [rows[n]["accuracy"] for n in on], where="post",
                color="black", linewidth=0.8, label="frontier")
    ax.set_xscale("log")
    ax.set_xlabel(f"bytes sent per node over the run ({summary['config'].get('chapter2_preset')} preset steps)")
    ax.set_ylabel("final test accuracy (%)")
    ax.set_title("Accuracy against bandwidth, 10 nodes (collective decision of node networks, shared model of SGD)",
                 fontsize=9)
    ax.grid(alpha=0.3, which="both")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def _bytes(value: float) -> str:
    for unit, size in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if value >= size:
            return f"{value / size:.3g} {unit}"
    return f"{value:.3g} B"


def table_markdown(summary: dict) -> str:
    rows, config = summary["rows"], summary["config"]
    on = set(summary.get("frontier", []))
    chapter2 = summary.get("chapter2_config") or {}
    lines = [
        "# Bandwidth frontier: output sharing against gradient exchange",
        "",
        f"Command: `{summary['command']}`  ",
        f"Preset `{summary['preset']}`, wall time {summary['wall_seconds']:.0f} s on {summary['device']}; commit "
        f"`{summary['git_commit']}`.  ",
        f"Redraw: `python experiments/bandwidth_frontier.py report {pathlib.Path(summary.get('out_dir', '.'))}`",
        "",
        f"Data: {summary.get('dataset')}" + (f" ({summary['note']})" if summary.get("note") else "") + ". "
        f"{config['num_nodes']} nodes with disjoint IID shards; the chapter-2 `{config['chapter2_preset']}` preset"
        + (f" with `{' '.join(config['chapter2_overrides'])}`" if config.get("chapter2_overrides") else "")
        + f": {recipes.describe(chapter2)}, {chapter2.get('num_steps', 0):,} steps, seed {config['seed']} "
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


def merge_runs(out_dir: pathlib.Path) -> dict:
    """The run in ``out_dir`` plus the rows of runs in its subfolders (e.g. methods a time budget skipped, run
    afterwards with ``--out DIR/extra methods=...``); the frontier is recomputed over all rows. A subfolder run
    that trains otherwise (:data:`SELECTION`, :data:`CHAPTER2_SELECTION`) is left out, with a line saying so."""
    summary, _ = results.read_run(out_dir)
    summary["extra_runs"] = []
    for extra, _ in results.read_runs_below(out_dir):
        if not (results.same_settings(summary["config"], extra["config"], selection=SELECTION)
                and results.same_settings(_recipe(summary["chapter2_config"]), _recipe(extra["chapter2_config"]),
                                          selection=CHAPTER2_SELECTION)):
            print(f"not merged: {extra['out_dir']} trains with other chapter-2 settings", flush=True)
            continue
        summary["rows"] |= extra["rows"]
        summary["extra_runs"].append({"command": extra["command"], "wall_seconds": extra["wall_seconds"],
                                      "git_commit": extra["git_commit"], "methods": list(extra["rows"])})
        summary["skipped"] = [s for s in summary.get("skipped", []) if s.split(" ")[0] not in extra["rows"]]
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
