"""Multi-process training on one machine, the run: the workers (:func:`worker`) joined by
``jax.distributed.initialize``, the single-process reference, the comparison (:func:`compare`) or the preemption
check (:func:`preemption`), and :func:`main`, the command line (``python -m experiments.distributed``).
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import pathlib
import shutil
import socket
import subprocess
import sys
import tempfile
import time

ROOT = pathlib.Path(__file__).resolve().parents[2]  # the repository root: workers start there


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("localhost", 0))
        return s.getsockname()[1]


def network_config(args: argparse.Namespace, backend: str):
    """The network every worker trains; building it starts no JAX backend (the workers build it before
    ``jax.distributed.initialize``, which must come before any backend)."""
    from jaxcomm import network

    every = args.steps // 2 if args.checkpoint else args.steps
    return network.NetworkConfig(num_nodes=args.nodes, topology="full", content="logits", temperature=2.0,
                                 broadcast_prob=0.5 / (args.nodes - 1), num_steps=args.steps,
                                 eval_every=every, batch_size=16, backend=backend, seed=args.seed)


def train(args: argparse.Namespace, config) -> dict:
    """Trains ``config`` in this process (one worker of many, or alone); returns host arrays."""
    import jax

    from jaxcomm import data, network, population
    from jaxcomm.checkpoint import Checkpointer
    from jaxcomm.models import MLP

    every = config.eval_every
    checkpointer = Checkpointer(args.checkpoint, every=every, resume=args.resume) if args.checkpoint else None
    out = network.train_network(config, MLP(hidden=(32,)), data.load_mnist_sample(), progress=False,
                                checkpointer=checkpointer)
    state = population.to_host((out["state"].nodes.params, out["state"].inbox))
    return {"leaves": jax.tree_util.tree_leaves(state), "final": out["final"], "resumed_from": out["resumed_from"]}


def worker(args: argparse.Namespace) -> None:
    # The caller's other XLA flags are kept (the tests' faster compilation, for one).
    flags = [f for f in os.environ.get("XLA_FLAGS", "").split() if "host_platform_device_count" not in f]
    os.environ["XLA_FLAGS"] = " ".join([*flags, f"--xla_force_host_platform_device_count={args.devices_per_process}"])
    import jax

    if args.process_id is None:  # the single-process reference: one device, vmap
        result = train(args, network_config(args, "vmap"))
    else:
        config = network_config(args, "sharded")  # before the backend: it must not start one
        jax.distributed.initialize(f"localhost:{args.port}", num_processes=args.processes,
                                   process_id=args.process_id)
        result = train(args, config)
    if args.process_id in (None, 0):
        import numpy as np

        np.savez(args.result, *result["leaves"])
        pathlib.Path(args.result).with_suffix(".json").write_text(json.dumps(
            {"final": result["final"], "resumed_from": result["resumed_from"], "devices": jax.device_count(),
             "processes": jax.process_count()}))


def _base(args: argparse.Namespace) -> list[str]:
    """This experiment (``python -m experiments.distributed``) with the run's settings, started from the
    repository root (``cwd=ROOT``)."""
    return [sys.executable, "-m", "experiments.distributed", "--nodes", str(args.nodes), "--steps", str(args.steps),
            "--seed", str(args.seed), "--processes", str(args.processes),
            "--devices-per-process", str(args.devices_per_process)]


def run_workers(args: argparse.Namespace, result: str, *extra: str) -> dict:
    """Runs ``args.processes`` workers joined by ``jax.distributed``; returns process 0's arrays
    (``leaves``, numbered as saved) and its record (``final``, ``resumed_from``, ``devices``, ``processes``)."""
    port = free_port()
    workers = [subprocess.Popen([*_base(args), "--worker", "--process-id", str(i), "--port", str(port),
                                 "--result", result, *extra], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                text=True, cwd=ROOT)
               for i in range(args.processes)]
    logs = [w.communicate(timeout=args.timeout)[0] for w in workers]
    if any(w.returncode for w in workers):
        raise RuntimeError("a worker failed:\n" + "\n".join(log[-3000:] for log in logs))
    return read_result(result)


def read_result(result: str) -> dict:
    """What a worker wrote to ``result``: its arrays as ``leaves`` (numbered as saved) and its JSON record."""
    import numpy as np

    with np.load(result) as arrays:
        leaves = [arrays[k] for k in arrays.files]
    return {"leaves": leaves, **json.loads(pathlib.Path(result).with_suffix(".json").read_text())}


def run_single(args: argparse.Namespace, result: str) -> dict:
    """The reference: the same network trained by one process on one device (backend vmap)."""
    subprocess.run([*_base(args), "--worker", "--devices-per-process", "1", "--result", result], check=True,
                   capture_output=True, timeout=args.timeout, cwd=ROOT)
    return read_result(result)


def compare(args: argparse.Namespace) -> dict:
    """Runs the workers and the reference as subprocesses and compares their results."""
    with tempfile.TemporaryDirectory() as tmp:
        start = time.perf_counter()
        sharded = run_workers(args, os.path.join(tmp, "sharded.npz"))
        multi_seconds = time.perf_counter() - start
        single = run_single(args, os.path.join(tmp, "single.npz"))
    return {"processes": sharded["processes"], "global_devices": sharded["devices"], "nodes": args.nodes,
            "steps": args.steps, **against_single(sharded, single), "multi_process_seconds": round(multi_seconds, 1)}


def against_single(sharded: dict, single: dict) -> dict:
    """Whether the workers' arrays equal the single process's (to float tolerance), and both accuracies."""
    import numpy as np

    pairs = list(zip(sharded["leaves"], single["leaves"], strict=True))
    info = {"sharded": sharded, "single": single}
    return {
        "matches_single_process": all(np.allclose(a, b, rtol=1e-5, atol=1e-5) for a, b in pairs),
        "max_abs_difference": max(float(np.max(np.abs(a.astype(float) - b.astype(float)))) for a, b in pairs),
        "avg_accuracy": {k: v["final"]["avg_accuracy"] for k, v in info.items()},
        "collective_accuracy": {k: v["final"]["collective_accuracy"]["negentropy"] for k, v in info.items()},
    }


def preemption(args: argparse.Namespace) -> dict:
    """The whole run with a checkpoint every half; the later checkpoints deleted (hosts preempted before
    writing them); new workers resume from the half-way one. Returns whether the resumed final state and
    record equal the whole run's bit for bit, and whether the whole run equals one process's
    (:func:`against_single`)."""
    import numpy as np

    with tempfile.TemporaryDirectory() as tmp:
        folder = os.path.join(tmp, "checkpoints")
        whole = run_workers(args, os.path.join(tmp, "whole.npz"), "--checkpoint", folder)
        later = [step for step in os.listdir(folder) if step.isdigit() and int(step) > args.steps // 2]
        for step in later:
            shutil.rmtree(os.path.join(folder, step))
        resumed = run_workers(args, os.path.join(tmp, "resumed.npz"), "--checkpoint", folder, "--resume")
        single = run_single(args, os.path.join(tmp, "single.npz"))
    pairs = list(zip(whole["leaves"], resumed["leaves"], strict=True))
    records = [{k: v for k, v in run["final"].items() if k != "seconds"} for run in (whole, resumed)]  # wall time
    return {
        "processes": resumed["processes"], "global_devices": resumed["devices"], "nodes": args.nodes,
        "steps": args.steps, "deleted_checkpoints": sorted(int(step) for step in later),
        "resumed_from": resumed["resumed_from"],
        "arrays_identical": all(a.dtype == b.dtype and np.array_equal(a, b) for a, b in pairs),
        "records_identical": records[0] == records[1],
        "bit_identical": all(a.dtype == b.dtype and np.array_equal(a, b) for a, b in pairs)
        and records[0] == records[1],
        "final": {"whole": whole["final"], "resumed": resumed["final"]},
        **against_single(whole, single),
    }


def parse(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m experiments.distributed",
                                     description=importlib.import_module(__package__).__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--processes", type=int, default=2, help="worker processes (default 2)")
    parser.add_argument("--devices-per-process", type=int, default=2, help="CPU devices per process (default 2)")
    parser.add_argument("--nodes", type=int, default=8, help="nodes; a multiple of all devices (default 8)")
    parser.add_argument("--steps", type=int, default=100, help="training steps (default 100)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--timeout", type=int, default=600, help="seconds per subprocess")
    parser.add_argument("--data-dir", default=None, metavar="DIR",
                        help="folder holding the datasets (sets $JAXCOMM_DATA_DIR; the run uses the shipped sample)")
    parser.add_argument("--preemption", action="store_true",
                        help="check instead that a checkpointed run resumes bit-identically across processes")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--checkpoint", default=None, help=argparse.SUPPRESS)
    parser.add_argument("--resume", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--process-id", type=int, default=None, help=argparse.SUPPRESS)
    parser.add_argument("--port", type=int, default=None, help=argparse.SUPPRESS)
    parser.add_argument("--result", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.preemption and (args.steps < 2 or args.steps % 2):
        parser.error(f"--preemption checkpoints every half run: --steps must be even, got {args.steps}")
    if args.nodes % (args.processes * args.devices_per_process):
        parser.error(f"--nodes must be a multiple of processes x devices = "
                     f"{args.processes * args.devices_per_process}, got {args.nodes}")
    return args


def main(argv=None) -> int:
    args = parse(argv)
    if args.data_dir is not None:
        os.environ["JAXCOMM_DATA_DIR"] = str(pathlib.Path(args.data_dir).expanduser().absolute())
    if args.worker:
        worker(args)
        return 0
    result = preemption(args) if args.preemption else compare(args)
    print(json.dumps(result, indent=2))
    return 0 if result["matches_single_process"] and result.get("bit_identical", True) else 1

