"""Where a population step's time goes, op by op (issue 41): the jax profiler's trace of the benchmark CNN's network
step (N nodes, backend "unrolled", one jitted step a call, donated; node states stacked or apart), each XLA op's
time summed by kind over the executor's threads. From the repository root:

    python -m experiments.benchmark.vs_pytorch.step_profile 10 stacked > results/benchmark/vs_pytorch/step_profile.md

Kinds: `ynn_fusion` (XLA:CPU's YNNPACK library calls: convolutions and dots), `convolution` (XLA's own Eigen
convolutions: here the stride-2 convolutions' input gradients, dilated), and the loop fusions by the name XLA
gives them (`transpose_copy_fusion`: layouts for the kernel-gradient convolutions; `multiply_add_fusion`: Adam;
`slice_bitcast_fusion`: a node's slice of the stack; `stack`: the gradients stacked). The XLA:CPU executor runs
independent ops on its threads at once, so the kinds add up to more than the wall time.
"""
import collections
import glob
import re
import sys
import tempfile
import time

import jax
from jax._src.lib import _profile_data

from experiments.benchmark import bench
from experiments.benchmark.vs_pytorch.unrolled_update import cnn_network
from jaxcomm import population

STEPS = 5


def main(num_nodes: int, layout: str) -> None:
    build, data = cnn_network(num_nodes)
    net = build()
    state = bench.initial(net)
    if layout == "apart":
        state = state._replace(nodes=population.unstack(state.nodes))
    step = jax.jit(net.step, donate_argnums=0)
    for _ in range(3):
        state = jax.block_until_ready(step(state, data)[0])
    with tempfile.TemporaryDirectory() as trace_dir:
        start = time.perf_counter()
        with jax.profiler.trace(trace_dir):
            for _ in range(STEPS):
                state = jax.block_until_ready(step(state, data)[0])
        wall = (time.perf_counter() - start) / STEPS * 1e3
        profile = _profile_data.ProfileData.from_file(glob.glob(f"{trace_dir}/**/*.xplane.pb", recursive=True)[0])
    kinds, counts, busy = collections.Counter(), collections.Counter(), 0.0
    for plane in profile.planes:
        for line in plane.lines:
            if not line.name.startswith("tf_XLAEigen"):  # the executor's threads
                continue
            for event in line.events:
                if event.name == "ThunkExecutor::Execute":
                    busy += event.duration_ns
                elif not event.name.startswith(("ThunkExecutor", "end: ", "SlinkyThreadPool")):
                    kind = re.sub(r"(\.\d+)+$", "", event.name)
                    kind = "convolution" if kind.startswith("convolution") else kind
                    kinds[kind] += event.duration_ns
                    counts[kind] += 1
    total = sum(kinds.values())
    print(f"{num_nodes} nodes, {layout}, jax {jax.__version__}: {wall:.1f} ms a step under the profiler (the mean "
          f"of {STEPS}); the executor's threads busy {busy / 1e6 / STEPS:.1f} ms a step in all.\n")
    print("| op kind | ops a step | ms a step (threads summed) | share |")
    print("|---|---|---|---|")
    for kind, ns in kinds.most_common(12):
        print(f"| `{kind}` | {counts[kind] // STEPS} | {ns / 1e6 / STEPS:.1f} | {ns / total:.0%} |")


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 10, sys.argv[2] if len(sys.argv) > 2 else "stacked")
