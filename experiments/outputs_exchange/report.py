"""The report of the chapter-2 supervised experiment (``python -m experiments.outputs_exchange``): Tables 2.1 and
2.2, §2.3.1's studies and their plots, drawn from a run's ``summary.json`` and ``curves.jsonl``.

:func:`write_report` merges the runs below a results folder into the run there (:func:`merge_runs`: study points and
rows run afterwards, reruns and runs that train otherwise set beside), then writes ``table.md``: the thesis' rows
beside the measured ones, steps to the target (on test and validation), the four weightings of the collective
decision, paired comparisons by seed (rows, studies against their reference point and against isolated nodes, other
runs against this one), the bandwidth under both data models beside a ring all-reduce, and the studies; then (with
``plots``) ``rows.png`` and ``studies.png``, matplotlib imported only then (:func:`jaxcomm.harness.report.pyplot`).
The rows, studies and config fields that pick what a run runs (:data:`ROWS`, :data:`STUDIES`, :data:`SELECTION`)
are defined here, read by the experiment's config and run too.
"""

from __future__ import annotations

import pathlib
from typing import Any

import numpy as np

from jaxcomm import exchange, recipes, stats
from jaxcomm.harness import report, results

EXPERIMENT = "outputs_exchange"

# row -> (nodes, content). The row names are the schema.
ROWS: dict[str, tuple[int, str]] = {
    "1_node_no_sharing": (1, "none"),
    "10_nodes_no_sharing": (10, "none"),
    "10_nodes_logits": (10, "logits"),
    "10_nodes_true_labels": (10, "true_labels"),
    "10_nodes_features": (10, "features"),
    "20_nodes_true_labels": (20, "true_labels"),
}
# Thesis Tables 2.1 (accuracy % after 5,000 steps) and 2.2 (steps to 85%): row -> (avg, collective, steps avg,
# steps collective); None = "N.A." or "-" in the thesis, strings as printed.
THESIS_TABLE: dict[str, tuple[Any, Any, Any, Any]] = {
    "1_node_no_sharing": (84.5, None, "5,900", None),
    "10_nodes_no_sharing": (71.1, 72.9, "> 13,000", "> 13,000"),
    "10_nodes_logits": (79.0, 84.8, "> 13,000", "5,300"),
    "10_nodes_true_labels": (81.8, 86.8, "12,800", "3,100"),
    "10_nodes_features": (72.0, 80.1, "> 13,000", "> 13,000"),
    "20_nodes_true_labels": (None, 87.7, None, "2,700"),
}
STUDIES = ("nodes", "neighbours", "frequency", "temperature")
STUDY_ORDER = ("nodes", "temperature", "neighbours", "frequency")
"""The order the presets run the studies in (the config's default ``studies``): the order of a report's merged
studies."""


def plot_rows(curves: list[dict], path: pathlib.Path) -> None:
    """Accuracy vs steps per row: node average (dashed) and collective decision (negentropy, solid)."""
    plt = report.pyplot()
    runs: dict[str, list[dict]] = {}
    for c in curves:
        if c["kind"] == "row":
            runs.setdefault(c["run"], []).append(c)
    rows = [_mean_curve(group) for group in runs.values()]
    cols = 3
    grid = (len(rows) + cols) // cols
    fig, axes = plt.subplots(grid, cols, figsize=(5 * cols, 3.6 * grid), squeeze=False, sharey=True)
    colours = plt.cm.tab10(np.arange(len(rows)))
    for ax, colour, c in zip(axes.flat, colours, rows, strict=False):
        ax.plot(c["steps"], c["collective_accuracy"]["negentropy"], color=colour, label="collective (negentropy)")
        ax.plot(c["steps"], c["collective_accuracy"]["entropy"], color=colour, linestyle=":",
                label="collective (entropy, Alg. 3 as printed)")
        ax.plot(c["steps"], c["avg_accuracy"], color=colour, linestyle="--", label="node average")
        ax.set(title=c["run"], xlabel="step", ylabel="test accuracy (%)")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    overview = axes.flat[len(rows)] if len(rows) < axes.size else None
    if overview is not None:
        for colour, c in zip(colours, rows, strict=True):
            overview.plot(c["steps"], c["collective_accuracy"]["negentropy"], color=colour, label=c["run"])
            overview.plot(c["steps"], c["avg_accuracy"], color=colour, linestyle="--")
        overview.set(title="all rows (solid collective, dashed average)", xlabel="step")
        overview.grid(alpha=0.3)
        overview.legend(fontsize=7)
    for ax in list(axes.flat)[len(rows) + 1:]:
        ax.axis("off")
    report.save_figure(fig, path)


def _mean_curve(curves: list[dict]) -> dict:
    """One run's curves over its seeds: the mean of every accuracy (one seed: the curve itself)."""
    if len(curves) == 1:
        return curves[0]
    mean = lambda read: np.mean([read(c) for c in curves], axis=0).tolist()  # noqa: E731
    return {**curves[0], "run": f"{curves[0]['run']} (mean of {len(curves)} seeds)",
            "avg_accuracy": mean(lambda c: c["avg_accuracy"]),
            "collective_accuracy": {w: mean(lambda c, w=w: c["collective_accuracy"][w])
                                    for w in curves[0]["collective_accuracy"]}}


def plot_studies(studies: list[dict], path: pathlib.Path) -> None:
    """Final node average and collective accuracy against each study's parameter."""
    plt = report.pyplot()
    names = [s for s in STUDIES if any(r["study"] == s for r in studies)]
    if not names:
        return
    fig, axes = plt.subplots(1, len(names), figsize=(4.5 * len(names), 3.8), squeeze=False)
    titles = {"nodes": "number of nodes N (true labels, full)", "neighbours": "neighbours p (10 nodes, ring)",
              "frequency": "consume / broadcast (10 nodes)", "temperature": "temperature tau (10 nodes, logits)"}
    for ax, study in zip(axes[0], names, strict=True):
        points = [r for r in studies if r["study"] == study]
        # rings of another size than the neighbours study's 10 nodes (study_rings): marks of their own at their p
        rings = [r for r in points if study == "neighbours" and r.get("nodes", 10) != 10]
        points = [r for r in points if r not in rings]
        if study == "frequency":
            labels = [r["label"] for r in points]
            xs = np.arange(len(points))
            ax.set_xticks(xs, labels, rotation=30, fontsize=8)
        else:  # in x's order: points merged from other runs come after this run's
            points = sorted(points, key=lambda r: r["x"])
            xs = [r["x"] for r in points]
            if study in ("nodes", "temperature"):
                ax.set_xscale("log")
                ax.xaxis.set_minor_locator(plt.NullLocator())
            ax.set_xticks(xs, [r["label"].split("=")[1] + (" (full)" if r["label"] == "p=9" else "")
                               for r in points])
        sd = {key: [r.get(f"{key}_sd") or 0.0 for r in points]  # over seeds (one seed: none)
              for key in ("collective_accuracy", "avg_accuracy")}
        ax.errorbar(xs, [r["collective_accuracy"] for r in points], yerr=sd["collective_accuracy"], fmt="o-",
                    capsize=3, label="collective (negentropy) ± sd")
        ax.plot(xs, [r["collective_accuracy_by_weighting"]["entropy"] for r in points], "x:",
                label="collective (entropy)")
        ax.errorbar(xs, [r["avg_accuracy"] for r in points], yerr=sd["avg_accuracy"], fmt="s--", capsize=3,
                    label="node average ± sd")
        for r in rings:
            ax.plot([r["x"]], [r["collective_accuracy"]], "D", label=f"{r['label']} ring: collective")
            ax.plot([r["x"]], [r["avg_accuracy"]], "d", fillstyle="none", label=f"{r['label']} ring: node average")
        ax.set(title=titles[study], ylabel="test accuracy (%)")
        ax.grid(alpha=0.3)
        # a ring of another size lands far below the curves, where "best" would still cover one of its marks
        ax.legend(fontsize=7, **({"loc": "upper center", "bbox_to_anchor": (0.5, -0.1), "ncol": 2} if rings else {}))
    report.save_figure(fig, path)


_num = report.cell


def _steps(value, horizon: int) -> str:
    return f"> {horizon:,}" if value is None else f"{value:,}"


_acc = report.mean_sd_cell


def _steps_per_seed(row: dict, key: str, horizon: int) -> str:
    """Steps to the target: each seed's, separated by ' / ' (older single-seed runs: the one value)."""
    if "per_seed" in row:
        return " / ".join(_steps(p[key], horizon) for p in row["per_seed"])
    return _steps(row[key], horizon)


def _validation_steps_section(curves: list[dict] | None) -> list[str]:
    """Table 2.2 read on validation curves at :func:`validation_target`, the same steps read on test beside."""
    target = recipes.validation_target(curves or [])
    if target is None:
        return []
    runs = [c for c in curves if c.get("kind") == "row" and c.get("validation_avg_accuracy")]

    def steps(c: dict, key: str) -> str:
        values = c[key] if not isinstance(c[key], dict) else c[key]["negentropy"]
        hit = next((step for step, v in zip(c["steps"], values, strict=True) if v >= target), None)
        return f"> {c['steps'][-1]:,}" if hit is None else f"{hit:,}"

    lines = ["", f"## Table 2.2 on validation: steps to {target:g}%, the target chosen on validation", "",
             f"The target is the single node's final validation accuracy, mean over seeds, rounded ({target:g}%), "
             "as the thesis' 85% sits at its single node's final 84.5%; steps are read on the validation curves "
             "(each seed's, separated by /), the same target on the test curves beside them.", "",
             "| row | validation avg | validation coll. | test avg | test coll. |", "|---|---|---|---|---|"]
    for name in dict.fromkeys(c["run"] for c in runs):
        seeds = sorted((c for c in runs if c["run"] == name), key=lambda c: c["seed"])
        cells = [" / ".join(steps(c, key) for c in seeds) for key in
                 ("validation_avg_accuracy", "validation_collective_accuracy", "avg_accuracy", "collective_accuracy")]
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    return lines


def table_markdown(summary: dict, curves: list[dict] | None = None) -> str:
    """table.md: Tables 2.1 and 2.2 beside the thesis', the collective decision's weightings, the paired
    comparisons, the bandwidth, the studies and the reruns."""
    rows = summary["rows"]
    # runs since the validation split also evaluate on it
    validated = any("validation_avg_accuracy" in r for r in [*rows.values(), *(summary.get("studies") or [])])
    lines = _heading(summary, validated) + _table_2_1(summary, validated) + _table_2_2(summary)
    lines += _validation_steps_section(curves)
    lines += _weightings_section(rows)
    lines += paired_markdown(rows)
    lines += bandwidth_markdown(summary)
    lines += _studies_section(summary, validated)
    lines += reruns_markdown(summary)
    lines += other_recipes_markdown(summary)
    lines += ["", "![accuracy vs steps per row](rows.png)", ""] if rows else [""]
    return "\n".join(lines)


def _heading(summary: dict, validated: bool) -> list[str]:
    """The title, the run (command, preset, wall time, device, commit, the command that redraws it), the data and
    the recipe, and the cpu preset's scale-downs."""
    config = summary["config"]
    note = f" ({summary['note']})" if summary.get("note") else ""
    lines = [
        "# Chapter 2: nodes exchanging outputs (Tables 2.1 and 2.2)", "",
        f"Command: `{summary['command']}`  ",
        f"Preset `{summary['preset']}`, wall time {summary['wall_seconds']:.0f} s on {summary['device']}; "
        f"commit `{summary['git_commit']}`.  ",
        f"Redraw: `{report.experiment_command(summary, EXPERIMENT)} report "
        f"{summary.get('out_dir', 'results/outputs_exchange')}`",
        "", f"Data: {summary.get('dataset')}{note}. Model: {recipes.describe(config)}; fully connected, consume "
        f"{config['consume_prob']}, "
        f"broadcast {config['broadcast_factor']} x p_c/(N-1), inbox {config['inbox_capacity']}, logits at tau "
        f"{config['temperature']}; {config['num_steps']:,} steps, evaluated every {config['eval_every']} steps on the "
        "test set" + (f" and on the validation split (the last {config['validation_size']:,} training images, held out "
                      "of every shard)" if validated else "")
        + ". Collective = Algorithm 3 with confident nodes weighted more (negentropy).", "",
    ]
    if summary.get("scale_downs"):
        lines += ["Scale-downs of the cpu preset:", ""] + [f"- {s}" for s in summary["scale_downs"]] + [""]
    return lines


def _table_2_1(summary: dict, validated: bool) -> list[str]:
    """Table 2.1: each row's accuracy at the final step beside the thesis'."""
    rows, config = summary["rows"], summary["config"]
    row_seeds = seeds_of(list(rows.values()))
    lines = [
        f"## Table 2.1: accuracy (%) at the final step (thesis: 5,000 steps; here {config['num_steps']:,}"
        + (f"; mean ± sd over seeds {row_seeds}" if row_seeds else "")
        + ")", "",
        "| row | thesis avg | thesis coll. | measured avg | measured coll. (negentropy) | gain coll. - avg |"
        + (" validation avg | validation coll. |" if validated else ""),
        "|---|---|---|---|---|---|" + ("---|---|" if validated else ""),
    ]
    for name, row in rows.items():
        t = THESIS_TABLE[name]
        coll = _acc(row, "collective_accuracy") + (" (= avg, one node)" if row["nodes"] == 1 else "")
        gain = row["collective_accuracy"] - row["avg_accuracy"]
        lines.append(f"| {name} | {_num(t[0])} | {_num(t[1]) if t[1] is not None else 'N.A.'} | "
                     f"{_acc(row, 'avg_accuracy')} | {coll} | {gain:+.1f} |"
                     + (f" {_acc(row, 'validation_avg_accuracy')} | {_acc(row, 'validation_collective_accuracy')} |"
                        if validated else ""))
    for extra in summary.get("extra_runs", []):
        if extra.get("rows"):
            lines += ["", f"Rows {', '.join(extra['rows'])} come from {_another_run(extra, summary)}."]
        for name, seeds in (extra.get("seeds") or {}).items():
            lines += ["", f"Seed{'s' * (len(seeds) > 1)} {', '.join(map(str, seeds))} of row {name} "
                      f"come{'s' * (len(seeds) == 1)} from "
                      f"{_another_run(extra, summary, 'settings but its seeds')}."]
    return lines


def _table_2_2(summary: dict) -> list[str]:
    """Table 2.2: each row's steps to the target accuracy beside the thesis'."""
    rows, config = summary["rows"], summary["config"]
    row_seeds = seeds_of(list(rows.values()))
    horizon = config["num_steps"]
    lines = ["", f"## Table 2.2: steps to the target (thesis: 85%; here {config['target']}%, "
             f"evaluated every {config['eval_every']} steps, '> {horizon:,}' = not reached"
             + ("; each seed's, separated by /" if row_seeds else "") + ")", "",
             "| row | thesis avg | thesis coll. | measured avg | measured coll. |", "|---|---|---|---|---|"]
    for name, row in rows.items():
        t = THESIS_TABLE[name]
        lines.append(f"| {name} | {_num(t[2])} | {_num(t[3]) if t[3] is not None else 'N.A.'} | "
                     f"{_steps_per_seed(row, 'steps_to_target_avg', horizon)} | "
                     f"{_steps_per_seed(row, 'steps_to_target_collective', horizon)} |")
    return lines


def _weightings_section(rows: dict) -> list[str]:
    """The collective decision under its four weightings, on the same predictions."""
    lines = ["", "## Collective decision: the four weightings on the same predictions (final step, %)", "",
             "| row | node average | negentropy | entropy (Alg. 3 as printed) | mean | vote | entropy - negentropy |",
             "|---|---|---|---|---|---|---|"]
    for name, row in rows.items():
        w = row["collective_accuracy_by_weighting"]
        lines.append(f"| {name} | {_num(row['avg_accuracy'])} | {_num(w['negentropy'])} | {_num(w['entropy'])} | "
                     f"{_num(w['mean'])} | {_num(w['vote'])} | {w['entropy'] - w['negentropy']:+.2f} |")
    return lines


def _studies_section(summary: dict, validated: bool) -> list[str]:
    """The configuration studies of §2.3.1: every point, where it came from, what the budget skipped, and their
    paired comparisons."""
    rows, config = summary["rows"], summary["config"]
    studies = summary.get("studies") or []
    if not studies:
        return []
    lines = ["", f"## Configuration studies (§2.3.1): {config['study_steps']:,} steps each, channels "
             f"{tuple(config['study_widths'])}, "
             + (f"seeds {study_seeds} (mean ± sd)" if (study_seeds := seeds_of(studies)) else "one seed"), "",
             "| study | point | N | content | topology, p | p_c | p_b | tau | avg | coll. (negentropy) | "
             "coll. (entropy) | bytes / node / step |" + (" validation avg / coll. |" if validated else ""),
             "|---|---|---|---|---|---|---|---|---|---|---|---|" + ("---|" if validated else "")]
    for s in studies:
        lines.append(f"| {s['study']} | {s['label']} | {s['nodes']} | {s['content']} | {s['topology']}, "
                     f"{s['num_neighbours']} | {s['consume_prob']:.2f} | {s['broadcast_prob']:.4f} | "
                     f"{s['temperature']:g} | {_acc(s, 'avg_accuracy')} | {_acc(s, 'collective_accuracy')} | "
                     f"{_num(s['collective_accuracy_by_weighting']['entropy'])} | "
                     f"{s['bytes_sent_per_node_step']:,.0f} |"
                     + (f" {_num(s.get('validation_avg_accuracy'))} / "
                        f"{_num(s.get('validation_collective_accuracy'))} |" if validated else ""))
    for extra in summary.get("extra_runs", []):
        if extra["points"]:
            lines += ["", f"Points {', '.join(extra['points'])} come from {_another_run(extra, summary)}."]
    if summary.get("skipped_studies"):
        lines += ["", "Skipped by the time budget: " + "; ".join(summary["skipped_studies"]) + "."]
    lines += study_paired_markdown(studies)
    lines += study_vs_isolated_markdown(studies, rows)
    return lines + ["", "![studies](studies.png)"]


COMPARISONS = (  # (row, against, what it asks)
    ("10_nodes_true_labels", "10_nodes_no_sharing", "sharing true labels vs isolated nodes"),
    ("10_nodes_logits", "10_nodes_no_sharing", "sharing logits vs isolated nodes"),
    ("10_nodes_features", "10_nodes_no_sharing", "sharing features vs isolated nodes"),
    ("10_nodes_true_labels", "10_nodes_logits", "true labels vs logits"),
    ("20_nodes_true_labels", "10_nodes_true_labels", "20 vs 10 nodes sharing true labels"),
    ("10_nodes_no_sharing", "1_node_no_sharing", "10 isolated nodes vs one node on all the data"),
    ("10_nodes_true_labels", "1_node_no_sharing", "10 nodes sharing true labels vs one node on all the data"),
)
"""The directions chapter 2 reads from Tables 2.1: each a difference paired by seed (same seed, same draws)."""


PAIRED_KEYS = ("avg_accuracy", "collective_accuracy", "validation_avg_accuracy", "validation_collective_accuracy")
"""The accuracies a paired comparison of chapter-2 rows reads (test, then validation where recorded)."""


STUDY_REFERENCES = {"nodes": "N=10", "temperature": "tau=1", "neighbours": "p=9", "frequency": "p_c=0.5"}
"""The point of each study every other point is compared with: the rows' network (10 nodes, fully connected,
p_c = 0.5 at equilibrium broadcast, tau = 1), at the studies' steps."""


def study_reference(study: dict, points: dict[str, dict]) -> str:
    """The point ``study`` is compared with (a key of ``points``): its study's :data:`STUDY_REFERENCES` point, but
    for a ring of another size than 10 nodes, the nodes study's fully connected network of its N where the run
    holds one (the graph alone changes; against the 10-node network N would change too)."""
    same_size = f"nodes N={study.get('nodes')}"
    if study["study"] == "neighbours" and study.get("nodes", 10) != 10 and same_size in points:
        return same_size
    return f"{study['study']} {STUDY_REFERENCES[study['study']]}"


def study_paired_markdown(studies: list[dict]) -> list[str]:
    """Every study point minus its :func:`study_reference` point, paired by seed (points run with the same >= 2
    seeds), :func:`jaxcomm.harness.report.paired_comparisons`."""
    points = {f"{s['study']} {s['label']}": s for s in studies}

    def name(s: dict, reference: str) -> str:  # "nodes: N=20 vs N=10"; another study's point says whose
        study, label = reference.split(" ", 1)
        return f"{s['study']}: {s['label']} vs {label}" + ("" if study == s["study"] else f" ({study} study)")

    comparisons = [(point, reference, name(s, reference)) for point, s in points.items()
                   if (reference := study_reference(s, points)) != point]
    return report.paired_comparisons(points, comparisons, PAIRED_KEYS, title="Studies against their reference point",
                                     why_paired="the same seed draws the same initialisations and, at the same N, "
                                                "the same shards")


ISOLATED = "10_nodes_no_sharing"


def study_vs_isolated_markdown(studies: list[dict], rows: dict) -> list[str]:
    """Every study point minus 10 isolated nodes trained as long (the row :data:`ISOLATED`, where it ran the
    studies' steps with their seeds), paired by seed: whether each way of sharing helps or hurts against not
    sharing at all (issue 39), one Holm family."""
    isolated = rows.get(ISOLATED)
    points = {f"{s['study']} {s['label']}": s for s in studies}
    if isolated is None or any(s["steps"] != isolated["steps"] for s in studies):
        return []
    comparisons = [(name, ISOLATED, f"{name} vs 10 isolated nodes") for name in points]
    return report.paired_comparisons(
        points | {ISOLATED: isolated}, comparisons, PAIRED_KEYS, title="Studies against 10 isolated nodes",
        why_paired=f"{isolated['steps']:,} steps each; the same seed draws the same initialisations and, at N = 10, "
                   "the same shards")


def paired_markdown(rows: dict) -> list[str]:
    """:data:`COMPARISONS` as paired differences of the node average and the collective (test; validation where
    recorded), :func:`jaxcomm.harness.report.paired_comparisons`."""
    return report.paired_comparisons(
        rows, COMPARISONS, PAIRED_KEYS,
        why_paired="the same seed draws the same shards, initialisations and messages' randomness")


SAMPLE_BYTES = {"cifar10": 32 * 32 * 3, "mnist": 28 * 28, "mnist_sample": 28 * 28}
"""Bytes of one uint8 input image, for summaries written before messages counted their inputs."""


def message_bytes_of(row: dict, config: dict, dataset: str) -> tuple[int, int]:
    """``(private, shared)`` bytes of one message of ``row``: with its images, with their indices. Summaries from
    before the data was counted (no ``data_model``) recorded the shared figure; the images are added here."""
    if row.get("data_model") == "private":
        return row["message_bytes"], row["message_bytes_shared"]
    shared = row.get("message_bytes_shared", row["message_bytes"])
    b = config["batch_size"]
    return (shared - b * exchange.INDEX_BYTES + b * SAMPLE_BYTES[dataset] if shared else 0), shared


def bandwidth_markdown(summary: dict) -> list[str]:
    """The bytes table under both data models (:data:`jaxcomm.exchange.DATA_MODELS`) beside a ring all-reduce."""
    rows, config = summary["rows"], summary["config"]
    dataset = summary.get("dataset") or config["dataset"]
    image = SAMPLE_BYTES[dataset]
    lines = ["", "## Bandwidth per node and step, under both data models", "",
             f"A message is the minibatch a node trained on plus its payload (uint8 class ids for true labels, "
             f"float32 logits or features) and an 8-byte header. **private** (the thesis, §2.2.2.1: every shard is "
             f"distinct and exclusive, so the receiver cannot look the samples up): the {config['batch_size']} "
             f"images travel, as the uint8 arrays the simulator holds ({image:,} B each). **shared** (every node "
             "holds the whole dataset, as codistillation assumes): int32 indices travel instead; the figure these "
             "tables printed before the data was counted. Measured: inbox `sent` counter (one copy per receiver) x "
             "message bytes / (N x steps). All-reduce: a synchronous ring all-reduce of the same CNN's float32 "
             "gradients, 2 (N-1)/N x 4 x num_params bytes sent per node and step.", "",
             "| row | params | sent copies | message B, private | message B, shared | B / node / step, private | "
             "B / node / step, shared | all-reduce B / node / step | all-reduce / private | all-reduce / shared |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for name, row in rows.items():
        messages = message_bytes_of(row, config, dataset)
        allred = row["allreduce_bytes_per_node_step"]
        sent = [row["counters"]["sent"] * m / (row["nodes"] * row["steps"]) for m in messages]
        ratios = [f"{allred / b:,.0f}x less" if b and allred else "-" for b in sent]
        lines.append(f"| {name} | {row['num_params']:,} | {row['counters']['sent']:,.0f} | {messages[0]:,.0f} | "
                     f"{messages[1]:,.0f} | {sent[0]:,.1f} | {sent[1]:,.1f} | {allred:,.0f} | {ratios[0]} | "
                     f"{ratios[1]} |")
    return lines


def seeds_of(runs: list[dict]) -> str | None:
    """The seeds of runs trained with several, as printed (None for single-seed runs)."""
    seeds = {tuple(r["seeds"]) for r in runs if len(r.get("seeds") or ()) > 1}
    return ", ".join(str(s) for s in sorted(seeds)[0]) if len(seeds) == 1 else None


def _another_run(extra: dict, summary: dict, same: str = "settings") -> str:
    """Where merged rows or points come from (an entry of ``extra_runs`` of ``summary``); the device is named for
    rows, and for points trained on another device than this run's (one study, two machines)."""
    named = extra.get("rows") or extra.get("seeds") or extra.get("device") != summary.get("device")
    device = f", on {extra['device']}" if named and extra.get("device") else ""
    return (f"another run with the same {same} (`{extra['out_dir']}/`): `{extra['command']}` "
            f"({extra['wall_seconds']:.0f} s, commit `{extra['git_commit']}`{device})")


def reruns_markdown(summary: dict) -> list[str]:
    """The rows of subfolder runs with the same settings (the table run again, e.g. to time it alone), beside this
    run's: what the same command gives twice."""
    said = lambda rows: f"seeds {seeds}" if (seeds := seeds_of(list(rows.values()))) else "one seed"  # noqa: E731
    lines, these = [], said(summary["rows"])
    for again in summary.get("reruns", []):
        name, those = pathlib.Path(again["out_dir"]).name, said(again["rows"])
        same = ", as this run's" if those == these else f" (this run: {these})"
        lines += ["", f"## The same settings run again (`{name}/`)", "",
                  f"`{again['command']}`: {again['wall_seconds']:.0f} s on {again.get('device')}, commit "
                  f"`{again['git_commit']}`; {those}{same}. Accuracy (%) at the final step, this run / run again.", "",
                  "| row | avg | coll. | validation avg | validation coll. |", "|---|---|---|---|---|"]
        for row_name, row in summary["rows"].items():
            other = again["rows"].get(row_name)
            if other is None:
                continue
            lines.append(f"| {row_name} | " + " | ".join(
                f"{_num(row.get(k))} / {_num(other.get(k))}" for k in
                ("avg_accuracy", "collective_accuracy", "validation_avg_accuracy", "validation_collective_accuracy"))
                + " |")
    return lines


def other_recipes_markdown(summary: dict) -> list[str]:
    """The rows of runs in subfolders that train otherwise (:data:`SELECTION`), beside this run's."""
    others = [o for o in summary.get("other_runs", []) if o["rows"]]
    if not others or not summary["rows"]:
        return []
    names = [pathlib.Path(o["out_dir"]).name for o in others]
    config = summary["config"]
    lines = ["", "## Other runs: the rows of runs in subfolders that train otherwise (avg / coll., %)", ""]
    for name, other in zip(names, others, strict=True):
        c = other["config"]
        changed = ", ".join(f"{k}={v}" for k, v in
                            results.changed_settings(config, c, selection=SELECTION).items())
        lines.append(f"- `{name}/`: {recipes.describe(c)}; {c['num_steps']:,} steps (differs in {changed}); "
                     f"`{other['command']}` ({other['wall_seconds']:.0f} s); its own table: `{name}/table.md`")
    seeds = [o for o in others if results.same_settings(config, o["config"], selection=(*SELECTION, "seed"))]
    lines += ["", "| row | thesis | this run | " + " | ".join(f"`{n}/`" for n in names)
              + (f" | mean over the {len(seeds) + 1} seeds" if seeds else "") + " |",
              "|---|---|---|" + "---|" * (len(names) + bool(seeds))]
    pair = lambda a, c: f"{_num(a)} / {_num(c)}"  # noqa: E731
    for name, row in summary["rows"].items():
        t = THESIS_TABLE[name]
        cells = [pair(t[0], t[1]) if t[1] is not None else f"{_num(t[0])} / N.A.",
                 pair(row["avg_accuracy"], row["collective_accuracy"])]
        cells += [pair(r["avg_accuracy"], r["collective_accuracy"]) if (r := o["rows"].get(name)) else "-"
                  for o in others]
        if seeds:
            runs = [row] + [o["rows"][name] for o in seeds if name in o["rows"]]
            cells.append(pair(*(float(np.mean([r[k] for r in runs])) for k in ("avg_accuracy", "collective_accuracy")))
                         + f" ({len(runs)})")
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    return (lines + paired_with_others_markdown(summary["rows"], others, names)
            + interactions_markdown(summary["rows"], others, names))


def paired_with_others_markdown(rows: dict, others: list[dict], names: list[str]) -> list[str]:
    """Each subfolder run's rows minus this run's, paired by seed where both ran the same >= 2 seeds: what the
    setting the subfolder run changes (e.g. augmentation alone) does to every row."""
    together, comparisons = dict(rows), []
    for name, other in zip(names, others, strict=True):
        for row, theirs in other["rows"].items():
            if row in rows:
                together[f"{name}/{row}"] = theirs
                comparisons.append((f"{name}/{row}", row, f"`{name}/` vs this run: {row}"))
    return report.paired_comparisons(together, comparisons, PAIRED_KEYS,
                                     why_paired="the same seed draws the same shards and initialisations; the "
                                     "runs differ only where the list above says",
                                     title="Other runs against this one, paired")


def _comparison_per_seed(rows: dict, a: str, b: str) -> dict | None:
    """Row ``a`` minus row ``b`` of one run as a row of its own: ``per_seed`` the paired differences of
    :data:`PAIRED_KEYS` both recorded. None unless both ran the same >= 2 seeds."""
    if a not in rows or b not in rows or len(seeds := rows[a].get("seeds") or ()) < 2 or seeds != rows[b].get("seeds"):
        return None
    per_seed = [{k: x[k] - y[k] for k in PAIRED_KEYS if x.get(k) is not None and y.get(k) is not None}
                for x, y in zip(rows[a]["per_seed"], rows[b]["per_seed"], strict=True)]
    return {"seeds": seeds, "per_seed": per_seed}


def interactions_markdown(rows: dict, others: list[dict], names: list[str]) -> list[str]:
    """What each subfolder run's change does to each comparison of :data:`COMPARISONS`: seed by seed, the
    comparison's difference in the subfolder run minus the same difference in this run (an interaction, e.g.
    augmentation x sharing true labels), where both runs ran the same >= 2 seeds; one Holm family."""
    together, comparisons = {}, []
    for a, b, question in COMPARISONS:
        if (here := _comparison_per_seed(rows, a, b)) is None:
            continue
        together[question] = here
        for name, other in zip(names, others, strict=True):
            if (there := _comparison_per_seed(other["rows"], a, b)) is not None:
                together[f"{name}/{question}"] = there
                comparisons.append((f"{name}/{question}", question, f"`{name}/` minus this run: {question}"))
    return report.paired_comparisons(together, comparisons, PAIRED_KEYS,
                                     why_paired="each comparison's difference in the subfolder run minus the same "
                                     "difference in this run; the same seed draws the same shards and "
                                     "initialisations in both",
                                     title="Other runs against this one: what the change does to each comparison")


SELECTION = ("rows", "studies", "study_points", "time_budget_s", "backend", "data_dir", "study_node_counts",
             "study_neighbours", "study_rings", "study_consume", "study_broadcast_factors", "study_temperatures")
"""Config fields that pick what a run runs, or how fast, rather than how it trains (the study grids pick points;
each point trains by the other fields)."""


LEGACY_SETTINGS = {"num_seeds": 1, "validation_size": 0}
"""What a run trained with when its config predates these fields (one seed, no validation split held out): a
subfolder run from before them does not merge into a run that has them."""


SEED_FIELDS = ("seed", "num_seeds")
"""Config fields a run's rows may be split by, seeds trained by different runs (:func:`merge_runs`)."""


def row_of(summary: dict, target: float) -> dict:
    """A row of Table 2.1 from its seeds' summary (:func:`jaxcomm.recipes.summarize_seeds`, whose ``per_seed`` hold
    each seed's steps to ``target``): the summary, the target and the median steps over seeds."""
    return {**summary, "target": target, **{key: stats.median_seed([p[key] for p in summary["per_seed"]])
                                            for key in ("steps_to_target_avg", "steps_to_target_collective")}}


def _merge_seeds(summary: dict, extra: dict) -> dict[str, list[int]] | None:
    """Merges into ``summary``'s rows the rows of ``extra``, a run that trains otherwise only by its seeds
    (:data:`SEED_FIELDS`): a row this run lacks is added, a row it has gains ``extra``'s seeds, every number
    summarised again over all of them, as one run of every seed would (:func:`row_of`). Returns
    ``{row: the seeds added}``; None (nothing merged) where a row's seeds overlap this run's."""
    rows = summary["rows"]
    if any(set(rows[name]["seeds"]) & set(row["seeds"]) for name, row in extra["rows"].items() if name in rows):
        return None
    for name, row in extra["rows"].items():
        if name in rows:
            steps = ("steps_to_target_avg", "steps_to_target_collective")  # added per seed after the summary
            per_seed = sorted(zip([*rows[name]["seeds"], *row["seeds"]], [*rows[name]["per_seed"], *row["per_seed"]],
                                  strict=True))
            merged = recipes.summarize_seeds([{k: v for k, v in p.items() if k not in steps} for _, p in per_seed],
                                             [seed for seed, _ in per_seed])
            merged["per_seed"] = [p for _, p in per_seed]
            rows[name] = row_of(merged, row["target"])
        else:
            rows[name] = row
    return {name: list(row["seeds"]) for name, row in extra["rows"].items()}


def merge_runs(out_dir: pathlib.Path) -> tuple[dict, list[dict]]:
    """The run in ``out_dir`` plus what runs in its subfolders with the same settings add: study points (points a
    time budget skipped, run afterwards with ``--out DIR/extra rows= study_points=...``), which leave the skipped
    list, and rows this run did not train when it trained some (a table split over runs, e.g. ``rows=...`` in
    calls of a lent GPU's 10 minutes, the others run with ``--out DIR/more rows=...``), and the seeds of a run that
    differs only in them (``seed=S num_seeds=K``: a row too long for one session, trained seed by seed;
    :func:`_merge_seeds`). A subfolder run that trains a row this run has, or rows beside a run of studies only, is
    a rerun, set beside, never merged; one that trains otherwise (a field outside :data:`SELECTION` differs, and
    not only its seeds, or seeds that overlap this run's) is listed as ``other_runs``, whose rows the table sets
    beside this run's."""
    summary, curves = results.read_run(out_dir)
    summary["extra_runs"], summary["other_runs"], summary["reruns"] = [], [], []
    for extra, extra_curves in results.read_runs_below(out_dir, experiment=EXPERIMENT):
        extra["config"] = {**LEGACY_SETTINGS, **extra["config"]}
        if not results.same_settings(summary["config"], extra["config"], selection=SELECTION):
            seeds = (_merge_seeds(summary, extra) if not extra["studies"] and results.same_settings(
                summary["config"], extra["config"], selection=SELECTION + SEED_FIELDS) else None)
            if seeds is None:
                summary["other_runs"].append(extra)
                continue
            curves += [c for c in extra_curves if c.get("kind") == "row" and c.get("run") in seeds]
            summary["extra_runs"].append({"out_dir": pathlib.Path(extra["out_dir"]).name, "command": extra["command"],
                                          "wall_seconds": extra["wall_seconds"], "git_commit": extra["git_commit"],
                                          "device": extra.get("device"), "points": [], "rows": [], "seeds": seeds})
            continue
        new_rows = [name for name in extra["rows"] if name not in summary["rows"]] if summary["rows"] else []
        if len(new_rows) < len(extra["rows"]):  # the rows run again with the same settings: set beside
            summary["reruns"].append(extra)
            new_rows = []
        summary["rows"].update({name: extra["rows"][name] for name in new_rows})
        curves += [c for c in extra_curves if c.get("kind") == "row" and c.get("run") in new_rows]
        points = [(s["study"], s["label"]) for s in extra["studies"]]
        if not points and not new_rows:
            continue
        # a merged point replaces this run's of the same label; the sort below puts it after its study's others
        summary["studies"] = [s for s in summary["studies"] if (s["study"], s["label"]) not in points] + list(
            extra["studies"])
        summary["skipped_studies"] = [s for s in summary.get("skipped_studies", [])
                                      if tuple(s.split(" ")[:2]) not in points]
        summary["extra_runs"].append({"out_dir": pathlib.Path(extra["out_dir"]).name, "command": extra["command"],
                                      "wall_seconds": extra["wall_seconds"],
                                      "git_commit": extra["git_commit"], "device": extra.get("device"),
                                      "points": [f"{study} {label}" for study, label in points],
                                      "rows": new_rows})
    summary["rows"] = {name: summary["rows"][name] for name in ROWS if name in summary["rows"]}
    if summary["extra_runs"]:  # the preset's order of studies, whatever order the folders were read in (stable)
        order = STUDY_ORDER
        summary["studies"].sort(key=lambda s: order.index(s["study"]) if s["study"] in order else len(order))
    return summary, curves


def write_report(out_dir: pathlib.Path, *, plots: bool = True) -> None:
    """Writes table.md, then (with ``plots``) rows.png and studies.png, from the run in ``out_dir`` and below."""
    out_dir = pathlib.Path(out_dir)
    summary, curves = merge_runs(out_dir)
    report.write_table(out_dir, table_markdown(summary, curves))
    if plots:
        drawn = {"studies": lambda: plot_studies(summary.get("studies") or [], out_dir / "studies.png")}
        if summary["rows"]:  # a run of study points only has no rows to draw
            drawn["rows"] = lambda: plot_rows(curves, out_dir / "rows.png")
        report.draw(**drawn)

