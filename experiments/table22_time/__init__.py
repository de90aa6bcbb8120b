"""Table 2.2 read in time: the steps each chapter-2 row needs to reach a target, as seconds on named links.

    python -m experiments.table22_time --preset cpu    # seconds: no training; reads results/outputs_exchange
    python -m experiments.table22_time report results/table22_time

The thesis reads its training steps as the wall time of a parallel system (§2.3) and finds 20 nodes sharing true
labels reach 85 % sooner than one node on all the data, 2,700 against 5,900 steps ("a speedup of over 215 %",
Table 2.2), communication taken as free and instantaneous. Here every row of a chapter-2 run (``outputs_dir``, from
``python -m experiments.outputs_exchange``: its summary and curves) is re-timed on one cluster per named link
(:data:`jaxcomm.clock.LINKS`): every node a computer whose local step takes ``seconds_per_step`` (0: what the run
measured for its single node), its messages leaving on its uplink one after the other while it computes
(:func:`jaxcomm.clock.seconds`: a node is held back only when its uplink cannot keep up). A row's time to the
target is its median seed's first evaluated step at or above the target, in virtual seconds; the speed-up is the
single node's time over the row's. Steps are read on the collective decision's validation curves at the target
chosen on validation (:func:`jaxcomm.recipes.validation_target`), and on the test curves at the run's own target
beside them.

Re-timed, not re-trained: the rows trained with instant delivery. On a slower link a message also arrives later
(``delay`` below: receiver steps in flight), which changes what a node learns from it. The rows named in ``rerun``
are trained again on every link that delays their messages, with the run's recipe and seeds, their messages in
flight (:func:`jaxcomm.network.train_network`'s ``cluster``): their steps to the target are read on those curves,
and their final accuracies paired by seed with the instant run's (links whose delays are equal share one run):

    python -m experiments.table22_time --preset cpu rerun=20_nodes_true_labels --out DIR  # hours on a CPU

References:
  Lacaille (2018), §2.3, Table 2.2.
"""

from .presets import EXPERIMENT, PRESETS, Table22TimeConfig
from .report import (
           PAIRED,
           SINGLE,
           THESIS_SPEEDUP,
           paired_markdown,
           paired_speedups,
           speedup,
           table_markdown,
           write_report,
)
from .run import main, paired, rerun_row, run

__all__ = ["EXPERIMENT", "PAIRED", "PRESETS", "SINGLE", "THESIS_SPEEDUP", "Table22TimeConfig", "main", "paired",
           "paired_markdown", "paired_speedups", "rerun_row", "run", "speedup", "table_markdown", "write_report"]

