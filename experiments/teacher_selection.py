"""Thesis ch. 3: a trained teacher selects the student's training data (MNIST), Table 3.1 and Fig. 3.1.

    JAXCOMM_DATA_DIR=/work/shared/data python experiments/teacher_selection.py --preset cpu
    python experiments/teacher_selection.py --preset smoke --out /tmp/ts    # seconds, shipped MNIST sample
    python experiments/teacher_selection.py report results/teacher_selection  # redraw plots and table

A teacher MLP 784-1200-1200-10 with dropout is trained once (early stopping on validation
accuracy) and cached on disk; its class probabilities on the whole training split are computed
once, since it never changes. Students MLP 784-32-32-10 (Adam defaults, batch m = 32) then
train as ONE population: every configuration of Table 3.1 and every seed in one jitted step.
Each update a student forwards n random minibatches (n*m samples), the teacher keeps the m
hardest and the student takes one Adam step on them with the teacher's soft labels
(temperature 1) or the true labels as targets. The stack-size study (n in 10..100, with and
without a warm-up of plain updates before selection starts) runs one population per n, so the
padding of n = 100 never slows the small stacks. The engine (teacher, students, counting) is
:mod:`jaxcomm.teacher`; this file holds the presets, :func:`run` and the report.

References:
  Lacaille (2018), §3.2-3.3, Table 3.1, Figure 3.1.
"""

from __future__ import annotations

import dataclasses
import pathlib
import sys
from collections.abc import Sequence
from typing import Any

import numpy as np

from jaxcomm import data, teacher
from jaxcomm.checkpoint import Checkpoints
from jaxcomm.data import ImageDataset
from jaxcomm.harness import cli as harness_cli
from jaxcomm.harness import report, results
from jaxcomm.teacher import Student
from jaxcomm.validation import is_int, require

EXPERIMENT = "teacher_selection"
DATASETS = ("mnist", "mnist_sample")
TRAIN_SIZES = {"mnist": 50_000, "mnist_sample": 4_000}  # training images after the validation split
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
THESIS_ROWS = ("baseline", "stack2_ce_soft", "stack2_ce_true", "stack2_euclid_soft", "stack2_random_soft",
               "stack5_ce_soft", "stack5_ce_true")
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


# --------------------------------------------------------------------------- config


@dataclasses.dataclass(frozen=True)
class TeacherSelectionConfig(teacher.SelectionConfig):
    """The engine's :class:`jaxcomm.teacher.SelectionConfig` plus the study's data, rows, seeds and budgets.

    Attributes (beside the engine's):
      dataset: "mnist" (50k/10k/10k, §3.2.2.1) or "mnist_sample" (the shipped real sample, for smoke runs).
      data_dir: folder holding MNIST; "" reads ``$JAXCOMM_DATA_DIR``.
      rows: the Table-3.1 rows to train (keys of :data:`TABLE_ROWS`); "baseline" is required.
      seeds: seeds per table row.
      max_updates: update budget of every table student.
      study_stack_sizes: stack sizes n of the study beyond the table's 1, 2 and 5 (empty: no study).
      study_seeds: seeds per study row.
      study_max_updates: update budget of study students.
      warmup_updates: plain updates (random minibatch, true labels) before selection starts,
        the remedy the study measures against collapse.
      timing_updates: updates of the solo timing run per stack size (wall seconds per update);
        0 skips it (wall-clock metrics are then null).
    """

    dataset: str = "mnist"
    data_dir: str = ""
    rows: tuple[str, ...] = tuple(TABLE_ROWS)
    seeds: int = 10
    max_updates: int = 30_000
    study_stack_sizes: tuple[int, ...] = (10, 20, 50, 100)
    study_seeds: int = 5
    study_max_updates: int = 10_000
    warmup_updates: int = 1000
    timing_updates: int = 300

    def __post_init__(self):
        super().__post_init__()
        require(self.dataset in DATASETS, "dataset", f"one of {DATASETS}", self.dataset)
        require(isinstance(self.data_dir, str), "data_dir", "a string", self.data_dir)
        for name in ("seeds", "max_updates", "study_seeds", "study_max_updates"):
            value = getattr(self, name)
            require(is_int(value) and value >= 1, name, "an integer >= 1", value)
        require(isinstance(self.rows, tuple) and all(r in TABLE_ROWS for r in self.rows) and "baseline" in self.rows
                and len(set(self.rows)) == len(self.rows), "rows",
                f"distinct names from {tuple(TABLE_ROWS)} including 'baseline'", self.rows)
        require(isinstance(self.study_stack_sizes, tuple) and all(is_int(n) and n >= 1
                                                                  for n in self.study_stack_sizes),
                "study_stack_sizes", "a tuple of integers >= 1", self.study_stack_sizes)
        require(is_int(self.timing_updates) and self.timing_updates >= 0, "timing_updates",
                "an integer >= 0 (0 skips the timing)", self.timing_updates)
        require(is_int(self.warmup_updates) and self.warmup_updates >= 0, "warmup_updates", "an integer >= 0",
                self.warmup_updates)
        largest = max((*self.study_stack_sizes, *(TABLE_ROWS[r][0] for r in self.rows)), default=1)
        require(largest * self.batch_size <= TRAIN_SIZES[self.dataset], "study_stack_sizes",
                f"stacks whose n * batch_size fits the {TRAIN_SIZES[self.dataset]:,} training images of "
                f"{self.dataset} (largest n here: {largest})", self.study_stack_sizes)


def cpu_config() -> TeacherSelectionConfig:
    """The thesis protocol scaled to finish in under 30 minutes on 2 CPU cores (see table.md)."""
    return TeacherSelectionConfig(seeds=8, max_updates=40_000, eval_every=250, study_seeds=5,
                                  study_max_updates=8000, study_stack_sizes=(10, 20, 50, 100))


def thesis_config() -> TeacherSelectionConfig:
    """The thesis' settings (for an accelerator): students stop only by the 20-epoch patience rule."""
    return TeacherSelectionConfig(teacher_max_epochs=100, teacher_patience=10, seeds=10, max_updates=200_000,
                                  eval_every=100, study_seeds=10, study_max_updates=100_000)


def smoke_config() -> TeacherSelectionConfig:
    """Seconds: a tiny teacher on the shipped real MNIST sample, a few hundred updates."""
    return TeacherSelectionConfig(dataset="mnist_sample", teacher_hidden=(64,), teacher_max_epochs=2,
                                  teacher_patience=1, cache_dir="", rows=("baseline", "stack2_ce_soft",
                                                                          "stack5_ce_true"),
                                  seeds=2, max_updates=200, patience_epochs=20, eval_every=100,
                                  study_stack_sizes=(10,), study_seeds=1, study_max_updates=100,
                                  warmup_updates=50, timing_updates=0)


PRESETS = {"smoke": smoke_config, "cpu": cpu_config, "thesis": thesis_config}


# --------------------------------------------------------------------------- run


def load_dataset(config: TeacherSelectionConfig) -> ImageDataset:
    """Real MNIST (50k/10k/10k) or the shipped real sample; never synthetic data."""
    return data.load_dataset(config.dataset, config.data_dir or None)


def table_students(config: TeacherSelectionConfig) -> list[Student]:
    return [Student(row, seed, *TABLE_ROWS[row], 0) for row in config.rows for seed in range(config.seeds)]


def study_students(config: TeacherSelectionConfig, n: int) -> list[Student]:
    """Stack n, cross-entropy, soft labels: without and with the warm-up remedy."""
    return [Student(f"stack{n}_ce_soft{suffix}", seed, n, "cross_entropy", True, warmup)
            for suffix, warmup in (("", 0), ("_warmup", config.warmup_updates)) for seed in range(config.study_seeds)]


def _median_or_none(values: Sequence[float]) -> float | None:
    """Median over seeds, None where it is not reached (fewer than half the seeds get there)."""
    if not values:
        return None
    med = float(np.median(np.asarray(values, float)))
    return med if np.isfinite(med) else None


def _tag(value: float | None) -> str:
    return f"{value:g}".replace(".", "_")


def row_metrics(students: Sequence[dict], seconds_per_update: dict[int, float]) -> dict:
    """Table-3.1 metrics of one row from its seeds (see the issue's summary.json schema)."""
    first = students[0]
    cost = {"stack_size": first["stack_size"], "warmup": first["warmup"]}
    test = np.asarray([s["test_accuracy"] for s in students])
    out = {"stack_size": first["stack_size"], "distance": first["distance"],
           "targets": "soft" if first["soft"] else "true", "warmup_updates": first["warmup"],
           "seeds": len(students),
           "collapsed_seeds": int(sum(s["best_val"] < COLLAPSE_ACCURACY for s in students)),
           "test_accuracy": round(float(test.mean()), 3),
           "test_accuracy_std": round(float(test.std(ddof=1)) if len(test) > 1 else 0.0, 3),
           "best_val_accuracy": round(float(np.mean([s["best_val"] for s in students])), 3),
           "backward_passes": _median_or_none([s["best_step"] for s in students]),
           "stop_step_median": _median_or_none([s["stop_step"] for s in students]),
           "stopped_by_patience": int(sum(s["stopped_by_patience"] for s in students))}
    for threshold in THRESHOLDS:
        per_seed = [teacher.updates_to(s["steps"], s["val_accuracy"], threshold) for s in students]
        out[f"updates_to_{_tag(threshold)}"] = _median_or_none(per_seed)
        out[f"seeds_reaching_{_tag(threshold)}"] = int(np.isfinite(per_seed).sum())
    med = out["updates_to_96_5"]
    n = first["stack_size"]
    out["forward_passes_to_96_5"] = None if med is None else teacher.forward_passes(med, **cost)
    out["compute_units_to_96_5"] = None if med is None else teacher.compute_units(med, **cost)
    if med is None or n not in seconds_per_update or 1 not in seconds_per_update:
        out["wall_seconds_to_96_5"] = None
    else:
        plain = min(med, first["warmup"])
        out["wall_seconds_to_96_5"] = round(plain * seconds_per_update[1] + (med - plain) * seconds_per_update[n], 2)
    return out


def add_speedups(rows: dict[str, dict]) -> None:
    """Baseline over row: updates to each threshold, and compute units and wall seconds to 96.5 %."""
    base = rows["baseline"]
    ratio = lambda b, r: None if b is None or r is None or r == 0 else round(b / r, 2)
    for row in rows.values():
        for threshold in THRESHOLDS:
            key = f"updates_to_{_tag(threshold)}"
            row[f"update_speedup_{_tag(threshold)}"] = ratio(base[key], row[key])
        row["compute_speedup_96_5"] = ratio(base["compute_units_to_96_5"], row["compute_units_to_96_5"])
        row["wall_speedup_96_5"] = ratio(base["wall_seconds_to_96_5"], row["wall_seconds_to_96_5"])


def run(config: TeacherSelectionConfig, *, checkpoints: Checkpoints | None = None, progress: bool = True) -> dict:
    """Trains the teacher (or loads it), the Table-3.1 population and the stack-size study.

    Returns:
      ``{"rows", "curves", "teacher", "groups", "seconds_per_update", "protocol"}`` for
      :func:`jaxcomm.harness.cli.main`.
    """
    dataset = load_dataset(config)
    params, teacher_info = teacher.train_teacher(config, dataset, progress=progress)
    arrays = teacher.train_arrays(config, params, dataset)
    teacher_info["train_accuracy"] = 100.0 * float(
        np.mean(np.argmax(np.asarray(arrays.teacher_probs), -1) == dataset.train.labels))

    resumable = lambda name: checkpoints.run(name) if checkpoints is not None else None
    groups = {"table": teacher.train_students(config, table_students(config), dataset, arrays,
                                              max_updates=config.max_updates, progress=progress, desc="table",
                                              checkpointer=resumable("table"))}
    for n in config.study_stack_sizes:
        groups[f"stack{n}"] = teacher.train_students(config, study_students(config, n), dataset, arrays,
                                                     max_updates=config.study_max_updates, stop_at=max(THRESHOLDS),
                                                     progress=progress, desc=f"stack {n}",
                                                     checkpointer=resumable(f"stack{n}"))
    stack_sizes = sorted({1, *(s for s, _, _ in (TABLE_ROWS[r] for r in config.rows)), *config.study_stack_sizes})
    seconds_per_update = {n: teacher.time_per_update(config, dataset, arrays, n, updates=config.timing_updates)
                          for n in stack_sizes if config.timing_updates}

    by_row: dict[str, list[dict]] = {}
    for group in groups.values():
        for student in group["students"]:
            by_row.setdefault(student["row"], []).append(student)
    rows = {row: row_metrics(students, seconds_per_update) for row, students in by_row.items()}
    add_speedups(rows)
    for row, (acc, backward) in THESIS_TABLE.items():
        if row in rows:
            rows[row]["thesis_test_accuracy"], rows[row]["thesis_backward_passes"] = acc, backward
    curves = [{"group": name, **s} for name, group in groups.items() for s in group["students"]]
    return {"rows": rows, "curves": curves, "teacher": teacher_info,
            "groups": {name: {"students": len(g["students"]), "updates_done": g["updates_done"],
                              "seconds": round(g["seconds"], 1)} for name, g in groups.items()},
            "seconds_per_update": {str(n): t for n, t in seconds_per_update.items()},
            "protocol": {"eval_every": config.eval_every, "thresholds": THRESHOLDS,
                         "collapse_below": COLLAPSE_ACCURACY, "soft_label_temperature": 1.0,
                         "compute_units": "forward pass of a minibatch = 1, backward pass = 2",
                         "dataset_sizes": [len(dataset.train.labels), len(dataset.validation.labels),
                                           len(dataset.test.labels)]}}


# --------------------------------------------------------------------------- report (reads only the run's files)


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
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


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
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def _fmt(value: Any, digits: int = 0) -> str:
    return report.cell(value, digits, missing="n.r.")


def table_markdown(summary: dict, curves: Sequence[dict] = ()) -> str:
    """table.md: thesis Table 3.1 beside the measured numbers, its rows paired by seed against the baseline (from
    ``curves``, the students' records), the study, and the choices made."""
    rows, config, teacher_info = summary["rows"], summary["config"], summary["teacher"]
    lines = ["# Chapter 3: a teacher selects the student's training data (MNIST): Table 3.1 and Figure 3.1", "",
             f"Command: `{summary['command']}`  ", f"Preset `{summary['preset']}`, wall time "
             f"{summary['wall_seconds']:.0f} s on {summary['device']}; commit "
             f"`{summary['git_commit']}`.  ",
             f"Teacher {'loaded from the cache' if teacher_info.get('cached') else 'trained in this run'} "
             f"(784-{'-'.join(map(str, config['teacher_hidden']))}-10, dropout {config['teacher_dropout']}, "
             f"{teacher_info['epochs']} epochs, best at epoch {teacher_info['best_epoch']}, "
             f"{teacher_info['seconds']:.0f} s to train): validation {teacher_info['val_accuracy']:.2f} %, test "
             f"{teacher_info['test_accuracy']:.2f} %, training-set {teacher_info['train_accuracy']:.2f} %.", "",
             "## Table 3.1", "",
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
    lines += paired_markdown(curves)
    lines += ["", "## Stack-size study (cross-entropy, soft labels)", "",
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
    spu = ", ".join(f"n={n}: {1e3 * t:.2f} ms" for n, t in summary["seconds_per_update"].items())
    groups = ", ".join(f"{name}: {g['students']} students, {g['updates_done']:,} updates, {g['seconds']:.0f} s"
                       for name, g in summary["groups"].items())
    lines += ["", f"Wall time per update of one student alone (after compilation): {spu}.  ",
              f"Populations (one jitted step each): {groups}.", "",
              "## Choices where the thesis is silent", "",
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
    return "\n".join(lines)


def _per_seed(curves: Sequence[dict], row: str) -> dict[int, dict]:
    return {c["seed"]: c for c in curves if c["group"] == "table" and c["row"] == row}


def _speedup_cell(base: Sequence[float], row: Sequence[float]) -> str:
    """Geometric mean of the per-seed ratios ``base / row`` [95 % interval of their logs, exponentiated] and whether
    it excludes 1; n.r. where a seed never got there."""
    from jaxcomm import stats  # noqa: PLC0415

    with np.errstate(invalid="ignore"):  # inf / inf where neither got there
        ratios = np.asarray(base, float) / np.asarray(row, float)
    if not np.all(np.isfinite(ratios)) or not np.all(ratios > 0):
        return "n.r."
    logs = np.log(ratios)
    lo, hi = stats.paired_ci95(logs, digits=None)
    return f"{np.exp(logs.mean()):.2f} [{np.exp(lo):.2f}, {np.exp(hi):.2f}] {'yes' if lo > 0 or hi < 0 else 'no'}"


def paired_markdown(curves: Sequence[dict]) -> list[str]:
    """Every table row against the baseline, seed by seed (seed s has the same initialisation and data stream in
    every row): the test accuracy difference (points), the update speedup to each threshold and the compute
    speedup to 96.5 %, each with its Student-t 95 % interval over seeds (of the log-ratios for speedups)."""
    from jaxcomm import stats  # noqa: PLC0415

    base = _per_seed(curves, "baseline")
    lines = []
    for row in TABLE_ROWS:
        runs = _per_seed(curves, row)
        if row == "baseline" or len(runs) < 2 or set(runs) != set(base):  # an interval needs 2 seeds
            continue
        seeds = sorted(runs)
        diffs = [runs[s]["test_accuracy"] - base[s]["test_accuracy"] for s in seeds]
        lo, hi = stats.paired_ci95(diffs, digits=None)
        cells = [f"{np.mean(diffs):+.2f} [{lo:+.2f}, {hi:+.2f}] {'yes' if lo > 0 or hi < 0 else 'no'}"]
        updates = {who: {t: [teacher.updates_to(c[s]["steps"], c[s]["val_accuracy"], t) for s in seeds]
                         for t in THRESHOLDS} for who, c in (("base", base), ("row", runs))}
        cells += [_speedup_cell(updates["base"][t], updates["row"][t]) for t in THRESHOLDS]
        units = {who: [teacher.compute_units(u, stack_size=c[s]["stack_size"], warmup=c[s]["warmup"])
                       if np.isfinite(u) else u for s, u in zip(seeds, updates[who][96.5], strict=True)]
                 for who, c in (("base", base), ("row", runs))}
        cells.append(_speedup_cell(units["base"], units["row"]))
        lines.append(f"| {LABELS[row]} | {len(seeds)} | " + " | ".join(cells) + " |")
    if not lines:
        return []
    return ["", "## Paired by seed against the baseline", "",
            "Seed s draws the same initialisation and data stream in every row. Test accuracy: the row's minus the "
            "baseline's, mean [95 % interval] (Student t), in points. Speedups: the geometric mean of the per-seed "
            "ratios (the baseline's updates, or compute units, over the row's) [95 % interval of the log-ratios, "
            "exponentiated]; n.r. where a seed of either never reached the threshold. \"yes\": the interval "
            "excludes 0 (accuracy) or 1 (speedup), the only directions to read.", "",
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


def cli(argv: Sequence[str] | None = None) -> int:
    """``report DIR`` redraws plots and table from a run's files; anything else runs the experiment."""
    return harness_cli.cli(argv, experiment=EXPERIMENT, presets=PRESETS, run=run,
                          description=__doc__.split("\n\n")[0], write_report=write_report)


if __name__ == "__main__":
    sys.exit(cli())
