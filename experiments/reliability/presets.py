"""The reliability experiment's config (:class:`ReliabilityConfig`: the resume check's steps, the networks,
the failure levels and seeds) and :data:`PRESETS` (``smoke``, ``cpu``, ``thesis``)."""

from __future__ import annotations

import dataclasses

from jaxcomm import inbox, network
from jaxcomm.validation import integer, one_of, probability, require, widths

DATASETS = ("cifar10", "mnist", "mnist_sample")


@dataclasses.dataclass(frozen=True)
class ReliabilityConfig:
    """The failure experiment and the resume check.

    Attributes:
      dataset: "cifar10" (the chapter-2 data) or an MNIST variant (smoke tests).
      data_dir: where the dataset lives ("" = ``JAXCOMM_DATA_DIR`` or tfds).
      widths: the strided CNN's channels (CIFAR-10) or the MLP's hidden widths (MNIST).
      node_counts: N of each network.
      failure_fractions: fraction of time each node is down, each in [0, 1).
      failure_steps: D, mean steps a failed node stays down.
      inbox_on_failure: "keep" or "lose" (see :class:`jaxcomm.network.NetworkConfig`).
      consume_prob: p_c (thesis 0.5); nodes broadcast with p_c / (N - 1).
      num_steps: training steps of each network.
      eval_every: steps between test evaluations.
      seeds: seeds per (N, f), trained as one sweep (:func:`jaxcomm.network_sweep.train_networks`).
      resume_steps: steps of the resume check's small MNIST network.
      seed: the first seed.
    """

    dataset: str = "cifar10"
    data_dir: str = ""
    widths: tuple[int, ...] = (16, 32, 64)
    node_counts: tuple[int, ...] = (10, 20)
    failure_fractions: tuple[float, ...] = (0.0, 0.1, 0.3)
    failure_steps: float = 100.0
    inbox_on_failure: str = "keep"
    consume_prob: float = 0.5
    num_steps: int = 2000
    eval_every: int = 250
    seeds: int = 1
    resume_steps: int = 600
    seed: int = 0

    def __post_init__(self):
        one_of("dataset", self.dataset, DATASETS)
        require(isinstance(self.data_dir, str), "data_dir", "a string", self.data_dir)
        widths("widths", self.widths)
        require(isinstance(self.node_counts, tuple) and len(self.node_counts) >= 1
                and all(isinstance(n, int) and n >= 2 for n in self.node_counts),
                "node_counts", "a non-empty tuple of integers >= 2", self.node_counts)
        require(isinstance(self.failure_fractions, tuple) and len(self.failure_fractions) >= 1
                and all(isinstance(f, float | int) and 0 <= f < 1 for f in self.failure_fractions),
                "failure_fractions", "a non-empty tuple of fractions in [0, 1)", self.failure_fractions)
        require(isinstance(self.failure_steps, float | int) and self.failure_steps >= 1, "failure_steps",
                "a number >= 1", self.failure_steps)
        one_of("inbox_on_failure", self.inbox_on_failure, network.INBOX_ON_FAILURE)
        probability("consume_prob", self.consume_prob)
        for name in ("num_steps", "eval_every", "seeds", "resume_steps"):
            integer(name, getattr(self, name), low=1)
        integer("seed", self.seed)

    def failure_prob(self, fraction: float) -> float:
        """q such that a node is down ``fraction`` of the time: f = qD / (1 + qD)."""
        return fraction / (self.failure_steps * (1.0 - fraction))

    def network(self, num_nodes: int, fraction: float, seed: int) -> network.NetworkConfig:
        return network.NetworkConfig(
            num_nodes=num_nodes, topology="full", content="true_labels", consume_prob=self.consume_prob,
            broadcast_prob=inbox.equilibrium_broadcast_prob(self.consume_prob, num_nodes - 1), inbox_capacity=16,
            failure_prob=self.failure_prob(fraction), failure_steps=float(self.failure_steps),
            inbox_on_failure=self.inbox_on_failure, num_steps=self.num_steps, eval_every=self.eval_every, seed=seed)


def cpu_config() -> ReliabilityConfig:
    """About 1 hour alone on 2 CPU cores: quarter-width CNN (16-32-64), 1,500 steps, 3 seeds (networks trained
    alone took about 120 s at 10 nodes and 245 s at 20; results/reliability/notes.md)."""
    return ReliabilityConfig(num_steps=1500, seeds=3)


def thesis_config() -> ReliabilityConfig:
    """The thesis' CNN width (64-128-256) and 5,000 steps, 3 seeds (for an accelerator)."""
    return ReliabilityConfig(widths=(64, 128, 256), num_steps=5000, eval_every=250, seeds=3)


def smoke_config() -> ReliabilityConfig:
    """Seconds: small MLP nodes on the shipped MNIST sample."""
    return ReliabilityConfig(dataset="mnist_sample", widths=(16,), node_counts=(4,), failure_fractions=(0.0, 0.3),
                             failure_steps=10.0, num_steps=60, eval_every=20, resume_steps=60)


PRESETS = {"smoke": smoke_config, "cpu": cpu_config, "thesis": thesis_config}
