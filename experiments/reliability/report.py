"""The reliability experiment's report: ``table.md`` (the resume check, the bad configurations rejected, the
accuracy under each failure level and its drop paired by seed) and ``failures.png``, drawn from a run's
``summary.json`` and ``curves.jsonl``.
"""

from __future__ import annotations

import pathlib
from collections.abc import Sequence

import numpy as np

from jaxcomm import stats
from jaxcomm.harness import report, results


def plot(curves: list[dict], path: pathlib.Path) -> None:
    plt = report.pyplot()

    nodes = sorted({c["nodes"] for c in curves})
    fig, axes = plt.subplots(1, len(nodes), figsize=(6 * len(nodes), 4.2), squeeze=False, sharey=True)
    colours = plt.cm.viridis(np.linspace(0, 0.85, len({c["failure_fraction"] for c in curves})))
    fractions = sorted({c["failure_fraction"] for c in curves})
    for ax, n in zip(axes[0], nodes, strict=True):
        for colour, f in zip(colours, fractions, strict=True):
            runs = [c for c in curves if c["nodes"] == n and c["failure_fraction"] == f]
            steps = runs[0]["steps"]
            coll = np.mean([c["collective_accuracy"] for c in runs], axis=0)
            avg = np.mean([c["avg_accuracy"] for c in runs], axis=0)
            ax.plot(steps, coll, color=colour, label=f"{100 * f:.0f}% down: collective")
            ax.plot(steps, avg, color=colour, linestyle="--", label=f"{100 * f:.0f}% down: node average")
        ax.set(title=f"{n} nodes, true labels, fully connected", xlabel="step", ylabel="test accuracy (%)")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    report.save_figure(fig, path, dpi=120)


def table_markdown(summary: dict, curves: Sequence[dict] = ()) -> str:
    """table.md; with the run's ``curves``, also what failures cost beyond the steps they take
    (:func:`lost_steps_markdown`)."""
    rows, config = summary["rows"], summary["config"]
    nodes = [str(n) for n in config["node_counts"]]
    lines = ["# Reliability: resume, bad configs, failing nodes", "",
             f"Command: `{summary['command']}`  ",
             f"Preset `{summary['preset']}`, wall time {summary['wall_seconds']:.0f} s on {summary['device']}; "
             f"commit `{summary['git_commit']}`.", ""]
    resume = rows["resume_identical"]
    bad = rows["bad_configs_rejected"]
    failed = " — failures: " + "; ".join(bad["failures"]) if bad["failures"] else ""
    lines += [f"- **Resume**: a 4-node MNIST-sample network killed by a real SIGTERM after "
              f"{resume['interrupted_at']} of {config['resume_steps']} steps and resumed from its orbax checkpoint "
              f"ends with {'exactly the' if resume['value'] else 'NOT the'} history and final state of the "
              f"uninterrupted run (history identical: {resume['history_identical']}, state identical: "
              f"{resume['state_identical']}).",
              f"- **Bad configs**: {bad['value']} of {bad['cases']} rules rejected before anything compiles, each "
              f"with a message naming the field{failed}.",
              ""]
    note = f" ({summary['note']})" if summary.get("note") else ""
    model = "strided CNN, channels" if config["dataset"] == "cifar10" else "MLP, hidden"
    lines += ["## Nodes that fail", "",
              f"Chapter-2 network on {summary.get('dataset')}{note}: {model} "
              f"{tuple(config['widths'])}, true labels, fully connected, consume 0.5, broadcast 0.5/(N-1), inbox 16, "
              f"{config['num_steps']} steps, {config['seeds']} seed(s). A node is down a fraction f of the time "
              f"(down with probability q per step, back after {config['failure_steps']:.0f} steps on average); "
              f"down nodes neither train, send nor receive (inbox {config['inbox_on_failure']}); the collective "
              "decision (negentropy weighting) asks only the nodes up at evaluation time.", "",
              "| row | f | q per step | measured down | " + " | ".join(
                  f"N={n} avg | N={n} collective" for n in nodes) + " |",
              "|---|---|---|---|" + "---|---|" * len(nodes)]
    for name, row in rows.items():
        if not name.startswith("failure_"):
            continue
        down = ", ".join(f"{100 * (1 - row['alive_fraction'][n]):.1f}%" for n in nodes)
        cells = " | ".join(f"{_over_seeds(row, 'avg_accuracy', n)} | {_over_seeds(row, 'collective_accuracy', n)}"
                           for n in nodes)
        lines.append(f"| {name} | {100 * row['failure_fraction']:.0f}% | {row['failure_prob']:.5f} | {down} | "
                     f"{cells} |")
    lines += paired_markdown(rows, nodes)
    lines += lost_steps_markdown(curves, config["num_steps"])
    lines += ["", "![accuracy vs steps](failures.png)", ""]
    return "\n".join(lines)


def _over_seeds(row: dict, key: str, nodes: str) -> str:
    """A cell: the mean over seeds, "± sd" where the row kept several seeds' values."""
    per_seed = (row.get("per_seed") or {}).get(nodes) or ()
    if len(per_seed) < 2:
        return f"{row[key][nodes]:.1f}"
    return f"{row[key][nodes]:.1f} ± {stats.mean_sd([p[key] for p in per_seed])[1]:.1f}"


def paired_markdown(rows: dict, nodes: Sequence[str]) -> list[str]:
    """The directions the failure grid is read for, each over seeds (>= 2) with its 95 % interval
    (:func:`jaxcomm.harness.report.paired_comparisons`): every failure level against no failures for each N
    (paired by seed: the same shards, initialisations and messages' randomness), and the largest N's drop against
    the smallest's (a difference of the two drops, seed by seed): "more nodes are more robust"."""
    levels = {name: row for name, row in rows.items() if name.startswith("failure_") and row.get("per_seed")}
    if "failure_0" not in levels:
        return []
    pseudo, comparisons = {}, []
    for name, row in levels.items():
        for n in nodes:
            per_seed = row["per_seed"][n]
            pseudo[f"{name}/N={n}"] = {"seeds": [p["seed"] for p in per_seed], "per_seed": per_seed}
            if name != "failure_0":
                comparisons.append((f"{name}/N={n}", f"failure_0/N={n}",
                                    f"N={n}: {round(100 * row['failure_fraction'])}% down vs none"))
    if len(nodes) > 1:
        small, large = nodes[0], nodes[-1]
        for name, row in levels.items():
            if name == "failure_0":
                continue
            drops = {n: [{key: p[key] - q[key] for key in ("avg_accuracy", "collective_accuracy")}
                         for p, q in zip(row["per_seed"][n], levels["failure_0"]["per_seed"][n], strict=True)]
                     for n in (small, large)}
            seeds = [p["seed"] for p in row["per_seed"][small]]
            for n in (small, large):
                pseudo[f"drop/{name}/N={n}"] = {"seeds": seeds, "per_seed": drops[n]}
            comparisons.append((f"drop/{name}/N={large}", f"drop/{name}/N={small}",
                                f"{round(100 * row['failure_fraction'])}% down: N={large}'s change vs N={small}'s"))
    return report.paired_comparisons(
        pseudo, comparisons, ("avg_accuracy", "collective_accuracy"),
        why_paired="the same seed draws the same shards and initialisations; a drop is a level's accuracy minus no "
        "failures' on the same seed")


def lost_steps(curves: Sequence[dict], num_steps: int) -> list[dict]:
    """For each failing (N, f): a failing network's final node average beside the failure-free network's (same N,
    same seed) at the steps a node of the failing one trained, ``(1 - down) * num_steps`` with ``down`` its
    measured down fraction (interpolated linearly between evaluations). Equal: failures cost the training steps
    they take away and nothing more (no cascade, no harm from stale inboxes).

    Returns:
      ``[{"nodes", "failure_fraction", "seeds", "steps_trained", "final", "reference"}]``, each list one entry per
      seed; a (N, f) without its failure-free seeds is left out.
    """
    free = {(c["nodes"], c["seed"]): c for c in curves if c["failure_fraction"] == 0}
    cells: dict[tuple[int, float], dict] = {}
    for c in sorted(curves, key=lambda c: (c["nodes"], c["failure_fraction"], c["seed"])):
        reference = free.get((c["nodes"], c["seed"]))
        if c["failure_fraction"] == 0 or reference is None:
            continue
        trained = c["alive_fraction"] * num_steps
        cell = cells.setdefault((c["nodes"], c["failure_fraction"]), {
            "nodes": c["nodes"], "failure_fraction": c["failure_fraction"], "seeds": [], "steps_trained": [],
            "final": [], "reference": []})
        cell["seeds"].append(c["seed"])
        cell["steps_trained"].append(trained)
        cell["final"].append(c["avg_accuracy"][-1])
        cell["reference"].append(float(np.interp(trained, reference["steps"], reference["avg_accuracy"])))
    return list(cells.values())


def lost_steps_markdown(curves: Sequence[dict], num_steps: int) -> list[str]:
    """:func:`lost_steps` as a table of paired comparisons (:func:`jaxcomm.harness.report.paired_comparisons`:
    its own family); none below 2 seeds."""
    pseudo, comparisons = {}, []
    for cell in lost_steps(curves, num_steps):
        name = f"{cell['nodes']}/{cell['failure_fraction']}"
        for side in ("final", "reference"):
            pseudo[f"{name}/{side}"] = {"seeds": cell["seeds"],
                                        "per_seed": [{"avg_accuracy": v} for v in cell[side]]}
        comparisons.append((f"{name}/final", f"{name}/reference",
                            f"N={cell['nodes']}, {100 * cell['failure_fraction']:.0f}% down vs none at "
                            f"{np.mean(cell['steps_trained']):,.0f} of {num_steps:,} steps"))
    return report.paired_comparisons(
        pseudo, comparisons, ("avg_accuracy",), title="What failures cost beyond the lost steps",
        why_paired="a failing network's final node average against the failure-free one's on the same seed at the "
        "steps its nodes trained, interpolated; near 0, failures cost the steps they take and nothing beyond")


def write_report(out_dir: pathlib.Path, *, plots: bool = True) -> None:
    """Writes table.md, then (with ``plots``) failures.png, from the run in ``out_dir``."""
    out_dir = pathlib.Path(out_dir)
    summary, curves = results.read_run(out_dir)
    report.write_table(out_dir, table_markdown(summary, curves))
    if plots:
        report.draw(failures=lambda: plot(curves, out_dir / "failures.png"))
