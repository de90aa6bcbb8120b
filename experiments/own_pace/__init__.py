"""The thesis' question when nodes do not wait: output sharing against isolated nodes, synchronous SGD and DiLoCo,
every node at its own pace, with stragglers, jitter, slow links and nodes that leave and rejoin.

The thesis (§2.3) reads its steps as the time of a parallel system in which every node steps together and
messages are free. Here (:mod:`jaxcomm.pace`) every node steps at its own pace: a step lasts ``step_seconds``
(an assumption, stated in every summary) times the node's slowdown (0, 1 or 3 stragglers 3x slower, chosen by
:func:`jaxcomm.clock.stragglers` with seed 0) times a lognormal jitter of 20 %; links are the LAN or WAN
presets (:data:`jaxcomm.clock.LINKS`); under churn every node goes off for Exp(2 s) after Exp(10 s) on, losing the
step it was taking. Methods, each saying what it waits for:

* ``isolated``: output sharing with no content (waits for nothing, sends nothing);
* ``outputs``: output sharing of true labels on a ring of 2 out-neighbours, p_c = 0.5 and the equilibrium p_b =
  0.25 (Algorithm 2: waits for nothing; messages in flight by the link);
* ``sync_sgd``: synchronous SGD (every step waits for the slowest node and a ring all-reduce);
* ``diloco``: synchronous DiLoCo, H = 10 (every round waits for every node);
* ``diloco_quorum``: DiLoCo whose round closes on 7 of 10 reports within a grace window of one nominal step.

Every run trains to ``horizon_seconds`` of virtual time: the ticks of its own timeline that end by then (so its
last evaluation is its model at the horizon), evaluated ``evaluations`` times on validation and test. Read per
condition: the accuracy at the horizon (the networks' collective decision, negentropy weights, as the thesis'
tables; the others' one model; the networks' node average beside it) and the virtual seconds to the target
(chosen on validation: the isolated nodes' final validation accuracy at 0 stragglers on the LAN, mean over seeds,
rounded down to a point). Output sharing minus every other method, paired
by seed, with Holm's adjustment over the whole table's comparisons (every condition's: one family).

    python -m experiments.own_pace --preset cpu --out results/own_pace      # ~40 minutes on 2 CPU cores
    python -m experiments.own_pace --preset smoke --out /tmp/own_pace        # the MNIST sample, a minute
    python -m experiments.own_pace report results/own_pace                   # redraw table.md, nothing runs

Each (condition, method) pair is saved as it finishes (``runs/<condition>/<method>.json``); a rerun with the same
``--out`` skips those already there, so an interrupted run continues where it stopped.
"""

from .presets import CHURN, CONDITIONS, METHODS, NETWORKS, PRESETS, Preset
from .report import plot_curves, table, write_report
from .run import cluster_of, main, method_of, run_pair, summarize

__all__ = ["CHURN", "CONDITIONS", "METHODS", "NETWORKS", "PRESETS", "Preset", "cluster_of", "main", "method_of",
           "plot_curves", "run_pair", "summarize", "table", "write_report"]

