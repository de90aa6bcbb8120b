"""Issue 40: the seconds a first run spends choosing its backend (an empty cache), and what it picks.

    python -m experiments.benchmark.probes.cold_choice > results/benchmark/cold_choice/cold_choice.md

Three networks built with ``backend="auto"``: the benchmark's student_n64 and cnn_n10 rows (a 1,000-step run
planned, as the benchmark's cold-choice column) and a user's residual CNN on the shipped MNIST sample (10 nodes,
200 steps planned: the issue's case). Each from its own empty cache; the seconds are those of building the
network, timing its candidates included.
"""

from __future__ import annotations

import contextlib
import io
import os
import sys
import tempfile
import time

import flax.linen as nn
import jax.numpy as jnp

from experiments.benchmark import bench
from jaxcomm import data, network
from jaxcomm.harness import results


class ResidualCNN(nn.Module):
    """A user's residual CNN: three 3x3 convolutions (one residual block), mean-pooled features."""

    num_classes: int = 10

    @nn.compact
    def __call__(self, x, train: bool = False):
        h = nn.relu(nn.Conv(32, (3, 3))(x))
        h = h + nn.relu(nn.Conv(32, (3, 3))(nn.relu(nn.Conv(32, (3, 3))(h))))
        features = jnp.mean(h, axis=(1, 2))
        return nn.Dense(self.num_classes)(features), features


def build(model, dataset, config: network.NetworkConfig) -> tuple[network.Network, float, str]:
    """The network built from an empty cache, the seconds building it took, and what auto printed."""
    os.environ["JAXCOMM_CACHE_DIR"] = tempfile.mkdtemp()
    printed = io.StringIO()
    start = time.perf_counter()
    with contextlib.redirect_stderr(printed):
        net = network.make_network(config, model, image_shape=dataset.train.images.shape[1:], num_classes=10)
    line = next((line for line in printed.getvalue().splitlines() if line.startswith("jaxcomm: auto chose")), "")
    return net, time.perf_counter() - start, line.removeprefix("jaxcomm: auto chose ")


def main() -> None:
    cases = []
    for workload, n in (("student", 64), ("cnn", 10)):
        model, dataset = bench.model_and_data(workload)
        config = network.NetworkConfig(num_nodes=n, content="none", num_neighbours=2, consume_prob=0.5,
                                       broadcast_prob=0.25, num_steps=bench.COLD_PLANNED_STEPS)
        cases.append((f"{workload}_n{n}", model, dataset, config))
    cases.append(("residual_cnn_n10", ResidualCNN(), data.load_mnist_sample(),
                  network.NetworkConfig(num_nodes=10, content="true_labels", num_steps=200)))
    print(f"Commit `{results.git_commit()}`, {results.device_description()}.\n")
    print("| network | steps planned | auto picked | choosing s | what auto printed |\n|---|---|---|---|---|")
    for name, model, dataset, config in cases:
        net, seconds, line = build(model, dataset, config)
        print(f"| {name} | {config.num_steps:,} | {net.backend}/{net.step_loop} | {seconds:.1f} | {line} |",
              flush=True)


if __name__ == "__main__":
    sys.exit(main())
