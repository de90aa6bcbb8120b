"""Multi-process training on one machine: the path a TPU-pod run takes, checked on CPU.

Starts ``--processes`` worker processes that join one JAX runtime through
``jax.distributed.initialize`` (coordinator on localhost), each with
``--devices-per-process`` CPU devices. The network's node axis is laid over the
global device mesh (backend "sharded"), so every process trains only its own
nodes; inbox exchanges cross process boundaries inside the compiled step. A
separate single-process run with backend "vmap" on one device trains the same
network; the script checks both end with the same parameters, inboxes and
accuracies.

With ``--preemption`` it checks instead that a pod run survives preemption: the
workers train with a checkpoint every half run (each process writing its own
shards, :mod:`jaxcomm.checkpoint`); the checkpoints after the first half are
deleted, as if the hosts died before saving them; new workers resume from the
half-way checkpoint, and their final state must equal the whole run's bit for bit
(and the whole run the single process's, as above).

    python -m experiments.distributed                       # 2 processes x 2 CPU devices, 8 nodes
    python -m experiments.distributed --processes 4 --nodes 16 --steps 200
    python -m experiments.distributed --preemption --devices-per-process 4

On a real pod, each host runs the worker body (:func:`.run.worker`) with its own process id
(or none: ``jax.distributed.initialize()`` reads the cluster's environment).
"""

from .run import (
           against_single,
           compare,
           main,
           network_config,
           parse,
           preemption,
           run_single,
           run_workers,
           train,
           worker,
)

__all__ = ["against_single", "compare", "main", "network_config", "parse", "preemption", "run_single", "run_workers",
           "train", "worker"]
