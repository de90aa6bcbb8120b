"""The chapter-2 supervised experiment's run: the networks of its rows and study points, :func:`run` (the rows,
then the studies, each a sweep over seeds) and :func:`main`, the command line
(``python -m experiments.outputs_exchange``).
"""

from __future__ import annotations

import dataclasses
import importlib
import time
from collections.abc import Sequence

from jaxcomm import data, network, recipes
from jaxcomm.checkpoint import Checkpoints
from jaxcomm.harness import cli as harness_cli
from jaxcomm.harness import results

from .presets import (
    CPU_SCALE_DOWNS,
    PRESETS,
    OutputsExchangeConfig,
    cpu_config,
    study_runs,
)
from .report import EXPERIMENT, ROWS, SELECTION, row_of, write_report


def study_network(config: OutputsExchangeConfig, kwargs: dict) -> network.NetworkConfig:
    """The network of a study point (``kwargs`` of :func:`study_runs`)."""
    kwargs = dict(kwargs)
    return config.network(kwargs.pop("num_nodes"), kwargs.pop("content"), steps=config.study_steps,
                          eval_every=config.study_eval_every, **kwargs)


def row_network(config: OutputsExchangeConfig, row: str) -> network.NetworkConfig:
    """The network of a row of Table 2.1 (a name of ``ROWS``)."""
    n, content = ROWS[row]
    return config.network(n, content, steps=config.num_steps, eval_every=config.eval_every)


def run_names(config: OutputsExchangeConfig) -> dict[tuple, str]:
    """``(network, channels) -> run name`` of every run ``config`` trains, in order: its rows under their names, then
    each distinct study network as ``study_{i}_n{N}_{content}`` (a point equal to a row or an earlier point reuses
    that run). The names key the runs' checkpoints, so a part of a run can be copied out by name (see
    ``experiments/outputs_exchange/tools/part.py``)."""
    names: dict[tuple, str] = {}
    for row in config.rows:
        names.setdefault((row_network(config, row), config.widths), row)
    rows = len(names)
    for _, _, _, kwargs in study_runs(config):
        net = study_network(config, kwargs)
        names.setdefault((net, config.study_widths), f"study_{len(names) - rows}_n{net.num_nodes}_{net.content}")
    return names


def run(config: OutputsExchangeConfig, *, checkpoints: Checkpoints | None = None, progress: bool = True) -> dict:
    """Trains the rows, then the studies; returns ``rows``, ``studies`` and ``curves``."""
    start = time.perf_counter()
    dataset = config.load()
    rows: dict[str, dict] = {}
    curves: list[dict] = []
    done: dict[tuple, dict] = {}  # (network, channels) -> trained run, shared by rows and studies
    seeds = [config.seed + i for i in range(config.num_seeds)]
    for name in config.rows:
        net = row_network(config, name)
        out = recipes.train_seeds(net, config.model(dataset.num_classes), dataset, name=name, seeds=seeds,
                    checkpoints=checkpoints, progress=progress)
        done[(net, config.widths)] = out
        for per_seed, history in zip(out["summary"]["per_seed"], out["histories"], strict=True):
            per_seed["steps_to_target_avg"] = recipes.steps_to_target(history, config.target,
                                                                      lambda h: h["avg_accuracy"])
            per_seed["steps_to_target_collective"] = recipes.steps_to_target(
                history, config.target, lambda h: h["collective_accuracy"]["negentropy"])
        rows[name] = row_of(out["summary"], config.target)
        curves += [{"kind": "row", **curve} for curve in out["curves"]]
    studies: list[dict] = []
    skipped: list[str] = []
    study_model = config.model(dataset.num_classes, widths=config.study_widths)
    seconds_per_node_step, last_nodes = 0.0, 1
    names = run_names(config)
    for study, label, x, kwargs in study_runs(config):
        net = study_network(config, kwargs)
        key = (net, config.study_widths)
        if key not in done:
            # Per node-step cost grows with N on a CPU (measured 1.5x from 10 to 20 CNN nodes): N^0.6.
            estimate = (seconds_per_node_step * net.num_nodes * net.num_steps * len(seeds)
                        * (net.num_nodes / last_nodes) ** 0.6)
            if config.time_budget_s and time.perf_counter() - start + estimate > config.time_budget_s:
                skipped.append(f"{study} {label} (estimated {estimate:.0f} s, over the time budget)")
                print(f"skipped {study} {label}: estimated {estimate:.0f} s, over the time budget", flush=True)
                continue
            done[key] = recipes.train_seeds(net, study_model, dataset, name=names[key], seeds=seeds,
                                            checkpoints=checkpoints, progress=progress)
            curves += [{"kind": "study", **curve} for curve in done[key]["curves"]]
            seconds_per_node_step = done[key]["summary"]["seconds"] / (net.num_nodes * net.num_steps * len(seeds))
            last_nodes = net.num_nodes
        studies.append({"study": study, "label": label, "x": x, "run": done[key]["curves"][0]["run"],
                        **{k: v for k, v in done[key]["summary"].items() if k != "counters"}})
    return {"rows": rows, "studies": studies, "skipped_studies": skipped, "curves": curves, "dataset": dataset.name,
            # the cpu preset's scale-downs hold for any selection of its rows and studies
            "scale_downs": list(CPU_SCALE_DOWNS) if results.same_settings(
                dataclasses.asdict(config), dataclasses.asdict(cpu_config()), selection=SELECTION) else None,
            "note": data.LOSSY_CIFAR10_NOTE if config.dataset == "cifar10" else None}


def main(argv: Sequence[str] | None = None) -> int:
    """``report DIR`` redraws table.md and the plots; anything else runs the experiment."""
    return harness_cli.cli(argv, experiment=EXPERIMENT, presets=PRESETS, run=run,
                           description=importlib.import_module(__package__).__doc__, write_report=write_report)
