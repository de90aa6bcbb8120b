"""Report helpers: table cells, ``table.md``, and plots that never cost a run its table.

An experiment's ``write_report(out_dir, *, plots=True)`` reads the run back
(:func:`jaxcomm.harness.results.read_run`), writes ``table.md`` with :func:`write_table`
first, then draws its plots through :func:`draw`, which turns a failing plot (no
matplotlib, a bad curve) into a one-line warning.
"""

from __future__ import annotations

import pathlib
import sys
from collections.abc import Callable, Sequence
from typing import Any


def pyplot():
    """``matplotlib.pyplot`` on the headless Agg backend (imported on first use)."""
    import matplotlib  # noqa: PLC0415

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # noqa: PLC0415

    return plt


def save_figure(fig: Any, path: pathlib.Path | str, dpi: int = 110) -> None:
    """Lays ``fig`` out, writes it to ``path`` (PNG at ``dpi``) and closes it, so sweeps of plots hold no memory."""
    fig.tight_layout()
    fig.savefig(path, dpi=dpi)
    pyplot().close(fig)


def cell(value: Any, digits: int = 1, missing: str = "-") -> str:
    """A table cell: ``missing`` for None, floats to ``digits`` places, ints with thousands separators."""
    if value is None:
        return missing
    if isinstance(value, float):
        return f"{value:,.{digits}f}"
    return f"{value:,}" if isinstance(value, int) else str(value)


def mean_sd_cell(row: dict, key: str, digits: int = 1, missing: str = "-") -> str:
    """``row[key]`` as "mean ± sd" when the row averages several seeds (``per_seed``, ``{key}_sd``), else
    :func:`cell` of the value (single-seed runs)."""
    if len(row.get("per_seed") or ()) > 1 and row.get(f"{key}_sd") is not None and row.get(key) is not None:
        return f"{cell(row[key], digits)} ± {cell(row[f'{key}_sd'], digits)}"
    return cell(row.get(key), digits, missing)


def experiment_command(summary: dict, name: str) -> str:
    """How to start experiment ``name`` as the run of ``summary`` was started: ``python -m experiments.<name>``, or
    ``python experiments/<name>.py`` for a run from before the experiments were packages (the tables committed then
    print it so, and redraw byte-identical)."""
    if "-m experiments." in str(summary.get("command") or ""):
        return f"python -m experiments.{name}"
    return f"python experiments/{name}.py"


def heading(title: str, summary: dict, script: str) -> list[str]:
    """A table's first lines: ``# title``, the run's command, preset, wall time, device and commit, and the
    command that redraws it (``python -m experiments.<name> report <out_dir>``, :func:`experiment_command`;
    ``script``: ``<name>.py``)."""
    redraw = experiment_command(summary, script.removesuffix(".py"))
    return [f"# {title}", "",
            f"Command: `{summary['command']}`  ",
            f"Preset `{summary['preset']}`, wall time {summary['wall_seconds']:.0f} s on {summary['device']}; commit "
            f"`{summary['git_commit']}`.  ",
            f"Redraw: `{redraw} report {pathlib.Path(summary.get('out_dir', '.'))}`",
            ""]


def paired_comparisons(rows: dict, comparisons: Sequence[tuple[str, str, str]], keys: Sequence[str], *,
                       why_paired: str, title: str = "Paired comparisons") -> list[str]:
    """The table of directions a chapter reads: for each ``(a, b, question)`` of ``comparisons`` whose rows both
    ran with the same >= 2 seeds, the mean over seeds of ``a``'s minus ``b``'s value of every key (from their
    ``per_seed`` rows; keys missing from either are left out) with its Student-t 95 % interval
    (:func:`jaxcomm.stats.paired_ci95`), its paired t-test p-value and that p-value Holm-adjusted over the table
    (:func:`jaxcomm.stats.holm`: the table is one family). A direction is read only where the adjusted p-value is
    below 0.05; a difference with zero spread over its seeds (a chance tie of 3 seeds) has no p-value and is not
    read. ``title`` starts the heading, ``why_paired`` ends it (what the same seed shares). No comparison: no
    lines."""
    import numpy as np  # noqa: PLC0415

    from jaxcomm import stats  # noqa: PLC0415

    found, shown = [], None
    for a, b, question in comparisons:
        seeds = rows.get(a, {}).get("seeds") or ()
        if b not in rows or len(seeds) < 2 or seeds != rows[b].get("seeds"):
            continue
        shown = seeds
        for key in keys:
            values = [(x.get(key), y.get(key)) for x, y in zip(rows[a]["per_seed"], rows[b]["per_seed"], strict=True)]
            if any(v is None for pair in values for v in pair):
                continue
            diffs = [x - y for x, y in values]
            p = stats.paired_t_p_value(diffs) if np.std(diffs) > 0 else None
            found.append((question, key, diffs, stats.paired_ci95(diffs, digits=None), p))
    if not found:
        return []
    adjusted = stats.holm([p for *_, p in found])
    lines = []
    for (question, key, diffs, (lo, hi), p), held in zip(found, adjusted, strict=True):
        read = "yes" if held is not None and held < 0.05 else "no"
        lines.append(f"| {question} | {key.replace('_accuracy', '').replace('_', ' ')} | {np.mean(diffs):+.1f} | "
                     f"[{lo:+.1f}, {hi:+.1f}] | {p_cell(p)} | {p_cell(held)} | {read} |")
    return ["", f"## {title} (seeds {', '.join(map(str, shown))}: {why_paired})", "",
            "Mean difference (points) and its 95 % interval over seeds (Student t); the paired t-test's p-value, raw "
            f"and Holm-adjusted over the table's {sum(p is not None for *_, p in found)} tests (one family). A "
            "direction is read only where the adjusted p-value is below 0.05; a zero spread (a chance tie of the "
            "seeds) is not tested.", "",
            "| comparison | accuracy | mean difference | 95 % interval | p | Holm p | direction read |",
            "|---|---|---|---|---|---|---|", *lines]


def p_cell(value: float | None, untested: str = "zero spread") -> str:
    """A p-value as a table shows it: three decimals, ``< 0.001`` below that, ``untested`` where none was computed."""
    if value is None:
        return untested
    return "< 0.001" if value < 0.001 else f"{value:.3f}"


def write_table(out_dir: pathlib.Path, table: str) -> pathlib.Path:
    """Writes ``table.md``: the generated ``table`` plus the hand-written ``notes.md`` beside it, if any.

    The notes (how a run went, how to read it) survive ``report`` redraws.
    """
    notes = pathlib.Path(out_dir) / "notes.md"
    text = table.rstrip("\n") + "\n"
    if notes.is_file():
        text += "\n" + notes.read_text().strip("\n") + "\n"
    path = pathlib.Path(out_dir) / "table.md"
    path.write_text(text)
    return path


def draw(**plots: Callable[[], Any]) -> bool:
    """Calls each plotting function; one that fails prints a one-line warning and the rest still run.

    Args:
      **plots: ``name=function`` pairs, e.g. ``fig3_1=lambda: plot_fig3_1(curves, out / "fig3_1.png")``.

    Returns:
      Whether every plot was drawn.
    """
    ok = True
    for name, plot in plots.items():
        try:
            plot()
        except Exception as error:  # noqa: BLE001  (a plot is never worth the run's table)
            message = " ".join(str(error).split())
            print(f"warning: plot {name} not drawn ({type(error).__name__}: {message})", file=sys.stderr)
            ok = False
    return ok


def accuracy_in_seconds(histories: dict[str, Sequence[dict]]) -> dict[str, dict[str, list]]:
    """Each run's accuracy against virtual seconds, from its history (``methods.train``'s, on a cluster):
    ``{name: {"seconds": [...], "node_average": [...], "collective": [...]}}``, one entry per evaluation that has a
    ``clock``; the collective is the negentropy decision (a shared model's accuracy for a method scored by one)."""
    out = {}
    for name, history in histories.items():
        timed = [r for r in history if isinstance(r.get("clock"), dict)]
        collective = [(r.get("collective_accuracy") or {}).get("negentropy", r.get("avg_accuracy")) for r in timed]
        out[name] = {"seconds": [float(r["clock"]["seconds"]) for r in timed],
                     "node_average": [r.get("avg_accuracy") for r in timed], "collective": collective}
    return out


def plot_accuracy_in_seconds(histories: dict[str, Sequence[dict]], path: pathlib.Path | str, *,
                             title: str = "") -> dict[str, dict[str, list]]:
    """Draws the node average and the collective accuracy of several runs against virtual seconds (two panels) to
    ``path``; returns what it drew (:func:`accuracy_in_seconds`)."""
    curves = accuracy_in_seconds(histories)
    plt = pyplot()
    fig, axes = plt.subplots(1, 2, figsize=(10, 3.8), sharey=True)
    for ax, key, label in ((axes[0], "node_average", "node average"), (axes[1], "collective", "collective")):
        for name, curve in curves.items():
            points = [(s, a) for s, a in zip(curve["seconds"], curve[key], strict=True) if a is not None]
            if points:
                ax.plot(*zip(*points, strict=True), marker=".", label=name)
        ax.set_xlabel("virtual seconds")
        ax.set_title(label)
        ax.grid(alpha=0.3)
    axes[0].set_ylabel("accuracy (%)")
    axes[1].legend(fontsize=8)
    if title:
        fig.suptitle(title)
    save_figure(fig, path)
    return curves
