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
:mod:`jaxcomm.teacher`; this file holds the presets and :func:`run`, the report is
:mod:`jaxcomm.harness.reports.teacher_selection`.

References:
  Lacaille (2018), §3.2-3.3, Table 3.1, Figure 3.1.
"""

from __future__ import annotations

import dataclasses
import pathlib
import sys
from collections.abc import Sequence

import numpy as np

from jaxcomm import data, teacher
from jaxcomm.checkpoint import Checkpoints
from jaxcomm.data import ImageDataset
from jaxcomm.harness import cli as harness_cli
from jaxcomm.harness.reports import teacher_selection as teacher_selection_report
from jaxcomm.harness.reports.teacher_selection import COLLAPSE_ACCURACY, TABLE_ROWS, THESIS_TABLE, THRESHOLDS
from jaxcomm.teacher import Student
from jaxcomm.validation import is_int, require

EXPERIMENT = "teacher_selection"
DATASETS = ("mnist", "mnist_sample")
TRAIN_SIZES = {"mnist": 50_000, "mnist_sample": 4_000}  # training images after the validation split
THESIS_ROWS = ("baseline", "stack2_ce_soft", "stack2_ce_true", "stack2_euclid_soft", "stack2_random_soft",
               "stack5_ce_soft", "stack5_ce_true")


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


def write_report(out_dir: pathlib.Path, *, plots: bool = True) -> None:
    """Writes table.md, then (with ``plots``) fig3_1.png and stack_size.png, from the run in ``out_dir``
    (:func:`jaxcomm.harness.reports.teacher_selection.write_report`)."""
    teacher_selection_report.write_report(out_dir, plots=plots)


def cli(argv: Sequence[str] | None = None) -> int:
    """``report DIR`` redraws plots and table from a run's files; anything else runs the experiment."""
    return harness_cli.cli(argv, experiment=EXPERIMENT, presets=PRESETS, run=run,
                          description=__doc__.split("\n\n")[0], write_report=write_report)


if __name__ == "__main__":
    sys.exit(cli())
