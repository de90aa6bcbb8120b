"""The bandwidth frontier's command line (``python -m experiments.bandwidth_frontier``): the library's
:func:`jaxcomm.harness.frontier.run` over its presets, and this experiment's report."""

from __future__ import annotations

import importlib
from collections.abc import Sequence

from jaxcomm.harness import cli as harness_cli
from jaxcomm.harness.frontier import EXPERIMENT, PRESETS, run

from .report import write_report

__all__ = ["main", "run"]


def main(argv: Sequence[str] | None = None) -> int:
    """``report DIR`` redraws table.md and the plot; anything else runs the experiment."""
    return harness_cli.cli(argv, experiment=EXPERIMENT, presets=PRESETS, run=run,
                           description=importlib.import_module(__package__).__doc__, write_report=write_report)
