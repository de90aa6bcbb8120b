"""Thesis ch. 4: two agents learn a 32-bit language by maximising mutual information (MNIST), Table 4.1.

    JAXCOMM_DATA_DIR=/work/shared/data python experiments/language.py --preset cpu
    python experiments/language.py --preset smoke --out /tmp/lang    # seconds, shipped MNIST sample
    python experiments/language.py report results/language           # redraw plots and table

Agents A (teacher) and B (student) see the same MNIST digit through their own fixed noisy
mask (10 % of pixels inverted, drawn once per agent, Algorithm 4). Each has a message
generator (ReLU MLP, L heads of 2 logits, Gumbel-softmax samples, temperature 4.0 x0.9 every
100 steps, floor 0.5) and a critic; generator and critic both maximise the vanilla-GAN
separation of joint pairs (x_A, s_A) from shuffled pairs (x_A, s'_A) (max-max, §4.2.2.3). The
four communication levels add the likelihood terms of eqs. 4.2.6-4.2.8 with their gradient
paths (:func:`jaxcomm.language.level`). A linear probe on B's last hidden layer is trained
beside them on stopped features; its validation accuracy is tracked and its test accuracy
taken at the best validation step (§4.2.2.5, Table 4.1).

The engine is the library's (:func:`jaxcomm.language.train_agents`): all members of one
message length and number of steps are ONE population, one jitted step over every pair of
agents, per-member levels, masks and views as arrays. Seed s has the same initialisation,
masks, minibatches and Gumbel noise in every level (paired). This file holds the presets,
:func:`run` (which members, then rows from their results) and the command line; the report
(tables, plots, the generated reading) is :mod:`jaxcomm.harness.reports.language`.
Beyond the thesis: the random-init probe, the collapsing "summed cross-entropy" reading, and a
study over pixel-inversion noise (10/30/50 %), complementary half-image views and message
length (32/64/128), each reporting the paired gain of every level over the baseline.

References:
  Lacaille (2018), §4.2-4.3, Algorithm 4, eqs. 4.2.6-4.2.8, Fig. 4.2-4.3, Table 4.1.
"""

from __future__ import annotations

import dataclasses
import pathlib
import sys
from collections.abc import Sequence
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from jaxcomm import language, language_metrics, stats
from jaxcomm.checkpoint import Checkpoints
from jaxcomm.data import ImageDataset, load_mnist, load_mnist_sample
from jaxcomm.harness import cli as harness_cli
from jaxcomm.harness.reports import language as language_report
from jaxcomm.harness.reports.language import ABLATIONS, EXPERIMENT, LEVELS, THESIS_TABLE
from jaxcomm.models import to_unit_float
from jaxcomm.probe import ProbeConfig
from jaxcomm.validation import is_int, is_real, require

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


# --------------------------------------------------------------------------- config


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


def load_dataset(config: LanguageConfig) -> ImageDataset:
    """Real MNIST (50k/10k/10k) or the shipped real sample; never synthetic data."""
    if config.dataset == "mnist_sample":
        return load_mnist_sample()
    return load_mnist(config.data_dir or None)


# --------------------------------------------------------------------------- members


class Entry(NamedTuple):
    """A member of the experiment: what it reports to, its named setting, the library member it trains."""

    group: str  # "table", "ce_sum" / "ce_mean" (the other normalisation), "study", an ablation or "prereg"
    setting: str  # a key of settings(config)
    member: language.Member
    estimator: str = "gumbel"  # an estimator is the population's (static), so it splits populations


def all_members(config: LanguageConfig) -> list[Entry]:
    """The table (levels x seeds, plus the random-init probe), the other normalisation, the study, the
    ablations and the pre-registered replication."""
    named = settings(config)
    norm, other = config.ce_normalisation, "sum" if config.ce_normalisation == "mean" else "mean"

    def entry(group: str, name: str, lv: str, seed: int, normalisation: str, **fields) -> Entry:
        s = named[name]
        estimator = fields.pop("estimator", "gumbel")
        return Entry(group, name, language.Member(lv, seed, s.noise, s.view, normalisation=normalisation, **fields),
                     estimator)

    members = [entry("table", "noise10", lv, s, norm) for lv in config.levels for s in range(config.seeds)]
    members += [entry("table", "noise10", "baseline", s, norm, frozen=True) for s in range(config.random_init_seeds)]
    members += [entry(f"ce_{other}", "noise10", lv, s, other) for lv in config.levels
                for s in range(config.collapse_seeds)]
    members += [entry("study", name, lv, s, setting_normalisation(config, name))
                for name in config.study_settings for lv in config.levels
                for s in range(config.study_seeds)]
    ablations = {"fixed_temperature": {"temperature": config.fixed_temperature} if config.fixed_temperature else None,
                 "delayed_probe": {"probe_delay": config.probe_delay} if config.probe_delay else None,
                 "reinforce": {"estimator": "reinforce"} if config.reinforce else None}
    members += [entry(group, "noise10", lv, s, norm, **fields) for group, fields in ablations.items() if fields
                for lv in config.ablation_levels for s in range(config.seeds)]
    members += [entry("prereg", "halves_sum", lv, s, "sum") for lv in ("baseline", "both_feedback")
                for s in range(config.prereg_first_seed, config.prereg_first_seed + config.prereg_seeds)]
    seeds = range(config.confirm_first_seed, config.confirm_first_seed + config.confirm_seeds)
    for name in config.confirm_cells:
        cell = CONFIRM_CELLS[name]
        members += [entry(f"confirm/{name}", cell.setting, lv, s, cell.normalisation, temperature=cell.temperature)
                    for lv in CONFIRM_LEVELS for s in seeds]
    for view in sorted({named[CONFIRM_CELLS[c].setting].view for c in config.confirm_cells}):
        setting = next(k for k, v in named.items() if v == named["noise10"]._replace(view=view))
        members += [entry(f"confirm_untrained/{view}", setting, "baseline", s, norm, frozen=True) for s in seeds]
    return members


def member_steps(config: LanguageConfig, entry: Entry) -> int:
    if entry.group.startswith("confirm"):
        return config.confirm_steps
    if entry.group in ("table", *ABLATIONS):
        return config.num_steps
    return config.study_steps if entry.group in ("study", "prereg") else config.collapse_steps


def populations(config: LanguageConfig) -> dict[tuple[int, int, str], list[Entry]]:
    """Members grouped by (message length, steps, estimator): each group trains as ONE population (one jitted
    step); per-member levels, views, temperatures and probe delays are arrays inside it."""
    named = settings(config)
    out: dict[tuple[int, int, str], list[Entry]] = {}
    for e in all_members(config):
        out.setdefault((named[e.setting].length, member_steps(config, e), e.estimator), []).append(e)
    return out


# --------------------------------------------------------------------------- metrics


def paired(members: Sequence[dict], reference: Sequence[dict], key: str = "test_accuracy") -> tuple[float | None,
                                                                                                    list, int]:
    """Mean paired difference ``members - reference`` of ``key`` by seed, its 95 % interval and the pairs."""
    ref = {m["seed"]: m[key] for m in reference}
    diffs = [m[key] - ref[m["seed"]] for m in members if m["seed"] in ref]
    return (round(float(np.mean(diffs)), 3) if diffs else None), list(stats.paired_ci95(diffs)), len(diffs)


def _mean_sd(values: Sequence[float]) -> tuple[float, float]:
    values = np.asarray(values, float)
    return round(float(values.mean()), 3), round(float(values.std(ddof=1)) if len(values) > 1 else 0.0, 3)


def row_metrics(members: Sequence[dict], baseline: Sequence[dict] | None) -> dict:
    """The issue's row metrics over seeds; paired with ``baseline`` by seed when given."""
    test = np.asarray([m["test_accuracy"] for m in members])
    out = {"test_accuracy": round(float(test.mean()), 3),
           "test_accuracy_std": round(float(test.std(ddof=1)) if len(test) > 1 else 0.0, 3),
           "seeds": len(members), "best_step": float(np.median([m["best_step"] for m in members])),
           "best_val_accuracy": round(float(np.mean([m["best_val"] for m in members])), 3),
           "collapsed_seeds": int(sum(m["collapsed"] for m in members))}
    if "collapsed_steps" in members[0]:  # the whole-run rule (language.collapse_over_run)
        out["collapsed_runs"] = int(sum(bool(m["collapsed_steps"]) for m in members))
        out["collapsed_evaluations"] = int(sum(len(m["collapsed_steps"]) for m in members))
    if "refit_test_accuracy" in members[0]:
        out["refit_test_accuracy"], out["refit_test_accuracy_std"] = _mean_sd([m["refit_test_accuracy"]
                                                                               for m in members])
        out["refit_converged"] = int(sum(m["refit_converged"] for m in members))
        out["refit_best_epoch"] = float(np.median([m["refit_best_epoch"] for m in members]))
    if "language" in members[0]:  # language metrics of each agent's final hard messages on test images
        for agent in ("a", "b"):
            for key in members[0]["language"][agent]:
                values = [m["language"][agent][key] for m in members]
                out[f"lang_{agent}_{key}"] = round(float(np.nanmean(values)), 4) if np.isfinite(values).any() \
                    else None
    for key in ("disc_a", "disc_b", "agreement", "mi_bits_a", "mi_bits_b", "distinct_a", "distinct_b"):
        if members[0].get(key):
            out[f"final_{key}"] = round(float(np.mean([m[key][-1] for m in members])), 4)
            out[f"peak_{key}"] = round(float(np.mean([max(m[key]) for m in members])), 4)
    if baseline is not None:
        out["paired_diff_vs_baseline"], out["paired_diff_ci95"], out["paired_seeds"] = paired(members, baseline)
        if "refit_test_accuracy" in members[0] and "refit_test_accuracy" in baseline[0]:
            out["refit_paired_diff_vs_baseline"], out["refit_paired_diff_ci95"], _ = paired(
                members, baseline, "refit_test_accuracy")
    return out


# --------------------------------------------------------------------------- run


def message_examples(config: LanguageConfig, pop: dict, dataset: ImageDataset, index: int) -> dict:
    """Teacher messages of a trained member for a few test digits at high and low temperature (Fig. 4.2).

    Same logits and the same Gumbel noise at every temperature, as in the thesis' figure.
    """
    params = jax.tree_util.tree_map(lambda leaf: leaf[index], pop["final_params"]["gen_a"])
    member = pop["members"][index]
    gen = language.MessageGenerator(hidden=config.hidden, length=member["length"])
    picks = [int(np.flatnonzero(dataset.test.labels == d)[0]) for d in (0, 1, 7, 9)]
    images = jnp.asarray(dataset.test.images[picks])
    arrays = pop["arrays"]
    x = language.apply_view(to_unit_float(images).reshape(len(picks), -1), arrays.invert_a[index],
                            arrays.keep_a[index])
    logits, _ = gen.apply({"params": params}, x)
    noise = language.gumbel_noise(jax.random.PRNGKey(config.seed), logits.shape)
    temps = (4.0, 0.5, 0.25)
    side = dataset.test.images.shape[1]
    return {"digits": [int(dataset.test.labels[i]) for i in picks], "temperatures": list(temps),
            "views": np.asarray(x.reshape(len(picks), side, -1)).round(3).tolist(),
            "samples": [np.asarray(jnp.exp(language.log_relaxed(logits, noise, t))[..., 1]).round(3).tolist()
                        for t in temps],
            "hard": np.asarray(jnp.argmax(logits, -1)).tolist(),
            "member": {k: member[k] for k in ("group", "setting", "level", "seed")}}


def _rows_of(ms: Sequence[dict], levels: Sequence[str], extra: dict) -> dict[str, dict]:
    base = [m for m in ms if m["level"] == "baseline"]
    return {lv: {**row_metrics([m for m in ms if m["level"] == lv], base), **extra} for lv in levels}


def confirm_rows(config: LanguageConfig, done: Sequence[dict], steps_of: dict[str, int]) -> dict[str, dict]:
    """Rows of the pre-registered confirmation: ``confirm/<cell>/<level>`` (paired with the cell's baseline, and
    with the untrained agents of its view under both probes) and ``confirm/untrained/<view>``."""
    named, rows = settings(config), {}
    untrained = {view: [m for m in done if m["group"] == f"confirm_untrained/{view}"] for view in ("full", "halves")}
    for view, ms in untrained.items():
        if ms:
            rows[f"confirm/untrained/{view}"] = {**row_metrics(ms, None), "view": view,
                                                 "steps": steps_of[ms[0]["population"]]}
    for name in config.confirm_cells:
        cell, ms = CONFIRM_CELLS[name], [m for m in done if m["group"] == f"confirm/{name}"]
        extra = {"cell": name, **cell._asdict(), **named[cell.setting]._asdict(),
                 "steps": steps_of[ms[0]["population"]], "seed_list": sorted({m["seed"] for m in ms})}
        for lv, row in _rows_of(ms, CONFIRM_LEVELS, extra).items():
            mine, frozen = [m for m in ms if m["level"] == lv], untrained[named[cell.setting].view]
            row["paired_diff_vs_untrained"], row["paired_diff_vs_untrained_ci95"], _ = paired(mine, frozen)
            if "refit_test_accuracy" in mine[0]:
                row["refit_paired_diff_vs_untrained"], row["refit_paired_diff_vs_untrained_ci95"], _ = paired(
                    mine, frozen, "refit_test_accuracy")
            rows[f"confirm/{name}/{lv}"] = row
    return rows


def run(config: LanguageConfig, *, checkpoints: Checkpoints | None = None, progress: bool = True) -> dict:
    """Trains every population (table, other CE normalisation, study) and computes the rows.

    Returns:
      ``{"rows", "curves", "populations", "message_examples", "protocol"}`` for
      :func:`jaxcomm.harness.cli.main`.
    """
    dataset = load_dataset(config)
    named = settings(config)
    metric_images = dataset.test.images[:config.metric_images]
    meanings = np.asarray(to_unit_float(jnp.asarray(metric_images))).reshape(len(metric_images), -1)
    pops: dict[str, dict] = {}
    for (length, steps, estimator), entries in populations(config).items():
        name = f"L{length}_steps{steps}" + ("" if estimator == "gumbel" else f"_{estimator}")
        groups = sorted({e.group for e in entries})
        refit = (ProbeConfig(config.refit_epochs, 256, config.refit_learning_rate)
                 if config.refit_epochs and ({"table", *ABLATIONS} & set(groups)
                                             or any(g.startswith("confirm") for g in groups)) else None)
        pop = language.train_agents(config.replace(estimator=estimator), [e.member for e in entries], dataset,
                                    length=length, num_steps=steps, progress=progress,
                                    desc=f"{name} ({', '.join(groups)}, {len(entries)} members)",
                                    checkpointer=checkpoints.run(name) if checkpoints else None, refit=refit)
        pop["members"] = [{"group": e.group, "setting": e.setting, "estimator": e.estimator, **m}
                          for e, m in zip(entries, pop["members"], strict=True)]
        if config.metric_images:
            symbols = pop["functions"].symbols(pop["final_params"], jnp.asarray(metric_images), pop["arrays"])
            for i, m in enumerate(pop["members"]):
                if m["group"] != "study":  # the study's cells read accuracy only (CPU budget)
                    m["language"] = {agent: language_metrics.language_report(
                        np.asarray(symbols[agent][i]), meanings, dataset.test.labels[:config.metric_images])
                        for agent in ("a", "b")}
        pops[name] = pop
    done = [{**m, "population": name} for name, pop in pops.items() for m in pop["members"]]
    steps_of = {name: pop["steps_done"] for name, pop in pops.items()}

    rows: dict[str, dict] = confirm_rows(config, done, steps_of)
    table = [m for m in done if m["group"] == "table" and not m["frozen"]]
    if table:
        extra = {"setting": "noise10", "normalisation": config.ce_normalisation,
                 "steps": steps_of[table[0]["population"]]}
        for lv, row in _rows_of(table, config.levels, extra).items():
            rows[lv] = {**row, "thesis_test_accuracy": THESIS_TABLE[lv]}
    frozen = [m for m in done if m["group"] == "table" and m["frozen"]]
    if frozen:
        rows["random_init_probe"] = {**row_metrics(frozen, None), "steps": steps_of[frozen[0]["population"]]}
        if "refit_test_accuracy" in frozen[0]:  # trained minus untrained agents of the same seed, both refit
            for lv in config.levels:
                rows[lv]["refit_paired_diff_vs_random_init"], rows[lv]["refit_paired_diff_vs_random_init_ci95"], _ = \
                    paired([m for m in table if m["level"] == lv], frozen, "refit_test_accuracy")
    for group in ABLATIONS:
        ms = [m for m in done if m["group"] == group]
        if not ms:
            continue
        extra = {"setting": "noise10", "normalisation": config.ce_normalisation, "steps": steps_of[ms[0]["population"]],
                 "estimator": ms[0]["estimator"], "temperature": ms[0]["temperature"],
                 "probe_delay": ms[0]["probe_delay"]}
        for lv, row in _rows_of(ms, config.ablation_levels, extra).items():
            mine, theirs = [m for m in ms if m["level"] == lv], [m for m in table if m["level"] == lv]
            diff, ci, n = paired(mine, theirs)
            rows[f"{group}/{lv}"] = {**row, "paired_diff_vs_table": diff, "paired_diff_vs_table_ci95": ci,
                                     "paired_seeds_vs_table": n}
            if "refit_test_accuracy" in mine[0] and "refit_test_accuracy" in theirs[0]:
                rows[f"{group}/{lv}"]["refit_paired_diff_vs_table"], rows[f"{group}/{lv}"][
                    "refit_paired_diff_vs_table_ci95"], _ = paired(mine, theirs, "refit_test_accuracy")
    prereg = [m for m in done if m["group"] == "prereg"]
    if prereg:
        extra = {"setting": "halves_sum", **named["halves_sum"]._asdict(), "normalisation": "sum",
                 "steps": steps_of[prereg[0]["population"]], "seed_list": sorted({m["seed"] for m in prereg})}
        rows.update({f"prereg/{lv}": row for lv, row in _rows_of(prereg, ("baseline", "both_feedback"),
                                                                  extra).items()})
    for group in sorted({m["group"] for m in done if m["group"].startswith("ce_")}):
        ms = [m for m in done if m["group"] == group]
        extra = {"setting": "noise10", "normalisation": ms[0]["normalisation"],
                 "steps": steps_of[ms[0]["population"]]}
        rows.update({f"{group}/{lv}": row for lv, row in _rows_of(ms, config.levels, extra).items()})
    for setting in config.study_settings:
        ms = [m for m in done if m["group"] == "study" and m["setting"] == setting]
        extra = {"setting": setting, **named[setting]._asdict(), "normalisation": ms[0]["normalisation"],
                 "steps": steps_of[ms[0]["population"]]}
        rows.update({f"study/{setting}/{lv}": row for lv, row in _rows_of(ms, config.levels, extra).items()})

    lv_pick = "both_feedback" if "both_feedback" in config.levels else "baseline"
    examples = None
    for pop in pops.values():  # the Fig. 4.2 member: seed 0 of both-feedback in the table
        hits = [i for i, m in enumerate(pop["members"]) if m["group"] == "table" and m["level"] == lv_pick
                and m["seed"] == 0 and not m["frozen"]]
        if hits:
            examples = message_examples(config, pop, dataset, hits[0])
    return {"rows": rows, "curves": done, "message_examples": examples,
            "populations": {name: {"members": len(p["members"]), "groups": sorted({m["group"] for m in p["members"]}),
                                   "steps_done": p["steps_done"], "interrupted": p["interrupted"],
                                   "seconds": round(p["seconds"], 1)} for name, p in pops.items()},
            "protocol": {"dataset_sizes": [len(dataset.train.labels), len(dataset.validation.labels),
                                           len(dataset.test.labels)],
                         "settings": {k: v._asdict() for k, v in named.items()},
                         "collapse_rule": "final |disc accuracy - 0.5| <= 0.05 and A/B agreement >= 0.95",
                         "collapse_over_run_rule": "an evaluation with A/B agreement >= 0.8 and either critic "
                                                   "within 0.05 of chance or either agent's distinct-message "
                                                   "fraction <= 0.25 (language.collapse_over_run)",
                         "language_metrics": f"final hard messages of each agent on the first {config.metric_images} "
                                             "test images (jaxcomm.language_metrics.language_report); "
                                             "not measured for the study's members",
                         "mi_estimate": f"InfoNCE lower bound of the trained critic on {config.diag_batch} "
                                        f"validation images, hard messages; capped at "
                                        f"log2({config.diag_batch}) = {np.log2(config.diag_batch):.2f} bits"}}


def write_report(out_dir: pathlib.Path, *, plots: bool = True) -> None:
    """Writes table.md, then (with ``plots``) fig4_3.png and messages.png, from the run in ``out_dir``
    (:func:`jaxcomm.harness.reports.language.write_report`)."""
    language_report.write_report(out_dir, plots=plots)


def cli(argv: Sequence[str] | None = None) -> int:
    """``report DIR`` redraws plots and table from a run's files; anything else runs the experiment."""
    return harness_cli.cli(argv, experiment=EXPERIMENT, presets=PRESETS, run=run,
                          description=__doc__.split("\n\n")[0], write_report=write_report)


if __name__ == "__main__":
    sys.exit(cli())
