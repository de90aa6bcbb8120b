"""Accuracy against bytes moved: output sharing (thesis ch. 2) against the gradient exchanges it argues against.

    JAXCOMM_DATA_DIR=/work/shared-cifar python -m experiments.bandwidth_frontier --preset cpu
    python -m experiments.bandwidth_frontier --preset smoke --out /tmp/bf     # seconds, shipped MNIST sample
    python -m experiments.bandwidth_frontier report results/bandwidth_frontier  # redraw table.md and the plot

What runs, how methods are scored and counted, and the Pareto front: :mod:`jaxcomm.harness.frontier` (research code
calls ``frontier.run(config, methods=[mine])``). The config's ``methods`` are specs of the zoo
(:func:`jaxcomm.zoo.parse`: ``outputs:<content>``, ``sync``, ``gossip:<k>``, compressors, ``powersgd:<r>``,
``diloco:<H>``, ``local_sgd:<H>``, ``codistill:<K>``, or any ``[module.]factory[:args]`` such as
``sparta:0.005``). This experiment trains a preset (``run.py``) and draws table.md and frontier.png
(``report.py``); runs in subfolders (methods a time budget skipped, run afterwards with
``--out DIR/extra methods=...``) join the table (:func:`jaxcomm.harness.frontier.merge_runs`).

References:
  Lacaille (2018), §1.3.2.2, §2.1, §2.4; seeds 003 (learned gradient compression) and 004
  (layer-by-layer compression).
"""

from jaxcomm.harness.frontier import EXPERIMENT, PRESETS, FrontierConfig, cpu_config, smoke_config, thesis_config

from .report import (
                     front_sentence,
                     holm_vs_isolated,
                     plot_frontier,
                     single_seed_table,
                     stored_bytes,
                     table_markdown,
                     write_report,
)
from .run import main, run

__all__ = ["EXPERIMENT", "PRESETS", "FrontierConfig", "cpu_config", "front_sentence", "holm_vs_isolated", "main",
           "plot_frontier", "run", "single_seed_table", "smoke_config", "stored_bytes", "table_markdown",
           "thesis_config", "write_report"]
