"""The reliability experiment's run: a resume checked against a straight run (:func:`resume_check`), the bad
configurations counted (:func:`bad_config_cases`), the networks trained while nodes fail (:func:`run`) and
:func:`main`, the command line (``python -m experiments.reliability``).
"""

from __future__ import annotations

import importlib
import os
import pathlib
import shutil
import signal
import tempfile
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from jaxcomm import data, network, network_sweep
from jaxcomm.checkpoint import Checkpointer, Checkpoints
from jaxcomm.driver import Interrupted
from jaxcomm.harness import cli as harness_cli
from jaxcomm.models import MLP
from jaxcomm.models.cnn import StridedCNN

from .presets import PRESETS, ReliabilityConfig
from .report import write_report

# --------------------------------------------------------------------------- resume


def _comparable(history: list[dict]) -> list[dict]:
    """A history without its wall-clock field (the only thing a resume may change)."""
    return [{k: v for k, v in record.items() if k != "seconds"} for record in history]


def resume_check(num_steps: int, *, seed: int = 0, directory: str | os.PathLike | None = None) -> dict:
    """Trains a small network straight through, then again killed by SIGTERM mid-run and resumed.

    The kill is a real signal to this process, sent during the second evaluation;
    the driver keeps that chunk, saves a checkpoint and raises :class:`Interrupted`.

    Returns:
      ``{"value": histories and final states identical, "interrupted_at": steps,
      "history_identical": bool, "state_identical": bool}``.
    """
    import jax  # noqa: PLC0415

    dataset = data.load_mnist_sample()
    model = MLP(hidden=(32,), num_classes=dataset.num_classes)
    config = network.NetworkConfig(num_nodes=4, num_neighbours=2, content="true_labels", num_steps=num_steps,
                                   eval_every=max(num_steps // 6, 1), seed=seed)
    straight = network.train_network(config, model, dataset, progress=False)
    folder = pathlib.Path(directory or tempfile.mkdtemp(prefix="jaxcomm-resume-"))
    evaluate, calls = network.accuracy_evaluator(dataset.test), []

    def evaluate_then_kill(*args):
        calls.append(1)
        if len(calls) == 2:
            os.kill(os.getpid(), signal.SIGTERM)
        return evaluate(*args)

    try:
        network.train_network(config, model, dataset, progress=False, evaluator=evaluate_then_kill,
                              checkpointer=Checkpointer(folder, every=config.eval_every))
        raise AssertionError("the SIGTERM did not interrupt the run")
    except Interrupted as error:
        interrupted_at = error.steps_done
    resumed = network.train_network(config, model, dataset, progress=False,
                                    checkpointer=Checkpointer(folder, every=config.eval_every, resume=True))
    if directory is None:
        shutil.rmtree(folder, ignore_errors=True)
    same_history = _comparable(straight["history"]) == _comparable(resumed["history"])
    leaves = lambda out: jax.tree_util.tree_leaves(jax.device_get(out["state"]))
    same_state = all(np.array_equal(a, b) for a, b in zip(leaves(straight), leaves(resumed), strict=True))
    return {"value": bool(same_history and same_state), "interrupted_at": interrupted_at,
            "history_identical": same_history, "state_identical": same_state}


# --------------------------------------------------------------------------- bad configs


def bad_config_cases() -> list[tuple[str, str, Callable[[], Any]]]:
    """``(rule, field named in the error, build)``: each ``build()`` must raise ValueError naming the field.

    One rule per line: ``tests/test_validation.py`` runs each as its own test, and
    :func:`run` counts them.
    """
    from jaxcomm import language  # noqa: PLC0415  (the ch. 4 engine's own config and member checks)
    from jaxcomm import teacher as ch3  # noqa: PLC0415  (the ch. 3 engine's own config and student checks)

    net = network.NetworkConfig
    teacher = ch3.SelectionConfig
    cases = [
        ("nodes < 1", "num_nodes", lambda: net(num_nodes=0)),
        ("nodes not an integer", "num_nodes", lambda: net(num_nodes=2.5)),
        ("p >= N", "num_neighbours", lambda: net(num_nodes=4, num_neighbours=4)),
        ("p < 0", "num_neighbours", lambda: net(num_nodes=4, num_neighbours=-1)),
        ("unknown topology", "topology", lambda: net(topology="star")),
        ("redraw period < 1", "redraw_every", lambda: net(topology="time_varying", redraw_every=0)),
        ("broadcast probability > 1", "broadcast_prob", lambda: net(broadcast_prob=1.5)),
        ("consume probability < 0", "consume_prob", lambda: net(consume_prob=-0.1)),
        ("unknown content", "content", lambda: net(content="gradients")),
        ("temperature <= 0", "temperature", lambda: net(temperature=0.0)),
        ("consumed weight < 0", "consumed_weight", lambda: net(consumed_weight=-1.0)),
        ("inbox capacity < 1", "capacity", lambda: net(inbox_capacity=0)),
        ("unknown overflow policy", "overflow", lambda: net(overflow="drop_random")),
        ("batch size < 1", "batch_size", lambda: net(batch_size=0)),
        ("learning rate <= 0", "learning_rate", lambda: net(learning_rate=0.0)),
        ("unknown partition", "partition", lambda: net(partition="sorted")),
        ("Dirichlet alpha <= 0", "dirichlet_alpha", lambda: net(partition="dirichlet", dirichlet_alpha=0.0)),
        ("unknown backend", "backend", lambda: net(backend="pmap")),
        ("unknown step loop", "step_loop", lambda: net(step_loop="while")),
        ("failure probability >= 1", "failure_prob", lambda: net(failure_prob=1.0)),
        ("failure duration < 1", "failure_steps", lambda: net(failure_steps=0.5)),
        ("failure schedule names a missing node", "failure_schedule",
         lambda: net(num_nodes=4, num_neighbours=2, failure_schedule=((4, 0, 10),))),
        ("unknown inbox-on-failure policy", "inbox_on_failure", lambda: net(inbox_on_failure="forward")),
        ("steps < 0", "num_steps", lambda: net(num_steps=-1)),
        ("evaluation period < 1", "eval_every", lambda: net(eval_every=0)),
        ("seed not an integer", "seed", lambda: net(seed="zero")),
        ("teacher patience < 1", "teacher_patience", lambda: teacher(teacher_patience=0)),
        ("teacher dropout >= 1", "teacher_dropout", lambda: teacher(teacher_dropout=1.0)),
        ("student widths empty", "student_hidden", lambda: teacher(student_hidden=())),
        ("unknown stack padding", "padding", lambda: teacher(padding="none")),
        ("stack size < 1", "stack_size", lambda: ch3.check_students(teacher(), [ch3.Student("x", 0, 0)])),
        ("n * m larger than the training set", "stack_size",
         lambda: ch3.check_students(teacher(), [ch3.Student("x", 0, 1000)], train_size=4000)),
        ("batch size < 1 (language)", "batch_size", lambda: language.AgentsConfig(batch_size=0)),
        ("temperature floor <= 0 (language)", "tau_floor", lambda: language.AgentsConfig(tau_floor=0.0)),
        ("temperature decay > 1 (language)", "tau_decay", lambda: language.AgentsConfig(tau_decay=1.5)),
        ("inversion noise > 1 (language)", "noise",
         lambda: language.check_members([language.Member("baseline", seed=0, noise=1.2)])),
        ("unknown critic (language)", "critic", lambda: language.AgentsConfig(critic="mine")),
        ("unknown dataset (reliability)", "dataset", lambda: ReliabilityConfig(dataset="svhn")),
        ("failure fraction >= 1", "failure_fractions", lambda: ReliabilityConfig(failure_fractions=(1.0,))),
    ]
    if _device_count() > 1:  # on one device every N divides
        cases.append(("nodes not divisible over devices", "num_nodes",
                      lambda: net(num_nodes=_device_count() + 1, num_neighbours=1, backend="sharded").check_devices()))
    return cases


def _device_count() -> int:
    import jax  # noqa: PLC0415

    return jax.device_count()


def count_rejected(cases: Sequence[tuple[str, str, Callable[[], Any]]]) -> dict:
    """Builds each bad config; a case passes if it raises ValueError whose message names its field."""
    rejected, failures = 0, []
    for rule, field, build in cases:
        try:
            build()
        except ValueError as error:
            if field in str(error):
                rejected += 1
                continue
            failures.append(f"{rule}: message does not name {field}: {error}")
        else:
            failures.append(f"{rule}: accepted")
    return {"value": rejected, "cases": len(cases), "failures": failures}


# --------------------------------------------------------------------------- failures


def load(config: ReliabilityConfig) -> data.ImageDataset:
    return data.load_dataset(config.dataset, config.data_dir or None)


def model_for(config: ReliabilityConfig, num_classes: int):
    if config.dataset == "cifar10":
        return StridedCNN(widths=config.widths, num_classes=num_classes)
    return MLP(hidden=config.widths, num_classes=num_classes)


def run(config: ReliabilityConfig, *, checkpoints: Checkpoints | None = None, progress: bool = True) -> dict:
    """The three parts of the module docstring; ``rows`` as issue 8 names them."""
    rows: dict[str, dict] = {"resume_identical": resume_check(config.resume_steps, seed=config.seed)}
    rows["bad_configs_rejected"] = count_rejected(bad_config_cases())
    dataset = load(config)
    model = model_for(config, dataset.num_classes)
    curves = []
    for fraction in config.failure_fractions:
        row: dict[str, Any] = {"failure_fraction": fraction, "failure_prob": config.failure_prob(fraction),
                               "avg_accuracy": {}, "collective_accuracy": {}, "alive_fraction": {},
                               "collective_accuracy_by_weighting": {}, "seconds": {}, "per_seed": {}}
        for n in config.node_counts:
            finals = []
            seeds = range(config.seed, config.seed + config.seeds)
            name = f"n{n}_f{round(100 * fraction)}"
            outs = network_sweep.train_networks([config.network(n, fraction, seed) for seed in seeds], model, dataset,
                                                progress=progress, desc=name,
                                                checkpointer=checkpoints.run(name) if checkpoints else None)
            for seed, out in zip(seeds, outs, strict=True):
                finals.append(out["final"])
                alive = float(np.mean([h["alive_fraction"] for h in out["history"]]))
                curves.append({"nodes": n, "failure_fraction": fraction, "seed": seed, "alive_fraction": alive,
                               "steps": [h["step"] for h in out["history"]],
                               "avg_accuracy": [round(h["avg_accuracy"], 3) for h in out["history"]],
                               "collective_accuracy": [round(h["collective_accuracy"]["negentropy"], 3)
                                                       for h in out["history"]],
                               "reachable": [h["reachable"] for h in out["history"]],
                               "seconds": round(out["history"][-1]["seconds"], 1)})
            key = str(n)
            row["per_seed"][key] = [{"seed": seed, "avg_accuracy": f["avg_accuracy"],
                                     "collective_accuracy": f["collective_accuracy"]["negentropy"]}
                                    for seed, f in zip(seeds, finals, strict=True)]
            row["avg_accuracy"][key] = float(np.mean([f["avg_accuracy"] for f in finals]))
            row["collective_accuracy"][key] = float(np.mean([f["collective_accuracy"]["negentropy"] for f in finals]))
            row["collective_accuracy_by_weighting"][key] = {
                w: float(np.mean([f["collective_accuracy"][w] for f in finals]))
                for w in finals[0]["collective_accuracy"]}
            row["alive_fraction"][key] = float(np.mean([c["alive_fraction"] for c in curves[-config.seeds:]]))
            # a population sweep's runs share one clock; a sequential sweep's run one after another
            seconds = [out["history"][-1]["seconds"] for out in outs]
            row["seconds"][key] = float(max(seconds) if outs[0]["sweep"]["mode"] == "population" else sum(seconds))
        rows[f"failure_{round(100 * fraction)}"] = row
    return {"rows": rows, "curves": curves, "dataset": dataset.name,
            "note": data.LOSSY_CIFAR10_NOTE
            if config.dataset == "cifar10" else None}


def main(argv: Sequence[str] | None = None) -> int:
    """``report DIR`` redraws table.md and the plot; anything else runs the experiment."""
    return harness_cli.cli(argv, experiment="reliability", presets=PRESETS, run=run,
                           description=importlib.import_module(__package__).__doc__, write_report=write_report)
