"""The bandwidth frontier's report: ``table.md`` (every method's accuracy against its bytes per node and step,
both data models, the Pareto fronts, the paired comparisons) and ``frontier.png``, drawn from a run's
``summary.json`` and the runs below it (:func:`jaxcomm.harness.frontier.merge_runs`).
"""

from __future__ import annotations

import pathlib

from jaxcomm import data, recipes, stats
from jaxcomm.harness import frontier, report
from jaxcomm.harness.frontier import multi_seed


def plot_frontier(summary: dict, path: pathlib.Path) -> None:
    """Final accuracy (mean ± sd over seeds) against bytes per node and step (log axis) under the private data
    model, one marker per family, the Pareto front as a step line; rows sending nothing drawn as a line at
    their mean in a band of ± sd."""
    plt = report.pyplot()
    data_model = "private" if multi_seed(summary) else "shared"
    rows = {name: row for name, row in frontier.under(summary["rows"], "private").items()
            if row.get("accuracy") is not None and row.get("bytes_per_node_step") is not None}
    sd = {name: row.get("accuracy_sd") or 0.0 for name, row in rows.items()}
    fig, ax = plt.subplots(figsize=(9, 6))
    for family in dict.fromkeys(row["family"] for row in rows.values()):
        names = [n for n in rows if rows[n]["family"] == family and rows[n]["bytes_per_node_step"] > 0]
        if not names:
            continue
        ax.errorbar([rows[n]["bytes_per_node_step"] for n in names], [rows[n]["accuracy"] for n in names],
                    yerr=[sd[n] for n in names], fmt=frontier.MARKERS.get(family, "*"), capsize=3, markersize=6,
                    label=family)
        for n in names:
            ax.annotate(n, (rows[n]["bytes_per_node_step"], rows[n]["accuracy"]), fontsize=7, xytext=(4, 3),
                        textcoords="offset points")
    for n in [n for n in rows if rows[n]["bytes_per_node_step"] == 0]:
        mean = rows[n]["accuracy"]
        ax.axhline(mean, color="grey", linestyle=":", label=f"{n} (0 bytes" + (", ± sd)" if sd[n] else ")"))
        if sd[n]:
            ax.axhspan(mean - sd[n], mean + sd[n], color="grey", alpha=0.15)
    on = [n for n in summary.get("frontier", []) if n in rows and rows[n]["bytes_per_node_step"] > 0]
    if on:
        ax.step([rows[n]["bytes_per_node_step"] for n in on], [rows[n]["accuracy"] for n in on], where="post",
                color="black", linewidth=0.8, label="Pareto front")
    seeds = len(summary.get("seeds") or ()) or 1
    steps = (summary.get("chapter2_config") or {}).get("num_steps", 0)
    ax.set_xscale("log")
    ax.set_xlabel(f"bytes sent per node and step ({data_model} data model, log scale)")
    ax.set_ylabel("final test accuracy (%)" + (f", mean ± sd over {seeds} seeds" if seeds > 1 else ""))
    ax.set_title(f"Accuracy against bandwidth: {summary['config']['num_nodes']} nodes, every method at {steps:,} "
                 f"steps, {data_model} data model\n(collective decision of node networks and codistillation, the "
                 "one model of synchronous, compressed and local SGD)", fontsize=9)
    ax.grid(alpha=0.3, which="both")
    ax.legend(fontsize=8)
    report.save_figure(fig, path, dpi=120)


def _bytes(value: float | None) -> str:
    if value is None:
        return "-"
    for unit, size in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if value >= size:
            return f"{value / size:.3g} {unit}"
    return f"{value:.3g} B"


def _vs_isolated(row: dict) -> str:
    """The paired difference from isolated nodes and its 95 % interval, in points."""
    diff, ci = row.get("paired_diff_vs_isolated"), row.get("paired_diff_vs_isolated_ci95")
    if diff is None:
        return "-"
    return f"{diff:+.1f}" + (f" [{ci[0]:+.1f}, {ci[1]:+.1f}]" if ci else "")


def holm_vs_isolated(rows: dict[str, dict]) -> dict[str, float | None]:
    """Each row's paired t-test against isolated nodes (``paired_diff_vs_isolated_p``,
    :func:`jaxcomm.harness.frontier.add_paired`), Holm-adjusted over the table (:func:`jaxcomm.stats.holm`; one
    family: every row tested, the ``_shared`` twins left out, since they are their private rows' runs and take their
    value). None: no test (fewer than 2 paired seeds, a stopped seed, or a zero spread)."""
    tested = {name: row.get("paired_diff_vs_isolated_p") for name, row in frontier.under(rows, "private").items()}
    held = dict(zip(tested, stats.holm(list(tested.values())), strict=True))
    return {name: held.get(name.removesuffix("_shared") if row.get("data_model") == "shared" else name)
            for name, row in rows.items()}


def stored_bytes(summary: dict, row: dict) -> float | None:
    """A row's bytes per node and step with its inputs counted as the dataset stores them (the ``stored``
    encoding, :data:`jaxcomm.data.STORED_BYTES_PER_IMAGE`): the run's own count where it made one; else re-priced
    from the row's record, exactly, since inputs travel whole: its inputs by kind, or (runs before the ledger's
    kinds) the B raw images of each of its private output-sharing messages. None without bytes or a stored size."""
    dataset, sent = summary.get("dataset"), row.get("bytes_per_node_step")
    if "bytes_per_node_step_stored" in row:
        return row["bytes_per_node_step_stored"]
    if sent is None or dataset not in data.STORED_BYTES_PER_IMAGE:
        return None
    ratio = data.STORED_BYTES_PER_IMAGE[dataset] / data.RAW_BYTES_PER_IMAGE[dataset]
    if "bytes_by_kind" in row:
        inputs = row["bytes_by_kind"].get("inputs", 0.0)
    elif row.get("family") == "outputs" and row.get("data_model") != "shared" and row.get("message_bytes"):
        batch = (summary.get("chapter2_config") or {})["batch_size"]
        inputs = sent * batch * data.RAW_BYTES_PER_IMAGE[dataset] / row["message_bytes"]
    else:  # no message of this row carries inputs
        inputs = 0.0
    return sent - inputs + inputs * ratio


def front_sentence(rows: dict[str, dict], on: list[str], data_model: str) -> str:
    """The Pareto front named in order of bytes, each point with its bytes and accuracy."""
    points = " → ".join(f"{n} ({_bytes(rows[n]['bytes_per_node_step'])}, {report.mean_sd_cell(rows[n], 'accuracy')})"
                        for n in on)
    return f"Pareto front under the {data_model} data model, by bytes per node and step: {points or 'none'}."


def _heading(summary: dict) -> list[str]:
    """The title, command, device and redraw lines every frontier table starts with."""
    return report.heading("Bandwidth frontier: output sharing against gradient exchange", summary,
                          "bandwidth_frontier.py")


def _data_line(summary: dict) -> str:
    """The data, the nodes and the chapter-2 recipe every method trains by."""
    config, chapter2 = summary["config"], summary.get("chapter2_config") or {}
    return (f"Data: {summary.get('dataset')}" + (f" ({summary['note']})" if summary.get("note") else "") + ". "
            f"{config['num_nodes']} nodes with disjoint IID shards; the chapter-2 `{config['chapter2_preset']}` "
            "preset" + (f" with `{' '.join(config['chapter2_overrides'])}`" if config.get("chapter2_overrides")
                        else "") + f": {recipes.describe(chapter2)}")


def table_markdown(summary: dict) -> str:
    """table.md of a run over seeds; a single-seed run's as it was drawn (:func:`single_seed_table`)."""
    if not multi_seed(summary):
        return single_seed_table(summary)
    rows, config = summary["rows"], summary["config"]
    chapter2 = summary.get("chapter2_config") or {}
    on = {model: set(summary.get(key, [])) for model, key in (("private", "frontier"), ("shared", "frontier_shared"))}
    lines = [
        *_heading(summary),
        f"{_data_line(summary)}. Every method at one horizon, {chapter2.get('num_steps', 0):,} steps, "
        f"evaluated every {config['eval_every']}; seeds {', '.join(map(str, summary.get('seeds') or []))} (a seed "
        "draws the shards, initialisations and batches; node networks train their seeds as one sweep).",
        "",
        "Accuracy: the final test accuracy, mean ± sd over seeds: the collective decision (negentropy) of node "
        "networks (outputs, gossip) and codistillation, the one model of synchronous, compressed and local SGD; "
        "node average beside it. vs isolated: the mean difference from `isolated` on the same seed, with its "
        "95 % interval (Student t); Holm p: its paired t-test's p-value, Holm-adjusted over the table's rows "
        "(one family; a `_shared` twin is its private row's test); read a direction only where Holm p is below "
        "0.05. Bytes: what each node sends per "
        "step under the private data model (a message carries its minibatch's images; see the module docstring "
        "for each count); 'of dense' = that over a dense ring all-reduce of the same gradients. Rows ending in "
        "`_shared` are the same runs as the row without the suffix, not trained again (the data model changes "
        "what is counted, not training), their messages counted under the shared data model (every node holds "
        "the dataset: int32 indices travel instead of images). Pareto front: no row with fewer or equal bytes "
        "has a higher mean accuracy; 'private' compares the rows without the `_shared` twins, 'shared' the twins "
        "in place of their private rows.",
        "",
        "| row | spec | family | accuracy | node avg | vs isolated [95 % CI] | Holm p | bytes / node / step | "
        "total / node | of dense | wall s | Pareto front |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    stored = any(stored_bytes(summary, row) is not None for row in rows.values())
    if stored:  # inputs under both encodings: the uint8 arrays held, and as the dataset stores them
        lines[-2:] = [lines[-2].replace("| bytes / node / step |", "| bytes / node / step | stored encoding |"),
                      lines[-1] + "---|"]
    graphs = any("graph" in row for row in rows.values())
    if graphs:  # the graph each row ran on ("-": a method that reads none)
        lines[-2:] = [lines[-2].replace("| family |", "| family | graph |"), lines[-1] + "---|"]
    held = holm_vs_isolated(rows)
    ordered = sorted(rows.items(), key=lambda item: (item[1]["bytes_per_node_step"] is None,
                                                     item[1]["bytes_per_node_step"] or 0))
    for name, row in ordered:
        accuracy = "stopped" if row["accuracy"] is None else report.mean_sd_cell(row, "accuracy")
        of_dense = row["fraction_of_dense_allreduce"]
        lines.append(f"| {name} | `{row['spec']}` | {row['family']} | "
                     + (f"{row.get('graph', '-')} | " if graphs else "") + f"{accuracy} | "
                     f"{report.mean_sd_cell(row, 'avg_accuracy')} | {_vs_isolated(row)} | "
                     f"{report.p_cell(held[name], '-')} | "
                     f"{_bytes(row['bytes_per_node_step'])} | "
                     + (f"{_bytes(stored_bytes(summary, row))} | " if stored else "")
                     + f"{_bytes(row['total_bytes_per_node'])} | "
                     f"{'-' if of_dense is None else f'{of_dense:.2e}'} | {row['wall_seconds']:.0f} | "
                     f"{', '.join(model for model in on if name in on[model])} |")
    lines += ["", front_sentence(rows, summary.get("frontier", []), "private"), "",
              front_sentence(rows, summary.get("frontier_shared", []), "shared")]
    if stored:
        as_stored = {n: r | {"bytes_per_node_step": stored_bytes(summary, r)}
                     for n, r in frontier.under(rows, "private").items()}
        lines += ["", front_sentence(as_stored, frontier.pareto(as_stored), "private")[:-1]
                  + "; inputs counted as the dataset stores them (stored encoding, `jaxcomm.data.STORED_BYTES_PER_"
                  "IMAGE`)."]
    for name, row in rows.items():
        if row.get("stopped"):
            lines += ["", f"{name} stopped: " + "; ".join(row["stopped"]) + "."]
    for extra in summary.get("extra_runs", []):
        lines += ["", f"Rows {', '.join(extra['methods'])} come from a second run, with the same settings, of "
                  f"methods the time budget skipped or added later: `{extra['command']}` "
                  f"({extra['wall_seconds']:.0f} s, commit `{extra['git_commit']}`)."]
    for other in summary.get("other_runs", []):
        folder = other["folder"]
        lines += ["", ("The superseded frontier is in `superseded/`" if folder == "superseded" else
                       f"`{folder}/` holds another run") + f" (`{other['command']}`), not merged: "
                  + "; ".join(other["reasons"]) + f". Its own table: `{folder}/table.md`."]
    if summary.get("skipped"):
        lines += ["", "Skipped by the time budget: " + "; ".join(summary["skipped"]) + "."]
    lines += ["", "![frontier](frontier.png)"]
    return "\n".join(lines) + "\n"


def single_seed_table(summary: dict) -> str:
    """table.md of a run from before the frontier had seeds (one per method, rows named by spec), byte for byte
    as it was drawn."""
    rows, config = summary["rows"], summary["config"]
    on = set(summary.get("frontier", []))
    chapter2 = summary.get("chapter2_config") or {}
    lines = [
        *_heading(summary),
        f"{_data_line(summary)}, {chapter2.get('num_steps', 0):,} steps, seed {config['seed']} "
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


def write_report(out_dir: pathlib.Path, *, plots: bool = True) -> None:
    """Writes table.md, then (with ``plots``) frontier.png, from the run in ``out_dir`` and the runs below it."""
    summary = frontier.merge_runs(out_dir)
    report.write_table(out_dir, table_markdown(summary))
    if plots:
        report.draw(frontier=lambda: plot_frontier(summary, pathlib.Path(out_dir) / "frontier.png"))
