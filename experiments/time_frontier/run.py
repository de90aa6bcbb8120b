"""The frontier-in-time experiment's run: the frontier read back (or trained), every row re-timed on each link's
cluster, the output-sharing rows named in ``rerun`` trained again with their messages in flight, and :func:`main`,
the command line (``python -m experiments.time_frontier``).
"""

from __future__ import annotations

import dataclasses
import importlib
import pathlib
from collections.abc import Sequence

import jax
import numpy as np

from jaxcomm import clock, stats, zoo
from jaxcomm import methods as methods_
from jaxcomm.checkpoint import Checkpoints
from jaxcomm.harness import cli as harness_cli
from jaxcomm.harness import frontier, results

from .presets import EXPERIMENT, PRESETS, TimeFrontierConfig
from .report import write_report


def frontier_of(config: TimeFrontierConfig, checkpoints: Checkpoints | None, progress: bool) -> tuple[dict, list]:
    """The frontier's summary (its config as a :class:`jaxcomm.harness.frontier.FrontierConfig`) and curves."""
    if not config.frontier_dir:
        fcfg = dataclasses.replace(frontier.PRESETS[config.frontier_preset](), data_dir=config.data_dir)
        out = frontier.run(fcfg, checkpoints=checkpoints, progress=progress)
        return {**out, "config": dataclasses.asdict(fcfg), "frontier_config": fcfg}, out["curves"]
    summary = frontier.merge_runs(pathlib.Path(config.frontier_dir))
    refused = {other["folder"] for other in summary["other_runs"]}  # runs the frontier itself leaves out
    curves = [c for run, cs in [results.read_run(config.frontier_dir)] + results.read_runs_below(
        config.frontier_dir, experiment=frontier.EXPERIMENT) if pathlib.Path(run["out_dir"]).name not in refused
        for c in cs]
    fcfg = results.config_from(frontier.FrontierConfig, summary["config"], data_dir=config.data_dir)
    return summary | {"frontier_config": fcfg}, curves


def measured_step(summary: dict) -> float:
    """Seconds of one node's local step in the frontier run: its isolated row's training seconds per node-step."""
    row, n = summary["rows"]["isolated"], summary["frontier_config"].num_nodes
    return float(np.mean([p["wall_seconds"] / (n * p["steps"]) for p in row["per_seed"]]))


def traffic_of(fcfg: frontier.FrontierConfig, spec: str, model, dataset) -> tuple:
    """A row's schedule (:attr:`Built.traffic`), built as the frontier built it (the backend fixed: no timing)."""
    method = zoo.parse(spec, recipe=fcfg.chapter2(), gossip_neighbours=fcfg.gossip_neighbours)
    cfg = frontier.base_network(fcfg, fcfg.seed).replace(backend="vmap", step_loop="scan")
    built = methods_.build(method, cfg, model, dataset)
    return clock.traffic_of(built, built.init(jax.random.PRNGKey(fcfg.seed))), method


def timed_row(row: dict, curves: list[dict], traffic: tuple, cluster: clock.Cluster, n: int, target: float,
              messages: bool) -> dict:
    """A row on ``cluster``: its seeds' virtual seconds at every evaluation (re-timed from the ledger: the
    traffic, and output sharing's message bytes, spread evenly over the nodes), at the horizon and to the target."""
    per_seed = {p["seed"]: p for p in row["per_seed"]}
    timed = []
    for curve in curves:
        sent = per_seed[curve["seed"]].get("bytes_per_node_step") or 0.0
        seconds = [clock.seconds(cluster, traffic, n, step, uplink_bytes=np.full(n, sent * step) if messages
                                 else None)["seconds"] for step in curve["steps"]]
        reached = [s for s, a in zip(seconds, curve["accuracy"], strict=True) if a >= target]
        timed.append({"seed": curve["seed"], "seconds": seconds, "to_target": reached[0] if reached else None})
    return {"family": row["family"], "spec": row["spec"], "accuracy": row["accuracy"],
            "accuracy_sd": row["accuracy_sd"], "bytes_per_node_step": row["bytes_per_node_step"],
            "seconds": float(np.mean([t["seconds"][-1] for t in timed])),
            "seconds_to_target": stats.median_seed([t["to_target"] for t in timed]),
            "reached": sum(t["to_target"] is not None for t in timed), "seeds": len(timed),
            "curves": [{"seed": t["seed"], "seconds": t["seconds"]} for t in timed]}


def run(config: TimeFrontierConfig, *, checkpoints: Checkpoints | None = None, progress: bool = True) -> dict:
    """Every frontier row on every link; ``links``: ``{link: {"rows", "target", ...}}``; ``curves``: the reruns'."""
    summary, curves = frontier_of(config, checkpoints, progress)
    fcfg = summary["frontier_config"]
    chapter2 = fcfg.chapter2()
    dataset = chapter2.load()
    model = chapter2.model(dataset.num_classes)
    n, rows = fcfg.num_nodes, summary["rows"]
    step = config.seconds_per_step or measured_step(summary)
    target = min(p["accuracy"] for p in rows["isolated"]["per_seed"])  # what every isolated seed reaches
    by_row: dict[str, list[dict]] = {}
    for c in curves:
        by_row.setdefault(c["run"], []).append(c)
    stopped = sorted(name for name, row in rows.items() if row["accuracy"] is None)  # a seed diverged: no time
    rows = {name: row for name, row in rows.items() if name not in stopped}
    schedules = {name: traffic_of(fcfg, row["spec"], model, dataset) for name, row in rows.items()
                 if not name.endswith("_shared")}
    links, rerun_curves, reruns = {}, [], {}  # reruns: (row, delays) -> trained; equal delays train alike
    for link_name in config.links:
        cluster = clock.Cluster(clock.Compute(step, source="measured" if not config.seconds_per_step else "given"),
                                clock.LINKS[link_name])
        table = {}
        for name, row in rows.items():
            traffic, method = schedules[name.removesuffix("_shared")]
            messages = row["family"] == "outputs"
            table[name] = timed_row(row, by_row.get(name.removesuffix("_shared"), []), traffic, cluster, n, target,
                                    messages)
            table[name]["rerun"] = False
            if name in config.rerun and link_name != "instant" and row.get("data_model") != "shared":
                delays = methods_.build(method, frontier.base_network(fcfg, fcfg.seed).replace(
                    backend="vmap", step_loop="scan"), model, dataset, cluster=cluster).delays
                key = (name, delays.tobytes())
                if key not in reruns:
                    reruns[key] = frontier.run_method(fcfg, method, dataset, spec=row["spec"], progress=progress,
                                                cluster=cluster, checkpoints=checkpoints.sub(link_name)
                                                if checkpoints else None) | {"link": link_name}
                    rerun_curves += [c | {"link": link_name} for c in reruns[key]["curves"]]
                out = reruns[key]
                again = out["rows"][name]
                table[name] = timed_row(again, out["curves"], traffic, cluster, n, target, messages) | {
                    "rerun": True, "instant_accuracy": row["accuracy"],
                    "vs_instant": _paired(again["per_seed"], row["per_seed"]),
                    "delay_steps": _delays(out["curves"]) | {"median": float(np.median(delays[delays > 0]))},
                    "trained_under": out["link"]}
        links[link_name] = {"rows": table, "link": clock.LINKS[link_name]._asdict(), "seconds_per_step": step}
    return {"rows": {}, "links": links, "target": target, "frontier_dir": config.frontier_dir,
            "frontier_command": summary.get("command"), "frontier_commit": summary.get("git_commit"),
            "frontier_extra_runs": summary.get("extra_runs", []),
            "num_nodes": n, "eval_every": fcfg.eval_every, "stopped": stopped, "curves": rerun_curves}


def _paired(again: list[dict], before: list[dict]) -> dict:
    """The rerun's accuracy minus the instant run's, paired by seed: mean and 95 % interval."""
    base = {p["seed"]: p["accuracy"] for p in before}
    diffs = [p["accuracy"] - base[p["seed"]] for p in again if p.get("accuracy") is not None]
    return {"mean": float(np.mean(diffs)),
            "ci95": list(stats.paired_ci95(diffs, digits=None)) if len(diffs) > 1 else None}


def _delays(curves: list[dict]) -> dict:
    counters = [c.get("counters") or {} for c in curves]
    ages = [c["mean_age"] for c in counters if c.get("mean_age") is not None]
    return {"mean_age": float(np.mean(ages)) if ages else None}


def main(argv: Sequence[str] | None = None) -> int:
    """``report DIR`` redraws table.md and the plot; anything else runs the experiment."""
    return harness_cli.cli(argv, experiment=EXPERIMENT, presets=PRESETS, run=run,
                           description=importlib.import_module(__package__).__doc__, write_report=write_report)
