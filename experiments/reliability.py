"""Reliability: resumable runs, bad configs rejected, and chapter-2 networks whose nodes fail.

The thesis motivates decentralised training by "increased stability and failure
resistance" (§2.1) but never tests it. This experiment

1. trains a small network once straight through and once stopped by a real
   SIGTERM and resumed from its orbax checkpoint, and checks the two histories
   and final states are identical (row ``resume_identical``);
2. builds every bad configuration of :func:`bad_config_cases` and counts those
   rejected before anything compiles with a message naming the field
   (row ``bad_configs_rejected``; ``tests/test_validation.py`` has one test each);
3. trains the chapter-2 CNN network on CIFAR-10 (true labels, fully connected,
   10 and 20 nodes) while nodes fail: a node is down a fraction f in {0, 10, 30} %
   of the time (down with probability q per step, back after D steps on average,
   f = qD / (1 + qD)); a down node neither trains, sends nor receives, and the
   collective decision asks only the reachable nodes (rows ``failure_0``,
   ``failure_10``, ``failure_30``).

    python experiments/reliability.py --preset cpu        # writes runs/reliability/cpu-<time>/
    python experiments/reliability.py report results/reliability   # redraws table.md and the plot
"""

from __future__ import annotations

import dataclasses
import os
import pathlib
import shutil
import signal
import sys
import tempfile
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from jaxcomm import data, inbox, network, network_sweep, stats
from jaxcomm.checkpoint import Checkpointer, Checkpoints
from jaxcomm.driver import Interrupted
from jaxcomm.harness import cli as harness_cli
from jaxcomm.harness import report, results
from jaxcomm.models import MLP
from jaxcomm.models.cnn import StridedCNN
from jaxcomm.validation import integer, one_of, probability, require, widths

DATASETS = ("cifar10", "mnist", "mnist_sample")


@dataclasses.dataclass(frozen=True)
class ReliabilityConfig:
    """The failure experiment and the resume check.

    Attributes:
      dataset: "cifar10" (the chapter-2 data) or an MNIST variant (smoke tests).
      data_dir: where the dataset lives ("" = ``JAXCOMM_DATA_DIR`` or tfds).
      widths: the strided CNN's channels (CIFAR-10) or the MLP's hidden widths (MNIST).
      node_counts: N of each network.
      failure_fractions: fraction of time each node is down, each in [0, 1).
      failure_steps: D, mean steps a failed node stays down.
      inbox_on_failure: "keep" or "lose" (see :class:`jaxcomm.network.NetworkConfig`).
      consume_prob: p_c (thesis 0.5); nodes broadcast with p_c / (N - 1).
      num_steps: training steps of each network.
      eval_every: steps between test evaluations.
      seeds: seeds per (N, f), trained as one sweep (:func:`jaxcomm.network_sweep.train_networks`).
      resume_steps: steps of the resume check's small MNIST network.
      seed: the first seed.
    """

    dataset: str = "cifar10"
    data_dir: str = ""
    widths: tuple[int, ...] = (16, 32, 64)
    node_counts: tuple[int, ...] = (10, 20)
    failure_fractions: tuple[float, ...] = (0.0, 0.1, 0.3)
    failure_steps: float = 100.0
    inbox_on_failure: str = "keep"
    consume_prob: float = 0.5
    num_steps: int = 2000
    eval_every: int = 250
    seeds: int = 1
    resume_steps: int = 600
    seed: int = 0

    def __post_init__(self):
        one_of("dataset", self.dataset, DATASETS)
        require(isinstance(self.data_dir, str), "data_dir", "a string", self.data_dir)
        widths("widths", self.widths)
        require(isinstance(self.node_counts, tuple) and len(self.node_counts) >= 1
                and all(isinstance(n, int) and n >= 2 for n in self.node_counts),
                "node_counts", "a non-empty tuple of integers >= 2", self.node_counts)
        require(isinstance(self.failure_fractions, tuple) and len(self.failure_fractions) >= 1
                and all(isinstance(f, float | int) and 0 <= f < 1 for f in self.failure_fractions),
                "failure_fractions", "a non-empty tuple of fractions in [0, 1)", self.failure_fractions)
        require(isinstance(self.failure_steps, float | int) and self.failure_steps >= 1, "failure_steps",
                "a number >= 1", self.failure_steps)
        one_of("inbox_on_failure", self.inbox_on_failure, network.INBOX_ON_FAILURE)
        probability("consume_prob", self.consume_prob)
        for name in ("num_steps", "eval_every", "seeds", "resume_steps"):
            integer(name, getattr(self, name), low=1)
        integer("seed", self.seed)

    def failure_prob(self, fraction: float) -> float:
        """q such that a node is down ``fraction`` of the time: f = qD / (1 + qD)."""
        return fraction / (self.failure_steps * (1.0 - fraction))

    def network(self, num_nodes: int, fraction: float, seed: int) -> network.NetworkConfig:
        return network.NetworkConfig(
            num_nodes=num_nodes, topology="full", content="true_labels", consume_prob=self.consume_prob,
            broadcast_prob=inbox.equilibrium_broadcast_prob(self.consume_prob, num_nodes - 1), inbox_capacity=16,
            failure_prob=self.failure_prob(fraction), failure_steps=float(self.failure_steps),
            inbox_on_failure=self.inbox_on_failure, num_steps=self.num_steps, eval_every=self.eval_every, seed=seed)


def cpu_config() -> ReliabilityConfig:
    """About 1 hour alone on 2 CPU cores: quarter-width CNN (16-32-64), 1,500 steps, 3 seeds (networks trained
    alone took about 120 s at 10 nodes and 245 s at 20; results/reliability/notes.md)."""
    return ReliabilityConfig(num_steps=1500, seeds=3)


def thesis_config() -> ReliabilityConfig:
    """The thesis' CNN width (64-128-256) and 5,000 steps, 3 seeds (for an accelerator)."""
    return ReliabilityConfig(widths=(64, 128, 256), num_steps=5000, eval_every=250, seeds=3)


def smoke_config() -> ReliabilityConfig:
    """Seconds: small MLP nodes on the shipped MNIST sample."""
    return ReliabilityConfig(dataset="mnist_sample", widths=(16,), node_counts=(4,), failure_fractions=(0.0, 0.3),
                             failure_steps=10.0, num_steps=60, eval_every=20, resume_steps=60)


PRESETS = {"smoke": smoke_config, "cpu": cpu_config, "thesis": thesis_config}


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


# --------------------------------------------------------------------------- report


def plot(curves: list[dict], path: pathlib.Path) -> None:
    plt = report.pyplot()

    nodes = sorted({c["nodes"] for c in curves})
    fig, axes = plt.subplots(1, len(nodes), figsize=(6 * len(nodes), 4.2), squeeze=False, sharey=True)
    colours = plt.cm.viridis(np.linspace(0, 0.85, len({c["failure_fraction"] for c in curves})))
    fractions = sorted({c["failure_fraction"] for c in curves})
    for ax, n in zip(axes[0], nodes, strict=True):
        for colour, f in zip(colours, fractions, strict=True):
            runs = [c for c in curves if c["nodes"] == n and c["failure_fraction"] == f]
            steps = runs[0]["steps"]
            coll = np.mean([c["collective_accuracy"] for c in runs], axis=0)
            avg = np.mean([c["avg_accuracy"] for c in runs], axis=0)
            ax.plot(steps, coll, color=colour, label=f"{100 * f:.0f}% down: collective")
            ax.plot(steps, avg, color=colour, linestyle="--", label=f"{100 * f:.0f}% down: node average")
        ax.set(title=f"{n} nodes, true labels, fully connected", xlabel="step", ylabel="test accuracy (%)")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    report.save_figure(fig, path, dpi=120)


def table_markdown(summary: dict) -> str:
    rows, config = summary["rows"], summary["config"]
    nodes = [str(n) for n in config["node_counts"]]
    lines = ["# Reliability: resume, bad configs, failing nodes", "",
             f"Command: `{summary['command']}`  ",
             f"Preset `{summary['preset']}`, wall time {summary['wall_seconds']:.0f} s on {summary['device']}; "
             f"commit `{summary['git_commit']}`.", ""]
    resume = rows["resume_identical"]
    bad = rows["bad_configs_rejected"]
    failed = " — failures: " + "; ".join(bad["failures"]) if bad["failures"] else ""
    lines += [f"- **Resume**: a 4-node MNIST-sample network killed by a real SIGTERM after "
              f"{resume['interrupted_at']} of {config['resume_steps']} steps and resumed from its orbax checkpoint "
              f"ends with {'exactly the' if resume['value'] else 'NOT the'} history and final state of the "
              f"uninterrupted run (history identical: {resume['history_identical']}, state identical: "
              f"{resume['state_identical']}).",
              f"- **Bad configs**: {bad['value']} of {bad['cases']} rules rejected before anything compiles, each "
              f"with a message naming the field{failed}.",
              ""]
    note = f" ({summary['note']})" if summary.get("note") else ""
    model = "strided CNN, channels" if config["dataset"] == "cifar10" else "MLP, hidden"
    lines += ["## Nodes that fail", "",
              f"Chapter-2 network on {summary.get('dataset')}{note}: {model} "
              f"{tuple(config['widths'])}, true labels, fully connected, consume 0.5, broadcast 0.5/(N-1), inbox 16, "
              f"{config['num_steps']} steps, {config['seeds']} seed(s). A node is down a fraction f of the time "
              f"(down with probability q per step, back after {config['failure_steps']:.0f} steps on average); "
              f"down nodes neither train, send nor receive (inbox {config['inbox_on_failure']}); the collective "
              "decision (negentropy weighting) asks only the nodes up at evaluation time.", "",
              "| row | f | q per step | measured down | " + " | ".join(
                  f"N={n} avg | N={n} collective" for n in nodes) + " |",
              "|---|---|---|---|" + "---|---|" * len(nodes)]
    for name, row in rows.items():
        if not name.startswith("failure_"):
            continue
        down = ", ".join(f"{100 * (1 - row['alive_fraction'][n]):.1f}%" for n in nodes)
        cells = " | ".join(f"{_over_seeds(row, 'avg_accuracy', n)} | {_over_seeds(row, 'collective_accuracy', n)}"
                           for n in nodes)
        lines.append(f"| {name} | {100 * row['failure_fraction']:.0f}% | {row['failure_prob']:.5f} | {down} | "
                     f"{cells} |")
    lines += paired_markdown(rows, nodes)
    lines += ["", "![accuracy vs steps](failures.png)", ""]
    return "\n".join(lines)


def _over_seeds(row: dict, key: str, nodes: str) -> str:
    """A cell: the mean over seeds, "± sd" where the row kept several seeds' values."""
    per_seed = (row.get("per_seed") or {}).get(nodes) or ()
    if len(per_seed) < 2:
        return f"{row[key][nodes]:.1f}"
    return f"{row[key][nodes]:.1f} ± {stats.mean_sd([p[key] for p in per_seed])[1]:.1f}"


def paired_markdown(rows: dict, nodes: Sequence[str]) -> list[str]:
    """The directions the failure grid is read for, each over seeds (>= 2) with its 95 % interval
    (:func:`jaxcomm.harness.report.paired_comparisons`): every failure level against no failures for each N
    (paired by seed: the same shards, initialisations and messages' randomness), and the largest N's drop against
    the smallest's (a difference of the two drops, seed by seed): "more nodes are more robust"."""
    levels = {name: row for name, row in rows.items() if name.startswith("failure_") and row.get("per_seed")}
    if "failure_0" not in levels:
        return []
    pseudo, comparisons = {}, []
    for name, row in levels.items():
        for n in nodes:
            per_seed = row["per_seed"][n]
            pseudo[f"{name}/N={n}"] = {"seeds": [p["seed"] for p in per_seed], "per_seed": per_seed}
            if name != "failure_0":
                comparisons.append((f"{name}/N={n}", f"failure_0/N={n}",
                                    f"N={n}: {round(100 * row['failure_fraction'])}% down vs none"))
    if len(nodes) > 1:
        small, large = nodes[0], nodes[-1]
        for name, row in levels.items():
            if name == "failure_0":
                continue
            drops = {n: [{key: p[key] - q[key] for key in ("avg_accuracy", "collective_accuracy")}
                         for p, q in zip(row["per_seed"][n], levels["failure_0"]["per_seed"][n], strict=True)]
                     for n in (small, large)}
            seeds = [p["seed"] for p in row["per_seed"][small]]
            for n in (small, large):
                pseudo[f"drop/{name}/N={n}"] = {"seeds": seeds, "per_seed": drops[n]}
            comparisons.append((f"drop/{name}/N={large}", f"drop/{name}/N={small}",
                                f"{round(100 * row['failure_fraction'])}% down: N={large}'s change vs N={small}'s"))
    return report.paired_comparisons(
        pseudo, comparisons, ("avg_accuracy", "collective_accuracy"),
        why_paired="the same seed draws the same shards and initialisations; a drop is a level's accuracy minus no "
        "failures' on the same seed")


def write_report(out_dir: pathlib.Path, *, plots: bool = True) -> None:
    """Writes table.md, then (with ``plots``) failures.png, from the run in ``out_dir``."""
    out_dir = pathlib.Path(out_dir)
    summary, curves = results.read_run(out_dir)
    report.write_table(out_dir, table_markdown(summary))
    if plots:
        report.draw(failures=lambda: plot(curves, out_dir / "failures.png"))


def cli(argv: Sequence[str] | None = None) -> int:
    """``report DIR`` redraws table.md and the plot; anything else runs the experiment."""
    return harness_cli.cli(argv, experiment="reliability", presets=PRESETS, run=run, description=__doc__,
                          write_report=write_report)


if __name__ == "__main__":
    sys.exit(cli())
