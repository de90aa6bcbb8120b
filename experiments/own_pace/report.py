"""The own-pace study's report: ``table.md`` (per condition, each method's accuracy at the horizon, seconds to
the target and goodput, and output sharing minus each other method paired by seed) and ``curves.png``, drawn from
the run's ``summary.json`` and its saved pairs.
"""

from __future__ import annotations

import json
import pathlib

import numpy as np

from jaxcomm import stats
from jaxcomm.harness import report

from .pairs import seeds_of, with_seeds
from .presets import CONDITIONS, METHODS


def table(summary: dict) -> str:
    head = (f"# Nodes at their own pace\n\n{summary.get('command', '')}\n\nCommit {summary.get('git_commit')}, "
            f"{summary.get('device')}, {summary.get('wall_seconds', 0):.0f} s"
            + (f" (its pairs, trained over every call that saved one: {summary['pairs_seconds']:.0f} s)"
               if "pairs_seconds" in summary else "") + ". Target (validation, chosen on "
            f"isolated nodes at 0 stragglers on the LAN): {summary['target_validation']} %.\n")
    if summary.get("holm_family") == "table":  # summaries before it adjusted within each condition
        count = sum(len(t["comparisons"]) for t in summary["tables"].values())
        head += (f"\nHolm p: adjusted over the table's {count} comparisons, every condition's together (one "
                 "family).\n")
    out = [head]
    for condition, t in summary["tables"].items():
        if not t["rows"]:
            continue
        out.append(f"\n## {condition}\n\n| method | test acc. at horizon | node average | s to target (median) | "
                   "goodput | node steps (min-max) |\n|---|---|---|---|---|---|")
        stops = []
        for name, r in t["rows"].items():
            if "stopped" in r:
                out.append(f"| {name} | stopped ({len(r['stopped'])} of {len(r['ticks'])} seeds) | - | - | - | - |")
                stops.append(f"{name} stopped: " + "; ".join(r["stopped"]) + ".")
                continue
            mean, sd = stats.mean_sd(r["test"], digits=2)
            coll, _ = stats.mean_sd(r["test_node_average"], digits=2)
            reach = stats.median_seed(r["seconds_to_target"])
            steps = np.asarray(r["node_steps"])
            out.append(f"| {name} | {mean:.2f} ± {sd:.2f} | {coll:.2f} | "
                       f"{'-' if reach is None else f'{reach:.1f}'} | {np.mean(r['goodput']):.2f} | "
                       f"{steps.min()}-{steps.max()} |")
        if stops:
            out.append("\n" + "\n".join(stops))
        if t["comparisons"]:
            out.append("\n| outputs minus | test acc. (paired, 95 % CI) | Holm p |\n|---|---|---|")
            for c in t["comparisons"]:
                p = "-" if c["holm_p"] is None else f"{c['holm_p']:.3g}"
                out.append(f"| {c['other']} | {c['mean']:+.2f} [{c['ci95'][0]:+.2f}, {c['ci95'][1]:+.2f}] | {p} |")
    return "\n".join(out) + "\n"


def plot_curves(out: pathlib.Path, seeds: list[int] | None = None) -> None:
    """``curves.png``: test accuracy (as scored) against virtual seconds, mean over ``seeds`` (the table's; None:
    every seed a pair holds), a panel per condition."""
    pairs = [json.loads(f.read_text()) for f in sorted((out / "runs").glob("*/*.json"))]
    if seeds is not None:
        pairs = [with_seeds(p, seeds) for p in pairs if set(seeds) <= set(seeds_of(p))]
    conditions = [c for c in CONDITIONS if any(p["condition"] == c for p in pairs)]
    plt = report.pyplot()
    colour = {name: f"C{i}" for i, name in enumerate(METHODS)}  # one colour a method in every panel
    columns = min(4, len(conditions))
    rows = -(-len(conditions) // columns)
    fig, axes = plt.subplots(rows, columns, figsize=(3.6 * columns, 3.0 * rows), squeeze=False, sharey=True)
    for ax, condition in zip(axes.flat, conditions, strict=False):
        for pair in (p for p in pairs if p["condition"] == condition):
            if pair.get("stopped"):  # a curve that ends where a seed's loss left its bounds: not drawn
                ax.plot([], [], label=f"{pair['method']} (stopped)", color=colour[pair["method"]], ls=":")
                continue
            length = min(len(c) for c in pair["curves"])  # seeds end at their own ticks: 20 or 21 evaluations
            seconds = np.mean([[pt["seconds"] for pt in c[:length]] for c in pair["curves"]], axis=0)
            accuracy = np.mean([[pt["test"] for pt in c[:length]] for c in pair["curves"]], axis=0)
            ax.plot(seconds, accuracy, label=pair["method"], marker=".", color=colour[pair["method"]])
        if any(p.get("stopped") for p in pairs if p["condition"] == condition):
            ax.legend(fontsize=6)  # which methods stopped here
        ax.set_title(condition, fontsize=9)
        ax.set_xlabel("virtual seconds")
        ax.grid(alpha=0.3)
    for ax in axes.flat[len(conditions):]:
        ax.axis("off")
    axes[0, 0].set_ylabel("test accuracy (%)")
    axes[0, 0].legend(fontsize=7)
    report.save_figure(fig, out / "curves.png")


def write_report(out: pathlib.Path | str, *, plots: bool = True) -> None:
    """``table.md`` from ``summary.json`` first, then the plot (a failing plot costs only a warning)."""
    out = pathlib.Path(out)
    summary = json.loads((out / "summary.json").read_text())
    (out / "table.md").write_text(table(summary))
    if plots:
        report.draw(curves=lambda: plot_curves(out, summary.get("seeds")))


def reading(comparison: dict, level: float = 0.05) -> str:
    """What a comparison says: "ahead" or "behind" (output sharing minus the other, Holm p < ``level``), else
    "unresolved"."""
    if comparison["holm_p"] is None or comparison["holm_p"] >= level:
        return "unresolved"
    return "ahead" if comparison["mean"] > 0 else "behind"


def verdicts(before: dict, after: dict) -> list[dict]:
    """Every comparison of two summaries of the study (e.g. 3 seeds, then 5), each read by :func:`reading` in its own
    table's Holm family: ``[{"condition", "other", "before", "after", "held"}]`` where ``held`` says the reading
    is the same. A comparison only one summary has is read "absent" in the other."""
    def readings(summary: dict) -> dict[tuple[str, str], str]:
        return {(condition, c["other"]): reading(c) for condition, t in summary["tables"].items()
                for c in t["comparisons"]}

    a, b = readings(before), readings(after)
    keys = list(a) + [k for k in b if k not in a]
    return [{"condition": k[0], "other": k[1], "before": a.get(k, "absent"), "after": b.get(k, "absent"),
             "held": a.get(k) == b.get(k)} for k in keys]
