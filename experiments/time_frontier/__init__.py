"""The bandwidth frontier read in time: every method's accuracy against virtual seconds on named links.

    JAXCOMM_DATA_DIR=/work/shared-cifar python -m experiments.time_frontier --preset cpu
    python -m experiments.time_frontier --preset cpu rerun=           # re-time only: minutes, no training
    python -m experiments.time_frontier --preset smoke --out /tmp/tf  # seconds, shipped MNIST sample
    python -m experiments.time_frontier report runs/time_frontier/<run>

A bandwidth-frontier run (``frontier_dir``, with the runs below it; :mod:`jaxcomm.harness.frontier`) is
read on a cluster per named link (:data:`jaxcomm.clock.LINKS`): every node a computer whose local step takes
``seconds_per_step`` (0: what the frontier run measured, its isolated row's training seconds per node-step),
its traffic timed by :mod:`jaxcomm.clock` from the byte ledger. Methods whose training the link does not change
(every synchronous one, and output sharing with instant links) are re-timed from their ledgers; the output-sharing
rows named in ``rerun`` are trained again with their messages in flight (they arrive the receiver steps their
transfer takes), the same seeds, so the change in accuracy that delays cause is paired.

Each link's table: accuracy, bytes, virtual seconds at the horizon, and the seconds to reach the accuracy every
isolated seed reaches in the horizon (the target: what not communicating surely gets), with the orderings by
bytes and by time side by side.

References:
  Lacaille (2018), §2.3 (steps as the wall time of a parallel system; communication taken as free).
"""

from .presets import EXPERIMENT, PRESETS, TimeFrontierConfig
from .report import TIE, fastest, swapped, table_markdown, write_report
from .run import main, run

__all__ = ["EXPERIMENT", "PRESETS", "TIE", "TimeFrontierConfig", "fastest", "main", "run", "swapped", "table_markdown",
           "write_report"]

