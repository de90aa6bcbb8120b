"""Thesis ch. 3: a trained teacher selects the student's training data (MNIST), Table 3.1 and Fig. 3.1.

    JAXCOMM_DATA_DIR=/work/shared/data python -m experiments.teacher_selection --preset cpu
    python -m experiments.teacher_selection --preset smoke --out /tmp/ts    # seconds, shipped MNIST sample
    python -m experiments.teacher_selection report results/teacher_selection  # redraw plots and table

A teacher MLP 784-1200-1200-10 with dropout is trained once (early stopping on validation
accuracy) and cached on disk; its class probabilities on the whole training split are computed
once, since it never changes. Students MLP 784-32-32-10 (Adam defaults, batch m = 32) then
train as ONE population: every configuration of Table 3.1 and every seed in one jitted step.
Each update a student forwards n random minibatches (n*m samples), the teacher keeps the m
hardest and the student takes one Adam step on them with the teacher's soft labels
(temperature 1) or the true labels as targets. The stack-size study (n in 10..100, with and
without a warm-up of plain updates before selection starts) runs one population per n, so the
padding of n = 100 never slows the small stacks. The engine (teacher, students, counting) is
:mod:`jaxcomm.teacher`; ``presets.py`` holds the config and presets, ``run.py`` :func:`run` and the command line,
``report.py`` the tables and plots.

References:
  Lacaille (2018), §3.2-3.3, Table 3.1, Figure 3.1.
"""

from .presets import (
    DATASETS,
    EXPERIMENT,
    PRESETS,
    THESIS_ROWS,
    TRAIN_SIZES,
    TeacherSelectionConfig,
    cpu_config,
    smoke_config,
    thesis_config,
)
from .report import (
    COLLAPSE_ACCURACY,
    TABLE_ROWS,
    THESIS_TABLE,
    THRESHOLDS,
    paired_markdown,
    table_markdown,
    write_report,
)
from .run import (
    add_speedups,
    load_dataset,
    main,
    row_metrics,
    run,
    study_students,
    table_students,
)

__all__ = ["COLLAPSE_ACCURACY", "DATASETS", "EXPERIMENT", "PRESETS", "TABLE_ROWS", "THESIS_ROWS", "THESIS_TABLE",
           "THRESHOLDS", "TRAIN_SIZES", "TeacherSelectionConfig", "add_speedups", "cpu_config", "load_dataset", "main",
           "paired_markdown", "row_metrics", "run", "smoke_config", "study_students", "table_markdown",
           "table_students", "thesis_config", "write_report"]
