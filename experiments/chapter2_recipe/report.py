"""The report of the recipe search (the chapter-2 recipe chosen on validation): ``table.md`` and
``validation.png``, drawn from a run's ``summary.json``.

:func:`write_report` is what ``python -m experiments.chapter2_recipe report DIR`` calls. :func:`table_markdown` lists
the candidates sorted by mean validation accuracy, best and chosen marked, with the rule, the threshold and the
changes from the preset (:func:`changes_line`); :func:`plot_validation` draws every candidate's mean validation
curve (matplotlib imported on first use, through :func:`jaxcomm.harness.report.pyplot`). :func:`format_value`, how a
candidate's name writes a recipe value, lives here because the experiment's grid and the report both write values.

References:
  Lacaille (2018), §2.3, Table 2.1; Hastie, Tibshirani and Friedman (2009), §7.10 (the one-standard-error rule).
"""

from __future__ import annotations

import pathlib
from typing import Any

from jaxcomm import recipes
from jaxcomm.harness import report, results


def format_value(value: Any) -> str:
    """A parsed value as a candidate's name writes it, which parses back to it: bools lower-case, floats by
    ``repr`` (1e-3 -> "0.001"), tuples' items joined by ``-``."""
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, tuple):
        return "-".join(format_value(v) for v in value)
    return repr(value) if isinstance(value, float) else str(value)


def _value(value: Any) -> str:
    """A summary's (JSON) value as the command line writes it (lists were tuples)."""
    return format_value(tuple(value) if isinstance(value, list) else value)


def _heading(summary: dict) -> list[str]:
    """The title, command, device and redraw lines."""
    return report.heading("Chapter-2 recipe chosen on validation", summary, "chapter2_recipe.py")


def _data_line(summary: dict) -> str:
    """The data, the validation split, the preset's recipe and how candidates train."""
    config, chapter2 = summary["config"], summary["chapter2_config"]
    nodes = config["num_nodes"]
    return (f"Data: {summary['dataset']}" + (f" ({summary['note']})" if summary.get("note") else "") + "; "
            f"validation: the last {summary['validation_size']:,} training images, held out of every shard. "
            f"Candidates: the chapter-2 `{config['chapter2_preset']}` preset ({recipes.describe(chapter2)}, "
            f"{chapter2['num_steps']:,} steps) with the changes in their name, each trained on "
            + ("one node" if nodes == 1 else f"{nodes} nodes sharing nothing")
            + f" with seeds {', '.join(map(str, summary['seeds']))}, evaluated every {config['eval_every']:,} steps. "
            "Accuracies: " + ("the node's" if nodes == 1 else "the node average") + " at the final step, mean ± sd "
            "over seeds; val SE = sd / sqrt(seeds); best val step: the evaluation of highest mean validation "
            "accuracy.")


def _threshold_line(summary: dict) -> str:
    """The best candidate's mean, its standard error and the floor the chosen one clears."""
    best = summary["rows"].get(summary["best"] or "")
    if best is None:
        return "No candidate finished: nothing chosen."
    floor = best["val_accuracy"] - best["val_accuracy_se"]
    return (f"Best `{summary['best']}`: {best['val_accuracy']:.2f} - SE {best['val_accuracy_se']:.2f} = "
            f"{floor:.2f}; chosen `{summary['chosen']}` ({summary['rows'][summary['chosen']]['val_accuracy']:.2f}).")


def changes_line(summary: dict) -> str:
    """One sentence: what the chosen candidate changes in the preset, and the command that trains by it."""
    if not summary["chosen"]:
        return "Changes from the preset: none (nothing chosen)."
    changes = summary["changes_from_preset"]
    if not changes:
        return f"Changes from the preset: none; the `{summary['config']['chapter2_preset']}` recipe is chosen as it is."
    said = "; ".join(f"{field} {_value(old)} → {_value(new)}" for field, (old, new) in changes.items())
    command = report.experiment_command(summary, "outputs_exchange")
    return (f"Changes from the preset: {said} (train chapter 2 by it: `{command} "
            f"--preset {summary['config']['chapter2_preset']} {' '.join(summary['chosen_overrides'])}`).")


def _cell(row: dict, key: str) -> str:
    return "stopped" if row[key] is None else f"{row[key]:.2f} ± {row[f'{key}_sd']:.2f}"


def table_markdown(summary: dict) -> str:
    """table.md: the candidates sorted by mean validation accuracy (stopped ones last), best and chosen marked."""
    rows = summary["rows"]
    lines = [*_heading(summary), _data_line(summary), "", f"Rule: {summary['rule']}", "",
             _threshold_line(summary), "",
             "| candidate | validation | test | val SE | best val step | steps | wall s | |",
             "|---|---|---|---|---|---|---|---|"]
    ordered = sorted(rows, key=lambda n: (rows[n]["val_accuracy"] is None, -(rows[n]["val_accuracy"] or 0.0)))
    for name in ordered:
        row = rows[name]
        marks = ", ".join(m for m, who in (("best", summary["best"]), ("chosen", summary["chosen"])) if who == name)
        lines.append(f"| `{name}` | {_cell(row, 'val_accuracy')} | {_cell(row, 'test_accuracy')} | "
                     f"{report.cell(row['val_accuracy_se'], 2)} | {report.cell(row['best_val_step'])} | "
                     f"{row['steps']:,} | {row['wall_seconds']:.0f} | {marks} |")
    for name in ordered:
        if rows[name].get("stopped"):
            lines += ["", f"`{name}` stopped: " + "; ".join(rows[name]["stopped"]) + "."]
    if summary.get("skipped"):
        lines += ["", "Skipped by the time budget: " + "; ".join(summary["skipped"]) + "."]
    lines += ["", changes_line(summary), "", "![validation](validation.png)"]
    return "\n".join(lines) + "\n"


def plot_validation(summary: dict, path: pathlib.Path) -> None:
    """Every candidate's mean validation accuracy (over seeds) against steps; best and chosen drawn thick."""
    plt = report.pyplot()
    rows = {name: row for name, row in summary["rows"].items() if row.get("curve")}
    fig, ax = plt.subplots(figsize=(10, 6))
    colours = plt.get_cmap("tab20")
    for i, (name, row) in enumerate(rows.items()):
        marks = [m for m, who in (("best", summary["best"]), ("chosen", summary["chosen"])) if who == name]
        ax.plot(row["curve"]["steps"], row["curve"]["val_accuracy"], marker=".", color=colours(i % 20),
                linewidth=2.5 if marks else 1.0, label=name + (f" ({', '.join(marks)})" if marks else ""))
    ax.set_xlabel("step")
    ax.set_ylabel(f"validation accuracy (%), mean over {len(summary['seeds'])} seeds")
    ax.set_title(f"Chapter-2 `{summary['config']['chapter2_preset']}` recipe candidates on the validation split "
                 f"({summary['validation_size']:,} images)", fontsize=10)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7, loc="best")
    report.save_figure(fig, path, dpi=120)


def write_report(out_dir: pathlib.Path, *, plots: bool = True) -> None:
    """Writes table.md, then (with ``plots``) validation.png, from the run in ``out_dir``."""
    summary, _ = results.read_run(out_dir)
    report.write_table(out_dir, table_markdown(summary))
    if plots:
        report.draw(validation=lambda: plot_validation(summary, pathlib.Path(out_dir) / "validation.png"))
