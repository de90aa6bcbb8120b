"""The chapter-4 experiment's config and presets: :class:`LanguageConfig` (the library's
:class:`jaxcomm.language.AgentsConfig` plus data, seeds, steps and the study), the study's named settings, the
pre-registered confirmation's cells, and :data:`PRESETS` (``smoke``, ``cpu``, ``horizon``, ``thesis``, ``confirm``).
"""

from __future__ import annotations

import dataclasses
from typing import NamedTuple

from jaxcomm import language
from jaxcomm.validation import is_int, is_real, require

from .report import LEVELS

DATASETS = ("mnist", "mnist_sample")


class Setting(NamedTuple):
    """How partial the views are and how long the messages: one cell of the study."""

    noise: float  # fraction of pixels each agent's fixed mask inverts
    view: str  # "full" or "halves" (A sees the top half, B the bottom half)
    length: int  # message length L


def settings(config: LanguageConfig) -> dict[str, Setting]:
    """Named settings: the table's ``noise10`` and the study's variations of it."""
    base = Setting(config.noise, "full", config.message_length)
    return {"noise10": base, "noise30": base._replace(noise=0.3), "noise50": base._replace(noise=0.5),
            "halves": base._replace(view="halves"), "halves_sum": base._replace(view="halves"),
            "len64": base._replace(length=64),
            "len128": base._replace(length=128)}


STUDY_SETTINGS = ("noise30", "noise50", "halves", "halves_sum", "len64", "len128")


class ConfirmCell(NamedTuple):
    """A cell of the pre-registered confirmation (``results/language/confirm_10000/preregistration.md``)."""

    setting: str  # a key of settings(config)
    normalisation: str  # cross-entropy over the heads: "mean" or "sum"
    temperature: float  # > 0: a fixed Gumbel-softmax temperature; 0: the annealed schedule


CONFIRM_CELLS = {"fixed_temperature": ConfirmCell("noise10", "mean", 1.0),
                 "full_sum": ConfirmCell("noise10", "sum", 0.0),
                 "halves_sum": ConfirmCell("halves_sum", "sum", 0.0)}
"""The three cells where communication helped before (issue 58 item 3): a fixed temperature of 1, and the summed
cross-entropy with the full view and with complementary halves. Each trains baseline and both feedback."""
CONFIRM_LEVELS = ("baseline", "both_feedback")


def setting_normalisation(config: LanguageConfig, name: str) -> str:
    """Study settings named ``*_sum`` use the summed cross-entropy (weights x L); the others the adopted one."""
    return "sum" if name.endswith("_sum") else config.ce_normalisation


@dataclasses.dataclass(frozen=True)
class LanguageConfig(language.AgentsConfig):
    """The chapter-4 experiment: the agents' config (inherited) plus data, seeds, steps and study.

    The fields of :class:`jaxcomm.language.AgentsConfig` (widths, learning rates, critic,
    estimator, temperature schedule, level weights, ``eval_every``, ``diag_batch``, backend,
    base seed) are inherited, not restated; overrides stay flat ``field=value``.

    Attributes:
      dataset: "mnist" (50k/10k/10k, §4.2.1.2) or "mnist_sample" (the shipped real sample, smoke runs).
      data_dir: folder holding MNIST; "" reads ``$JAXCOMM_DATA_DIR``.
      message_length: L of the table (thesis: 32).
      ce_normalisation: "mean" (adopted: cross-entropy averaged over the L heads) or "sum".
      noise: fraction of pixels inverted by each agent's fixed mask in the table (thesis: 0.1).
      levels: communication levels of the table; "baseline" is required.
      seeds: paired seeds per level.
      num_steps: training steps of the table population.
      random_init_seeds: seeds of the probe on untrained agents (0: skip).
      collapse_seeds: seeds of the other cross-entropy normalisation, shown beside (0: skip).
      collapse_steps: steps of that run.
      study_settings: names from :data:`STUDY_SETTINGS` (empty: no study).
      study_seeds: paired seeds per level in each study setting.
      study_steps: steps of the study populations.
      ablation_levels: levels of the thesis' ablations (fixed temperature, delayed probe, REINFORCE),
        each on the table's ``seeds`` (paired with the table's members of the same seed).
      fixed_temperature: the Gumbel-softmax temperature of the fixed-temperature ablation (0: skip).
      probe_delay: the delayed-probe ablation's first probe step (0: skip); the agents are the table's.
      reinforce: run the REINFORCE ablation (score-function gradients through hard samples).
      refit_epochs: epochs of the probe refit to convergence on the final agents of the table and the
        ablations, and on the untrained ones (0: skip; :func:`jaxcomm.language.refit_probes`). 200 epochs of
        Adam 1e-2: on seed 0 (baseline, both feedback, untrained) 30 epochs of Adam 1e-3 and 60 of 5e-3 were
        still improving on validation at their last epoch for the trained agents; 200 of 1e-2 had flattened.
      refit_learning_rate: the refit probe's Adam step (features standardised, batch 256).
      prereg_seeds: seeds of the pre-registered ``halves_sum`` replication (0: skip), numbered from
        ``prereg_first_seed`` (``results/language/preregistration.md``).
      prereg_first_seed: its first seed (new seeds: the study used ``range(study_seeds)``).
      metric_images: test images on which the language metrics are measured (0: skip).
      confirm_cells: names from :data:`CONFIRM_CELLS` of the pre-registered confirmation (empty: skip); each
        trains baseline and both feedback on ``confirm_seeds`` seeds from ``confirm_first_seed``, beside the
        untrained agents of each view the cells use (their probes: trained minus untrained).
      confirm_seeds, confirm_first_seed, confirm_steps: its seeds and steps.
    """

    dataset: str = "mnist"
    data_dir: str = ""
    message_length: int = 32
    ce_normalisation: str = "mean"
    noise: float = 0.1
    levels: tuple[str, ...] = LEVELS
    seeds: int = 10
    num_steps: int = 2000
    random_init_seeds: int = 5
    collapse_seeds: int = 3
    collapse_steps: int = 1000
    study_settings: tuple[str, ...] = STUDY_SETTINGS
    study_seeds: int = 6
    study_steps: int = 1000
    ablation_levels: tuple[str, ...] = ("baseline", "both_feedback")
    fixed_temperature: float = 1.0
    probe_delay: int = 1000
    reinforce: bool = True
    refit_epochs: int = 200
    refit_learning_rate: float = 0.01
    prereg_seeds: int = 10
    prereg_first_seed: int = 10
    metric_images: int = 1000
    confirm_cells: tuple[str, ...] = ()
    confirm_seeds: int = 10
    confirm_first_seed: int = 10
    confirm_steps: int = 10_000

    def __post_init__(self):
        super().__post_init__()
        require(self.dataset in DATASETS, "dataset", f"one of {DATASETS}", self.dataset)
        require(isinstance(self.data_dir, str), "data_dir", "a string", self.data_dir)
        for name in ("message_length", "num_steps", "collapse_steps", "study_seeds", "study_steps", "confirm_seeds",
                     "confirm_steps"):
            value = getattr(self, name)
            require(is_int(value) and value >= 1, name, "an integer >= 1", value)
        for name in ("seeds", "confirm_first_seed", "random_init_seeds", "collapse_seeds", "probe_delay",
                     "refit_epochs", "prereg_seeds", "prereg_first_seed", "metric_images"):
            value = getattr(self, name)
            require(is_int(value) and value >= 0, name, "an integer >= 0", value)
        require(is_real(self.noise) and 0.0 <= self.noise <= 1.0, "noise", "a fraction in [0, 1]", self.noise)
        require(is_real(self.refit_learning_rate) and self.refit_learning_rate > 0, "refit_learning_rate",
                "a number > 0", self.refit_learning_rate)
        require(is_real(self.fixed_temperature) and self.fixed_temperature >= 0, "fixed_temperature",
                "a number >= 0 (0: skip)", self.fixed_temperature)
        require(isinstance(self.reinforce, bool), "reinforce", "True or False", self.reinforce)
        require(isinstance(self.ablation_levels, tuple) and all(lv in self.levels for lv in self.ablation_levels)
                and len(set(self.ablation_levels)) == len(self.ablation_levels), "ablation_levels",
                f"distinct names from levels {self.levels}", self.ablation_levels)
        require(self.probe_delay < self.num_steps, "probe_delay", f"an integer below num_steps ({self.num_steps})",
                self.probe_delay)
        require(self.ce_normalisation in language.NORMALISATIONS, "ce_normalisation",
                f"one of {language.NORMALISATIONS}", self.ce_normalisation)
        require(isinstance(self.levels, tuple) and all(lv in LEVELS for lv in self.levels)
                and "baseline" in self.levels and len(set(self.levels)) == len(self.levels), "levels",
                f"distinct names from {LEVELS} including 'baseline'", self.levels)
        require(isinstance(self.study_settings, tuple) and all(s in STUDY_SETTINGS for s in self.study_settings)
                and len(set(self.study_settings)) == len(self.study_settings), "study_settings",
                f"distinct names from {STUDY_SETTINGS}", self.study_settings)
        require(isinstance(self.confirm_cells, tuple) and all(c in CONFIRM_CELLS for c in self.confirm_cells)
                and len(set(self.confirm_cells)) == len(self.confirm_cells), "confirm_cells",
                f"distinct names from {tuple(CONFIRM_CELLS)}", self.confirm_cells)
        require(self.seeds >= 1 or self.confirm_cells, "seeds", "an integer >= 1 (0 only with confirm_cells)",
                self.seeds)


def cpu_config() -> LanguageConfig:
    """The thesis protocol scaled to a 2-core CPU (table.md states the wall time)."""
    return LanguageConfig(seeds=10, num_steps=2000, eval_every=100, random_init_seeds=10, collapse_seeds=10,
                          collapse_steps=1000, study_seeds=8, study_steps=1000, probe_delay=1000)


def thesis_config() -> LanguageConfig:
    """The thesis' settings for an accelerator: more steps (the schedule reaches its floor at ~2,000)."""
    return LanguageConfig(seeds=10, num_steps=10_000, eval_every=100, random_init_seeds=10, collapse_seeds=10,
                          collapse_steps=2000, study_seeds=10, study_steps=5000, probe_delay=2000)


def horizon_config() -> LanguageConfig:
    """The thesis' horizon on a 2-core CPU (issue 39): the table's four levels x 10 paired seeds at 10,000 steps,
    the untrained-agent probe, online and refit probes and the fixed-temperature ablation; nothing else (the
    study, the other normalisation and the other ablations keep their ``cpu`` horizon). One population of 70
    members, about 1.5 CPU hours; resumable (``--resume``)."""
    return LanguageConfig(seeds=10, num_steps=10_000, eval_every=100, random_init_seeds=10, collapse_seeds=0,
                          study_settings=(), probe_delay=0, reinforce=False, prereg_seeds=0)


def smoke_config() -> LanguageConfig:
    """Seconds: tiny agents on the shipped real MNIST sample, a few chunks of steps."""
    return LanguageConfig(dataset="mnist_sample", hidden=(16, 8), critic_hidden=16, message_length=8,
                          batch_size=16, seeds=2, num_steps=20, eval_every=10, diag_batch=16, random_init_seeds=1,
                          collapse_seeds=1, collapse_steps=20, study_settings=("halves", "len64"), study_seeds=2,
                          study_steps=20, probe_delay=10, refit_epochs=2, prereg_seeds=2, prereg_first_seed=2,
                          metric_images=40)


def confirm_config() -> LanguageConfig:
    """The pre-registered confirmation at the thesis' horizon (issue 58 item 3,
    ``results/language/confirm_10000/preregistration.md``): baseline and both feedback in the three
    :data:`CONFIRM_CELLS` on new seeds 10-19, 10,000 steps, online and refit probes, and the untrained agents of
    each view; nothing else. One population of 80 members, about 1.7 CPU hours alone; resumable (``--resume``)."""
    return LanguageConfig(seeds=0, eval_every=100, random_init_seeds=0, collapse_seeds=0, study_settings=(),
                          fixed_temperature=0.0, probe_delay=0, reinforce=False, prereg_seeds=0,
                          confirm_cells=tuple(CONFIRM_CELLS), confirm_seeds=10, confirm_first_seed=10,
                          confirm_steps=10_000)


PRESETS = {"smoke": smoke_config, "cpu": cpu_config, "horizon": horizon_config, "thesis": thesis_config,
           "confirm": confirm_config}
