"""The pace benchmark's rows (:data:`ROWS`, :data:`QUICK`), each measured in lockstep and at its own pace in
interleaved rounds (:func:`measure`), and :func:`main`, the command line (``python -m experiments.pace_benchmark``).
"""

from __future__ import annotations

import argparse
import importlib
import json
import pathlib
import statistics
import sys
import time

from .report import ROUNDS, table, write_report

DEFAULT = {}
ROWS = (("student", 64, "straggler", DEFAULT), ("student", 64, "straggler", {"resolution": 1.0}),
        ("student", 64, "straggler", {"resolution": 1.5}),
        ("cnn", 10, "straggler", {"lift": "loop/eager"}), ("cnn", 10, "straggler", {"lift": "unrolled/dispatch"}),
        ("student", 64, "profiles_10x", DEFAULT), ("student", 64, "profiles_10x", {"capacity": 16}))
"""(workload, N, cluster, how): ``how`` may fix the lift, the resolution (of the fastest nominal step; default
:class:`jaxcomm.pace.OwnPace`'s 0.75) and the capacity (nodes per pass of a stacked step that gathers the due
nodes; default every node computed)."""
QUICK = (("student", 8, "straggler", DEFAULT), ("student", 8, "straggler", {"capacity": 2}))
CHUNKS = {"student": 400, "cnn": 50}  # ticks per timed call: about 2 s of a 2-core CPU each
JITTER = 0.2


def cluster_of(kind: str, n: int):
    """One straggler 3x slower, or half the nodes 10x slower (profiles 10x apart); 20 % jitter; a LAN."""
    from jaxcomm import clock

    speed = clock.stragglers(n, count=1, slowdown=3.0) if kind == "straggler" else \
        tuple(1.0 if i < n // 2 else 10.0 for i in range(n))
    return clock.Cluster(clock.Compute(0.01, speed=speed, jitter=JITTER), clock.LAN)


def measure(workload: str, n: int, kind: str, how: dict, chunk: int) -> dict:
    """One row: both arms of one network structure, timed in interleaved rounds."""
    import jax

    from experiments.benchmark import bench
    from jaxcomm import methods, network, pace

    model, dataset = bench.model_and_data(workload)
    cluster = cluster_of(kind, n)
    config = network.NetworkConfig(num_nodes=n, content="true_labels", topology="ring", num_neighbours=1,
                                   num_steps=chunk * (2 * ROUNDS + 2), eval_every=chunk)
    if "lift" in how:
        backend, step_loop = how["lift"].split("/")
        config = config.replace(backend=backend, step_loop=step_loop)
    method = network.output_sharing()
    lockstep = methods.build(method, config, model, dataset)
    config = config.replace(backend=lockstep.backend, step_loop=lockstep.step_loop)  # one lift for both arms
    own_pace = pace.OwnPace(resolution=None if "resolution" not in how else how["resolution"] * 0.01,
                            capacity=how.get("capacity"))
    paced, timeline = methods.at_own_pace(methods.build(method, config, model, dataset, cluster=cluster,
                                                        own_pace=own_pace), cluster, own_pace)
    data = network.network_data(dataset, config)
    arms = {}
    paced_data = data._replace(pace=timeline.rows())  # what the step at its own pace reads
    for name, built, arm_data in (("lockstep", lockstep, data), ("own_pace", paced, paced_data)):
        run, state = bench.loop_of(built), bench.initial(built)
        state = jax.block_until_ready(run(state, arm_data, chunk))[0]  # compiled, and the rows' first chunk
        arms[name] = [run, state, [], arm_data]
    for _ in range(ROUNDS):
        for arm in arms.values():
            start = time.perf_counter()
            arm[1] = jax.block_until_ready(arm[0](arm[1], arm[3], chunk))[0]
            arm[2].append(chunk / (time.perf_counter() - start))
    steps_per_second = {name: statistics.median(arm[2]) for name, arm in arms.items()}
    share = timeline.due_share()
    lock, own = n * steps_per_second["lockstep"], n * share * steps_per_second["own_pace"]
    return {"workload": workload, "num_nodes": n, "cluster": kind, "capacity": own_pace.capacity_for(n),
            "backend": lockstep.backend,
            "step_loop": lockstep.step_loop, "resolution_seconds": timeline.resolution,
            "resolution_of_fastest_step": timeline.resolution / 0.01, "due_share": share,
            "lockstep_node_steps_per_second": lock, "own_pace_ticks_per_second": steps_per_second["own_pace"],
            "own_pace_useful_node_steps_per_second": own, "ratio": own / lock,
            "virtual_node_steps_per_second": float(timeline.steps[-1].sum() / timeline.time[-1]),
            "lockstep_virtual_node_steps_per_second": float(n / (0.01 * max(cluster.compute.speed)))}


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["report"]:
        write_report(argv[1])
        return 0
    description = importlib.import_module(__package__).__doc__.splitlines()[0]
    parser = argparse.ArgumentParser(prog="python -m experiments.pace_benchmark", description=description)
    parser.add_argument("--out", default="runs/benchmark/pace")
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--chunk", type=int, default=0, help="ticks per timed call (0: the workload's, CHUNKS)")
    args = parser.parse_args(argv)

    from jaxcomm.harness import results

    start = time.perf_counter()
    rows = [measure(*row, chunk=args.chunk or CHUNKS[row[0]]) for row in (QUICK if args.quick else ROWS)]
    summary = {"experiment": "pace_benchmark", "command": results.command_line(),
               "git_commit": results.git_commit(), "device": results.device_description(),
               "host_cpu": results.host_cpu(), "wall_seconds": time.perf_counter() - start, "rows": rows}
    out = pathlib.Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
    write_report(out)
    print(table(summary))
    return 0

