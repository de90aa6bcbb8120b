"""The chapter-3 experiment's run: the students of the table and of the stack-size study, :func:`run` (the teacher,
then every student as one population per stack size, then the rows) and :func:`main`, the command line
(``python -m experiments.teacher_selection``).
"""

from __future__ import annotations

import importlib
from collections.abc import Sequence

import numpy as np

from jaxcomm import data, teacher
from jaxcomm.checkpoint import Checkpoints
from jaxcomm.data import ImageDataset
from jaxcomm.harness import cli as harness_cli
from jaxcomm.teacher import Student

from .presets import EXPERIMENT, PRESETS, TeacherSelectionConfig
from .report import (
    COLLAPSE_ACCURACY,
    TABLE_ROWS,
    THESIS_TABLE,
    THRESHOLDS,
    write_report,
)


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
           "test_accuracy": float(test.mean()),
           "test_accuracy_std": float(test.std(ddof=1)) if len(test) > 1 else 0.0,
           "best_val_accuracy": float(np.mean([s["best_val"] for s in students])),
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
        out["wall_seconds_to_96_5"] = plain * seconds_per_update[1] + (med - plain) * seconds_per_update[n]
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


def main(argv: Sequence[str] | None = None) -> int:
    """``report DIR`` redraws plots and table from a run's files; anything else runs the experiment."""
    description = importlib.import_module(__package__).__doc__.split("\n\n")[0]
    return harness_cli.cli(argv, experiment=EXPERIMENT, presets=PRESETS, run=run, description=description,
                           write_report=write_report)
