"""The chapter-3 experiment's config and presets: :class:`TeacherSelectionConfig` (the engine's
:class:`jaxcomm.teacher.SelectionConfig` plus data, rows, seeds and budgets) and :data:`PRESETS` (``smoke``,
``cpu``, ``thesis``).
"""

from __future__ import annotations

import dataclasses

from jaxcomm import teacher
from jaxcomm.validation import is_int, require

from .report import TABLE_ROWS

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
