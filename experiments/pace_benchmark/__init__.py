"""What training at their own pace costs: useful node-steps per second against lockstep, side by side in one run.

A run at its own pace (:mod:`jaxcomm.pace`) steps only the nodes due at each tick; where its step computes every
node and keeps the due ones (a stacked population), the share of due nodes per tick bounds its useful work; the
eager loop computes only the due nodes, and ``OwnPace(capacity=K)`` gathers them K at a time. For each row (output
sharing of true labels on a ring; one straggler 3x slower, or half the nodes on a device 10x slower; 20 %
per-step jitter) this times the
same network's compiled chunk of steps in lockstep and at its own pace, in interleaved rounds, and reports the
useful node-steps per second of each (lockstep: every node every step; own pace: the nodes due), their ratio,
the share of nodes due per tick and the simulation's time resolution (two step ends closer than it may be
taken in either order).

    python -m experiments.pace_benchmark --out results/benchmark/pace   # about 5 minutes on 2 CPU cores
    python -m experiments.pace_benchmark --quick                          # 8 nodes, a smoke test
    python -m experiments.pace_benchmark report results/benchmark/pace    # redraw table.md, nothing runs

The CNN rows time random uint8 32x32x3 images (speed does not depend on pixel values), the MLP rows the shipped
MNIST sample, as the benchmark (``python -m experiments.benchmark``) does.
"""

from .report import table, write_report
from .run import CHUNKS, QUICK, ROUNDS, ROWS, cluster_of, main, measure

__all__ = ["CHUNKS", "QUICK", "ROUNDS", "ROWS", "cluster_of", "main", "measure", "table", "write_report"]

