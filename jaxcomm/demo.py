"""The demo: 10 MLP nodes on MNIST digits, isolated vs sharing true labels.

Each node holds a private tenth of the training digits. Isolated nodes only see
their shard; sharing nodes also train on minibatches (indices + true labels)
that their ring neighbours broadcast, as in thesis ch. 2. The table shows the
average node accuracy and the collective decision under every weighting. Each
network's seeds train as one sweep (:func:`jaxcomm.network_sweep.train_networks`).

    jaxcomm demo                       # the shipped 5,000-digit sample, about a minute on 2 CPU cores
    jaxcomm demo --dataset mnist --data-dir ../shared/data
"""

from __future__ import annotations

import dataclasses
import time

import numpy as np

from jaxcomm import data, decision, network_sweep, validation
from jaxcomm.models import MLP
from jaxcomm.network import NetworkConfig


@validation.named_fields
@dataclasses.dataclass(frozen=True)
class DemoConfig:
    """What the demo runs; every field is a command-line option.

    Attributes:
      dataset: "mnist_sample" (shipped with the package) or "mnist".
      data_dir: folder holding MNIST (for ``dataset="mnist"``).
      num_nodes: N.
      num_neighbours: p of the ring.
      num_steps: training steps per node.
      hidden: widths of each node's MLP.
      seed: the first seed; runs use ``seed, seed + 1, ...``.
      num_seeds: runs per network; the table shows mean and standard deviation.
      backend: how the nodes are lifted ("auto" or one of jaxcomm.population.BACKENDS).
    """

    dataset: str = "mnist_sample"
    data_dir: str | None = None
    num_nodes: int = 10
    num_neighbours: int = 2
    num_steps: int = 3000
    hidden: tuple[int, ...] = (64,)
    seed: int = 0
    num_seeds: int = 3
    backend: str = "auto"

    def networks(self) -> dict[str, NetworkConfig]:
        """The two networks compared, validated before any data is read."""
        base = NetworkConfig(
            num_nodes=self.num_nodes, topology="ring", num_neighbours=self.num_neighbours,
            consume_prob=0.5,
            # Each node then receives p * p_b = p_c messages a step on average: the
            # inbox neither starves nor overflows (the thesis' equilibrium, §2.3.1.2).
            broadcast_prob=0.5 / max(self.num_neighbours, 1),
            num_steps=self.num_steps, eval_every=max(self.num_steps // 5, 1), seed=self.seed, backend=self.backend,
        )
        return {"isolated": base.replace(content="none"), "sharing true labels": base.replace(content="true_labels")}


class Interrupted(KeyboardInterrupt):
    """Ctrl-C or SIGTERM stopped a network's training: the demo has no complete table to show."""

    def __init__(self, network: str, seed: int, steps_done: int, num_steps: int):
        super().__init__(f"interrupted after {steps_done} of {num_steps} steps ({network}, seed {seed})")
        self.network, self.seed, self.steps_done = network, seed, steps_done


def run(config: DemoConfig, *, progress: bool = True) -> dict:
    """Trains both networks for every seed; returns one row of metrics per network.

    Accuracies are ``(mean, sd)`` over seeds, in %, on the test split.

    Raises:
      Interrupted: SIGINT/SIGTERM stopped a run before its last step (no partial table is made).
    """
    networks = config.networks()
    if config.num_seeds < 1:
        raise ValueError(f"num_seeds must be an integer >= 1, got {config.num_seeds!r}")
    if config.dataset not in ("mnist_sample", "mnist"):
        raise ValueError(f"dataset must be one of ('mnist_sample', 'mnist'), got {config.dataset!r}")
    dataset = data.load_dataset(config.dataset, config.data_dir)
    model = MLP(hidden=config.hidden, num_classes=dataset.num_classes)
    rows = {}
    seeds = range(config.seed, config.seed + config.num_seeds)
    for name, network in networks.items():
        start = time.perf_counter()
        results = network_sweep.train_networks([network.replace(seed=seed) for seed in seeds], model, dataset,
                                               progress=progress, desc=f"{name}, {seeds_text(config)}")
        for seed, result in zip(seeds, results, strict=True):
            if result.get("interrupted") or result.get("final") is None:
                raise Interrupted(name, seed, int(result.get("steps_done", 0)), network.num_steps)
        finals = [result["final"] for result in results]
        collective = {w: [f["collective_accuracy"][w] for f in finals] for w in decision.WEIGHTINGS}
        rows[name] = {
            "avg_accuracy": _mean_sd([f["avg_accuracy"] for f in finals]),
            "collective_accuracy": {w: _mean_sd(values) for w, values in collective.items()},
            **{c: int(np.mean([f["counters"][c] for f in finals])) for c in ("consumed", "dropped", "fallbacks")},
            "seconds": time.perf_counter() - start,
        }
    return {"dataset": dataset.name, "train_size": len(dataset.train.labels),
            "test_size": len(dataset.test.labels), "rows": rows}


def seeds_text(config: DemoConfig) -> str:
    """``seeds 0..2``, or ``seed 0`` for one."""
    last = config.seed + config.num_seeds - 1
    return f"seeds {config.seed}..{last}" if config.num_seeds > 1 else f"seed {config.seed}"


def _mean_sd(values: list[float]) -> tuple[float, float]:
    return float(np.mean(values)), float(np.std(values))


def format_table(result: dict) -> str:
    """A markdown table of :func:`run`'s rows: mean ± sd over seeds; counters are per-seed means; seconds are the
    network's sweep of every seed, compilation and evaluations included."""
    _pm = lambda stat: f"{stat[0]:.1f} ± {stat[1]:.1f}"
    weightings = decision.WEIGHTINGS
    header = ["network", "avg acc", *(f"coll. {w}" for w in weightings), "consumed", "dropped", "fallbacks",
              "seconds"]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for name, row in result["rows"].items():
        cells = [name, _pm(row["avg_accuracy"]), *(_pm(row["collective_accuracy"][w]) for w in weightings),
                 str(row["consumed"]), str(row["dropped"]), str(row["fallbacks"]), f"{row['seconds']:.0f}"]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)
