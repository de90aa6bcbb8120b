"""Reliability: resumable runs, bad configs rejected, and chapter-2 networks whose nodes fail.

The thesis motivates decentralised training by "increased stability and failure
resistance" (§2.1) but never tests it. This experiment

1. trains a small network once straight through and once stopped by a real
   SIGTERM and resumed from its orbax checkpoint, and checks the two histories
   and final states are identical (row ``resume_identical``);
2. builds every bad configuration of :func:`bad_config_cases` and counts those
   rejected before anything compiles with a message naming the field
   (row ``bad_configs_rejected``; ``tests/test_validation.py`` has one test each);
3. trains the chapter-2 CNN network on CIFAR-10 (true labels, fully connected,
   10 and 20 nodes) while nodes fail: a node is down a fraction f in {0, 10, 30} %
   of the time (down with probability q per step, back after D steps on average,
   f = qD / (1 + qD)); a down node neither trains, sends nor receives, and the
   collective decision asks only the reachable nodes (rows ``failure_0``,
   ``failure_10``, ``failure_30``).

The config and presets are in ``presets.py``, the three parts and the command line in ``run.py``, the table and
plot in ``report.py``.

    python -m experiments.reliability --preset cpu      # writes runs/reliability/cpu-<time>/
    python -m experiments.reliability report results/reliability   # redraws table.md and the plot
"""

from .presets import DATASETS, PRESETS, ReliabilityConfig, cpu_config, smoke_config, thesis_config
from .report import paired_markdown, table_markdown, write_report
from .run import bad_config_cases, count_rejected, main, resume_check, run

__all__ = ["DATASETS", "PRESETS", "ReliabilityConfig", "bad_config_cases", "count_rejected", "cpu_config", "main",
           "paired_markdown", "resume_check", "run", "smoke_config", "table_markdown", "thesis_config",
           "write_report"]

