"""Table 2.2 in time, the run: the chapter-2 run's rows read back, each row's steps to the target as virtual
seconds on every link's cluster, the rows named in ``rerun`` trained again with their messages in flight, and
:func:`main`, the command line (``python -m experiments.table22_time``).
"""

from __future__ import annotations

import importlib
from collections.abc import Sequence

import numpy as np

from experiments.outputs_exchange.report import ROWS
from jaxcomm import clock, recipes, stats
from jaxcomm.checkpoint import Checkpoints
from jaxcomm.harness import cli as harness_cli
from jaxcomm.harness import results
from jaxcomm.validation import require

from .presets import EXPERIMENT, PRESETS, Table22TimeConfig
from .report import PAIRED, SINGLE, seconds_at, write_report


def measured_step(curves: list[dict]) -> float:
    """Seconds of the single node's step: wall seconds between its first and last evaluations over the steps
    between them (the first interval, which holds compilation, left out), median over seeds."""
    single = [c for c in curves if c.get("kind") == "row" and c["run"] == SINGLE]
    require(bool(single), "outputs_dir", f"a run with a {SINGLE} row and its curves", None)
    return float(np.median([(c["seconds"][-1] - c["seconds"][0]) / (c["steps"][-1] - c["steps"][0])
                            for c in single]))


def first_step(curve: dict, key: str, target: float) -> int | None:
    """The first evaluated step of ``curve`` whose collective (``key``: "validation_collective_accuracy" or
    "collective_accuracy", negentropy) is >= ``target``; None if none is."""
    values = curve[key]["negentropy"] if isinstance(curve[key], dict) else curve[key]
    return next((step for step, value in zip(curve["steps"], values, strict=True) if value >= target), None)


def delay_steps(cluster: clock.Cluster, num_nodes: int, message_bytes: float) -> int:
    """The median receiver steps a broadcast to the N - 1 others is in flight (:func:`jaxcomm.clock.delivery_steps`);
    0 for one node or no messages."""
    if num_nodes < 2 or not message_bytes:
        return 0
    adj = ~np.eye(num_nodes, dtype=bool)
    return int(np.median(clock.delivery_steps(cluster, adj, message_bytes)[adj]))


KEYS = {"validation": "validation_collective_accuracy", "test": "collective_accuracy"}
"""The curve each split's steps to the target are read on (the collective decision, negentropy)."""


def steps_to(curves: list[dict], targets: dict) -> dict:
    """``{split: first step at or above the split's target, per seed}`` for the splits every curve has."""
    return {split: [first_step(c, KEYS[split], targets[split]) for c in curves]
            for split in targets if targets[split] is not None and all(KEYS[split] in c for c in curves)}


def run(config: Table22TimeConfig, *, checkpoints: Checkpoints | None = None, progress: bool = True) -> dict:
    """Every row of ``outputs_dir`` on every link: ``rows`` ``{row: {"nodes", "bytes_per_node_step",
    "message_bytes", "steps": {"validation", "test"} per seed, "links": {link: {"seconds": {"validation",
    "test"} of the median seed, "step_seconds", "held_back", "delay_steps"[, "rerun"]}}}}``, with the targets and
    the step; a rerun row's link holds its run with the messages in flight (:func:`rerun_row`)."""
    summary, curves = results.read_run(config.outputs_dir)
    step = config.seconds_per_step or measured_step(curves)
    targets = {"validation": recipes.validation_target(curves), "test": float(summary["config"]["target"])}
    missing = sorted(set(config.rerun) - set(summary["rows"]))
    require(not missing, "rerun", f"rows of the run in {config.outputs_dir}, from {sorted(summary['rows'])}", missing)
    out, trained, rerun_curves = {}, {}, []  # trained: (row, delay steps) -> its rerun; equal delays train alike
    for name, row in summary["rows"].items():
        seeds = sorted((c for c in curves if c.get("kind") == "row" and c["run"] == name), key=lambda c: c["seed"])
        n, sent = row["nodes"], row["bytes_sent_per_node_step"]
        steps = steps_to(seeds, targets)
        links = {}
        for link_name in config.links:
            cluster = clock.Cluster(clock.Compute(step, source="measured" if not config.seconds_per_step else "given"),
                                    clock.LINKS[link_name])
            one = seconds_at(cluster, n, sent, 1)
            links[link_name] = {"seconds": {split: seconds_at(cluster, n, sent, stats.median_seed(per_seed))
                                            for split, per_seed in steps.items()},
                                "step_seconds": one, "held_back": one > step * (1 + 1e-9),
                                "uplink_seconds": sent / clock.LINKS[link_name].bandwidth,
                                "delay_steps": delay_steps(cluster, n, row["message_bytes"] if sent else 0)}
            if name in config.rerun and links[link_name]["delay_steps"]:
                key = (name, links[link_name]["delay_steps"])
                if key not in trained:
                    trained[key] = rerun_row(summary, name, cluster, link_name, checkpoints=checkpoints,
                                             progress=progress)
                    rerun_curves += trained[key]["curves"]
                again = trained[key]
                reached = steps_to(again["curves"], targets)
                links[link_name]["rerun"] = {
                    "link": again["link"], "per_seed": again["per_seed"], "steps": reached,
                    "seconds": {split: seconds_at(cluster, n, sent, stats.median_seed(per_seed))
                                for split, per_seed in reached.items()},
                    "vs_instant": {key_: paired(again["per_seed"], row, key_) for key_ in PAIRED}}
        out[name] = {"nodes": n, "content": row["content"], "bytes_per_node_step": sent,
                     "message_bytes": row["message_bytes"], "steps": steps, "links": links}
    return {"rows": out, "targets": targets, "seconds_per_step": step, "horizon": summary["config"]["num_steps"],
            "links": {name: clock.LINKS[name]._asdict() for name in config.links},
            "source": {"out_dir": config.outputs_dir, "command": summary["command"],
                       "git_commit": summary["git_commit"], "device": summary["device"]},
            **({"curves": rerun_curves} if config.rerun else {})}


def rerun_row(summary: dict, name: str, cluster: clock.Cluster, link: str, *, checkpoints: Checkpoints | None,
              progress: bool) -> dict:
    """Row ``name`` of the run ``summary`` describes, trained again on ``cluster`` with the run's recipe, horizon
    and seeds, its messages in flight: ``{"link" (trained under), "delays" (the median receiver steps in flight),
    "per_seed" (final accuracies, the mean age of consumed messages), "curves"}``."""
    recipe = results.config_from(recipes.Chapter2Recipe, summary["config"])  # the run's data, model and sharing
    dataset = recipe.load()
    n, content = ROWS[name]
    net = recipe.network(n, content, steps=recipe.num_steps, eval_every=summary["config"]["eval_every"])
    seeds = summary["rows"][name]["seeds"]
    out = recipes.train_seeds(net, recipe.model(dataset.num_classes), dataset, name=f"{name}_{link}", seeds=seeds,
                              checkpoints=checkpoints, progress=progress, cluster=cluster)
    per_seed = [{"seed": seed, **{key: p.get(key) for key in PAIRED},
                 "mean_age": p["counters"].get("mean_age"), "in_flight": p["counters"].get("in_flight")}
                for seed, p in zip(seeds, out["summary"]["per_seed"], strict=True)]
    return {"link": link, "per_seed": per_seed,
            "curves": [c | {"kind": "rerun", "link": link, "row": name} for c in out["curves"]]}


def paired(again: list[dict], row: dict, key: str) -> dict:
    """The rerun's final ``key`` minus the instant run's, seed by seed: mean, 95 % interval and p-value (paired t)."""
    before = dict(zip(row["seeds"], (p.get(key) for p in row["per_seed"]), strict=True))
    diffs = [p[key] - before[p["seed"]] for p in again if p.get(key) is not None and before.get(p["seed"]) is not None]
    if len(diffs) < 2:
        return {"mean": float(np.mean(diffs)) if diffs else None, "ci95": None, "p": None, "seeds": len(diffs)}
    return {"mean": float(np.mean(diffs)), "ci95": list(stats.paired_ci95(diffs, digits=None)),
            "p": stats.paired_t_p_value(diffs), "seeds": len(diffs)}


def main(argv: Sequence[str] | None = None) -> int:
    """``report DIR`` redraws table.md; anything else runs the experiment."""
    return harness_cli.cli(argv, experiment=EXPERIMENT, presets=PRESETS, run=run,
                           description=importlib.import_module(__package__).__doc__, write_report=write_report)
