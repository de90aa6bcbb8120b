"""The recipe search's run: every candidate trained on its own nodes as one sweep over seeds
(:func:`train_candidate`), the one-standard-error rule (:func:`choose`), :func:`run` and :func:`main`, the command
line (``python -m experiments.chapter2_recipe``).
"""

from __future__ import annotations

import dataclasses
import importlib
import math
import time
from collections.abc import Sequence
from typing import Any

import numpy as np

from jaxcomm import data, driver, network_sweep, recipes, stats
from jaxcomm.checkpoint import Checkpoints
from jaxcomm.harness import cli as harness_cli

from .presets import EVAL_SPLIT, EXPERIMENT, PRESETS, RULE, Candidate, Chapter2RecipeSearchConfig, checkpoint_name
from .report import format_value, write_report


def seed_numbers(seed: int, out: dict, share: float) -> dict:
    """One seed's final numbers: ``val_accuracy``, ``test_accuracy`` (node averages, %), ``steps`` and
    ``wall_seconds`` (its share of the sweep's training time)."""
    final = out["final"]
    return {"seed": seed, "val_accuracy": final["validation"]["avg_accuracy"], "test_accuracy": final["avg_accuracy"],
            "steps": out["steps_done"], "wall_seconds": round(share, 1)}


def seed_curve(name: str, seed: int, history: list[dict]) -> dict:
    """One seed's validation and test accuracy (node average, %) and loss at every evaluation."""
    return {"candidate": name, "seed": seed, "steps": [h["step"] for h in history],
            "val_accuracy": [round(h["validation"]["avg_accuracy"], 3) for h in history],
            "test_accuracy": [round(h["avg_accuracy"], 3) for h in history],
            "loss": [round(h["loss"], 4) for h in history]}


def mean_curve(curves: list[dict]) -> dict:
    """The seeds' curves averaged per evaluation: ``steps``, ``val_accuracy``, ``test_accuracy`` (%)."""
    return {"steps": curves[0]["steps"],
            **{key: [round(float(v), 3) for v in np.mean([c[key] for c in curves], axis=0)]
               for key in ("val_accuracy", "test_accuracy")}}


def candidate_record(candidate: Candidate, per_seed: list[dict], curve: dict | None) -> dict:
    """A candidate's row: ``overrides``, ``num_steps`` and ``batch_size`` (its recipe's, the rule's cost),
    ``seeds``, ``per_seed``, ``val_accuracy`` and ``test_accuracy`` (means over seeds, %) with their sample sds
    ``*_sd``, ``val_accuracy_se`` (sd / sqrt(seeds)), ``best_val_step`` and ``best_val_accuracy`` (the evaluation
    of highest mean validation accuracy), ``steps`` (the most any seed trained), ``wall_seconds`` (summed over
    seeds) and ``curve`` (:func:`mean_curve`). A candidate whose loss left its bounds has ``stopped`` and None
    for every accuracy."""
    stopped = [f"seed {p['seed']}: {p['stopped']}" for p in per_seed if "stopped" in p]
    row = {"overrides": dict(candidate.overrides), "num_steps": candidate.recipe.num_steps,
           "batch_size": candidate.recipe.batch_size, "seeds": len(per_seed), "per_seed": per_seed,
           "steps": max(p["steps"] for p in per_seed),
           "wall_seconds": round(sum(p["wall_seconds"] for p in per_seed), 1)}
    for key in ("val_accuracy", "test_accuracy"):
        row[key], row[f"{key}_sd"] = (None, None) if stopped else stats.mean_sd([p[key] for p in per_seed])
    row["val_accuracy_se"] = None if stopped else row["val_accuracy_sd"] / math.sqrt(len(per_seed))
    if curve and not stopped:
        best = int(np.argmax(curve["val_accuracy"]))  # the first evaluation at the highest mean
        row |= {"best_val_step": curve["steps"][best], "best_val_accuracy": curve["val_accuracy"][best]}
    else:
        row |= {"best_val_step": None, "best_val_accuracy": None}
    return row | {"curve": curve} | ({"stopped": stopped} if stopped else {})


def train_candidate(config: Chapter2RecipeSearchConfig, candidate: Candidate, dataset, *,
                    checkpoints: Checkpoints | None, progress: bool) -> tuple[dict, list[dict]]:
    """Trains ``candidate`` with every seed as one sweep, evaluated on validation and test; ``(row, curves)``
    (:func:`candidate_record`, one :func:`seed_curve` per seed). A sweep whose loss leaves its bounds is recorded
    as stopped (a learning rate too high is a result of the search, not a failure of it)."""
    seeds, recipe = config.seeds(), candidate.recipe
    net = recipe.network(config.num_nodes, "none", eval_every=config.eval_every)
    model = recipe.model(dataset.num_classes)
    try:
        outs = network_sweep.train_networks([net.replace(seed=s) for s in seeds], model, dataset, eval_split=EVAL_SPLIT,
                                            progress=progress, desc=candidate.name,
                                            checkpointer=checkpoints.run(checkpoint_name(candidate.name))
                                            if checkpoints else None)
    except driver.LossStop as stop:
        print(f"[{candidate.name}] stopped: {stop}", flush=True)
        per_seed = [{"seed": s, "val_accuracy": None, "test_accuracy": None, "steps": stop.step, "wall_seconds": 0.0,
                     "stopped": str(stop)} for s in seeds]
        return candidate_record(candidate, per_seed, None), []
    # a population sweep's train_seconds is the whole sweep's: each seed is charged its share
    shares = [out["train_seconds"] / (out["sweep"]["runs"] if out["sweep"]["mode"] == "population" else 1)
              for out in outs]
    per_seed = [seed_numbers(s, out, share) for s, out, share in zip(seeds, outs, shares, strict=True)]
    curves = [seed_curve(candidate.name, s, out["history"]) for s, out in zip(seeds, outs, strict=True)]
    row = candidate_record(candidate, per_seed, mean_curve(curves))
    print(f"[{candidate.name}] validation {row['val_accuracy']:.2f} ± {row['val_accuracy_sd']:.2f}, test "
          f"{row['test_accuracy']:.2f} ± {row['test_accuracy_sd']:.2f} over {len(seeds)} seeds in "
          f"{row['wall_seconds']:.0f} s", flush=True)
    return row, curves


def choose(candidates: dict[str, dict]) -> tuple[str | None, str | None]:
    """``(best, chosen)`` by the one-standard-error rule on validation (:data:`RULE`).

    Args:
      candidates: ``{name: row}`` in grid order; a row has ``val_accuracy`` (mean, %; None: stopped, left
        out), ``val_accuracy_se``, ``num_steps`` and ``batch_size``.

    Returns:
      ``best``: the highest mean validation accuracy (the first in grid order on a tie); ``chosen``: among the
      candidates whose mean is >= best's mean - best's standard error, the fewest ``num_steps``, then the
      smallest ``batch_size``, then the first in grid order. ``(None, None)`` if no candidate has an accuracy.
    """
    scored = {name: row for name, row in candidates.items() if row.get("val_accuracy") is not None}
    if not scored:
        return None, None
    best = max(scored, key=lambda name: scored[name]["val_accuracy"])
    floor = scored[best]["val_accuracy"] - scored[best]["val_accuracy_se"]
    within = [name for name, row in scored.items() if row["val_accuracy"] >= floor]
    chosen = min(within, key=lambda name: (scored[name]["num_steps"], scored[name]["batch_size"]))
    return best, chosen


def changes_from_preset(preset: recipes.Chapter2Recipe, overrides: dict[str, Any]) -> dict[str, list]:
    """``{field: [preset value, chosen value]}`` for every override that differs from the preset."""
    return {field: [getattr(preset, field), value] for field, value in overrides.items()
            if getattr(preset, field) != value}


def run(config: Chapter2RecipeSearchConfig, *, checkpoints: Checkpoints | None = None, progress: bool = True) -> dict:
    """Trains the candidates in grid order until the time budget, then chooses; returns ``rows`` (one per
    candidate trained, by name, in grid order), ``best``, ``chosen``, ``rule``, ``changes_from_preset``,
    ``chosen_overrides`` (command-line ``field=value`` of those changes), ``skipped``, ``curves`` (one per
    candidate and seed), ``seeds``, ``dataset``, ``validation_size`` (images) and ``chapter2_config`` (the
    preset's recipe).

    With ``checkpoints`` every candidate's sweep saves its state; resumed (``checkpoints.resume``), a finished
    one returns from its checkpoint without a training step and an unfinished one continues.
    """
    start = time.perf_counter()
    preset = config.preset()
    dataset = preset.load()
    if not len(dataset.validation.labels):
        raise ValueError(f"{dataset.name} holds no validation split to choose on (validation_size "
                         f"{preset.validation_size})")
    rows: dict[str, dict] = {}
    curves, skipped = [], []
    spent = trained = 0.0  # seconds, and steps x seeds, of the candidates so far: the time budget's rate
    restored = 0.0  # training seconds of a resumed run's earlier parts, which this process did not spend
    for candidate in config.candidates():
        work = candidate.recipe.num_steps * config.num_seeds
        estimate = spent / trained * work if trained else 0.0
        if config.time_budget_s and time.perf_counter() - start + restored + estimate > config.time_budget_s:
            skipped.append(f"{candidate.name} (estimated {estimate:.0f} s, over the time budget)")
            print(f"skipped {candidate.name}: estimated {estimate:.0f} s, over the time budget", flush=True)
            continue
        began = time.perf_counter()
        row, seed_curves = train_candidate(config, candidate, dataset, checkpoints=checkpoints, progress=progress)
        took = time.perf_counter() - began
        restored += max(0.0, row["wall_seconds"] - took)
        spent, trained = spent + max(took, row["wall_seconds"]), trained + row["steps"] * config.num_seeds
        rows[candidate.name] = row
        curves += seed_curves
    best, chosen = choose(rows)
    changes = changes_from_preset(preset, rows[chosen]["overrides"]) if chosen else {}
    return {"rows": rows, "best": best, "chosen": chosen, "rule": RULE, "changes_from_preset": changes,
            "chosen_overrides": [f"{field}={format_value(new)}" for field, (_, new) in changes.items()],
            "skipped": skipped, "curves": curves, "seeds": config.seeds(), "dataset": dataset.name,
            "validation_size": len(dataset.validation.labels), "chapter2_config": dataclasses.asdict(preset),
            "note": data.LOSSY_CIFAR10_NOTE if preset.dataset == "cifar10" else None}


def main(argv: Sequence[str] | None = None) -> int:
    """``report DIR`` redraws table.md and the plot; anything else runs the search."""
    return harness_cli.cli(argv, experiment=EXPERIMENT, presets=PRESETS, run=run,
                           description=importlib.import_module(__package__).__doc__, write_report=write_report)
