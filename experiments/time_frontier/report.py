"""The frontier-in-time report: ``table.md`` (each link's accuracy, bytes and virtual seconds, the seconds to the
isolated rows' target, the orderings by bytes and by time side by side) and ``time.png``, drawn from a run's
``summary.json``.
"""

from __future__ import annotations

import pathlib

import numpy as np

from jaxcomm.harness import frontier, report, results


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
              f"`{summary['frontier_command']}`, commit `{summary['frontier_commit']}`"
              + "".join(f"; with its subfolder run `{x['command']}`, commit `{x['git_commit']}`, for "
                        f"{', '.join(x['methods'])}" for x in summary.get("frontier_extra_runs", []))
              + f"); {summary['num_nodes']} nodes. "
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
