"""What JAX's persistent compilation cache saves a researcher who runs seeds one by one.

    python -m experiments.benchmark.probes.compile_cache > results/benchmark/compile_cache/compile_cache.md

8 seeds of DiLoCo (H = 50) on 10 student-MLP nodes, 1,000 steps each, trained one by one with
``jaxcomm.methods.train`` in one process (the benchmark's method-sweep row, one-by-one arm), three ways, each in a
fresh process: without the cache; with ``JAX_COMPILATION_CACHE_DIR`` set to an empty folder (later seeds load the
programs the first compiled); and again with that folder now full (a second run of the same script). Every arm
with ``JAXCOMM_AUTOTUNE=0`` (the shipped table's pair), so that only XLA's compiles differ between them.
"""

from __future__ import annotations

import json
import sys
import tempfile
import time

SEEDS = 8


def arm() -> None:
    """One arm, in this process: the seeds one by one; prints the seconds as JSON."""
    from experiments.benchmark import bench
    from jaxcomm import methods, network, zoo

    model, dataset = bench.model_and_data("student")
    method = zoo.parse("diloco:50")
    start = time.perf_counter()
    for seed in range(SEEDS):
        config = network.NetworkConfig(num_nodes=10, num_steps=1000, eval_every=250, seed=seed)
        methods.train(method, config, model, dataset, progress=False)
    print(json.dumps({"seconds": time.perf_counter() - start}))


def run_arm(env: dict) -> float:
    from experiments.benchmark import bench

    return bench.in_fresh_process(__spec__.name, "--arm", env={"JAXCOMM_AUTOTUNE": "0", **env})["seconds"]


def main() -> None:
    from jaxcomm.harness import results

    cache = tempfile.mkdtemp()
    with_cache = {"JAX_COMPILATION_CACHE_DIR": cache, "JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS": "0.1"}
    arms = [("no cache", {}), ("cache, empty at the start", with_cache), ("cache, full (a second run)", with_cache)]
    print(f"Commit `{results.git_commit()}`, {results.device_description()}.\n")
    print(f"| {SEEDS} DiLoCo seeds one by one | seconds |\n|---|---|")
    for name, env in arms:
        print(f"| {name} | {run_arm(env):.1f} |", flush=True)


if __name__ == "__main__":
    sys.exit(arm() if sys.argv[1:] == ["--arm"] else main())
