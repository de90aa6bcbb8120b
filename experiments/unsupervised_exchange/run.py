"""The chapter-2 unsupervised experiment's run: the rows' node programs and networks, :func:`run` (every row a sweep
over seeds, probed at each stage against the untrained encoders) and :func:`main`, the command line
(``python -m experiments.unsupervised_exchange``).
"""

from __future__ import annotations

import base64
import dataclasses
import functools
import importlib
import time
from collections.abc import Sequence

import jax
import numpy as np

from jaxcomm import bandwidth, data, network, network_sweep, population, recipes, unsupervised
from jaxcomm.checkpoint import Checkpoints
from jaxcomm.harness import cli as harness_cli
from jaxcomm.harness import results

from .presets import (
    CPU_SCALE_DOWNS,
    EXPERIMENT,
    PRESETS,
    UnsupervisedExchangeConfig,
    cpu_config,
)
from .report import ROW_OBJECTIVES, ROWS, write_report


def load(config: UnsupervisedExchangeConfig) -> data.ImageDataset:
    if config.dataset == "mnist_sample":
        return data.load_dataset(config.dataset)
    return data.load_dataset(config.dataset, config.data_dir or None, validation_size=config.validation_size)


@functools.cache
def family_parts(config: UnsupervisedExchangeConfig, family: str, image_shape: tuple[int, ...]):
    """``(program, metrics, pictures)`` of one family (:mod:`jaxcomm.unsupervised`).

    Cached: the rows of one family share these functions, and so their compilations (the
    programs' ``init``, the objective, the pictures; the network steps differ row by row).
    """
    model = config.model(family, image_shape)
    program = config.program(family, image_shape)
    if family == "vae":
        return program, unsupervised.vae_metrics(model), unsupervised.vae_pictures(model)
    return program, unsupervised.bigan_metrics(model), unsupervised.bigan_pictures(model)


def num_params(program: network.NodeProgram) -> int:
    """Trainable parameters of one node, from shapes only."""
    return bandwidth.num_params(jax.eval_shape(program.init, jax.random.PRNGKey(0)).params)


def encode_images(images: np.ndarray) -> dict:
    """uint8 ``[K, H, W, C]`` as JSON: shape and base64 bytes."""
    images = np.ascontiguousarray(images, np.uint8)
    return {"shape": list(images.shape), "base64": base64.b64encode(images.tobytes()).decode("ascii")}


def summarise(name: str, history: list[dict], *, nodes: int) -> dict:
    """The row of Table 2.3: the stage with the best validation node average, its test accuracies."""
    best = unsupervised.best_stage(history)
    probe = best["probe"]
    best_collective = unsupervised.best_stage(history, "val_collective_accuracy")
    many = nodes > 1
    return {
        "avg_accuracy": probe["avg_accuracy"],
        "collective_accuracy": probe["collective_accuracy"]["negentropy"] if many else None,
        "best_step": int(best["step"]),
        "collective_accuracy_by_weighting": dict(probe["collective_accuracy"]) if many else None,
        "val_avg_accuracy": probe["val_avg_accuracy"],
        "val_collective_accuracy": probe["val_collective_accuracy"] if many else None,
        "node_accuracy_min_max": [min(probe["node_accuracies"]), max(probe["node_accuracies"])],
        "probe_best_epochs": probe["best_epochs"],
        # the thesis picks one stage per row; picking it by the collective's validation accuracy instead:
        "best_step_by_val_collective": int(best_collective["step"]) if many else None,
        "collective_accuracy_at_that_step": (best_collective["probe"]["collective_accuracy"]["negentropy"]
                                             if many else None),
        "stages": [{"step": h["step"], "avg_accuracy": h["probe"]["avg_accuracy"],
                    "collective_accuracy": h["probe"]["collective_accuracy"]["negentropy"],
                    "val_avg_accuracy": h["probe"]["val_avg_accuracy"],
                    "val_collective_accuracy": h["probe"]["val_collective_accuracy"],
                    "seconds": round(h["probe"]["seconds"], 1)} for h in history if "probe" in h],
    }


def train(config: UnsupervisedExchangeConfig, name: str, dataset: data.ImageDataset, *,
          checkpoints: Checkpoints | None, progress: bool, controls: dict) -> tuple[dict, dict, dict]:
    """One row trained with every seed as one sweep (:func:`jaxcomm.network_sweep.train_networks`) and summarised:
    ``(row, curve, pictures)`` — the row and curve averaged over seeds (each seed's row in ``per_seed``), the
    pictures of the first seed's node 0.

    ``controls`` caches the untrained encoders' probes per (family, nodes) across rows, one per seed.
    """
    family, nodes, communicate = ROWS[name]
    if name in ROW_OBJECTIVES:
        config = dataclasses.replace(config, consumed_objective=ROW_OBJECTIVES[name])
    net = config.network(nodes, communicate)
    seeds = [config.seed + i for i in range(config.num_seeds)]
    program, metrics, pictures = family_parts(config, family, tuple(dataset.train.images.shape[1:]))
    # seed None: each run's evaluation (its fixed noise and probe shuffling) follows its own seed, as alone
    evaluator = unsupervised.make_evaluator(dataset, metrics=metrics, probe_steps=config.probe_steps,
                                            probe=config.probe, metric_batch=config.objective_batch)
    # Before training: each run starts from this very state (network.init of PRNGKey(seed)). The probes of the
    # untrained encoders are the control of every accuracy: the same for every row of one family and size.
    untrained = network.make_network(net, program, image_shape=dataset.train.images.shape[1:],
                                     num_classes=dataset.num_classes)
    key = (family, nodes)
    probe_now = config.probe_untrained and key not in controls
    befores = [evaluator(dataclasses.replace(untrained, config=net.replace(seed=seed)),
                         untrained.init(jax.random.PRNGKey(seed)), 0, probe_now=probe_now) for seed in seeds]
    if probe_now:
        controls[key] = [before["probe"] for before in befores]
    outs = network_sweep.train_networks([net.replace(seed=seed) for seed in seeds], program, dataset,
                                        evaluator=evaluator,
                                        progress=progress, desc=name,
                                        checkpointer=checkpoints.run(name) if checkpoints else None)
    runs = [_run_row(name, out, before, program=program, control=controls[key][i] if key in controls else None)
            for i, (out, before) in enumerate(zip(outs, befores, strict=True))]
    if probe_now:
        for run, before in zip(runs, befores, strict=True):
            run["probe_seconds"] = round(run["probe_seconds"] + before["probe"]["seconds"], 1)
    row, curve = _over_seeds(runs, seeds, outs)
    shown = unsupervised.pictures_of(pictures, population.node(outs[0]["state"].nodes, 0),
                                     dataset.test.images[: config.num_pictures], jax.random.PRNGKey(config.seed))
    picture_record = {"kind": "pictures", "run": name, "step": outs[0]["steps_done"],
                      **{k: encode_images(v) for k, v in shown.items()}}
    coll = "-" if row["collective_accuracy"] is None else f"{row['collective_accuracy']:.1f}"
    print(f"[{name}] {len(seeds)} seed(s): avg {row['avg_accuracy']:.1f} collective {coll} "
          f"({row['seconds']:.0f} s, probes {row['probe_seconds']:.0f} s)", flush=True)
    return row, curve, picture_record


def _run_row(name: str, out: dict, before: dict, *, program: network.NodeProgram, control: dict | None
             ) -> dict:
    """One seed's row of Table 2.3 (:func:`summarise` plus its costs and settings), its curve in ``_curve``."""
    history, net = out["history"], out["network"].config
    nodes = net.num_nodes
    row = summarise(name, history, nodes=nodes)
    counters = out["final"]["counters"]
    message = out["network"].message_bytes
    if control is not None:
        row.update({"untrained_avg_accuracy": control["avg_accuracy"],
                    "untrained_collective_accuracy": control["collective_accuracy"]["negentropy"] if nodes > 1
                    else None})
    initial = before["objective"]
    row.update({
        "family": ROWS[name][0], "nodes": nodes, "communication": net.content != "none", "steps": out["steps_done"],
        "consume_prob": net.consume_prob, "broadcast_prob": net.broadcast_prob,
        "consumed_objective": ROW_OBJECTIVES.get(name, "replace") if net.content != "none" else None,
        "num_params": num_params(program),
        "payload_dim": program.payload_dim, "message_bytes": message, "data_model": net.data_model,
        "bytes_sent_per_node_step": counters["sent"] * message / (nodes * max(out["steps_done"], 1)),
        "counters": counters, "consumed_fraction": float(np.mean([h["consumed_fraction"] for h in history])),
        "initial_objective": initial, "final_objective": history[-1]["objective"],
        "seconds": round(out["train_seconds"], 1),
        "probe_seconds": round(sum(h["probe"]["seconds"] for h in history if "probe" in h), 1),
    })
    row["_curve"] = {
        "kind": "row", "run": name, "family": row["family"], "nodes": nodes, "communication": row["communication"],
        "steps": [0] + [h["step"] for h in history], "loss": [None] + [round(h["loss"], 4) for h in history],
        "objective": {k: [round(v, 4) for v in [initial[k]] + [h["objective"][k] for h in history]]
                      for k in initial},
        "probe_steps": [h["step"] for h in history if "probe" in h],
        "avg_accuracy": [round(h["probe"]["avg_accuracy"], 3) for h in history if "probe" in h],
        "collective_accuracy": [round(h["probe"]["collective_accuracy"]["negentropy"], 3)
                                for h in history if "probe" in h],
        "val_avg_accuracy": [round(h["probe"]["val_avg_accuracy"], 3) for h in history if "probe" in h],
        "untrained_avg_accuracy": row.get("untrained_avg_accuracy"),
        "untrained_collective_accuracy": row.get("untrained_collective_accuracy"),
        "seconds": [0.0] + [round(h["seconds"], 1) for h in history]}
    return row


def _over_seeds(runs: list[dict], seeds: list[int], outs: list[dict]) -> tuple[dict, dict]:
    """A row and its curve over seeds: one seed's as they are; else the mean of every number (stages and
    curves point by point), the sd of the accuracies, each seed's row in ``per_seed`` and its best stage in
    ``best_steps``, ``seconds`` the sweep's."""
    curves = [run.pop("_curve") for run in runs]
    if len(runs) == 1:
        return runs[0], curves[0]
    row = recipes.summarize_seeds(runs, seeds, spread=("avg_accuracy", "collective_accuracy", "val_avg_accuracy",
                                                       "val_collective_accuracy", "untrained_avg_accuracy",
                                                       "untrained_collective_accuracy"))
    row["stages"] = _mean([run["stages"] for run in runs])  # stage by stage, key by key
    row["best_steps"] = [run["best_step"] for run in runs]
    # a population sweep's runs share one clock, a sequential sweep's run one after another
    times = [run["seconds"] for run in runs]
    row["seconds"] = max(times) if outs[0]["sweep"]["mode"] == "population" else round(sum(times), 1)
    row["probe_seconds"] = round(sum(run["probe_seconds"] for run in runs), 1)
    curve = {k: _mean([c[k] for c in curves]) for k in curves[0]} | {"seeds": seeds}
    return row, curve


def _mean(values: list):
    """The mean of numbers, element by element of equal-length lists, key by key of dicts; else the first."""
    first = values[0]
    if isinstance(first, dict):
        return {k: _mean([v[k] for v in values]) for k in first}
    if isinstance(first, list):
        return [_mean(list(column)) for column in zip(*values, strict=True)]
    if first is None or isinstance(first, bool) or not isinstance(first, int | float):
        return first
    return float(np.mean(values))


def run(config: UnsupervisedExchangeConfig, *, checkpoints: Checkpoints | None = None, progress: bool = True) -> dict:
    """Trains the rows; returns ``rows`` and ``curves`` (objective and probe curves, then pictures)."""
    dataset = load(config)
    rows: dict[str, dict] = {}
    curves: list[dict] = []
    pictures: list[dict] = []
    start = time.perf_counter()
    controls: dict = {}
    for name in config.rows:
        row, curve, shown = train(config, name, dataset, checkpoints=checkpoints, progress=progress,
                                  controls=controls)
        rows[name] = row
        curves.append(curve)
        pictures.append(shown)
    return {"rows": rows, "curves": curves + pictures, "dataset": dataset.name,
            "rows_seconds": round(time.perf_counter() - start, 1),
            # the cpu preset's scale-downs hold for any selection of its rows
            "scale_downs": list(CPU_SCALE_DOWNS) if results.same_settings(
                dataclasses.asdict(config), dataclasses.asdict(cpu_config()), selection=("rows",)) else None,
            "note": data.LOSSY_CIFAR10_NOTE if config.dataset == "cifar10" else None}


def main(argv: Sequence[str] | None = None) -> int:
    """``report DIR`` redraws table.md and the plots; anything else runs the experiment."""
    return harness_cli.cli(argv, experiment=EXPERIMENT, presets=PRESETS, run=run,
                           description=importlib.import_module(__package__).__doc__, write_report=write_report)
