"""FedAvg in jaxcomm against the simulators researchers would pick instead, Flower and pfl-research (issue 74 item 4).

The same workload in three frameworks, each run in its own fresh process, the frameworks alternated (their order
rotated each repetition), R repetitions, in one run, reported side by side: FedAvg on real MNIST, MLP 784-64-10;
each round every participating client takes 5 local plain-SGD steps of batch 32 at lr 0.05 from the global model on
minibatches drawn with replacement from its own IID shard, then the equal-weight average (server SGD at rate 1),
evaluated on the MNIST test set at the end. The shards are jaxcomm's (``data.partition`` with the repetition's seed),
written once to an .npz the peers read; the PyTorch models are initialised as Flax initialises jaxcomm's.

Arms (rows; :func:`.presets.arms`): (a) 10 clients, 200 rounds; (b) 100 clients, 50 rounds; (c) a cohort of 10 of
100 clients, 200 rounds; (d) 10 clients, 4 rounds; (e) pfl-research's CIFAR-10 benchmark's shape on the CPU (its
simple CNN, 1,000 users of 50 images, 50 a round, 5 local steps of batch 10 at lr 0.1, ``cifar_rounds`` rounds).
jaxcomm's side of (c) and (e) is its cohort API, ``jaxcomm.federated``: where this jaxcomm has none, those rows say
"not available in this jaxcomm".

    python -m experiments.peers --preset smoke                        # 2 clients, 2 rounds: seconds a framework
    python -m experiments.peers --preset cpu peers_python=PATH        # arms (a)-(e), 3 repetitions (hours)
    python -m experiments.peers --preset cpu arms=d_10_clients_4_rounds repetitions=5
    python -m experiments.peers report runs/peers/cpu-...             # redraw table.md from summary.json

Flower and pfl-research pin packages the test environment pins otherwise: they usually live in a venv of their own,
named by ``peers_python`` (README.md); a framework that is not installed there is skipped with its reason. Writes
``summary.json`` (every child's record in full precision, the command, the commit, the host CPU, the versions of
each framework, the matmul probe) and ``table.md`` to ``runs/peers/<preset>-<time>`` (or ``--out DIR``).
"""

from .presets import FRAMEWORKS, MAIN_ARMS, PRESETS, Arm, Config, arms

__all__ = ["FRAMEWORKS", "MAIN_ARMS", "PRESETS", "Arm", "Config", "arms"]


def __getattr__(name: str):
    """``write_report`` (the results redraw reads it here), imported on first use: the peers' children import this
    package in a venv without JAX, and the report imports jaxcomm."""
    if name == "write_report":
        from .report import write_report  # noqa: PLC0415

        return write_report
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
