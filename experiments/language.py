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
:func:`run` (which members, then rows from their results) and the report (tables, plots).
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

from jaxcomm import language, stats
from jaxcomm.checkpoint import Checkpoints
from jaxcomm.data import ImageDataset, load_mnist, load_mnist_sample
from jaxcomm.harness import cli as harness_cli
from jaxcomm.harness import report, results
from jaxcomm.models import to_unit_float
from jaxcomm.validation import is_int, is_real, require

EXPERIMENT = "language"
DATASETS = ("mnist", "mnist_sample")
LEVELS = language.LEVEL_NAMES
THESIS_TABLE = {"baseline": 64.4, "student_receiving_only": 65.7, "student_feedback_to_teacher": 69.4,
                "both_feedback": 71.4}
LABELS = {"baseline": "baseline (no communication)", "student_receiving_only": "student receiving only (4.2.6)",
          "student_feedback_to_teacher": "student feedback to teacher (4.2.7)",
          "both_feedback": "both feedback (4.2.8)"}


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

    def __post_init__(self):
        super().__post_init__()
        require(self.dataset in DATASETS, "dataset", f"one of {DATASETS}", self.dataset)
        require(isinstance(self.data_dir, str), "data_dir", "a string", self.data_dir)
        for name in ("message_length", "seeds", "num_steps", "collapse_steps", "study_seeds", "study_steps"):
            value = getattr(self, name)
            require(is_int(value) and value >= 1, name, "an integer >= 1", value)
        for name in ("random_init_seeds", "collapse_seeds"):
            value = getattr(self, name)
            require(is_int(value) and value >= 0, name, "an integer >= 0", value)
        require(is_real(self.noise) and 0.0 <= self.noise <= 1.0, "noise", "a fraction in [0, 1]", self.noise)
        require(self.ce_normalisation in language.NORMALISATIONS, "ce_normalisation",
                f"one of {language.NORMALISATIONS}", self.ce_normalisation)
        require(isinstance(self.levels, tuple) and all(lv in LEVELS for lv in self.levels)
                and "baseline" in self.levels and len(set(self.levels)) == len(self.levels), "levels",
                f"distinct names from {LEVELS} including 'baseline'", self.levels)
        require(isinstance(self.study_settings, tuple) and all(s in STUDY_SETTINGS for s in self.study_settings)
                and len(set(self.study_settings)) == len(self.study_settings), "study_settings",
                f"distinct names from {STUDY_SETTINGS}", self.study_settings)


def cpu_config() -> LanguageConfig:
    """The thesis protocol scaled to a 2-core CPU (table.md states the wall time)."""
    return LanguageConfig(seeds=10, num_steps=2000, eval_every=100, random_init_seeds=5, collapse_seeds=10,
                          collapse_steps=1000, study_seeds=8, study_steps=1000)


def thesis_config() -> LanguageConfig:
    """The thesis' settings for an accelerator: more steps (the schedule reaches its floor at ~2,000)."""
    return LanguageConfig(seeds=10, num_steps=10_000, eval_every=100, random_init_seeds=10, collapse_seeds=10,
                          collapse_steps=2000, study_seeds=10, study_steps=5000)


def smoke_config() -> LanguageConfig:
    """Seconds: tiny agents on the shipped real MNIST sample, a few chunks of steps."""
    return LanguageConfig(dataset="mnist_sample", hidden=(16, 8), critic_hidden=16, message_length=8,
                          batch_size=16, seeds=2, num_steps=20, eval_every=10, diag_batch=16, random_init_seeds=1,
                          collapse_seeds=1, collapse_steps=20, study_settings=("halves", "len64"), study_seeds=2,
                          study_steps=20)


PRESETS = {"smoke": smoke_config, "cpu": cpu_config, "thesis": thesis_config}


def load_dataset(config: LanguageConfig) -> ImageDataset:
    """Real MNIST (50k/10k/10k) or the shipped real sample; never synthetic data."""
    if config.dataset == "mnist_sample":
        return load_mnist_sample()
    return load_mnist(config.data_dir or None)


# --------------------------------------------------------------------------- members


class Entry(NamedTuple):
    """A member of the experiment: what it reports to, its named setting, the library member it trains."""

    group: str  # "table", "ce_sum" / "ce_mean" (the other normalisation) or "study"
    setting: str  # a key of settings(config)
    member: language.Member


def all_members(config: LanguageConfig) -> list[Entry]:
    """The table (levels x seeds, plus the random-init probe), the other normalisation and the study."""
    named = settings(config)
    norm, other = config.ce_normalisation, "sum" if config.ce_normalisation == "mean" else "mean"

    def entry(group: str, name: str, lv: str, seed: int, frozen: bool, normalisation: str) -> Entry:
        s = named[name]
        return Entry(group, name, language.Member(lv, seed, s.noise, s.view, frozen, normalisation))

    members = [entry("table", "noise10", lv, s, False, norm) for lv in config.levels for s in range(config.seeds)]
    members += [entry("table", "noise10", "baseline", s, True, norm) for s in range(config.random_init_seeds)]
    members += [entry(f"ce_{other}", "noise10", lv, s, False, other) for lv in config.levels
                for s in range(config.collapse_seeds)]
    members += [entry("study", name, lv, s, False, setting_normalisation(config, name))
                for name in config.study_settings for lv in config.levels
                for s in range(config.study_seeds)]
    return members


def member_steps(config: LanguageConfig, entry: Entry) -> int:
    return {"table": config.num_steps, "study": config.study_steps}.get(entry.group, config.collapse_steps)


def populations(config: LanguageConfig) -> dict[tuple[int, int], list[Entry]]:
    """Members grouped by (message length, steps): each group trains as ONE population (one jitted step)."""
    named = settings(config)
    out: dict[tuple[int, int], list[Entry]] = {}
    for e in all_members(config):
        out.setdefault((named[e.setting].length, member_steps(config, e)), []).append(e)
    return out


# --------------------------------------------------------------------------- metrics


def row_metrics(members: Sequence[dict], baseline: Sequence[dict] | None) -> dict:
    """The issue's row metrics over seeds; paired with ``baseline`` by seed when given."""
    test = np.asarray([m["test_accuracy"] for m in members])
    out = {"test_accuracy": round(float(test.mean()), 3),
           "test_accuracy_std": round(float(test.std(ddof=1)) if len(test) > 1 else 0.0, 3),
           "seeds": len(members), "best_step": float(np.median([m["best_step"] for m in members])),
           "best_val_accuracy": round(float(np.mean([m["best_val"] for m in members])), 3),
           "collapsed_seeds": int(sum(m["collapsed"] for m in members))}
    for key in ("disc_a", "disc_b", "agreement", "mi_bits_a", "mi_bits_b", "distinct_a", "distinct_b"):
        if members[0].get(key):
            out[f"final_{key}"] = round(float(np.mean([m[key][-1] for m in members])), 4)
            out[f"peak_{key}"] = round(float(np.mean([max(m[key]) for m in members])), 4)
    if baseline is not None:
        base = {m["seed"]: m["test_accuracy"] for m in baseline}
        diffs = [m["test_accuracy"] - base[m["seed"]] for m in members if m["seed"] in base]
        out["paired_diff_vs_baseline"] = round(float(np.mean(diffs)), 3) if diffs else None
        out["paired_diff_ci95"] = list(stats.paired_ci95(diffs))
        out["paired_seeds"] = len(diffs)
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


def run(config: LanguageConfig, *, checkpoints: Checkpoints | None = None, progress: bool = True) -> dict:
    """Trains every population (table, other CE normalisation, study) and computes the rows.

    Returns:
      ``{"rows", "curves", "populations", "message_examples", "protocol"}`` for
      :func:`jaxcomm.harness.cli.main`.
    """
    dataset = load_dataset(config)
    named = settings(config)
    pops: dict[str, dict] = {}
    for (length, steps), entries in populations(config).items():
        name = f"L{length}_steps{steps}"
        groups = sorted({e.group for e in entries})
        pop = language.train_agents(config, [e.member for e in entries], dataset, length=length, num_steps=steps,
                                    progress=progress, desc=f"{name} ({', '.join(groups)}, {len(entries)} members)",
                                    checkpointer=checkpoints.run(name) if checkpoints else None)
        pop["members"] = [{"group": e.group, "setting": e.setting, **m}
                          for e, m in zip(entries, pop["members"], strict=True)]
        pops[name] = pop
    done = [{**m, "population": name} for name, pop in pops.items() for m in pop["members"]]
    steps_of = {name: pop["steps_done"] for name, pop in pops.items()}

    rows: dict[str, dict] = {}
    table = [m for m in done if m["group"] == "table" and not m["frozen"]]
    extra = {"setting": "noise10", "normalisation": config.ce_normalisation, "steps": steps_of[table[0]["population"]]}
    for lv, row in _rows_of(table, config.levels, extra).items():
        rows[lv] = {**row, "thesis_test_accuracy": THESIS_TABLE[lv]}
    frozen = [m for m in done if m["group"] == "table" and m["frozen"]]
    if frozen:
        rows["random_init_probe"] = {**row_metrics(frozen, None), "steps": steps_of[frozen[0]["population"]]}
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
                         "mi_estimate": f"InfoNCE lower bound of the trained critic on {config.diag_batch} "
                                        f"validation images, hard messages; capped at "
                                        f"log2({config.diag_batch}) = {np.log2(config.diag_batch):.2f} bits"}}


# --------------------------------------------------------------------------- report


def _band(members: list[dict], key: str = "val_accuracy"):
    length = min(len(m["steps"]) for m in members)
    values = np.asarray([m[key][:length] for m in members], float)
    return np.asarray(members[0]["steps"][:length]), values.mean(0), values.std(0)


def plot_fig4_3(summary: dict, curves: list[dict], path: pathlib.Path) -> None:
    """Fig. 4.3: B's probe validation accuracy vs steps per level (mean, band = +-1 std over seeds)."""
    plt = report.pyplot()

    groups = [g for g in ("table", "ce_sum", "ce_mean") if any(c["group"] == g for c in curves)]
    fig, axes = plt.subplots(1, 4, figsize=(22, 4.8))
    for ax, group in zip(axes[:2], groups, strict=False):
        for i, lv in enumerate(LEVELS):
            ms = [c for c in curves if c["group"] == group and c["level"] == lv and not c["frozen"]]
            if not ms:
                continue
            steps, mean, std = _band(ms)
            ax.plot(steps, mean, color=f"C{i}", label=f"{LABELS[lv]} ({len(ms)} seeds)")
            ax.fill_between(steps, mean - std, mean + std, color=f"C{i}", alpha=0.15, linewidth=0)
        frozen = [c for c in curves if c["group"] == group and c["frozen"]]
        if frozen:
            steps, mean, std = _band(frozen)
            ax.plot(steps, mean, ":", color="grey", label=f"probe on untrained agents ({len(frozen)} seeds)")
        norm = next(c["normalisation"] for c in curves if c["group"] == group)
        ax.set_title(f"{'adopted' if group == 'table' else 'other reading'}: cross-entropy {norm} over heads")
        ax.set_xlabel("training steps")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7, loc="lower right")
    axes[0].set_ylabel("student probe validation accuracy (%)")
    ax = axes[2]
    for j, group in enumerate(groups):
        for i, lv in enumerate(LEVELS):
            ms = [c for c in curves if c["group"] == group and c["level"] == lv and not c["frozen"]]
            if ms and ms[0].get("agreement"):
                steps, mean, _ = _band(ms, "agreement")
                ax.plot(steps, mean, "-" if j == 0 else "--", color=f"C{i}",
                        label=f"{lv} ({ms[0]['normalisation']})")
    ax.set_title("A/B hard-message agreement (1.0 with chance critic = collapse)")
    ax.set_xlabel("training steps")
    ax.set_ylim(0.3, 1.02)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=6)
    ax = axes[3]
    for i, lv in enumerate(LEVELS):
        ms = [c for c in curves if c["group"] == "table" and c["level"] == lv and not c["frozen"]]
        if ms and ms[0].get("mi_bits_a"):
            steps, mean, std = _band(ms, "mi_bits_a")
            ax.plot(steps, mean, color=f"C{i}", label=lv)
            ax.fill_between(steps, mean - std, mean + std, color=f"C{i}", alpha=0.15, linewidth=0)
    cap = np.log2(summary["config"]["diag_batch"])
    ax.axhline(cap, color="grey", linestyle=":", linewidth=0.8, label=f"cap log2(batch) = {cap:.0f} bits")
    ax.set_title("I(X_A; S_A) lower bound (InfoNCE, hard messages), bits")
    ax.set_xlabel("training steps")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=6)
    fig.suptitle("Two agents, 32-bit Gumbel-softmax language, MNIST with 10 % inverted pixels "
                 "(mean over seeds, band = +-1 std)", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def plot_messages(summary: dict, path: pathlib.Path) -> None:
    """Fig. 4.2: the teacher's message for a few digits at high and low temperature (same logits and noise)."""
    plt = report.pyplot()

    ex = summary["message_examples"]
    n, temps = len(ex["digits"]), ex["temperatures"]
    fig, axes = plt.subplots(n, 1 + len(temps), figsize=(3 + 4 * len(temps), 1.3 * n + 1),
                             gridspec_kw={"width_ratios": [1] + [4] * len(temps)})
    for r in range(n):
        axes[r, 0].imshow(np.asarray(ex["views"][r]), cmap="gray")
        axes[r, 0].set_axis_off()
        axes[r, 0].set_title(f"digit {ex['digits'][r]} (A's view)", fontsize=7)
        for c, t in enumerate(temps):
            ax = axes[r, c + 1]
            ax.imshow(np.asarray(ex["samples"][c][r])[None, :], cmap="viridis", vmin=0, vmax=1, aspect="auto")
            ax.set_yticks([])
            ax.set_xticks([])
            if r == 0:
                ax.set_title(f"temperature {t}: P(bit = 1) of the relaxed sample", fontsize=8)
    member = ex["member"]
    fig.suptitle(f"Teacher messages after training ({member['level']}, seed {member['seed']}); same logits and "
                 f"Gumbel noise at every temperature", fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def _ci(row: dict) -> str:
    lo, hi = row.get("paired_diff_ci95", [None, None])
    if row.get("paired_diff_vs_baseline") is None or lo is None or not np.isfinite(lo):
        return "-"
    return f"{row['paired_diff_vs_baseline']:+.2f} [{lo:+.2f}, {hi:+.2f}]"


def paired_p_value(row: dict) -> float | None:
    """Two-sided p-value of the paired t-test behind a row's 95 % interval (None without one)."""
    return stats.p_value_from_ci95(row.get("paired_diff_vs_baseline"), row.get("paired_diff_ci95"),
                                   row.get("paired_seeds", 0))


def study_answer(summary: dict, *, gain: float = 2.0) -> str:
    """The study's answer: settings where both-feedback beats the baseline by >= ``gain`` points, CI above 0.

    Looks at the table's row (10 % noise, 32 bits, adopted normalisation) and every study setting.
    """
    rows = summary["rows"]
    cells = [("table (noise10, L=32)", rows["both_feedback"])] if "both_feedback" in rows else []
    cells += [(name.split("/")[1], row) for name, row in rows.items()
              if name.startswith("study/") and name.endswith("/both_feedback")]
    cells = [(name, row) for name, row in cells if row.get("paired_diff_vs_baseline") is not None]
    hits = [f"{name} ({_ci(row)})" for name, row in cells
            if row["paired_diff_vs_baseline"] >= gain and np.isfinite(row["paired_diff_ci95"][0] or np.nan)
            and row["paired_diff_ci95"][0] > 0]
    if hits:
        tests = []
        for name, row in cells:
            p = paired_p_value(row)
            if p is not None and f"{name} (" in " ".join(hits):
                tests.append(f"{name}: two-sided paired t-test p = {p:.3f}, Bonferroni-adjusted over the "
                             f"{len(cells)} both-feedback cells p = {min(1.0, p * len(cells)):.3f}")
        return (f"Both-feedback beats the baseline by >= {gain:g} points with a 95 % interval above zero in: "
                + "; ".join(hits) + ". (" + "; ".join(tests) + ".)")
    if not cells:
        return "No both-feedback row was measured."
    name, row = max(cells, key=lambda c: c[1]["paired_diff_vs_baseline"])
    return (f"None of the measured settings gives a both-feedback gain of >= {gain:g} points with a 95 % interval "
            f"above zero. The largest measured both-feedback gain is {name}: {_ci(row)} points.")


def _significance(row: dict) -> str:
    lo, hi = row.get("paired_diff_ci95", [None, None])
    if lo is None or not np.isfinite(lo):
        return "no interval"
    return "above zero" if lo > 0 else "below zero" if hi < 0 else "contains zero"


def reading(summary: dict) -> list[str]:
    """Bullet points comparing the measured table with the thesis' Table 4.1, from the rows alone."""
    rows, out = summary["rows"], []
    if "baseline" not in rows:
        return out
    base = rows["baseline"]["test_accuracy"]
    out.append(f"- Baseline: {base:.1f} % measured vs {THESIS_TABLE['baseline']} % in the thesis "
               f"({base - THESIS_TABLE['baseline']:+.1f} points).")
    for lv in LEVELS[1:]:
        if lv not in rows:
            continue
        r = rows[lv]
        thesis_gain = THESIS_TABLE[lv] - THESIS_TABLE["baseline"]
        lo, hi = r["paired_diff_ci95"]
        inside = lo is not None and np.isfinite(lo) and lo <= thesis_gain <= hi
        out.append(f"- {LABELS[lv]}: thesis gain {thesis_gain:+.1f}, measured paired gain {_ci(r)} (interval "
                   f"{_significance(r)}; the thesis' gain is {'inside' if inside else 'outside'} it).")
    order = sorted((lv for lv in LEVELS if lv in rows), key=lambda lv: rows[lv]["test_accuracy"])
    out.append(f"- Thesis ordering baseline < receiving only < feedback < both feedback: "
               f"{'reproduced' if order == list(LEVELS) else 'not reproduced'} (measured, lowest to highest mean: "
               f"{', '.join(order)}).")
    if "random_init_probe" in rows:
        rnd = rows["random_init_probe"]["test_accuracy"]
        lowest = min(rows[lv]["test_accuracy"] for lv in LEVELS if lv in rows)
        out.append(f"- Probe on untrained agents: {rnd:.1f} %, {abs(lowest - rnd):.1f} points "
                   f"{'below' if rnd < lowest else 'ABOVE'} the lowest trained level: training the language "
                   f"{'adds' if rnd < lowest else 'does not add'} information to B's features beyond a random "
                   "projection (hazard (b) of the issue " + ("avoided)." if rnd < lowest else "present)."))
    other = [k for k in rows if k.startswith("ce_") and k.endswith("/both_feedback")]
    for key in other:
        group = key.split("/")[0]
        coll = sum(rows[f"{group}/{lv}"]["collapsed_seeds"] for lv in LEVELS if f"{group}/{lv}" in rows)
        seeds = sum(rows[f"{group}/{lv}"]["seeds"] for lv in LEVELS if f"{group}/{lv}" in rows)
        r = rows[key]
        out.append(f"- Other cross-entropy normalisation ({group}): {coll}/{seeds} runs collapsed by the rule "
                   f"above; both feedback: final A/B agreement {r.get('final_agreement', float('nan')):.2f} with "
                   f"critic accuracy {r.get('final_disc_a', float('nan')):.2f} and "
                   f"{r.get('final_distinct_a', float('nan')):.2f} distinct messages, paired gain {_ci(r)}.")
    out.append("- Note: a FIXED inversion mask is an invertible map of the image (x -> 1 - x on fixed pixels), so "
               "the 10/30/50 % views lose no information and an agent can in principle undo its own mask; only the "
               "halves views make the agents' observations truly partial.")
    strong, weak, full = (rows.get(k) for k in ("study/halves_sum/both_feedback", "study/halves/both_feedback",
                                                  "ce_sum/both_feedback"))
    if strong and weak:
        text = (f"- Partial views x normalisation (halves_sum is beyond the issue's grid): with complementary halves, "
                f"both feedback gains {_ci(weak)} with the adopted averaged cross-entropy and {_ci(strong)} with the "
                f"summed one (weights x L)")
        text += f"; on the full 10 % views the summed reading gives {_ci(full)}." if full else "."
        if _significance(strong) == "above zero" and full and _significance(full) == "below zero":
            text += (" A strong likelihood term helps the student when the agents' views are truly complementary and "
                     "hurts it when they are not.")
        out.append(text)
    if any(k.startswith("study/") for k in rows):
        out.append("- Study: " + study_answer(summary))
    return out


def table_markdown(summary: dict) -> str:
    """table.md: thesis Table 4.1 beside the measured numbers, the study, the collapsing reading and the choices."""
    rows, cfg = summary["rows"], summary["config"]
    norm, other = cfg["ce_normalisation"], "sum" if cfg["ce_normalisation"] == "mean" else "mean"
    pops = summary["populations"]
    lines = ["# Chapter 4: two agents learn a 32-bit language by maximising mutual information (MNIST), Table 4.1",
             "", f"Command: `{summary['command']}` (base seed {cfg['seed']})  ",
             f"Preset `{summary['preset']}`, wall time {summary['wall_seconds']:.0f} s "
             f"({summary['wall_seconds'] / 60:.1f} min) on {summary['device']}; commit `{summary['git_commit']}`.  ",
             "Populations (each one jitted step over all its members): " + "; ".join(
                 f"{k} ({'+'.join(g['groups'])}): {g['members']} members x {g['steps_done']} steps, "
                 f"{g['seconds']:.0f} s" for k, g in pops.items()) + ".", "",
             "## Table 4.1 (adopted reading: cross-entropy averaged over the heads)", "",
             f"Test accuracy (%) of the student's linear probe at its best validation step (mean ± std over "
             f"{cfg['seeds']} seeds, {cfg['num_steps']} steps, validation every {cfg['eval_every']} steps). Paired "
             "difference = level minus baseline on the same seed (same initialisation, masks, minibatches and "
             "Gumbel noise), mean and Student-t 95 % interval, in points. Collapsed = final critic at chance "
             "(|acc - 0.5| <= 0.05) with A/B agreement >= 0.95. MI = InfoNCE lower bound of A's critic on "
             f"{cfg['diag_batch']} validation images with hard messages (capped at "
             f"{np.log2(cfg['diag_batch']):.1f} bits), peak over training / final. Distinct messages = fraction of "
             f"distinct hard messages of A among those {cfg['diag_batch']} images (1/{cfg['diag_batch']} = one "
             "constant message).", "",
             "| level | thesis | measured | paired diff vs baseline [95 % CI] | best step (median) | collapsed | "
             "critic acc. A (final) | A/B agreement (final) | distinct messages A (final) | MI A bits (peak / final) |",
             "|---|---|---|---|---|---|---|---|---|---|"]

    def line(name: str, row: dict, thesis: str) -> str:
        return (f"| {name} | {thesis} | {row['test_accuracy']:.2f} ± {row['test_accuracy_std']:.2f} | {_ci(row)} | "
                f"{row['best_step']:.0f} | {row['collapsed_seeds']}/{row['seeds']} | "
                f"{row.get('final_disc_a', float('nan')):.3f} | {row.get('final_agreement', float('nan')):.3f} | "
                f"{row.get('final_distinct_a', float('nan')):.3f} | "
                f"{row.get('peak_mi_bits_a', float('nan')):.2f} / {row.get('final_mi_bits_a', float('nan')):.2f} |")

    for lv in LEVELS:
        if lv in rows:
            lines.append(line(LABELS[lv], rows[lv], f"{THESIS_TABLE[lv]}"))
    if "random_init_probe" in rows:
        r = rows["random_init_probe"]
        lines.append(f"| probe on untrained agents (random init) | - | {r['test_accuracy']:.2f} ± "
                     f"{r['test_accuracy_std']:.2f} | - | {r['best_step']:.0f} | - | - | - | - | - |")
    if any(k.startswith(f"ce_{other}/") for k in rows):
        steps = rows[f"ce_{other}/baseline"]["steps"]
        word = "summed" if other == "sum" else "averaged"
        lines += ["", f"## The other reading: cross-entropy {word} over the {cfg['message_length']} heads "
                  f"({cfg['collapse_seeds']} seeds, {steps} steps, same weights 0.01 / 0.005)", "",
                  "| level | thesis | measured | paired diff vs baseline [95 % CI] | best step (median) | collapsed | "
                  "critic acc. A (final) | A/B agreement (final) | distinct messages A (final) | "
                  "MI A bits (peak / final) |", "|---|---|---|---|---|---|---|---|---|---|"]
        for lv in LEVELS:
            if f"ce_{other}/{lv}" in rows:
                lines.append(line(LABELS[lv], rows[f"ce_{other}/{lv}"], f"{THESIS_TABLE[lv]}"))
    study = sorted({k.split("/")[1] for k in rows if k.startswith("study/")})
    if study:
        lines += ["", "## Study beyond the thesis: how partial the views, how long the message", "",
                  f"{cfg['study_seeds']} paired seeds per level, {cfg['study_steps']} steps (fewer than the table, "
                  "to fit the CPU budget); the 10 % / 32-bit cell is the table above. Each cell: test accuracy of "
                  "the level, then its paired gain over the same setting's baseline [95 % CI], points. "
                  "halves = A sees the top half, B the bottom half (plus each one's 10 % inverted pixels); "
                  "halves_sum = the same views with the summed cross-entropy (weights x L).", "",
                  "| setting | noise | view | L | CE over heads | baseline | receiving only | feedback to teacher | "
                  "both feedback | collapsed (all levels) |", "|---|---|---|---|---|---|---|---|---|---|"]
        for s in study:
            r = {lv: rows.get(f"study/{s}/{lv}") for lv in LEVELS}
            cells = [f"{r['baseline']['test_accuracy']:.2f} ± {r['baseline']['test_accuracy_std']:.2f}"]
            cells += [f"{r[lv]['test_accuracy']:.2f}; {_ci(r[lv])}" if r[lv] else "-" for lv in LEVELS[1:]]
            coll = sum(x["collapsed_seeds"] for x in r.values() if x)
            b = r["baseline"]
            lines.append(f"| {s} | {b['noise']} | {b['view']} | {b['length']} | {b['normalisation']} | "
                         + " | ".join(cells) + f" | {coll} |")
        lines += ["", "**Answer:** " + study_answer(summary)]
    lines += ["", "## Reading (generated from the numbers above)", "", *reading(summary)]
    lines += ["", "## Choices where the thesis is silent", "",
              "- Data: MNIST official training set split 50,000 / 10,000 (last 10,000 = validation), official 10,000 "
              "test (§4.2.1.2); pixels in [0, 1]; an inverted pixel is 1 - x.",
              f"- Message generators: ReLU MLP 784-{'-'.join(map(str, cfg['hidden']))} -> "
              f"{cfg['message_length']} heads x 2 logits, Flax default init; the probe reads the "
              f"{cfg['hidden'][-1]}-unit last hidden layer. Kept small on purpose: wide layers make the probe on "
              "untrained agents beat every trained level (issue 4, hazard (b)); the random-init row measures it.",
              f"- Critic (discriminator), one per agent: MLP on the concatenation [x (784), flattened message "
              f"({2 * cfg['message_length']})] -> {cfg['critic_hidden']} ReLU -> 1 logit; objective "
              f"`{cfg['critic']}` (vanilla GAN: one negative (x_b, s_(b+1)) per positive, the message of the next "
              "sample in the minibatch); generator and critic both minimise the same loss (max-max).",
              f"- Messages in training: relaxed Gumbel-softmax samples (no straight-through), estimator "
              f"`{cfg['estimator']}`; temperature {cfg['tau_init']} x{cfg['tau_decay']} every {cfg['tau_every']} "
              f"steps, floor {cfg['tau_floor']}; hard argmax messages at evaluation (diagnostics).",
              f"- Likelihood terms: the cross-entropy between the received relaxed sample (target) and the log of the "
              f"receiver's own relaxed sample (eq. 4.2.6 with s = Gumbel-softmax sample values), "
              f"**{norm}** over the heads (adopted), weights {cfg['one_way_weight']} (receiving only) and "
              f"{cfg['two_way_weight']} (each term of the feedback levels). Summed over heads the same weights are "
              f"x{cfg['message_length']} larger; that reading is shown above.",
              "- Gradient paths: receiving only: the target s_A is a constant (no gradient into A); feedback to "
              "teacher: the same term, gradient also into A through s_A; both feedback: both terms, gradients into "
              "both senders and both predictors (tested: a forbidden gradient is exactly zero).",
              f"- Optimisers: Adam {cfg['learning_rate']} for generators and critics (one optimiser over both agents), "
              f"batch {cfg['batch_size']}, minibatches drawn uniformly with replacement; the probe: Adam "
              f"{cfg['probe_learning_rate']} on the same minibatch, stopped features of B, trained from step 0 "
              "(the thesis found delaying it no better).",
              "- Test accuracy: the probe and B's generator at the best validation evaluation (per seed).",
              "- Masks: Bernoulli(noise) per pixel, drawn once per agent and seed (`uniform < noise`, so the 10 % "
              "mask of a seed is inside its 30 % and 50 % masks); identical across levels for a seed.",
              ""]
    return "\n".join(lines)


def write_report(out_dir: pathlib.Path, *, plots: bool = True) -> None:
    """Writes table.md, then (with ``plots``) fig4_3.png and messages.png, from the run in ``out_dir``."""
    out_dir = pathlib.Path(out_dir)
    summary, curves = results.read_run(out_dir)
    report.write_table(out_dir, table_markdown(summary))
    if plots:
        report.draw(fig4_3=lambda: plot_fig4_3(summary, curves, out_dir / "fig4_3.png"),
                    messages=lambda: plot_messages(summary, out_dir / "messages.png"))


def cli(argv: Sequence[str] | None = None) -> int:
    """``report DIR`` redraws plots and table from a run's files; anything else runs the experiment."""
    return harness_cli.cli(argv, experiment=EXPERIMENT, presets=PRESETS, run=run,
                          description=__doc__.split("\n\n")[0], write_report=write_report)


if __name__ == "__main__":
    sys.exit(cli())
