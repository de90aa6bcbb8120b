"""XLA:CPU's library switches as levers (issue 41): the student and CNN rows' engine steps under each flag set.

Each flag set runs in a child process of its own (XLA reads its flags once); the children run one after another
in interleaved rounds, and each reports the best of its calls. From the repository root:

    python -m experiments.benchmark.vs_pytorch.xla_cpu_flags > results/benchmark/vs_pytorch/xla_cpu_flags.md

Rows: the student MLP, 64 nodes (`vmap`, one jitted network step a call, donated), and the chapter-2 benchmark CNN,
10 nodes (`unrolled`, likewise), both without messages (content "none"), batch 32.
"""
import json
import os
import platform
import subprocess
import sys
import time

FLAG_SETS = {
    "default (YNNPACK dots and convolutions)": "",
    "convolutions on XLA's own (Eigen) emitter": "--xla_cpu_experimental_ynn_fusion_type=individual_dot",
    "dots through oneDNN": "--xla_cpu_use_onednn=true --xla_cpu_experimental_onednn_fusion_type=dot",
}
ROUNDS, CALLS = 3, 10
ROWS = {"student": (64, "vmap"), "cnn": (10, "unrolled")}


def child() -> None:
    """Times each row's step in this process: ``{row: best ms}`` on stdout."""
    import jax

    from experiments.benchmark import bench
    from jaxcomm import network

    out = {}
    for workload, (n, backend) in ROWS.items():
        model, dataset = bench.model_and_data(workload)
        config = network.NetworkConfig(num_nodes=n, content="none", batch_size=32, backend=backend,
                                       step_loop="dispatch")
        data = network.network_data(dataset, config)
        net = network.make_network(config, model, image_shape=dataset.train.images.shape[1:],
                                   num_classes=dataset.num_classes)
        state = bench.initial(net)
        step = jax.jit(net.step, donate_argnums=0).lower(state, data).compile()
        state = jax.block_until_ready(step(state, data)[0])  # a fresh program's first run is not timed
        best = float("inf")
        for _ in range(3):
            start = time.perf_counter()
            for _ in range(CALLS):
                state = step(state, data)[0]
            jax.block_until_ready(state)
            best = min(best, (time.perf_counter() - start) / CALLS * 1e3)
        out[workload] = best
    print(json.dumps(out))


def main() -> None:
    import jax

    from experiments.benchmark import bench

    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
    ms: dict[str, list[dict]] = {name: [] for name in FLAG_SETS}
    for _ in range(ROUNDS):
        for name, flags in FLAG_SETS.items():
            xla_flags = " ".join(f for f in (os.environ.get("XLA_FLAGS", ""), flags) if f)
            ms[name].append(bench.in_fresh_process(__spec__.name, "--child", env={"XLA_FLAGS": xla_flags}))
    print(f"Commit `{commit}`, {platform.processor() or platform.machine()}, {os.cpu_count()} CPUs, jax "
          f"{jax.__version__}; {ROUNDS} interleaved rounds of a child process per flag set, each the best of 3 calls "
          f"of {CALLS} steps.\n")
    print("| flags | XLA_FLAGS | student 64 nodes, ms a step | CNN 10 nodes, ms a step | student against default "
          "| CNN against default |")
    print("|---|---|---|---|---|---|")
    base = {w: min(r[w] for r in ms[next(iter(FLAG_SETS))]) for w in ROWS}
    for name, flags in FLAG_SETS.items():
        best = {w: min(r[w] for r in ms[name]) for w in ROWS}
        rounds = {w: ", ".join(f"{r[w]:.1f}" for r in ms[name]) for w in ROWS}
        print(f"| {name} | `{flags or '-'}` | {best['student']:.2f} ({rounds['student']}) | {best['cnn']:.1f} "
              f"({rounds['cnn']}) | {base['student'] / best['student']:.2f}x | {base['cnn'] / best['cnn']:.2f}x |")


if __name__ == "__main__":
    child() if sys.argv[1:] == ["--child"] else main()
