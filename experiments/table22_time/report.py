"""Table 2.2 in time, the report: ``table.md`` (each row's time to the target on every link beside the thesis'
steps, the speed-ups paired by seed, the reruns with their messages in flight against the instant run, and the
reading generated from the numbers), drawn from a run's ``summary.json``. The time arithmetic the run shares with
it (:func:`seconds_at`) and the rows it reads (:data:`SINGLE`, :data:`PAIRED`) live here.
"""

from __future__ import annotations

import pathlib

import numpy as np

from jaxcomm import clock, stats
from jaxcomm.harness import report, results

SINGLE = "1_node_no_sharing"
THESIS_SPEEDUP = 5900 / 2700
"""The thesis' Table 2.2: one node reaches 85 % at 5,900 steps, 20 nodes sharing true labels at 2,700."""


def seconds_at(cluster: clock.Cluster, num_nodes: int, bytes_per_step: float, steps: int | None) -> float | None:
    """Virtual seconds after ``steps`` steps of N nodes each sending ``bytes_per_step`` a step asynchronously
    (:func:`jaxcomm.clock.seconds`); None for None."""
    if steps is None:
        return None
    return clock.seconds(cluster, (), num_nodes, steps,
                         uplink_bytes=np.full(num_nodes, bytes_per_step * steps))["seconds"]


PAIRED = ("collective_accuracy", "avg_accuracy", "validation_collective_accuracy")
"""The final accuracies a rerun is paired on with the instant run, seed by seed."""


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
                         f"{hi:.2f}] | {report.p_cell(t['holm'], '-')} | {word} |")
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
                     f"{t['mean']:+.1f} {ci} | {report.p_cell(t['p'], '-')} | {report.p_cell(t['holm'], '-')} |")
    return lines + [""]


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
                         f"{verdict} ({t['mean']:+.1f} points, Holm p {report.p_cell(t['holm'], '-')}).")
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
