"""The report of the chapter-3 experiment (Table 3.1 and Fig. 3.1): ``table.md``, ``fig3_1.png`` and
``stack_size.png``, all drawn from a run's ``summary.json`` and ``curves.jsonl``.

:func:`write_report` is what ``python -m experiments.teacher_selection report DIR`` calls. :func:`table_markdown`
sets the thesis' Table 3.1 beside the measured rows, then the rows paired by seed against the baseline
(:func:`paired_markdown`), the stack-size study (:func:`study_rows`) and the choices made where the thesis is silent.
:func:`plot_fig3_1` and :func:`plot_stack_sizes` draw the figures (matplotlib imported on first use, through
:func:`jaxcomm.harness.report.pyplot`). The constants the experiment's run shares with it (:data:`THRESHOLDS`,
:data:`COLLAPSE_ACCURACY`, :data:`TABLE_ROWS`, :data:`THESIS_TABLE`) live here.

References:
  Lacaille (2018), §3.2-3.3, Table 3.1, Figure 3.1.
"""

from __future__ import annotations

import pathlib
from collections.abc import Sequence
from typing import Any, NamedTuple

import numpy as np

from jaxcomm import teacher
from jaxcomm.harness import report, results

THRESHOLDS = (96.5, 96.8)  # validation accuracy (%) of the headline "updates to X" metrics
COLLAPSE_ACCURACY = 90.0  # a seed whose best validation accuracy stays below this has collapsed

# Table 3.1's configurations: row -> (stack size n, distance, soft-label targets).
TABLE_ROWS: dict[str, tuple[int, str, bool]] = {
    "baseline": (1, "cross_entropy", False),  # n = 1: the teacher returns the only minibatch, true labels
    "stack2_ce_soft": (2, "cross_entropy", True),
    "stack2_ce_true": (2, "cross_entropy", False),
    "stack2_euclid_soft": (2, "euclidean", True),
    "stack2_random_soft": (2, "random", True),
    "stack5_ce_soft": (5, "cross_entropy", True),
    "stack5_ce_true": (5, "cross_entropy", False),
    "stack5_learn_true": (5, "learnability", False),  # beyond the thesis: RHO-LOSS score
}
# Thesis Table 3.1: row -> (test accuracy %, backward passes at the best validation accuracy).
THESIS_TABLE = {
    "baseline": (96.4, 39_000),
    "stack2_ce_soft": (96.9, 25_000),
    "stack2_ce_true": (96.5, 18_700),
    "stack2_euclid_soft": (96.8, 18_700),
    "stack2_random_soft": (96.7, 32_800),
    "stack5_ce_soft": (96.8, 13_700),
    "stack5_ce_true": (96.8, 9_100),
}


FIG_LEFT = ("baseline", "stack2_ce_soft", "stack2_ce_true", "stack2_euclid_soft", "stack2_random_soft")
FIG_RIGHT = ("baseline", "stack2_ce_soft", "stack5_ce_soft", "stack5_ce_true", "stack5_learn_true")
LABELS = {"baseline": "baseline (no teacher, true labels)", "stack2_ce_soft": "stack 2, cross-entropy, soft labels",
          "stack2_ce_true": "stack 2, cross-entropy, true labels",
          "stack2_euclid_soft": "stack 2, Euclidean, soft labels", "stack2_random_soft": "stack 2, random, soft labels",
          "stack5_ce_soft": "stack 5, cross-entropy, soft labels",
          "stack5_ce_true": "stack 5, cross-entropy, true labels",
          "stack5_learn_true": "stack 5, learnability, true labels (beyond thesis)"}


def _mean_band(students: list[dict]) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Steps, mean, min and max of validation accuracy over seeds, up to the shortest curve."""
    length = min(len(s["steps"]) for s in students)
    acc = np.asarray([s["val_accuracy"][:length] for s in students])
    return np.asarray(students[0]["steps"][:length]), acc.mean(0), acc.min(0), acc.max(0)


def plot_fig3_1(curves: list[dict], path: pathlib.Path) -> None:
    """Thesis Fig. 3.1: validation accuracy vs student backward passes, mean over seeds, min-max band."""
    plt = report.pyplot()

    table = [c for c in curves if c["group"] == "table"]
    fig, axes = plt.subplots(1, 2, figsize=(13, 5), sharey=True)
    for ax, rows, title in ((axes[0], FIG_LEFT, "stack of 2 minibatches"),
                            (axes[1], FIG_RIGHT, "stack of 5 minibatches")):
        for row in rows:
            students = [c for c in table if c["row"] == row]
            if not students:
                continue
            steps, mean, low, high = _mean_band(students)
            style = "--" if row == "stack5_learn_true" else "-"
            line, = ax.plot(steps, mean, style, color=f"C{list(LABELS).index(row)}",
                            label=f"{LABELS[row]} ({len(students)} seeds)")
            ax.fill_between(steps, low, high, color=line.get_color(), alpha=0.15, linewidth=0)
        for threshold in THRESHOLDS:
            ax.axhline(threshold, color="grey", linewidth=0.6, linestyle=":")
        ax.set_ylim(92, 98)
        ax.set_xlabel("student backward passes (parameter updates)")
        ax.set_title(title)
        ax.legend(fontsize=8, loc="lower right")
        ax.grid(alpha=0.3)
    axes[0].set_ylabel("validation accuracy (%)  mean over seeds, band = min..max")
    fig.suptitle("Teacher selects the student's minibatch (MNIST, student 784-32-32-10, m = 32); "
                 "dotted: 96.5 % and 96.8 %", fontsize=10)
    report.save_figure(fig, path)


def study_rows(summary: dict) -> list[tuple[int, str | None, str | None]]:
    """(n, row without warm-up, row with warm-up) of the stack-size study, n = 1, 2, 5 from the table."""
    rows = summary["rows"]
    sizes = sorted({r["stack_size"] for r in rows.values()})
    out = []
    for n in sizes:
        plain = {1: "baseline"}.get(n, f"stack{n}_ce_soft")
        warm = f"stack{n}_ce_soft_warmup"
        out.append((n, plain if plain in rows else None, warm if warm in rows else None))
    return out


def plot_stack_sizes(summary: dict, path: pathlib.Path) -> None:
    """Updates and compute to the baseline's accuracy level (96.5 %) vs stack size n, with and without warm-up."""
    plt = report.pyplot()

    rows, study = summary["rows"], study_rows(summary)
    fig, axes = plt.subplots(1, 2, figsize=(12, 4.8))
    for key, ax, ylabel in (("updates_to_96_5", axes[0], "median backward passes to 96.5 % validation"),
                            ("compute_units_to_96_5", axes[1], "median compute to 96.5 % (forward 1, backward 2)")):
        notes = []
        for variant, marker, label in ((1, "o-", "no warm-up"),
                                       (2, "s--", f"warm-up: {summary['config']['warmup_updates']} plain updates")):
            points = [(n, rows[names[variant]]) for names in study for n in [names[0]] if names[variant] is not None]
            if variant == 2 and points:  # n = 1 has nothing to warm up: start from the baseline
                points = [(1, rows["baseline"])] + points
            reached = [(n, r[key]) for n, r in points if r[key] is not None]
            if reached:
                ax.plot(*zip(*reached, strict=True), marker, label=label, color=f"C{variant - 1}")
            for n, r in points:
                text = ("not reached; " if r[key] is None else "") + (
                    f"{r['collapsed_seeds']}/{r['seeds']} collapsed" if r["collapsed_seeds"] else "")
                if text:
                    notes.append((n, r[key], text.rstrip("; "), variant))
        base = rows["baseline"][key]
        if base is not None:
            ax.axhline(base, color="grey", linewidth=0.8, linestyle=":", label="baseline")
        for n, value, text, variant in notes:
            if value is not None:
                ax.annotate(text, (n, value), fontsize=7, color=f"C{variant - 1}", textcoords="offset points",
                            xytext=(4, -12 * variant + 6))
            else:  # vertical, side by side: one column per variant
                ax.annotate(text, (n, 0.35), xycoords=ax.get_xaxis_transform(), fontsize=7, rotation=90,
                            color=f"C{variant - 1}", textcoords="offset points", xytext=(-10 + 10 * variant, 0))
        ax.set_xscale("log")
        ax.set_xlim(0.8, 2.5 * max(n for n, _, _ in study))  # room for the notes right of the last n
        ax.set_xticks([n for n, _, _ in study], [str(n) for n, _, _ in study])
        ax.set_xlabel("teacher stack size n (minibatches the teacher chooses from)")
        ax.set_ylabel(ylabel, fontsize=9)
        ax.set_ylim(bottom=0)
        ax.grid(alpha=0.3)
        if ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize=8)
    fig.suptitle("Stack-size study: cross-entropy selection, soft labels (median over seeds; n = 1 is the "
                 "baseline)", fontsize=10)
    report.save_figure(fig, path)


def _fmt(value: Any, digits: int = 0) -> str:
    return report.cell(value, digits, missing="n.r.")


def table_markdown(summary: dict, curves: Sequence[dict] = ()) -> str:
    """table.md: thesis Table 3.1 beside the measured numbers, its rows paired by seed against the baseline (from
    ``curves``, the students' records), the study, and the choices made."""
    lines = _heading(summary) + _table_3_1(summary)
    lines += paired_markdown(curves)
    lines += _study_section(summary)
    spu = ", ".join(f"n={n}: {1e3 * t:.2f} ms" for n, t in summary["seconds_per_update"].items())
    groups = ", ".join(f"{name}: {g['students']} students, {g['updates_done']:,} updates, {g['seconds']:.0f} s"
                       for name, g in summary["groups"].items())
    lines += ["", f"Wall time per update of one student alone (after compilation): {spu}.  ",
              f"Populations (one jitted step each): {groups}.", ""]
    lines += _choices_section(summary["config"])
    return "\n".join(lines)


def _heading(summary: dict) -> list[str]:
    """The title, the run (command, preset, wall time, device, commit) and the teacher."""
    config, teacher_info = summary["config"], summary["teacher"]
    return ["# Chapter 3: a teacher selects the student's training data (MNIST): Table 3.1 and Figure 3.1", "",
            f"Command: `{summary['command']}`  ", f"Preset `{summary['preset']}`, wall time "
            f"{summary['wall_seconds']:.0f} s on {summary['device']}; commit "
            f"`{summary['git_commit']}`.  ",
            f"Teacher {'loaded from the cache' if teacher_info.get('cached') else 'trained in this run'} "
            f"(784-{'-'.join(map(str, config['teacher_hidden']))}-10, dropout {config['teacher_dropout']}, "
            f"{teacher_info['epochs']} epochs, best at epoch {teacher_info['best_epoch']}, "
            f"{teacher_info['seconds']:.0f} s to train): validation {teacher_info['val_accuracy']:.2f} %, test "
            f"{teacher_info['test_accuracy']:.2f} %, training-set {teacher_info['train_accuracy']:.2f} %.", ""]


def _table_3_1(summary: dict) -> list[str]:
    """Table 3.1: the thesis' accuracy and backward passes of each configuration beside the measured ones, and the
    robust headline (updates, forward passes, compute and wall seconds to 96.5 % / 96.8 %)."""
    rows, config = summary["rows"], summary["config"]
    lines = ["## Table 3.1", "",
             "Test accuracy at the best-validation parameters (mean ± std over seeds); backward passes = median "
             "updates at the best validation accuracy (the thesis' column); then the robust headline: median "
             "updates until validation accuracy first reaches 96.5 % / 96.8 % (evaluated every "
             f"{config['eval_every']} updates), their speedup over the baseline, student forward passes "
             "(minibatches) to 96.5 %, compute speedup to 96.5 % (forward = 1, backward = 2 units, teacher "
             "predictions cached), wall-clock seconds to 96.5 % of one student alone, and seeds whose best "
             "validation accuracy stayed under 90 % (collapsed). n.r. = not reached by at least half the seeds.", "",
             "| configuration | thesis acc. | thesis backward | acc. (%) | backward at best val | updates to 96.5 | "
             "updates to 96.8 | speedup 96.5 / 96.8 | forward to 96.5 | compute speedup | wall s to 96.5 "
             "(speedup) | collapsed |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for row in TABLE_ROWS:
        if row not in rows:
            continue
        r = rows[row]
        thesis = THESIS_TABLE.get(row)
        lines.append(
            f"| {LABELS[row]} | {thesis[0] if thesis else '-'} | {_fmt(thesis[1]) if thesis else '-'} | "
            f"{r['test_accuracy']:.2f} ± {r['test_accuracy_std']:.2f} | {_fmt(r['backward_passes'])} | "
            f"{_fmt(r['updates_to_96_5'])} ({r['seeds_reaching_96_5']}/{r['seeds']}) | "
            f"{_fmt(r['updates_to_96_8'])} ({r['seeds_reaching_96_8']}/{r['seeds']}) | "
            f"{_fmt(r['update_speedup_96_5'], 2)} / {_fmt(r['update_speedup_96_8'], 2)} | "
            f"{_fmt(r['forward_passes_to_96_5'])} | {_fmt(r['compute_speedup_96_5'], 2)} | "
            f"{_fmt(r['wall_seconds_to_96_5'], 1)} ({_fmt(r['wall_speedup_96_5'], 2)}) | "
            f"{r['collapsed_seeds']}/{r['seeds']} |")
    return lines


def _study_section(summary: dict) -> list[str]:
    """The stack-size study: n >= 10 with and without a warm-up, beside the table's n = 1, 2, 5."""
    rows, config = summary["rows"], summary["config"]
    lines = ["", "## Stack-size study (cross-entropy, soft labels)", "",
             f"n = 1, 2, 5 are the table's rows (baseline, stack 2 and stack 5 CE soft); n >= 10 ran as one "
             f"population per n with {config['study_seeds']} seeds, without and with a warm-up of "
             f"{config['warmup_updates']} plain updates (random minibatch, true labels) before selection starts, "
             f"for at most {config['study_max_updates']:,} updates, stopping once every student had reached "
             f"{max(THRESHOLDS)} % (so their test accuracy is at an early best-validation point).", "",
             "| n | warm-up | seeds | collapsed | best val. (%) | updates to 96.5 | updates to 96.8 | "
             "update speedup 96.5 | forward to 96.5 | compute speedup 96.5 | wall s to 96.5 |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    for n, plain, warm in study_rows(summary):
        for name in (plain, warm):
            if name is None:
                continue
            r = rows[name]
            lines.append(f"| {n} | {r['warmup_updates']} | {r['seeds']} | {r['collapsed_seeds']} | "
                         f"{r['best_val_accuracy']:.2f} | {_fmt(r['updates_to_96_5'])} "
                         f"({r['seeds_reaching_96_5']}/{r['seeds']}) | {_fmt(r['updates_to_96_8'])} "
                         f"({r['seeds_reaching_96_8']}/{r['seeds']}) | {_fmt(r['update_speedup_96_5'], 2)} | "
                         f"{_fmt(r['forward_passes_to_96_5'])} | {_fmt(r['compute_speedup_96_5'], 2)} | "
                         f"{_fmt(r['wall_seconds_to_96_5'], 1)} |")
    return lines


def _choices_section(config: dict) -> list[str]:
    """The choices made where the thesis is silent, with the run's values."""
    return ["## Choices where the thesis is silent", "",
           "- Data: MNIST official training set split 50,000 / 10,000 (the last 10,000 as validation), "
           "official 10,000 test (§3.2.2.1); pixels scaled to [0, 1], no augmentation.",
           f"- Teacher: dropout {config['teacher_dropout']} after each hidden layer (Srivastava et al.'s hidden "
           f"rate), no input dropout, Adam 1e-3, batch {config['teacher_batch_size']}, early stopping on "
           f"validation accuracy checked each epoch with patience {config['teacher_patience']} epochs (max "
           f"{config['teacher_max_epochs']}), best-validation parameters kept; cached on disk by its config.",
           "- Initialisation: Flax defaults (LeCun-normal kernels, zero biases) for teacher and students; "
           "seed s gets the same initialisation and data stream in every row (paired comparison).",
           "- Minibatches are drawn uniformly with replacement from the 50,000 training images (for the "
           "baseline and for every minibatch the student sends to the stack).",
           "- Soft labels: the teacher's softmax at temperature 1; the student's loss is the cross-entropy to "
           "the targets (eq. 2.2.2); the teacher's predictions on the training set are computed once.",
           f"- Validation accuracy is evaluated every {config['eval_every']} updates; \"updates to X\" is the "
           "first evaluation at or above X, so it has that resolution.",
           f"- Stop rule: {config['patience_epochs']} epochs ({config['patience_epochs']} x 50,000 / 32 updates) "
           f"without validation improvement, or the preset's budget of {config['max_updates']:,} updates, "
           "whichever comes first; on 2 CPU cores the budget comes first, so the thesis' \"backward passes at "
           "best validation\" is capped by it.",
           "- Counting: one update = one backward pass of m = 32 samples; a selecting update forwards n "
           "minibatches and reuses the chosen samples' forward pass for the gradient (\"a gain of (n-1)*m "
           "backward passes\", §3.2.3.3), so a plain update costs 1 forward + 1 backward.",
           "- Stack of n = 1 with true labels is exactly the baseline (the teacher returns the only minibatch).",
           f"- Collapse: best validation accuracy under {COLLAPSE_ACCURACY} %.", ""]


def _per_seed(curves: Sequence[dict], row: str) -> dict[int, dict]:
    return {c["seed"]: c for c in curves if c["group"] == "table" and c["row"] == row}


class _Paired(NamedTuple):
    """One paired comparison over seeds: the mean, its 95 % interval (of the log-ratios for a speedup) and n."""

    mean: float
    lo: float
    hi: float
    n: int
    ratio: bool  # a speedup (shown exponentiated, read against 1)


def _speedup(base: Sequence[float], row: Sequence[float]) -> _Paired | None:
    """The per-seed ratios ``base / row`` as log-ratios; None (n.r.) where a seed never got there."""
    from jaxcomm import stats  # noqa: PLC0415

    with np.errstate(invalid="ignore"):  # inf / inf where neither got there
        ratios = np.asarray(base, float) / np.asarray(row, float)
    if not np.all(np.isfinite(ratios)) or not np.all(ratios > 0):
        return None
    logs = np.log(ratios)
    lo, hi = stats.paired_ci95(logs, digits=None)
    return _Paired(float(logs.mean()), lo, hi, len(logs), True)


def _cell(c: _Paired | None, adjusted: float | None) -> str:
    if c is None:
        return "n.r."
    show = np.exp if c.ratio else (lambda v: v)
    sign = "" if c.ratio else "+"
    text = f"{show(c.mean):{sign}.2f} [{show(c.lo):{sign}.2f}, {show(c.hi):{sign}.2f}]"
    return text + ("" if adjusted is None else f" p={adjusted:.2g} {'yes' if adjusted < 0.05 else 'no'}")


def paired_markdown(curves: Sequence[dict]) -> list[str]:
    """Every table row against the baseline, seed by seed (seed s has the same initialisation and data stream in
    every row): the test accuracy difference (points), the update speedup to each threshold and the compute
    speedup to 96.5 %, each with its Student-t 95 % interval over seeds (of the log-ratios for speedups) and its
    p-value Holm-adjusted over every comparison of the table (one family)."""
    from jaxcomm import stats  # noqa: PLC0415

    base = _per_seed(curves, "baseline")
    rows: dict[str, list[_Paired | None]] = {}
    for row in TABLE_ROWS:
        runs = _per_seed(curves, row)
        if row == "baseline" or len(runs) < 2 or set(runs) != set(base):  # an interval needs 2 seeds
            continue
        seeds = sorted(runs)
        diffs = [runs[s]["test_accuracy"] - base[s]["test_accuracy"] for s in seeds]
        lo, hi = stats.paired_ci95(diffs, digits=None)
        updates = {who: {t: [teacher.updates_to(c[s]["steps"], c[s]["val_accuracy"], t) for s in seeds]
                         for t in THRESHOLDS} for who, c in (("base", base), ("row", runs))}
        units = {who: [teacher.compute_units(u, stack_size=c[s]["stack_size"], warmup=c[s]["warmup"])
                       if np.isfinite(u) else u for s, u in zip(seeds, updates[who][96.5], strict=True)]
                 for who, c in (("base", base), ("row", runs))}
        rows[row] = [_Paired(float(np.mean(diffs)), lo, hi, len(diffs), False),
                     *(_speedup(updates["base"][t], updates["row"][t]) for t in THRESHOLDS),
                     _speedup(units["base"], units["row"])]
    if not rows:
        return []
    flat = [c for cells in rows.values() for c in cells]
    adjusted = iter(stats.holm([None if c is None else stats.p_value_from_ci95(c.mean, (c.lo, c.hi), c.n)
                                for c in flat]))
    lines = [f"| {LABELS[row]} | {cells[0].n} | " + " | ".join(_cell(c, next(adjusted)) for c in cells) + " |"
             for row, cells in rows.items()]
    return ["", "## Paired by seed against the baseline", "",
            "Seed s draws the same initialisation and data stream in every row. Test accuracy: the row's minus the "
            "baseline's, mean [95 % interval] (Student t), in points. Speedups: the geometric mean of the per-seed "
            "ratios (the baseline's updates, or compute units, over the row's) [95 % interval of the log-ratios, "
            "exponentiated]; n.r. where a seed of either never reached the threshold. p: the paired t-test's "
            "two-sided p-value, Holm-adjusted over every comparison of this table (one family); \"yes\": adjusted "
            "p < 0.05, the only directions to read.", "",
            "| configuration | seeds | test acc. difference | update speedup to 96.5 | update speedup to 96.8 | "
            "compute speedup to 96.5 |", "|---|---|---|---|---|---|", *lines]


def write_report(out_dir: pathlib.Path, *, plots: bool = True) -> None:
    """Writes table.md, then (with ``plots``) fig3_1.png and stack_size.png, from the run in ``out_dir``."""
    out_dir = pathlib.Path(out_dir)
    summary, curves = results.read_run(out_dir)
    report.write_table(out_dir, table_markdown(summary, curves))
    if plots:
        report.draw(fig3_1=lambda: plot_fig3_1(curves, out_dir / "fig3_1.png"),
                    stack_size=lambda: plot_stack_sizes(summary, out_dir / "stack_size.png"))
