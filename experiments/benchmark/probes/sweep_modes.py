"""Which of a sweep's two modes is faster for each method the benchmark sweeps, on this CPU.

    python -m experiments.benchmark.probes.sweep_modes > results/benchmark/sweep_modes/sweep_modes.md

8 seeds of each method of the benchmark's method-sweep rows (``METHOD_SWEEPS``: DiLoCo H = 50, synchronous SGD,
codistillation K = 100) on 10 student-MLP nodes, 1,000 steps, evaluated every 250: one by one
(``jaxcomm.methods.train`` per seed), and as one ``jaxcomm.methods.sweep`` in each mode, "population" (the step
vmapped over runs: one population of 80 nodes) and "sequential" (run after run through one compiled step). Each
arm in a fresh process, the arms interleaved over two rounds; the final accuracies are printed so that the modes
can be seen to train the same runs.
"""

from __future__ import annotations

import json
import sys
import time

SEEDS = 8
METHODS = ("diloco:50", "sync", "codistill:100")
ARMS = ("one_by_one", "population", "sequential")
ROUNDS = 2


def arm(spec: str, mode: str) -> None:
    """One arm, in this process; prints its seconds and the runs' final node-average accuracies as JSON."""
    from experiments.benchmark import bench
    from jaxcomm import methods, network, zoo

    model, dataset = bench.model_and_data("student")
    method = zoo.parse(spec)
    configs = [network.NetworkConfig(num_nodes=10, num_steps=1000, eval_every=250, seed=s) for s in range(SEEDS)]
    start = time.perf_counter()
    if mode == "one_by_one":
        runs = [methods.train(method, c, model, dataset, progress=False) for c in configs]
    else:
        runs = methods.sweep(method, configs, model, dataset, progress=False, mode=mode)
    print(json.dumps({"seconds": time.perf_counter() - start,
                      "accuracy": [r["final"]["avg_accuracy"] for r in runs]}))


def run_arm(spec: str, mode: str) -> dict:
    from experiments.benchmark import bench

    return bench.in_fresh_process(__spec__.name, "--arm", spec, mode)


def main() -> None:
    from jaxcomm.harness import results

    start = time.perf_counter()
    seconds = {(spec, mode): [] for spec in METHODS for mode in ARMS}
    accuracy = {}
    for _ in range(ROUNDS):
        for spec in METHODS:
            for mode in ARMS:
                out = run_arm(spec, mode)
                seconds[spec, mode].append(out["seconds"])
                accuracy[spec, mode] = out["accuracy"]
    print(f"Commit `{results.git_commit()}`, {results.device_description()}; wall time "
          f"{time.perf_counter() - start:.0f} s.\n")
    print(f"Seconds for {SEEDS} seeds (round 1 / round 2); `x` = one by one over the mode, best round against best "
          f"round.\n")
    print("| method | one by one | population | sequential | x population | x sequential | same accuracies |")
    print("|---|---|---|---|---|---|---|")
    for spec in METHODS:
        cells = [" / ".join(f"{s:.1f}" for s in seconds[spec, mode]) for mode in ARMS]
        best = {mode: min(seconds[spec, mode]) for mode in ARMS}
        same = max(abs(a - b) for mode in ARMS[1:]
                   for a, b in zip(accuracy[spec, "one_by_one"], accuracy[spec, mode], strict=True))
        print(f"| {spec} | {' | '.join(cells)} | {best['one_by_one'] / best['population']:.2f}x | "
              f"{best['one_by_one'] / best['sequential']:.2f}x | within {same:.2f} points |")


if __name__ == "__main__":
    sys.exit(arm(*sys.argv[2:]) if sys.argv[1:2] == ["--arm"] else main())
