"""The chapter-4 experiment's run: which members train (:func:`all_members`, grouped into populations by
:func:`populations`), :func:`run` (every population trained by :func:`jaxcomm.language.train_agents`, then the rows
from their results) and :func:`main`, the command line (``python -m experiments.language``).
"""

from __future__ import annotations

import importlib
from collections.abc import Sequence
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from jaxcomm import language, language_metrics, stats
from jaxcomm.checkpoint import Checkpoints
from jaxcomm.data import ImageDataset, load_mnist, load_mnist_sample
from jaxcomm.harness import cli as harness_cli
from jaxcomm.models import to_unit_float
from jaxcomm.probe import ProbeConfig

from .presets import (
    CONFIRM_CELLS,
    CONFIRM_LEVELS,
    PRESETS,
    LanguageConfig,
    setting_normalisation,
    settings,
)
from .report import ABLATIONS, EXPERIMENT, THESIS_TABLE, write_report


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
    return (float(np.mean(diffs)) if diffs else None), list(stats.paired_ci95(diffs, digits=None)), len(diffs)


def _mean_sd(values: Sequence[float]) -> tuple[float, float]:
    values = np.asarray(values, float)
    return float(values.mean()), float(values.std(ddof=1)) if len(values) > 1 else 0.0


def row_metrics(members: Sequence[dict], baseline: Sequence[dict] | None) -> dict:
    """The issue's row metrics over seeds; paired with ``baseline`` by seed when given."""
    test = np.asarray([m["test_accuracy"] for m in members])
    out = {"test_accuracy": float(test.mean()),
           "test_accuracy_std": float(test.std(ddof=1)) if len(test) > 1 else 0.0,
           "seeds": len(members), "best_step": float(np.median([m["best_step"] for m in members])),
           "best_val_accuracy": float(np.mean([m["best_val"] for m in members])),
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
                out[f"lang_{agent}_{key}"] = float(np.nanmean(values)) if np.isfinite(values).any() else None
    for key in ("disc_a", "disc_b", "agreement", "mi_bits_a", "mi_bits_b", "distinct_a", "distinct_b"):
        if members[0].get(key):
            out[f"final_{key}"] = float(np.mean([m[key][-1] for m in members]))
            out[f"peak_{key}"] = float(np.mean([max(m[key]) for m in members]))
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
    pops = train_populations(config, dataset, checkpoints=checkpoints, progress=progress)
    done = [{**m, "population": name} for name, pop in pops.items() for m in pop["members"]]
    steps_of = {name: pop["steps_done"] for name, pop in pops.items()}
    rows: dict[str, dict] = confirm_rows(config, done, steps_of)
    rows.update(table_rows(config, done, steps_of))
    rows.update(reading_rows(config, done, steps_of))
    return {"rows": rows, "curves": done, "message_examples": figure_examples(config, pops, dataset),
            "populations": {name: {"members": len(p["members"]), "groups": sorted({m["group"] for m in p["members"]}),
                                   "steps_done": p["steps_done"], "interrupted": p["interrupted"],
                                   "seconds": round(p["seconds"], 1)} for name, p in pops.items()},
            "protocol": protocol(config, dataset)}


def train_populations(config: LanguageConfig, dataset: ImageDataset, *, checkpoints: Checkpoints | None,
                      progress: bool) -> dict[str, dict]:
    """Every population of :func:`populations` trained (its refit probe where it holds the table, an ablation or
    the confirmation), by name; each member's record carries its group, setting and estimator, and (but for the
    study's) the language metrics of its final hard messages."""
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
    return pops


def table_rows(config: LanguageConfig, done: Sequence[dict], steps_of: dict[str, int]) -> dict[str, dict]:
    """Rows of Table 4.1 (a row per level, paired with the baseline), of the probe on untrained agents, and of the
    ablations (each paired with the table's members of the same level and seed)."""
    rows: dict[str, dict] = {}
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
    return rows


def reading_rows(config: LanguageConfig, done: Sequence[dict], steps_of: dict[str, int]) -> dict[str, dict]:
    """Rows beyond the table: the pre-registered replication, the other cross-entropy normalisation and the study
    (each level paired with its own baseline)."""
    named, rows = settings(config), {}
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
    return rows


def figure_examples(config: LanguageConfig, pops: dict[str, dict], dataset: ImageDataset) -> dict | None:
    """Fig. 4.2's messages (:func:`message_examples`) of seed 0 of both feedback in the table (the baseline where
    the table has no feedback level), or None."""
    lv_pick = "both_feedback" if "both_feedback" in config.levels else "baseline"
    examples = None
    for pop in pops.values():
        hits = [i for i, m in enumerate(pop["members"]) if m["group"] == "table" and m["level"] == lv_pick
                and m["seed"] == 0 and not m["frozen"]]
        if hits:
            examples = message_examples(config, pop, dataset, hits[0])
    return examples


def protocol(config: LanguageConfig, dataset: ImageDataset) -> dict:
    """What the summary states about how the rows were measured: splits, settings, the collapse rules, the
    language metrics and the mutual-information estimate."""
    return {"dataset_sizes": [len(dataset.train.labels), len(dataset.validation.labels), len(dataset.test.labels)],
            "settings": {k: v._asdict() for k, v in settings(config).items()},
            "collapse_rule": "final |disc accuracy - 0.5| <= 0.05 and A/B agreement >= 0.95",
            "collapse_over_run_rule": "an evaluation with A/B agreement >= 0.8 and either critic "
                                      "within 0.05 of chance or either agent's distinct-message "
                                      "fraction <= 0.25 (language.collapse_over_run)",
            "language_metrics": f"final hard messages of each agent on the first {config.metric_images} "
                                "test images (jaxcomm.language_metrics.language_report); "
                                "not measured for the study's members",
            "mi_estimate": f"InfoNCE lower bound of the trained critic on {config.diag_batch} "
                           f"validation images, hard messages; capped at "
                           f"log2({config.diag_batch}) = {np.log2(config.diag_batch):.2f} bits"}


def main(argv: Sequence[str] | None = None) -> int:
    """``report DIR`` redraws plots and table from a run's files; anything else runs the experiment."""
    description = importlib.import_module(__package__).__doc__.split("\n\n")[0]
    return harness_cli.cli(argv, experiment=EXPERIMENT, presets=PRESETS, run=run, description=description,
                           write_report=write_report)
