"""Nodes held apart in the dispatched unrolled step (issue 41, a lever; population.Unstacked, driver.Layout).

The chapter-2 benchmark CNN (`bench.model_and_data("cnn")`), N nodes, backend "unrolled", one jitted
network step a call with its state donated: node states stacked (every step slices each node's parameters out of
the stack, stacks the gradients back for one Adam pass over the stack, and copies the stacked parameters it
updates in place) against node states apart (each node's step reads and updates its own buffers, as the driver now
holds them within a chunk of dispatched steps). Both compiled in one process, timed in interleaved rounds (the
best round of each). From the repository root:

    python -m experiments.benchmark.vs_pytorch.nodes_apart 10 20 > results/benchmark/vs_pytorch/nodes_apart.md
"""
import sys

import jax

from experiments.benchmark import bench
from experiments.benchmark.vs_pytorch.unrolled_update import cnn_network, first_call, interleaved, print_table
from jaxcomm import population


def measure(num_nodes: int) -> dict:
    build, data = cnn_network(num_nodes)
    net = build()
    step = jax.jit(net.step, donate_argnums=0)
    stacked = bench.initial(net)
    apart = bench.initial(net)
    apart = apart._replace(nodes=population.unstack(apart.nodes))
    return interleaved({"stacked": first_call(step, stacked, data), "apart": first_call(step, apart, data)}, data)


if __name__ == "__main__":
    print_table(measure, [int(n) for n in sys.argv[1:]] or [10, 20], "node states", "stacked", "apart")
