"""The chapter-2 unsupervised experiment's config and presets: :class:`UnsupervisedExchangeConfig` (the library's
:class:`jaxcomm.unsupervised.UnsupervisedConfig` plus data, stages, measurements and rows), :data:`PRESETS`
(``smoke``, ``cpu``, ``thesis``) and the cpu preset's scale-downs.
"""

from __future__ import annotations

import dataclasses

from jaxcomm import unsupervised
from jaxcomm.validation import integer, one_of, require

from .report import ROWS

EXPERIMENT = "unsupervised_exchange"
DATASETS = ("cifar10", "mnist", "mnist_sample")


# --------------------------------------------------------------------------- config


@dataclasses.dataclass(frozen=True)
class UnsupervisedExchangeConfig(unsupervised.UnsupervisedConfig):
    """The six rows of Table 2.3: the library's :class:`jaxcomm.unsupervised.UnsupervisedConfig` (models,
    programs, probes, network) plus the experiment's data, stages, measurements and rows.

    Attributes (beside the library's):
      dataset: "cifar10" (the chapter's data) or an MNIST variant (smoke tests).
      data_dir: where the dataset lives ("" = ``JAXCOMM_DATA_DIR`` or tfds).
      validation_size: the last training images held out as the probes' validation split (CIFAR-10
        and MNIST; the shipped MNIST sample has its own 1,000).
      probe_every: steps between probe stages (a multiple of ``eval_every`` dividing ``num_steps``).
      probe_untrained: also probe the untrained encoders (step 0), once per family and number of
        nodes: the control of every accuracy (random convolutional features are far above chance).
      objective_batch: validation images of the fixed batch the local objective is measured on.
      num_pictures: test images reconstructed, and samples drawn, by node 0 of every row at the end.
      rows: which rows of :data:`ROWS` to run.
      num_seeds: every row runs with seeds ``seed, seed + 1, ...`` as one sweep
        (:func:`jaxcomm.network_sweep.train_networks`); the table gives the mean and standard deviation.
    """

    dataset: str = "cifar10"
    data_dir: str = ""
    validation_size: int = 5000
    probe_every: int = 400
    probe_untrained: bool = True
    objective_batch: int = 256
    num_pictures: int = 8
    rows: tuple[str, ...] = tuple(ROWS)
    num_seeds: int = 3

    def __post_init__(self):
        super().__post_init__()
        integer("num_seeds", self.num_seeds, low=1)
        one_of("dataset", self.dataset, DATASETS)
        require(isinstance(self.data_dir, str), "data_dir", "a string", self.data_dir)
        integer("validation_size", self.validation_size, low=1)
        for name in ("probe_every", "objective_batch", "num_pictures"):
            integer(name, getattr(self, name), low=1)
        require(isinstance(self.probe_untrained, bool), "probe_untrained", "True or False", self.probe_untrained)
        require(self.probe_every % self.eval_every == 0, "probe_every",
                f"a multiple of eval_every = {self.eval_every}", self.probe_every)
        require(self.num_steps % self.probe_every == 0, "num_steps",
                f"a multiple of probe_every = {self.probe_every} (the last stage is the last step)", self.num_steps)
        require(isinstance(self.rows, tuple) and len(self.rows) >= 1 and all(r in ROWS for r in self.rows)
                and len(set(self.rows)) == len(self.rows), "rows",
                f"a non-empty tuple of distinct rows of {tuple(ROWS)}", self.rows)

    @property
    def probe_steps(self) -> tuple[int, ...]:
        return tuple(range(self.probe_every, self.num_steps + 1, self.probe_every))


def cpu_config() -> UnsupervisedExchangeConfig:
    """The eight rows (Table 2.3's six and the two ``add`` rows) x 3 seeds: about 45 minutes per seed alone on
    2 CPU cores, 2 h 10 min in all (estimated from a one-seed run of the six rows; see :data:`CPU_SCALE_DOWNS`)."""
    return UnsupervisedExchangeConfig()


CPU_SCALE_DOWNS = (
    "encoders 16-32-64 channels (a quarter of the thesis-sized 64-128-256 of the supervised rows), latent 64, "
    "BiGAN discriminator 256 wide: the thesis gives no sizes for its unsupervised models",
    "1,200 steps per node and row (the thesis gives no horizon for Table 2.3), probes at 3 stages (400, 800, "
    "1,200 steps) and of the untrained encoders (step 0, the control); measured before the run on 2 cores, "
    "another job on one of them: per step 16 ms (VAE, 1 node), 37 ms (BiGAN, 1 node), 145 ms (VAE, 10 nodes; "
    "130 ms alone), 530 ms (BiGAN, 10 nodes); per probe stage of 10 nodes 43 s of feature extraction (60k images "
    "x 10 encoders) + 10 s of probes (37 s in all alone), of 1 node 5 s; estimated 35 minutes alone",
    "linear probes: Adam 1e-2 on minibatches of 512, 40 epochs, the best validation epoch kept",
    "3 seeds per row, each row one sweep (mean ± sd in the table); the untrained encoders are probed for every "
    "seed, the control each row is paired with",
)


def thesis_config() -> UnsupervisedExchangeConfig:
    """The thesis-sized models for an accelerator: 64-128-256 encoders, latent 128, 20,000 steps, 5 stages.

    The thesis gives neither sizes nor horizon for Table 2.3; these follow its supervised models
    (64-128-256, §2.3.2) and train each node 10x longer than the cpu preset.
    """
    return UnsupervisedExchangeConfig(widths=(64, 128, 256), latent=128, disc_hidden=512, num_steps=20000,
                                      eval_every=500, probe_every=4000, probe_epochs=100)


def smoke_config() -> UnsupervisedExchangeConfig:
    """Seconds: tiny nodes on the shipped MNIST sample, every row, two stages of a few steps."""
    return UnsupervisedExchangeConfig(dataset="mnist_sample", widths=(4,), latent=4, disc_hidden=8,
                                      num_steps=4, eval_every=2, probe_every=2, probe_epochs=2,
                                      objective_batch=16, num_pictures=4, backend="vmap", num_seeds=2)


PRESETS = {"smoke": smoke_config, "cpu": cpu_config, "thesis": thesis_config}
