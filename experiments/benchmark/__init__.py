"""Speed of every population backend on the thesis' three models, against the thesis' way.

For each workload (student MLP 784-32-32-10, teacher MLP 784-1200-1200-10 with
dropout, chapter-2 strided CNN of ~700k parameters) and number of nodes N, a
fresh subprocess (so peak memory is per row) measures node-steps per second of
the engine's network step (local minibatch sampling, uint8 gather, forward,
backward, Adam) with each backend of :func:`jaxcomm.population.lift`, and of the
thesis' way of running: nodes trained one after another, every node-step a
separate compiled call (§2.2.1). It also measures the machine's float32 matmul
rate, each row's fraction of it (XLA's FLOP count of one node-step x node-steps
per second), the inbox's share of a step (true-label messages over a ring, best
backend) and the state's memory per node. ``eager`` is the engine's own per-node loop (backend "loop", step
loop "eager": one compiled call per node inside the engine's step, inbox and all, node states held apart
within a chunk of steps), a candidate of ``backend="auto"`` like the others.

    python -m experiments.benchmark                  # the full table and the sweeps, 1-2 h on 2 CPU cores
    python -m experiments.benchmark --quick          # N <= 8, a minute (smoke test)
    python -m experiments.benchmark --only cnn_n10   # one row

Sweeps (:func:`jaxcomm.network_sweep.train_networks`): R networks of one structure, seeds 0..R-1, trained as one
sweep against R ``train_network`` calls one by one, each arm in a fresh process; the wall clock from the call
to the results (compilation and evaluations included): 16 student-MLP networks of 10 nodes (1,000 steps,
evaluated every 250) and 5 CNN networks of 10 nodes (300 steps). Rows and sweeps that fail (or time out)
are marked "failed" and the script exits 1. On a GPU the parent process does not preallocate memory
(``XLA_PYTHON_CLIENT_PREALLOCATE=false``), so each row's process has the device to itself.

Scale (``--scale``, or ``--only student_scale cnn_scale``): the largest population that trains in the memory
budget (``--memory-gib``, default 24, on CPU; the device's limit on an accelerator). Student MLPs of 256, 1,024
and 4,096 nodes and CNNs of 8, 32 and 128 train 4 steps (true labels over a ring, evaluated every 2), each N in a
fresh process; a line through the peaks (peak RSS on CPU, the device's peak bytes in use on an accelerator) is
extrapolated to the budget, and ``--scale-confirm`` trains 90 % of the predicted N to check it (opt-in: it can
take most of the machine's memory). ``--merge-scale SCALE_DIR INTO_DIR`` puts a separate run's scale suite into
another summary, as ``--merge-sweeps`` does for the sweeps.

    python -m experiments.benchmark --scale --no-sweeps --only student_scale cnn_scale

On a GPU (``--suite gpu``): student MLPs of 64 and 1,024 nodes, teachers of 8 and 32, CNNs of 10, 20 and 256
(both step loops), the scale suite in the device's memory, and four sweeps: R x N = 160 and 640 student nodes
(16 and 64 networks of 10), 50 and 200 CNN nodes (5 and 20 networks of 10). Each row's process times out after
300 s. In one command it may outlast a lent GPU's 10 minutes: ``experiments/gpu_session.sh`` runs it in three
(its stages bench, sweeps and scale), merged afterwards:

    python -m experiments.benchmark --merge-sweeps SWEEPS_DIR BENCH_DIR
    python -m experiments.benchmark --merge-scale SCALE_DIR BENCH_DIR

A run stopped by Ctrl-C or SIGTERM writes the rows it measured, lists the others as not run and exits 130.

Each step runs the way the engine runs it (``step_loop="auto"``): in lax.scan
for the MLPs, one jitted call per step for the CNN on CPU (see jaxcomm.speed).
Timings use real MNIST digits (the shipped sample) for the MLPs; the CNN rows
use random uint8 32x32x3 images, since speed does not depend on pixel values.
Every row of the full and gpu suites first builds its network with ``backend="auto"`` from an empty cache, as a
user's first run does, and records the pair picked, the seconds choosing took and that pair's speed against the
fastest pair (issue 40).
Writes runs/benchmark/<suite>-<time>/summary.json (or --out DIR), table.md and, with --write-choices, the
measured-best table that ``backend="auto"`` reads (jaxcomm/assets/backends.json). ``report DIR`` redraws DIR's
table.md from its summary.json and its hand-written notes.md; nothing runs:

    python -m experiments.benchmark report results/benchmark/vs_pytorch
"""

from .bench import BACKENDS, ScaleRow, SweepRow
from .presets import METHOD_SWEEPS, SUITES, Row, rows, scale_rows, selection, sweep_rows
from .report import format_table, write_report
from .run import EAGER_CHUNK, FAMILIES, ROUNDS, main, measure_peer, measure_row, run_rows

__all__ = ["BACKENDS", "EAGER_CHUNK", "FAMILIES", "METHOD_SWEEPS", "ROUNDS", "SUITES", "Row", "ScaleRow", "SweepRow",
           "format_table", "main", "measure_peer", "measure_row", "rows", "run_rows", "scale_rows", "selection",
           "sweep_rows", "write_report"]
