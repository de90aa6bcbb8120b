"""What training at their own pace costs: useful node-steps per second against lockstep, side by side in one run.

A run at its own pace (:mod:`jaxcomm.pace`) computes every node at every tick and keeps the steps of the nodes
due, so the share of due nodes per tick bounds its useful work. For each row (output sharing of true labels on
a ring; one straggler 3x slower, or half the nodes on a device 10x slower; 20 % per-step jitter) this times the
same network's compiled chunk of steps in lockstep and at its own pace, in interleaved rounds, and reports the
useful node-steps per second of each (lockstep: every node every step; own pace: the nodes due), their ratio,
the share of nodes due per tick and the simulation's time resolution (two step ends closer than it may be
taken in either order).

    python experiments/pace_benchmark.py --out results/benchmark/pace     # about 5 minutes on 2 CPU cores
    python experiments/pace_benchmark.py --quick                            # 8 nodes, a smoke test
    python experiments/pace_benchmark.py report results/benchmark/pace      # redraw table.md, nothing runs

The CNN rows time random uint8 32x32x3 images (speed does not depend on pixel values), the MLP rows the shipped
MNIST sample, as ``experiments/benchmark.py`` does.
"""

from __future__ import annotations

import argparse
import json
import pathlib
import statistics
import sys
import time

ROWS = (("student", 64, "straggler"), ("cnn", 10, "straggler"), ("student", 64, "profiles_10x"))
QUICK = (("student", 8, "straggler"),)
ROUNDS = 5
CHUNKS = {"student": 400, "cnn": 50}  # ticks per timed call: about 2 s of a 2-core CPU each
JITTER = 0.2


def cluster_of(kind: str, n: int):
    """One straggler 3x slower, or half the nodes 10x slower (profiles 10x apart); 20 % jitter; a LAN."""
    from jaxcomm import clock

    speed = clock.stragglers(n, count=1, slowdown=3.0) if kind == "straggler" else \
        tuple(1.0 if i < n // 2 else 10.0 for i in range(n))
    return clock.Cluster(clock.Compute(0.01, speed=speed, jitter=JITTER), clock.LAN)


def measure(workload: str, n: int, kind: str, chunk: int) -> dict:
    """One row: both arms of one network structure, timed in interleaved rounds."""
    import jax

    from jaxcomm import methods, network
    from jaxcomm.harness import bench

    model, dataset = bench.model_and_data(workload)
    cluster = cluster_of(kind, n)
    config = network.NetworkConfig(num_nodes=n, content="true_labels", topology="ring", num_neighbours=1,
                                   num_steps=chunk * (2 * ROUNDS + 2), eval_every=chunk)
    method = network.output_sharing()
    lockstep = methods.build(method, config, model, dataset)
    config = config.replace(backend=lockstep.backend, step_loop=lockstep.step_loop)  # one lift for both arms
    paced, timeline = methods.at_own_pace(methods.build(method, config, model, dataset, cluster=cluster,
                                                        own_pace=True), cluster, True)
    data = network.network_data(dataset, config)
    arms = {}
    for name, built in (("lockstep", lockstep), ("own_pace", paced)):
        run, state = bench.loop_of(built), bench.initial(built)
        state = jax.block_until_ready(run(state, data, chunk))[0]  # compiled, and the rows' first chunk
        arms[name] = [run, state, []]
    for _ in range(ROUNDS):
        for arm in arms.values():
            start = time.perf_counter()
            arm[1] = jax.block_until_ready(arm[0](arm[1], data, chunk))[0]
            arm[2].append(chunk / (time.perf_counter() - start))
    steps_per_second = {name: statistics.median(arm[2]) for name, arm in arms.items()}
    share = timeline.due_share()
    lock, own = n * steps_per_second["lockstep"], n * share * steps_per_second["own_pace"]
    return {"workload": workload, "num_nodes": n, "cluster": kind, "backend": lockstep.backend,
            "step_loop": lockstep.step_loop, "resolution_seconds": timeline.resolution,
            "resolution_of_fastest_step": timeline.resolution / 0.01, "due_share": share,
            "lockstep_node_steps_per_second": lock, "own_pace_ticks_per_second": steps_per_second["own_pace"],
            "own_pace_useful_node_steps_per_second": own, "ratio": own / lock,
            "virtual_node_steps_per_second": float(timeline.steps[-1].sum() / timeline.time[-1]),
            "lockstep_virtual_node_steps_per_second": float(n / (0.01 * max(cluster.compute.speed)))}


def table(summary: dict) -> str:
    lines = ["| workload | N | cluster | lift | resolution (of the fastest step) | nodes due per tick | "
             "lockstep node-steps/s | own pace useful node-steps/s | ratio |", "|---" * 9 + "|"]
    for r in summary["rows"]:
        lines.append(f"| {r['workload']} | {r['num_nodes']} | {r['cluster']} | {r['backend']}/{r['step_loop']} | "
                     f"{r['resolution_seconds'] * 1e3:.1f} ms ({r['resolution_of_fastest_step']:.2f}) | "
                     f"{r['due_share']:.2f} | {r['lockstep_node_steps_per_second']:,.0f} | "
                     f"{r['own_pace_useful_node_steps_per_second']:,.0f} | {r['ratio']:.2f}x |")
    head = (f"Measured on {summary['device']}, commit {summary['git_commit']}, {summary['wall_seconds']:.0f} s: "
            f"`{summary['command']}`. Rounds interleaved, medians of {ROUNDS}.\n\n")
    return head + "\n".join(lines) + "\n"


def write_report(out: pathlib.Path | str, *, plots: bool = True) -> None:
    """``table.md`` from ``summary.json`` (no plots)."""
    out = pathlib.Path(out)
    (out / "table.md").write_text(table(json.loads((out / "summary.json").read_text())))


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["report"]:
        write_report(argv[1])
        return 0
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="runs/benchmark/pace")
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--chunk", type=int, default=0, help="ticks per timed call (0: the workload's, CHUNKS)")
    args = parser.parse_args(argv)

    from jaxcomm.harness import results

    start = time.perf_counter()
    rows = [measure(*row, args.chunk or CHUNKS[row[0]]) for row in (QUICK if args.quick else ROWS)]
    summary = {"experiment": "pace_benchmark", "command": results.command_line(),
               "git_commit": results.git_commit(), "device": results.device_description(),
               "wall_seconds": time.perf_counter() - start, "rows": rows}
    out = pathlib.Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
    write_report(out)
    print(table(summary))
    return 0


if __name__ == "__main__":
    sys.exit(main())
