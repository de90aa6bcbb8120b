"""The bandwidth frontier read in time: every method's accuracy against virtual seconds on named links.

    JAXCOMM_DATA_DIR=/work/shared-cifar python experiments/time_frontier.py --preset cpu
    python experiments/time_frontier.py --preset cpu rerun=          # re-time only: minutes, no training
    python experiments/time_frontier.py --preset smoke --out /tmp/tf  # seconds, shipped MNIST sample
    python experiments/time_frontier.py report runs/time_frontier/<run>

A bandwidth-frontier run (``frontier_dir``, with the runs below it; :mod:`jaxcomm.harness.frontier`) is
read on a cluster per named link (:data:`jaxcomm.clock.LINKS`): every node a computer whose local step takes
``seconds_per_step`` (0: what the frontier run measured, its isolated row's training seconds per node-step),
its traffic timed by :mod:`jaxcomm.clock` from the byte ledger. Methods whose training the link does not change
(every synchronous one, and output sharing with instant links) are re-timed from their ledgers; the output-sharing
rows named in ``rerun`` are trained again with their messages in flight (they arrive the receiver steps their
transfer takes), the same seeds, so the change in accuracy that delays cause is paired.

Each link's table: accuracy, bytes, virtual seconds at the horizon, and the seconds to reach the accuracy every
isolated seed reaches in the horizon (the target: what not communicating surely gets), with the orderings by
bytes and by time side by side.

References:
  Lacaille (2018), §2.3 (steps as the wall time of a parallel system; communication taken as free).
"""

from __future__ import annotations

import dataclasses
import pathlib
import sys
from collections.abc import Sequence

import jax
import numpy as np

from jaxcomm import clock, stats, zoo
from jaxcomm import methods as methods_
from jaxcomm.checkpoint import Checkpoints
from jaxcomm.harness import cli as harness_cli
from jaxcomm.harness import frontier, report, results
from jaxcomm.validation import require

EXPERIMENT = "time_frontier"


@dataclasses.dataclass(frozen=True)
class TimeFrontierConfig:
    """Attributes:
      frontier_dir: a bandwidth-frontier results folder to read; "": train ``frontier_preset`` first.
      frontier_preset: the frontier preset trained when ``frontier_dir`` is "".
      links: names of :data:`jaxcomm.clock.LINKS`, each a cluster of its own (``instant`` is the thesis' view).
      seconds_per_step: one node's local step, in seconds; 0: the frontier run's measurement.
      rerun: rows (output sharing) trained again under each link but ``instant``, messages in flight.
      data_dir: the dataset's folder for the reruns and the traffic ("" = ``JAXCOMM_DATA_DIR`` or tfds).
    """

    frontier_dir: str = "results/bandwidth_frontier"
    frontier_preset: str = "smoke"
    links: tuple[str, ...] = ("instant", "datacenter", "lan_1g", "wan_100m")
    seconds_per_step: float = 0.0
    rerun: tuple[str, ...] = ("true_labels", "logits", "features")
    data_dir: str = ""

    def __post_init__(self):
        require(isinstance(self.links, tuple) and self.links and set(self.links) <= set(clock.LINKS), "links",
                f"a non-empty tuple of {sorted(clock.LINKS)}", self.links)
        require(isinstance(self.seconds_per_step, float | int) and self.seconds_per_step >= 0, "seconds_per_step",
                "seconds >= 0", self.seconds_per_step)
        require(isinstance(self.rerun, tuple), "rerun", "a tuple of row names", self.rerun)
        require(bool(self.frontier_dir) or self.frontier_preset in frontier.PRESETS, "frontier_preset",
                f"one of {sorted(frontier.PRESETS)}", self.frontier_preset)


PRESETS = {"cpu": TimeFrontierConfig,
           "smoke": lambda: TimeFrontierConfig(frontier_dir="", links=("instant", "wan_100m"), rerun=("true_labels",))}


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


# --------------------------------------------------------------------------- report


def _seconds(value: float | None) -> str:
    if value is None:
        return "not reached"
    return f"{value / 60:.1f} min" if value >= 120 else f"{value:.1f} s"


TIE = 0.01
"""Times within 1 % of each other count as a tie (the ordering by time does not separate them)."""


def swapped(table: dict[str, dict]) -> list[tuple[str, str]]:
    """Pairs (a, b) the two orderings disagree on: a sends fewer bytes per node-step than b, yet takes more than
    :data:`TIE` longer."""
    names = sorted(table)
    return [(a, b) for a in names for b in names
            if table[a]["bytes_per_node_step"] < table[b]["bytes_per_node_step"]
            and table[a]["seconds"] > table[b]["seconds"] * (1 + TIE)]


def fastest(table: dict[str, dict]) -> list[str]:
    """The rows whose every seed reaches the target, soonest (within :data:`TIE`), most accurate first."""
    done = {name: r for name, r in table.items() if r["reached"] == r["seeds"]}
    if not done:
        return []
    best = min(r["seconds_to_target"] for r in done.values())
    return sorted((name for name, r in done.items() if r["seconds_to_target"] <= best * (1 + TIE)),
                  key=lambda name: -done[name]["accuracy"])


def table_markdown(summary: dict) -> str:
    lines = report.heading("The frontier in time: accuracy against virtual seconds per link", summary,
                           "time_frontier.py")
    lines += [f"Frontier read: `{summary['frontier_dir'] or '(trained by this run)'}` (command "
              f"`{summary['frontier_command']}`, commit `{summary['frontier_commit']}`); {summary['num_nodes']} nodes. "
              f"Target: {summary['target']:.1f} %, what every isolated seed reaches at the horizon (the lowest of "
              "their final accuracies). Seconds to target: the "
              "median seed's first evaluation at or above it (the frontier evaluates every "
              f"{summary['eval_every']} steps, so it is read to that step)."
              + (f" Not timed (a seed stopped): {', '.join(summary['stopped'])}." if summary["stopped"] else ""), ""]
    for name, link in summary["links"].items():
        spec = link["link"]
        lines += [f"## {name}: {spec['bandwidth'] * 8 / 1e9:g} Gbit/s, {spec['latency'] * 1e3:g} ms"
                  if np.isfinite(spec["bandwidth"]) else f"## {name}: no transfer time",
                  "", f"{spec['source']}. A local step: {link['seconds_per_step'] * 1e3:.2f} ms.", "",
                  "| row | family | accuracy (%) | bytes/node/step | virtual time at the horizon | to target | "
                  "trained |", "|---|---|---|---|---|---|---|"]
        table = link["rows"]
        for row_name in sorted(table, key=lambda r: table[r]["seconds"]):
            r = table[row_name]
            trained = "re-timed from the ledger" if not r["rerun"] else (
                f"rerun in flight ({r['delay_steps']['median']:g} steps; trained under {r['trained_under']}): "
                f"{r['vs_instant']['mean']:+.1f} vs instant"
                + (f" [{r['vs_instant']['ci95'][0]:+.1f}, {r['vs_instant']['ci95'][1]:+.1f}]"
                   if r["vs_instant"]["ci95"] else "")
                + (f", mean age {r['delay_steps']['mean_age']:.1f} steps" if r["delay_steps"]["mean_age"] else ""))
            lines.append(f"| {row_name} | {r['family']} | {r['accuracy']:.1f} ± {r['accuracy_sd']:.1f} | "
                         f"{r['bytes_per_node_step']:,.0f} | {_seconds(r['seconds'])} | "
                         f"{_seconds(r['seconds_to_target'])} ({r['reached']}/{r['seeds']}) | {trained} |")
        pairs, first = swapped(table), fastest(table)
        lines += ["", "Fastest to the target (every seed): " + (", ".join(
            f"{r} ({_seconds(table[r]['seconds_to_target'])}, {table[r]['accuracy']:.1f} %)" for r in first)
            if first else "none") + ".",
                  "", f"Orderings by bytes and by time (ties within {TIE:.0%}) disagree on {len(pairs)} of "
                  f"{len(table) * (len(table) - 1) // 2} pairs"
                  + (": " + "; ".join(f"{a} sends less than {b} but takes longer" for a, b in pairs[:6])
                     + (" ..." if len(pairs) > 6 else "") if pairs else "") + ".", ""]
    return "\n".join(lines) + "\n"


def plot_links(summary: dict, path: pathlib.Path) -> None:
    """Accuracy against virtual seconds at the horizon, one panel per link."""
    plt = report.pyplot()
    names = list(summary["links"])
    fig, axes = plt.subplots(1, len(names), figsize=(5 * len(names), 4), squeeze=False, sharey=True)
    for ax, name in zip(axes[0], names, strict=True):
        for row_name, r in summary["links"][name]["rows"].items():
            ax.scatter(r["seconds"], r["accuracy"], marker=frontier.MARKERS.get(r["family"], "o"))
            ax.annotate(row_name, (r["seconds"], r["accuracy"]), fontsize=6)
        ax.axhline(summary["target"], color="grey", linestyle=":", linewidth=0.8)
        spread = [r["seconds"] for r in summary["links"][name]["rows"].values()]
        ax.set(xscale="log" if max(spread) > 3 * min(spread) else "linear", title=name,
               xlabel="virtual seconds at the horizon", ylabel="accuracy (%)")
        ax.grid(alpha=0.3)
    report.save_figure(fig, path)


def write_report(out_dir: pathlib.Path, *, plots: bool = True) -> None:
    summary, _ = results.read_run(out_dir)
    report.write_table(pathlib.Path(out_dir), table_markdown(summary))
    if plots:
        report.draw(links=lambda: plot_links(summary, pathlib.Path(out_dir) / "time.png"))


def cli(argv: Sequence[str] | None = None) -> int:
    return harness_cli.cli(argv, experiment=EXPERIMENT, presets=PRESETS, run=run, description=__doc__,
                           write_report=write_report)


if __name__ == "__main__":
    sys.exit(cli())
