"""Multi-process training on one machine: the path a TPU-pod run takes, checked on CPU.

Starts ``--processes`` worker processes that join one JAX runtime through
``jax.distributed.initialize`` (coordinator on localhost), each with
``--devices-per-process`` CPU devices. The network's node axis is laid over the
global device mesh (backend "sharded"), so every process trains only its own
nodes; inbox exchanges cross process boundaries inside the compiled step. A
separate single-process run with backend "vmap" on one device trains the same
network; the script checks both end with the same parameters, inboxes and
accuracies.

    python experiments/distributed.py                       # 2 processes x 2 CPU devices, 8 nodes
    python experiments/distributed.py --processes 4 --nodes 16 --steps 200

On a real pod, each host runs the worker body below with its own process id
(or none: ``jax.distributed.initialize()`` reads the cluster's environment).
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import socket
import subprocess
import sys
import tempfile
import time


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("localhost", 0))
        return s.getsockname()[1]


def train(args: argparse.Namespace, backend: str) -> dict:
    """Trains the network in this process (one worker of many, or alone); returns host arrays."""
    import jax

    from jaxcomm import data, network, population
    from jaxcomm.models import MLP

    config = network.NetworkConfig(num_nodes=args.nodes, topology="full", content="logits", temperature=2.0,
                                   broadcast_prob=0.5 / (args.nodes - 1), num_steps=args.steps,
                                   eval_every=args.steps, batch_size=16, backend=backend, seed=args.seed)
    out = network.train_network(config, MLP(hidden=(32,)), data.load_mnist_sample(), progress=False)
    state = population.to_host((out["state"].nodes.params, out["state"].inbox))
    return {"leaves": jax.tree_util.tree_leaves(state), "final": out["final"]}


def worker(args: argparse.Namespace) -> None:
    os.environ["XLA_FLAGS"] = f"--xla_force_host_platform_device_count={args.devices_per_process}"
    import jax

    if args.process_id is None:  # the single-process reference: one device, vmap
        result = train(args, "vmap")
    else:
        jax.distributed.initialize(f"localhost:{args.port}", num_processes=args.processes,
                                   process_id=args.process_id)
        result = train(args, "sharded")
    if args.process_id in (None, 0):
        import numpy as np

        np.savez(args.result, *result["leaves"])
        pathlib.Path(args.result).with_suffix(".json").write_text(json.dumps(
            {"final": result["final"], "devices": jax.device_count(), "processes": jax.process_count()}))


def compare(args: argparse.Namespace) -> dict:
    """Runs the workers and the reference as subprocesses and compares their results."""
    import numpy as np

    base = [sys.executable, __file__, "--nodes", str(args.nodes), "--steps", str(args.steps),
            "--seed", str(args.seed), "--processes", str(args.processes),
            "--devices-per-process", str(args.devices_per_process)]
    with tempfile.TemporaryDirectory() as tmp:
        sharded, single = os.path.join(tmp, "sharded.npz"), os.path.join(tmp, "single.npz")
        port, start = free_port(), time.perf_counter()
        workers = [subprocess.Popen([*base, "--worker", "--process-id", str(i), "--port", str(port),
                                     "--result", sharded], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                    text=True)
                   for i in range(args.processes)]
        logs = [w.communicate(timeout=args.timeout)[0] for w in workers]
        if any(w.returncode for w in workers):
            raise RuntimeError("a worker failed:\n" + "\n".join(log[-3000:] for log in logs))
        multi_seconds = time.perf_counter() - start
        subprocess.run([*base, "--worker", "--devices-per-process", "1", "--result", single], check=True,
                       capture_output=True, timeout=args.timeout)
        a, b = np.load(sharded), np.load(single)
        leaves_equal = all(np.allclose(a[k], b[k], rtol=1e-5, atol=1e-5) for k in a.files)
        max_diff = max(float(np.max(np.abs(a[k].astype(float) - b[k].astype(float)))) for k in a.files)
        info = {name: json.loads(pathlib.Path(path).with_suffix(".json").read_text())
                for name, path in (("sharded", sharded), ("single", single))}
    return {
        "processes": info["sharded"]["processes"], "global_devices": info["sharded"]["devices"],
        "nodes": args.nodes, "steps": args.steps, "matches_single_process": leaves_equal,
        "max_abs_difference": max_diff,
        "avg_accuracy": {k: v["final"]["avg_accuracy"] for k, v in info.items()},
        "collective_accuracy": {k: v["final"]["collective_accuracy"]["negentropy"] for k, v in info.items()},
        "multi_process_seconds": round(multi_seconds, 1),
    }


def parse(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--processes", type=int, default=2, help="worker processes (default 2)")
    parser.add_argument("--devices-per-process", type=int, default=2, help="CPU devices per process (default 2)")
    parser.add_argument("--nodes", type=int, default=8, help="nodes; a multiple of all devices (default 8)")
    parser.add_argument("--steps", type=int, default=100, help="training steps (default 100)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--timeout", type=int, default=600, help="seconds per subprocess")
    parser.add_argument("--data-dir", default=None, metavar="DIR",
                        help="folder holding the datasets (sets $JAXCOMM_DATA_DIR; the run uses the shipped sample)")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--process-id", type=int, default=None, help=argparse.SUPPRESS)
    parser.add_argument("--port", type=int, default=None, help=argparse.SUPPRESS)
    parser.add_argument("--result", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
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
    result = compare(args)
    print(json.dumps(result, indent=2))
    return 0 if result["matches_single_process"] else 1


if __name__ == "__main__":
    sys.exit(main())
