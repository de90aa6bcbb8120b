"""The workload's arms (:class:`Arm`), the run's config (:class:`Config`) and its presets ``smoke`` and ``cpu``.

Nothing here imports JAX, torch or jaxcomm: the child processes of every framework import this module.
"""

from __future__ import annotations

import dataclasses

FRAMEWORKS = ("jaxcomm", "flower", "pfl")
"""Every framework's run of an arm is its own process (:mod:`.child`); a repetition runs them in a rotated order."""
JAXCOMM_CACHES = ("fresh", "kept")


@dataclasses.dataclass(frozen=True)
class Arm:
    """One row: FedAvg of ``model`` on ``dataset`` over ``num_clients`` IID shards.

    Every round each participating client starts from the global model and takes ``local_steps`` plain SGD steps
    (``learning_rate``, no momentum) on minibatches of ``batch_size`` drawn with replacement from its own shard;
    the server averages the participants' models with equal weights (server SGD at rate 1). ``cohort``: clients a
    round samples (without replacement; None: every client, every round).
    """

    name: str
    dataset: str  # "mnist" or "cifar10"
    model: str  # "mlp" (784-64-10) or "cnn" (pfl-research's simple_cnn)
    num_clients: int
    rounds: int
    cohort: int | None = None
    local_steps: int = 5
    batch_size: int = 32
    learning_rate: float = 0.05
    about: str = ""

    def __post_init__(self):
        if self.dataset not in ("mnist", "cifar10") or self.model not in ("mlp", "cnn"):
            raise ValueError(f"arm {self.name}: dataset mnist|cifar10 and model mlp|cnn, got {self.dataset}, "
                             f"{self.model}")
        if self.cohort is not None and not 1 <= self.cohort <= self.num_clients:
            raise ValueError(f"arm {self.name}: cohort must be in [1, num_clients={self.num_clients}], got "
                             f"{self.cohort}")
        if min(self.num_clients, self.rounds, self.local_steps, self.batch_size) < 1:
            raise ValueError(f"arm {self.name}: clients, rounds, local steps and batch must be >= 1")

    @property
    def participants(self) -> int:
        """Clients that train in a round."""
        return self.num_clients if self.cohort is None else self.cohort

    @property
    def client_steps(self) -> int:
        """Local SGD steps of the whole run: rounds x participants x local steps."""
        return self.rounds * self.participants * self.local_steps


def arms(cifar_rounds: int = 20) -> dict[str, Arm]:
    """Every arm by name (issue 74 item 4's (a)-(e), and the smoke arms); ``cifar_rounds``: arm (e)'s rounds."""
    out = [
        Arm("a_10_clients_200_rounds", "mnist", "mlp", 10, 200, about="(a) 10 clients, 200 rounds"),
        Arm("b_100_clients_50_rounds", "mnist", "mlp", 100, 50, about="(b) 100 clients, 50 rounds"),
        Arm("c_10_of_100_200_rounds", "mnist", "mlp", 100, 200, cohort=10,
            about="(c) a cohort of 10 of 100 clients, 200 rounds"),
        Arm("d_10_clients_4_rounds", "mnist", "mlp", 10, 4, about="(d) 10 clients, 4 rounds (start-up dominates)"),
        # pfl-research's CIFAR-10 benchmark (benchmarks/image_classification/configs/baseline.yaml): simple_cnn,
        # cifar10_iid with 50 images per user (1,000 users), cohort 50, one local epoch of batch 10 (5 steps), local
        # lr 0.1, central SGD lr 1, 1,500 central iterations; here as many rounds as the cpu preset's budget fits
        Arm("e_cifar10_50_of_1000", "cifar10", "cnn", 1000, cifar_rounds, cohort=50, batch_size=10, learning_rate=0.1,
            about=f"(e) pfl-research's CIFAR-10 benchmark shape: simple CNN, 50 of 1,000 users, {cifar_rounds} "
                  "rounds"),
        # issue 74's scale row: M = 10,000 clients (5 MNIST digits each), a cohort of 100; Flower's 10,000 supernodes
        # are not tried on 2 cores
        Arm("f_100_of_10000", "mnist", "mlp", 10000, 50, cohort=100,
            about="(f) a cohort of 100 of 10,000 clients, 50 rounds"),
        Arm("smoke", "mnist", "mlp", 2, 2, about="smoke: 2 clients, 2 rounds"),
        Arm("smoke_cohort", "mnist", "mlp", 4, 2, cohort=2, about="smoke: a cohort of 2 of 4 clients, 2 rounds"),
    ]
    return {arm.name: arm for arm in out}


MAIN_ARMS = ("a_10_clients_200_rounds", "b_100_clients_50_rounds", "c_10_of_100_200_rounds", "d_10_clients_4_rounds",
             "e_cifar10_50_of_1000")


@dataclasses.dataclass(frozen=True)
class Config:
    """A run of the benchmark: which arms, which frameworks, how many repetitions.

    Attributes:
      arms: names of :func:`arms`, the table's rows.
      frameworks: of :data:`FRAMEWORKS`, the table's columns.
      repetitions: R; repetition r uses seed ``seed + r`` (its shards, every framework's initialisation and draws)
        and runs the frameworks in an order rotated by r.
      seed: the first repetition's seed.
      cifar_rounds: arm (e)'s rounds, what its budget fits (the cpu preset states it).
      peers_python: the interpreter the Flower and pfl-research children run under ("": this one); their pins clash
        with the test environment's, so they usually live in a venv of their own (README.md).
      jaxcomm_cache: "fresh": every jaxcomm child starts from an empty backend-choice cache (``JAXCOMM_CACHE_DIR``),
        as a user's first run of the model, choosing included; "kept": one cache for the run (the first jaxcomm run
        of a model fills it, the later ones read it).
      timeout: seconds a child may run before it is killed and recorded as failed.
      probe_size: side of the square float32 matmul that measures the machine's rate (the step floor).
    """

    arms: tuple[str, ...] = MAIN_ARMS
    frameworks: tuple[str, ...] = FRAMEWORKS
    repetitions: int = 3
    seed: int = 0
    cifar_rounds: int = 20
    peers_python: str = ""
    jaxcomm_cache: str = "fresh"
    timeout: int = 3600
    probe_size: int = 2048

    def __post_init__(self):
        known = arms(self.cifar_rounds)
        unknown = [a for a in self.arms if a not in known]
        if unknown or not self.arms:
            raise ValueError(f"arms: unknown {unknown or 'none given'}; arms are: {', '.join(known)}")
        bad = [f for f in self.frameworks if f not in FRAMEWORKS]
        if bad or not self.frameworks or len(set(self.frameworks)) != len(self.frameworks):
            raise ValueError(f"frameworks: distinct names of {FRAMEWORKS}, got {self.frameworks}")
        if self.repetitions < 1 or self.cifar_rounds < 1 or self.timeout < 1 or self.probe_size < 16:
            raise ValueError("repetitions, cifar_rounds and timeout must be >= 1, probe_size >= 16")
        if self.jaxcomm_cache not in JAXCOMM_CACHES:
            raise ValueError(f"jaxcomm_cache: one of {JAXCOMM_CACHES}, got {self.jaxcomm_cache!r}")

    def selected(self) -> list[Arm]:
        """The arms this run measures, in order."""
        known = arms(self.cifar_rounds)
        return [known[name] for name in self.arms]


def smoke() -> Config:
    """2 clients, 2 rounds, one repetition: seconds per framework (Flower's start-up: tens of seconds)."""
    return Config(arms=("smoke",), repetitions=1, timeout=600, probe_size=512)


def cpu() -> Config:
    """Arms (a)-(e), 3 repetitions, on a 2-core CPU.

    Arm (e)'s budget: about 15 minutes for its slowest framework's run (Flower's) on a quiet 2-core machine, hence
    20 rounds (50 of 1,000 users, 5 steps of batch 10 each: 5,000 client-steps). Measured while writing it, 2 rounds
    on a 2-core machine at a load of 9-13 (a fraction of the cores): a warm round took 124 s in Flower, 54 s in
    pfl-research and 14 s in jaxcomm; a quiet machine takes several times less. Where Flower's run outlasts the
    budget, lower ``cifar_rounds`` (the table states the rounds that ran).
    """
    return Config()


PRESETS = {"smoke": smoke, "cpu": cpu}
