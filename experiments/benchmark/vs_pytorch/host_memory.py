"""Host memory kept between calls (jaxcomm.host_memory, issue 41's levers) against glibc's defaults, for the benchmark
CNN's 10 nodes or the student MLP's 64: node-steps per second of each pair in fresh processes (the setting is
process-wide and taken when jaxcomm is imported), the two modes alternating, and the minor page faults per step.
From the repository root:

    python -m experiments.benchmark.vs_pytorch.host_memory > results/benchmark/vs_pytorch/host_memory.md
    python -m experiments.benchmark.vs_pytorch.host_memory student > results/benchmark/vs_pytorch/host_memory_student.md
"""
import json
import os
import platform
import resource
import sys
import time

from experiments.benchmark import bench

PAIRS = {"cnn": (("loop", "eager"), ("unrolled", "dispatch"), ("patches", "dispatch"), ("patches", "scan")),
         "student": (("vmap", "scan"), ("unrolled", "scan"), ("unrolled", "dispatch"))}
NODES = {"cnn": 10, "student": 64}
ROUNDS = 3
CHUNK = 10


def child(workload: str, backend: str, step_loop: str) -> dict:
    import jax

    import jaxcomm
    from jaxcomm import network

    model, dataset = bench.model_and_data(workload)
    config = network.NetworkConfig(num_nodes=NODES[workload], content="none", batch_size=32, backend=backend,
                                   step_loop=step_loop)
    net = network.make_network(config, model, image_shape=dataset.train.images.shape[1:], num_classes=10)
    data, run = network.network_data(dataset, config), bench.loop_of(net)
    _, _, state = bench.timed(run, bench.initial(net), data, CHUNK)
    faults = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    steps, start = 0, time.perf_counter()
    while time.perf_counter() - start < 4.0:
        state = jax.block_until_ready(run(state, data, CHUNK))[0]
        steps += CHUNK
    seconds = time.perf_counter() - start
    return {"mode": jaxcomm.HOST_MEMORY, "node_steps_per_s": NODES[workload] * steps / seconds,
            "faults_per_step": (resource.getrusage(resource.RUSAGE_SELF).ru_minflt - faults) / steps}


def main(workload: str) -> None:
    rows = {}
    for r in range(ROUNDS):
        for backend, step_loop in PAIRS[workload]:
            for mode in ("release", "keep") if r % 2 == 0 else ("keep", "release"):
                out = bench.in_fresh_process(__spec__.name, workload, backend, step_loop,
                                             env={"JAXCOMM_HOST_MEMORY": mode, "JAXCOMM_AUTOTUNE": "0"})
                assert out["mode"] == mode, out
                rows.setdefault((backend, step_loop), {}).setdefault(mode, []).append(out)
    import jax
    import numpy as np

    print(f"# Host memory kept between calls (`jaxcomm.host_memory`), benchmark {workload}, {NODES[workload]} nodes\n")
    command = "python -m experiments.benchmark.vs_pytorch.host_memory" + ("" if workload == "cnn" else f" {workload}")
    print(f"Command: `{command}`; {platform.processor() or platform.machine()}, "
          f"{os.cpu_count()} cores, jax {jax.__version__}, float32 matmul {bench.matmul_gflops():.0f} GFLOP/s. "
          f"Each cell: {ROUNDS} fresh processes, the modes alternating; node-steps/s over 4 s after a compiled "
          f"chunk of {CHUNK} steps (median, then min-max); faults: minor page faults a step.\n")
    print("| backend / step loop | release: node-steps/s | keep: node-steps/s | keep / release | release faults/step "
          "| keep faults/step |")
    print("|---|---|---|---|---|---|")
    for (backend, step_loop), modes in rows.items():
        rel = [m["node_steps_per_s"] for m in modes["release"]]
        kep = [m["node_steps_per_s"] for m in modes["keep"]]
        fr = np.median([m["faults_per_step"] for m in modes["release"]])
        fk = np.median([m["faults_per_step"] for m in modes["keep"]])
        print(f"| {backend} / {step_loop} | {np.median(rel):.1f} ({min(rel):.1f}-{max(rel):.1f}) "
              f"| {np.median(kep):.1f} ({min(kep):.1f}-{max(kep):.1f}) | {np.median(kep) / np.median(rel):.2f}x "
              f"| {fr:,.0f} | {fk:,.0f} |")


if __name__ == "__main__":
    if len(sys.argv) == 4:
        print(json.dumps(child(*sys.argv[1:])))
    else:
        main(sys.argv[1] if len(sys.argv) > 1 else "cnn")
