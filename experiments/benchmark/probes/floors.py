"""How far a sweep can go: the seconds of training a sweep cannot share, beside the benchmark's two arms (issue 37).

A sweep of R runs shares what is built and compiled once (the model, the compiled step, the backend's choice) and
cannot share each run's training. For each method, in fresh processes (the benchmark's own arms,
``experiments/benchmark.py --measure-sweep``): its 8 seeds one by one (``jaxcomm.methods.train``) and as one sweep
(``jaxcomm.methods.sweep``, the mode ``auto`` picks), the wall clock of each arm, and the training seconds of the
sweep's runs (the driver's ``train_seconds``: run by run, each run's;
the first includes the compile, so a run's training is the median of the others'). The ceiling, one by one over
R x that training, is the speed-up a sweep would reach if it cost nothing but its runs' training. From the
repository root:

    python -m experiments.benchmark.probes.floors > results/benchmark/method_sweeps/floors.md
"""
import dataclasses
import json
import os
import platform
import statistics

from experiments.benchmark import bench

METHODS = ("sync", "diloco:50", "codistill:100")
RUNS, NODES, STEPS, EVAL_EVERY = 8, 10, 1000, 250
BENCHMARK = "experiments.benchmark"  # run as a module, from the repository root


def main() -> None:
    import jax

    print("# Method sweeps: the training a sweep cannot share\n")
    print(f"Command: `python -m experiments.benchmark.probes.floors`; {platform.machine()}, {os.cpu_count()} cores, "
          f"jax {jax.__version__}, float32 matmul {bench.matmul_gflops():.0f} GFLOP/s, `JAXCOMM_AUTOTUNE=0`. {RUNS} "
          f"seeds of {NODES} student-MLP nodes, {STEPS:,} steps, evaluated every {EVAL_EVERY}; each arm in a fresh "
          "process.\n")
    print("| method | sweep mode | one by one s | sweep s | speed-up | a run's training in the sweep s "
          f"| {RUNS} runs' training s | ceiling (one by one / training) |")
    print("|---|---|---|---|---|---|---|---|")
    for spec in METHODS:
        row = json.dumps(dataclasses.asdict(bench.SweepRow("student", RUNS, NODES, STEPS, EVAL_EVERY, spec)))
        one, sweep = (bench.in_fresh_process(BENCHMARK, "--measure-sweep", row, arm, env={"JAXCOMM_AUTOTUNE": "0"})
                      for arm in ("one_by_one", "sweep"))
        if sweep["mode"] == "sequential":
            run = statistics.median(sweep["train_seconds"][1:])
            training, per_run = RUNS * run, f"{run:.2f}"
        else:  # one population: the whole sweep's training, compile included
            training, per_run = sweep["train_seconds"][0], "-"
        print(f"| {spec} | {sweep['mode']} | {one['seconds']:.1f} | {sweep['seconds']:.1f} "
              f"| {one['seconds'] / sweep['seconds']:.2f}x | {per_run} | {training:.1f} "
              f"| {one['seconds'] / training:.2f}x |")


if __name__ == "__main__":
    main()
