"""Table 2.2 read in time: the steps each chapter-2 row needs to reach a target, as seconds on named links.

    python experiments/table22_time.py --preset cpu           # seconds: no training; reads results/outputs_exchange
    python experiments/table22_time.py report results/table22_time

The thesis reads its training steps as the wall time of a parallel system (§2.3) and finds 20 nodes sharing true
labels reach 85 % sooner than one node on all the data, 2,700 against 5,900 steps ("a speedup of over 215 %",
Table 2.2), communication taken as free and instantaneous. Here every row of a chapter-2 run (``outputs_dir``, from
``experiments/outputs_exchange.py``: its summary and curves) is re-timed on one cluster per named link
(:data:`jaxcomm.clock.LINKS`): every node a computer whose local step takes ``seconds_per_step`` (0: what the run
measured for its single node), its messages leaving on its uplink one after the other while it computes
(:func:`jaxcomm.clock.seconds`: a node is held back only when its uplink cannot keep up). A row's time to the
target is its median seed's first evaluated step at or above the target, in virtual seconds; the speed-up is the
single node's time over the row's. Steps are read on the collective decision's validation curves at the target
chosen on validation (:func:`jaxcomm.recipes.validation_target`), and on the test curves at the run's own target
beside them.

Re-timed, not re-trained: the rows trained with instant delivery. On a slower link a message also arrives later
(``delay`` below: receiver steps in flight), which changes what a node learns from it. The rows named in ``rerun``
are trained again on every link that delays their messages, with the run's recipe and seeds, their messages in
flight (:func:`jaxcomm.network.train_network`'s ``cluster``): their steps to the target are read on those curves,
and their final accuracies paired by seed with the instant run's (links whose delays are equal share one run):

    python experiments/table22_time.py --preset cpu rerun=20_nodes_true_labels --out DIR   # hours on a CPU

References:
  Lacaille (2018), §2.3, Table 2.2.
"""

from __future__ import annotations

import dataclasses
import pathlib
import sys
from collections.abc import Sequence

import numpy as np

from jaxcomm import clock, recipes, stats
from jaxcomm.checkpoint import Checkpoints
from jaxcomm.harness import cli as harness_cli
from jaxcomm.harness import report, results
from jaxcomm.harness.reports.outputs_exchange import ROWS
from jaxcomm.validation import require

EXPERIMENT = "table22_time"
SINGLE = "1_node_no_sharing"
THESIS_SPEEDUP = 5900 / 2700
"""The thesis' Table 2.2: one node reaches 85 % at 5,900 steps, 20 nodes sharing true labels at 2,700."""


@dataclasses.dataclass(frozen=True)
class Table22TimeConfig:
    """Attributes:
      outputs_dir: a chapter-2 results folder (``experiments/outputs_exchange.py``) with a single-node row.
      links: names of :data:`jaxcomm.clock.LINKS`, a cluster each.
      seconds_per_step: one node's local step in seconds; 0: the run's single node's measured step (its curves'
        wall seconds between the first and last evaluations over the steps between them, median over seeds).
      rerun: rows of the run trained again, with their messages in flight, on every link of ``links`` that
        delays them (hours on a CPU for the 5,000-step rows; checkpointed, ``--resume``).
    """

    outputs_dir: str = "results/outputs_exchange"
    links: tuple[str, ...] = ("instant", "datacenter", "lan_1g", "wan_100m")
    seconds_per_step: float = 0.0
    rerun: tuple[str, ...] = ()

    def __post_init__(self):
        require(isinstance(self.outputs_dir, str) and self.outputs_dir, "outputs_dir", "a results folder",
                self.outputs_dir)
        require(isinstance(self.links, tuple) and self.links and set(self.links) <= set(clock.LINKS), "links",
                f"a non-empty tuple of {sorted(clock.LINKS)}", self.links)
        require(isinstance(self.seconds_per_step, float | int) and self.seconds_per_step >= 0, "seconds_per_step",
                "seconds >= 0", self.seconds_per_step)
        sharing = [name for name, (n, content) in ROWS.items() if n > 1 and content != "none"]
        require(isinstance(self.rerun, tuple) and set(self.rerun) <= set(sharing), "rerun",
                f"a tuple of rows that send messages, from {sharing}", self.rerun)


PRESETS = {"cpu": Table22TimeConfig}


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


def seconds_at(cluster: clock.Cluster, num_nodes: int, bytes_per_step: float, steps: int | None) -> float | None:
    """Virtual seconds after ``steps`` steps of N nodes each sending ``bytes_per_step`` a step asynchronously
    (:func:`jaxcomm.clock.seconds`); None for None."""
    if steps is None:
        return None
    return clock.seconds(cluster, (), num_nodes, steps,
                         uplink_bytes=np.full(num_nodes, bytes_per_step * steps))["seconds"]


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


PAIRED = ("collective_accuracy", "avg_accuracy", "validation_collective_accuracy")
"""The final accuracies a rerun is paired on with the instant run, seed by seed."""


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


# --------------------------------------------------------------------------- report


def _seconds(value: float | None, horizon_seconds: float | None = None) -> str:
    if value is None:
        return "not reached" if horizon_seconds is None else f"> {_seconds(horizon_seconds)}"
    return f"{value / 60:.1f} min" if value >= 120 else f"{value:.1f} s"


def speedup(summary: dict, name: str, link: str, split: str, *, rerun: bool = False) -> float | None:
    """The single node's time to the target over ``name``'s on ``link`` (``rerun``: trained with its messages in
    flight there); None if either does not reach it."""
    single = summary["rows"][SINGLE]["links"][link]["seconds"].get(split)
    timed = summary["rows"][name]["links"][link]
    mine = (timed["rerun"] if rerun else timed)["seconds"].get(split)
    return None if single is None or mine is None else single / mine


def table_markdown(summary: dict) -> str:
    src, step, targets = summary["source"], summary["seconds_per_step"], summary["targets"]
    splits = [s for s in ("validation", "test") if targets.get(s) is not None]
    lines = report.heading("Table 2.2 in time: steps to the target as seconds on named links", summary,
                           "table22_time.py")
    lines += [f"Rows read: `{src['out_dir']}` (command `{src['command']}`, commit `{src['git_commit']}`, "
              f"{src['device']}). A node's local step: {step * 1e3:.2f} ms (the single node's, measured there). "
              "Each row's time to the target: its median seed's first evaluated step at or above it (collective "
              "decision), times what a step takes on the link (the step, or the node's uplink busy with its "
              "messages if that is longer: `step on link`). Targets: "
              + ", ".join(f"{targets[s]:g} % on {s}" + (" (chosen on validation)" if s == "validation" else
                                                         " (the run's own)") for s in splits)
              + f". Speed-up: the single node's time over the row's (thesis: {THESIS_SPEEDUP:.2f}x for 20 nodes "
              "sharing true labels, 5,900 against 2,700 steps to 85 %, communication free). `delay`: receiver "
              "steps a message is in flight on the link, which the rows did not train with (re-timed, not "
              "re-trained). `uplink / step`: the seconds a node's uplink needs for what it sends per step; a "
              "device whose step is shorter than that is held back by its link."
              + (" Rows marked `in flight` trained again on the link with their messages delayed (below)."
                 if any("rerun" in t for row in summary["rows"].values() for t in row["links"].values()) else ""),
              ""]
    for link, spec in summary["links"].items():
        bandwidth = spec["bandwidth"]
        title = (f"## {link}: {bandwidth * 8 / 1e9:g} Gbit/s, {spec['latency'] * 1e3:g} ms"
                 if bandwidth is not None and np.isfinite(bandwidth) else f"## {link}: no transfer time")
        lines += [title, "", f"{spec['source']}.", "",
                  "| row | bytes / node / step | uplink / step | step on link | delay (steps) | "
                  + " | ".join(f"to {targets[s]:g} % ({s}) | speed-up ({s})" for s in splits) + " |",
                  "|---|---|---|---|---|" + "---|---|" * len(splits)]
        for name, row in summary["rows"].items():
            timed = row["links"][link]
            horizon = timed["step_seconds"] * summary["horizon"]
            cells = []
            for s in splits:
                ratio = speedup(summary, name, link, s) if s in row["steps"] else None
                cells += [_seconds(timed["seconds"].get(s), horizon), "-" if ratio is None else f"{ratio:.2f}x"]
            lines.append(f"| {name} | {row['bytes_per_node_step']:,.0f} | {timed['uplink_seconds'] * 1e3:.2f} ms | "
                         f"{timed['step_seconds'] * 1e3:.2f} ms"
                         + (" (uplink)" if timed["held_back"] else "") + f" | {timed['delay_steps']} | "
                         + " | ".join(cells) + " |")
            if "rerun" in timed:  # the same row trained with its messages in flight on this link
                again, cells = timed["rerun"], []
                for s in splits:
                    ratio = speedup(summary, name, link, s, rerun=True) if s in again["steps"] else None
                    cells += [_seconds(again["seconds"].get(s), horizon), "-" if ratio is None else f"{ratio:.2f}x"]
                lines.append(f"| {name}, in flight | | | | {timed['delay_steps']} | " + " | ".join(cells) + " |")
        lines.append("")
    return "\n".join(lines + paired_markdown(summary) + rerun_markdown(summary) + reading(summary))


def paired_speedups(summary: dict, link: str) -> list[dict]:
    """Every row's speed-up over the single node on ``link``, seed by seed (seed s of the row against seed s of the
    single node, the seconds each needs to its first evaluation at the target): the geometric mean, the 95 %
    interval of the log-ratios and the paired t-test's p-value, Holm-adjusted over the link's rows and splits;
    ``mean`` None ("n.r.") where a seed of either never reached the target within the horizon."""
    spec = summary["links"][link]
    cluster = clock.Cluster(clock.Compute(summary["seconds_per_step"]),
                            clock.Link(**{k: spec[k] for k in clock.Link._fields if k in spec}))
    single = summary["rows"][SINGLE]
    out = []
    for name, row in summary["rows"].items():
        for split in (s for s in row["steps"] if name != SINGLE and s in single["steps"]):
            pairs = [(seconds_at(cluster, single["nodes"], single["bytes_per_node_step"], a),
                      seconds_at(cluster, row["nodes"], row["bytes_per_node_step"], b))
                     for a, b in zip(single["steps"][split], row["steps"][split], strict=True)]
            test = {"row": name, "split": split, "seeds": len(pairs), "mean": None, "ci": None, "p": None}
            if pairs and all(a is not None and b is not None for a, b in pairs):
                logs = np.log([a / b for a, b in pairs])
                lo, hi = stats.paired_ci95(logs, digits=None)
                tie = np.ptp(logs) < 1e-12  # every seed the same ratio (evaluations every few hundred steps)
                test |= {"mean": float(logs.mean()), "ci": [lo, hi],
                         "p": None if tie else stats.p_value_from_ci95(float(logs.mean()), (lo, hi), len(logs))}
            out.append(test)
    for test, adjusted in zip(out, stats.holm([t["p"] for t in out]), strict=True):
        test["holm"] = adjusted
    return out


def paired_markdown(summary: dict) -> list[str]:
    """The speed-ups of the tables above, seed by seed instead of the median seed (:func:`paired_speedups`)."""
    lines = ["## Speed-ups paired by seed", "",
             "Seed s of a row against seed s of the single node: the geometric mean of the per-seed speed-ups "
             "[95 % interval of the log-ratios, exponentiated], the paired t-test's p-value Holm-adjusted over each "
             "link's rows and splits; n.r.: a seed of either never reached the target within the horizon; zero "
             "spread: every seed gave the same ratio (the curves are evaluated every few hundred steps), not "
             "tested. A direction is read only where the adjusted p-value is below 0.05.", ""]
    for link in summary["links"]:
        tests = paired_speedups(summary, link)
        if not tests:
            continue
        lines += [f"**{link}**", "", "| row | split | seeds | speed-up [95 % CI] | p (Holm) | direction |",
                  "|---|---|---|---|---|---|"]
        for t in tests:
            if t["mean"] is None:
                lines.append(f"| {t['row']} | {t['split']} | {t['seeds']} | n.r. | - | - |")
                continue
            lo, hi = (np.exp(v) for v in t["ci"])
            word = ("zero spread, not tested" if t["holm"] is None else "faster" if t["holm"] < 0.05 and t["mean"] > 0
                    else "slower" if t["holm"] < 0.05 else "none (adjusted p >= 0.05)")
            lines.append(f"| {t['row']} | {t['split']} | {t['seeds']} | {np.exp(t['mean']):.2f}x [{lo:.2f}, "
                         f"{hi:.2f}] | {_p(t['holm'])} | {word} |")
        lines.append("")
    return lines


def rerun_tests(summary: dict) -> list[dict]:
    """Every rerun's final accuracies against the instant run's (:data:`PAIRED`), one per row, link trained under
    and accuracy: ``row``, ``link``, ``delay``, ``mean_age``, ``key``, the paired difference (``mean``, ``ci95``,
    ``p``) and ``holm`` (adjusted over all of them)."""
    reruns = {}  # (row, the link it trained under) -> rerun; links with equal delays share one
    for name, row in summary["rows"].items():
        for timed in row["links"].values():
            if "rerun" in timed:
                reruns.setdefault((name, timed["rerun"]["link"]), (timed["delay_steps"], timed["rerun"]))
    tests = []
    for (name, link), (delay, again) in reruns.items():
        ages = [p["mean_age"] for p in again["per_seed"] if p.get("mean_age") is not None]
        tests += [{"row": name, "link": link, "delay": delay, "mean_age": float(np.mean(ages)) if ages else None,
                   "key": key, **again["vs_instant"][key]} for key in PAIRED
                  if again["vs_instant"][key]["mean"] is not None]
    return [t | {"holm": h} for t, h in zip(tests, stats.holm([t["p"] for t in tests]), strict=True)]


def rerun_markdown(summary: dict) -> list[str]:
    """The rows trained again with their messages in flight (:func:`rerun_tests`), a line per comparison."""
    tests = rerun_tests(summary)
    if not tests:
        return []
    lines = ["## Trained with the messages in flight", "",
             "Each row below trained again on a link (and on every link with the same delay), same recipe, horizon "
             "and seeds as the instant run, each message reaching its receivers only after its transfer time "
             "(`delay`: receiver steps, the median edge; `mean age`: steps between a consumed message's sending and "
             "its use, mean over seeds). Difference: the rerun's final accuracy minus the instant run's, paired by "
             "seed, mean and 95 % interval; p: paired t, and Holm-adjusted over the "
             f"{len(tests)} comparisons of this table. A direction is read only where the adjusted p is below 0.05.",
             "", "| row | trained on | delay (steps) | mean age (steps) | accuracy | difference [95 % CI] | p | "
             "Holm p |", "|---|---|---|---|---|---|---|---|"]
    for t in tests:
        ci = "-" if t["ci95"] is None else f"[{t['ci95'][0]:+.1f}, {t['ci95'][1]:+.1f}]"
        age = "-" if t["mean_age"] is None else f"{t['mean_age']:.1f}"
        lines.append(f"| {t['row']} | {t['link']} | {t['delay']} | {age} | {t['key'].replace('_', ' ')} | "
                     f"{t['mean']:+.1f} {ci} | {_p(t['p'])} | {_p(t['holm'])} |")
    return lines + [""]


def _p(value: float | None) -> str:
    return "-" if value is None else f"{value:.3f}"


def reading(summary: dict) -> list[str]:
    """What the tables say, computed from them: per row that reaches the target, its speed-up on each link, and
    the step below which the slowest link's uplink would hold its nodes back."""
    step, links = summary["seconds_per_step"], list(summary["links"])
    lines = ["## Reading (generated from the tables above)", ""]
    for name, row in summary["rows"].items():
        if name == SINGLE or not row["steps"]:
            continue
        for split in row["steps"]:
            ratios = [speedup(summary, name, link, split) for link in links]
            if all(r is None for r in ratios):
                lines.append(f"- {name} ({split}): does not reach the target within the horizon.")
                continue
            spread = " / ".join("-" if r is None else f"{r:.2f}x" for r in ratios)
            lines.append(f"- {name} ({split}): speed-up over one node {spread} on {' / '.join(links)} (thesis "
                         f"{THESIS_SPEEDUP:.2f}x for 20 nodes sharing true labels, communication free).")
        reruns = [link for link in links if "rerun" in row["links"][link]]
        for split in row["steps"] if reruns else ():
            ratios = [speedup(summary, name, link, split, rerun=True) for link in reruns]
            lines.append(f"  Trained with its messages in flight ({split}): speed-up "
                         + " / ".join("-" if r is None else f"{r:.2f}x" for r in ratios)
                         + f" on {' / '.join(reruns)}.")
        for t in (t for t in rerun_tests(summary) if t["row"] == name):
            verdict = ("no difference from instant detected" if t["holm"] is None or t["holm"] >= 0.05 else
                       ("lower" if t["mean"] < 0 else "higher") + " than instant")
            steps = f"{t['delay']} step{'' if t['delay'] == 1 else 's'}"
            lines.append(f"  Its final {t['key'].replace('_', ' ')} trained on {t['link']} ({steps} in flight): "
                         f"{verdict} ({t['mean']:+.1f} points, Holm p {_p(t['holm'])}).")
        worst = max(row["links"][link]["uplink_seconds"] for link in links)
        if worst:
            held = [link for link in links if row["links"][link]["held_back"]]
            lines.append(f"  Its uplink needs at most {worst * 1e3:.2f} ms a step; at the {step * 1e3:.2f} ms step "
                         + (f"it holds nodes back on {', '.join(held)}" if held else "no link holds a node back")
                         + f"; a device stepping faster than {worst * 1e3:.2f} ms would be held back on the slowest "
                         "link.")
    return lines + [""]


def write_report(out_dir: pathlib.Path, *, plots: bool = True) -> None:  # noqa: ARG001  (no plot: a table reads it)
    summary, _ = results.read_run(out_dir)
    report.write_table(pathlib.Path(out_dir), table_markdown(summary))


def cli(argv: Sequence[str] | None = None) -> int:
    return harness_cli.cli(argv, experiment=EXPERIMENT, presets=PRESETS, run=run, description=__doc__,
                           write_report=write_report)


if __name__ == "__main__":
    sys.exit(cli())
