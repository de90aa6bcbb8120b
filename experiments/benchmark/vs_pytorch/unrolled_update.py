"""The optimiser of an unrolled population, per node or once over the stack (issue 41, a lever; population.lift_train).

The chapter-2 benchmark CNN (`bench.model_and_data("cnn")`), N nodes, backend "unrolled", one jitted
network step a call with its state donated: the step as it was (each node's Adam in its own copy of the unrolled
step: `population.lift` of the whole train step) against the step as the engine runs it now (gradients unrolled,
Adam vmapped over the stacked nodes: `population.lift_train`), both compiled in one process and timed in
interleaved rounds (the best round of each). From the repository root:

    python -m experiments.benchmark.vs_pytorch.unrolled_update 10 20 > results/benchmark/vs_pytorch/unrolled_update.md
"""
import platform
import subprocess
import sys
import time

import jax

from experiments.benchmark import bench
from jaxcomm import network, population

ROUNDS, CALLS = 5, 5


def whole(step, *, backend, **kwargs):  # the step before lift_train: every node's optimiser inside its copy
    return population.lift(step, backend=backend, **kwargs)


def cnn_network(num_nodes: int):
    """``(build, data)``: the benchmark's isolated CNN nodes, unrolled and dispatched; ``build()`` makes the
    network (again, to read a swapped module attribute)."""
    model, dataset = bench.model_and_data("cnn")
    config = network.NetworkConfig(num_nodes=num_nodes, content="none", batch_size=32, backend="unrolled",
                                   step_loop="dispatch")
    image_shape = dataset.train.images.shape[1:]
    return (lambda: network.make_network(config, model, image_shape=image_shape, num_classes=10),
            network.network_data(dataset, config))


def measure(num_nodes: int) -> dict:
    build, data = cnn_network(num_nodes)
    runs, halves = {}, population.lift_train
    try:
        for name, lift in (("per node", whole), ("stacked", halves)):
            population.lift_train = lift  # read when the network is built
            net = build()
            step = jax.jit(net.step, donate_argnums=0)
            state = jax.tree_util.tree_map(lambda x: x.copy(), net.init(jax.random.PRNGKey(0)))  # no shared buffer
            runs[name] = first_call(step, state, data)
    finally:
        population.lift_train = halves
    return interleaved(runs, data)


def first_call(step, state, data) -> dict:
    """``step`` compiled and run once on ``state``: ``{"step", "state", "compile_s"}``."""
    start = time.perf_counter()
    state = jax.block_until_ready(step(state, data)[0])
    return {"step": step, "state": state, "compile_s": time.perf_counter() - start}


def interleaved(runs: dict, data) -> dict:
    """Each run's step timed in :data:`ROUNDS` interleaved rounds of :data:`CALLS` calls: ``{name: {"compile_s",
    "ms"}}``."""
    ms = {name: [] for name in runs}
    for _ in range(ROUNDS):
        for name, run in runs.items():
            start = time.perf_counter()
            for _ in range(CALLS):
                run["state"] = run["step"](run["state"], data)[0]
            jax.block_until_ready(run["state"])
            ms[name].append((time.perf_counter() - start) / CALLS * 1e3)
    return {name: {"compile_s": run["compile_s"], "ms": ms[name]} for name, run in runs.items()}


def print_table(measure, sizes: list[int], what: str, before: str, after: str) -> None:
    """The markdown table of ``measure(n) -> {before: ..., after: ...}`` (:func:`interleaved`) for each N."""
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
    print(f"Commit `{commit}`, {platform.processor() or platform.machine()}, {jax.device_count()} x "
          f"{jax.default_backend()}, jax {jax.__version__}; {ROUNDS} interleaved rounds of {CALLS} steps.\n")
    print(f"| nodes | {what} | compile s | ms a step (best) | rounds (ms) | {after} / {before} |")
    print("|---|---|---|---|---|---|")
    for n in sizes:
        out = measure(n)
        ratio = min(out[before]["ms"]) / min(out[after]["ms"])
        for name, run in out.items():
            rounds = ", ".join(f"{ms:.0f}" for ms in run["ms"])
            print(f"| {n} | {name} | {run['compile_s']:.1f} | {min(run['ms']):.1f} | {rounds} | "
                  + (f"{ratio:.2f}x faster |" if name == after else "|"))


if __name__ == "__main__":
    print_table(measure, [int(n) for n in sys.argv[1:]] or [10, 20], "optimiser", "per node", "stacked")
