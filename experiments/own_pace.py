"""The thesis' question when nodes do not wait: output sharing against isolated nodes, synchronous SGD and DiLoCo,
every node at its own pace, with stragglers, jitter, slow links and nodes that leave and rejoin.

The thesis (§2.3) reads its steps as the time of a parallel system in which every node steps together and
messages are free. Here (:mod:`jaxcomm.pace`) every node steps at its own pace: a step lasts ``step_seconds``
(an assumption, stated in every summary) times the node's slowdown (0, 1 or 3 stragglers 3x slower, chosen by
:func:`jaxcomm.clock.stragglers` with seed 0) times a lognormal jitter of 20 %; links are the LAN or WAN
presets (:data:`jaxcomm.clock.LINKS`); under churn every node goes off for Exp(2 s) after Exp(10 s) on, losing the
step it was taking. Methods, each saying what it waits for:

* ``isolated``: output sharing with no content (waits for nothing, sends nothing);
* ``outputs``: output sharing of true labels on a ring of 2 out-neighbours, p_c = 0.5 and the equilibrium p_b =
  0.25 (Algorithm 2: waits for nothing; messages in flight by the link);
* ``sync_sgd``: synchronous SGD (every step waits for the slowest node and a ring all-reduce);
* ``diloco``: synchronous DiLoCo, H = 10 (every round waits for every node);
* ``diloco_quorum``: DiLoCo whose round closes on 7 of 10 reports within a grace window of one nominal step.

Every run trains to ``horizon_seconds`` of virtual time: the ticks of its own timeline that end by then (so its
last evaluation is its model at the horizon), evaluated ``evaluations`` times on validation and test. Read per
condition: the accuracy at the horizon (the networks' collective decision, negentropy weights, as the thesis'
tables; the others' one model; the networks' node average beside it) and the virtual seconds to the target
(chosen on validation: the isolated nodes' final validation accuracy at 0 stragglers on the LAN, mean over seeds,
rounded down to a point). Output sharing minus every other method, paired
by seed, with Holm's adjustment over each table's comparisons.

    python experiments/own_pace.py --preset cpu --out results/own_pace        # ~40 minutes on 2 CPU cores
    python experiments/own_pace.py --preset smoke --out /tmp/own_pace          # the MNIST sample, a minute
    python experiments/own_pace.py report results/own_pace                     # redraw table.md, nothing runs

Each (condition, method) pair is saved as it finishes (``runs/<condition>/<method>.json``); a rerun with the same
``--out`` skips those already there, so an interrupted run continues where it stopped.
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import json
import math
import pathlib
import sys
import time

import numpy as np

from jaxcomm import clock, data, data_parallel, exchange, inbox, local_sgd, methods, network, pace, stats
from jaxcomm.harness import report, results
from jaxcomm.models import MLP


@dataclasses.dataclass(frozen=True)
class Preset:
    dataset: str = "mnist"
    hidden: tuple[int, ...] = (128,)
    num_nodes: int = 10
    batch_size: int = 32
    step_seconds: float = 0.01
    horizon_seconds: float = 30.0
    evaluations: int = 20
    seeds: tuple[int, ...] = (0, 1, 2)
    sync_every: int = 10
    quorum: int = 7


PRESETS = {"cpu": Preset, "smoke": functools.partial(Preset, dataset="mnist_sample", hidden=(32,), num_nodes=4,
                                                     horizon_seconds=1.0, evaluations=2, seeds=(0, 1), quorum=3)}
CONDITIONS = {f"{link}_{k}_stragglers{'_churn' if churn else ''}": (link, k, churn)
              for link, k, churn in [("lan_1g", 0, False), ("lan_1g", 1, False), ("lan_1g", 3, False),
                                     ("wan_100m", 0, False), ("wan_100m", 1, False), ("wan_100m", 3, False),
                                     ("lan_1g", 1, True), ("wan_100m", 1, True)]}
CHURN = clock.Availability(mean_up=10.0, mean_down=2.0)
NETWORKS = ("isolated", "outputs")


def method_of(name: str, preset: Preset) -> methods.Method:
    return {"isolated": lambda: network.output_sharing(exchange.none(), name="isolated"),
            "outputs": lambda: network.output_sharing(exchange.true_labels(), name="outputs"),
            "sync_sgd": data_parallel.sync_sgd,
            "diloco": lambda: local_sgd.diloco(preset.sync_every, name="diloco"),
            "diloco_quorum": lambda: local_sgd.diloco(preset.sync_every, quorum=preset.quorum,
                                                      grace=preset.step_seconds, name="diloco_quorum")}[name]()


METHODS = ("isolated", "outputs", "sync_sgd", "diloco", "diloco_quorum")


def cluster_of(condition: str, preset: Preset) -> clock.Cluster:
    link, k, churn = CONDITIONS[condition]
    speed = clock.stragglers(preset.num_nodes, count=k, slowdown=3.0, seed=0)
    return clock.Cluster(clock.Compute(preset.step_seconds, speed=speed, jitter=0.2,
                                       source="an assumed 10 ms nominal step"),
                         clock.LINKS[link], availability=CHURN if churn else None, name=condition)


def ticks_within_horizon(built, cluster: clock.Cluster, seed: int, preset: Preset) -> int:
    """The ticks of a seed's timeline that end by the horizon (at least one): its model at the horizon is the one
    after the last of them."""
    bound = int(2 * preset.horizon_seconds / preset.step_seconds) + 10
    timeline = pace.of_run(cluster, preset.num_nodes, bound, seed=seed, waits=built.waits,
                           traffic=() if callable(built.traffic) else built.traffic)
    if timeline.time[-1] < preset.horizon_seconds:
        raise RuntimeError(f"{bound} ticks do not reach {preset.horizon_seconds} s")
    return max(1, int(np.sum(timeline.time <= preset.horizon_seconds)))


def run_pair(condition: str, name: str, preset: Preset, dataset) -> dict:
    """Every seed of one method under one condition, each trained to the horizon (its own number of ticks)."""
    cluster, method = cluster_of(condition, preset), method_of(name, preset)
    model = MLP(hidden=preset.hidden, num_classes=dataset.num_classes)
    base = network.NetworkConfig(num_nodes=preset.num_nodes, batch_size=preset.batch_size, topology="ring",
                                 num_neighbours=2, content="true_labels", consume_prob=0.5,
                                 broadcast_prob=inbox.equilibrium_broadcast_prob(0.5, 2), num_steps=1, eval_every=1,
                                 seed=0)
    probe = methods.build(method, base, model, dataset, cluster=cluster, own_pace=True)
    start, curves, shares, ticks = time.perf_counter(), [], [], []
    for seed in preset.seeds:
        count = ticks_within_horizon(probe, cluster, seed, preset)
        config = base.replace(num_steps=count, eval_every=max(1, count // preset.evaluations), seed=seed)
        run = methods.train(method, config, model, dataset, eval_split=("validation", "test"), progress=False,
                            cluster=cluster, own_pace=True)
        curves.append([curve_point(record, name) for record in run["history"]])
        shares.append(run["timeline"].due_share())
        ticks.append(count)
    return {"condition": condition, "method": name, "ticks": ticks, "seconds": time.perf_counter() - start,
            "curves": curves, "due_share": shares}


def curve_point(record: dict, name: str) -> dict:
    """One evaluation: virtual seconds; validation and test accuracy as each method is scored (the networks' N
    nodes by their collective decision, negentropy weights, as the thesis' tables; the others' one model), the node
    average beside it; each node's steps and the goodput."""
    def split_of(split):
        return record if split == "validation" else record[split]  # the first split is the record's

    def scored(split):
        r = split_of(split)
        return r["collective_accuracy"]["negentropy"] if name in NETWORKS else r["avg_accuracy"]

    return {"seconds": record["clock"]["seconds"], "tick": record["step"], "validation": scored("validation"),
            "test": scored("test"), "validation_node_average": split_of("validation")["avg_accuracy"],
            "test_node_average": split_of("test")["avg_accuracy"], "node_steps": record["pace"]["node_steps"],
            "goodput": record["pace"]["goodput"]}


def seconds_to(curve: list[dict], target: float | None, key: str) -> float | None:
    """The virtual seconds of the first evaluation at or above ``target`` (None: never, or no target)."""
    return None if target is None else next((p["seconds"] for p in curve if p[key] >= target), None)


def summarize(out: pathlib.Path, preset_name: str) -> dict:
    pairs = {(p["condition"], p["method"]): p for p in
             (json.loads(f.read_text()) for f in sorted((out / "runs").glob("*/*.json")))}
    isolated = pairs.get(("lan_1g_0_stragglers", "isolated"))
    target = math.floor(float(np.mean([c[-1]["validation"] for c in isolated["curves"]]))) if isolated else None
    tables = {}
    for condition in CONDITIONS:
        rows = {}
        for name in METHODS:
            pair = pairs.get((condition, name))
            if pair is None:
                continue
            final = [c[-1] for c in pair["curves"]]
            rows[name] = {"test": [p["test"] for p in final], "validation": [p["validation"] for p in final],
                          "test_node_average": [p["test_node_average"] for p in final],
                          "seconds_at_end": [p["seconds"] for p in final],
                          "seconds_to_target": [seconds_to(c, target, "validation") for c in pair["curves"]],
                          "goodput": [p["goodput"] for p in final], "node_steps": [p["node_steps"] for p in final],
                          "ticks": pair["ticks"], "due_share": pair["due_share"], "wall_seconds": pair["seconds"]}
        comparisons = []
        if "outputs" in rows:
            for other in METHODS:
                if other != "outputs" and other in rows:
                    diffs = [a - b for a, b in zip(rows["outputs"]["test"], rows[other]["test"], strict=True)]
                    mean = float(np.mean(diffs))
                    comparisons.append({"other": other, "metric": "test accuracy at the horizon", "mean": mean,
                                        "ci95": list(stats.paired_ci95(diffs)), "p": stats.paired_t_p_value(diffs)})
        for c, p in zip(comparisons, stats.holm([c["p"] for c in comparisons]), strict=True):
            c["holm_p"] = p
        tables[condition] = {"rows": rows, "comparisons": comparisons}
    return {"experiment": "own_pace", "preset": preset_name, "target_validation": target, "tables": tables}


def table(summary: dict) -> str:
    head = (f"# Nodes at their own pace\n\n{summary.get('command', '')}\n\nCommit {summary.get('git_commit')}, "
            f"{summary.get('device')}, {summary.get('wall_seconds', 0):.0f} s. Target (validation, chosen on "
            f"isolated nodes at 0 stragglers on the LAN): {summary['target_validation']} %.\n")
    out = [head]
    for condition, t in summary["tables"].items():
        if not t["rows"]:
            continue
        out.append(f"\n## {condition}\n\n| method | test acc. at horizon | node average | s to target (median) | "
                   "goodput | node steps (min-max) |\n|---|---|---|---|---|---|")
        for name, r in t["rows"].items():
            mean, sd = stats.mean_sd(r["test"], digits=2)
            coll, _ = stats.mean_sd(r["test_node_average"], digits=2)
            reach = stats.median_seed(r["seconds_to_target"])
            steps = np.asarray(r["node_steps"])
            out.append(f"| {name} | {mean:.2f} ± {sd:.2f} | {coll:.2f} | "
                       f"{'-' if reach is None else f'{reach:.1f}'} | {np.mean(r['goodput']):.2f} | "
                       f"{steps.min()}-{steps.max()} |")
        if t["comparisons"]:
            out.append("\n| outputs minus | test acc. (paired, 95 % CI) | Holm p |\n|---|---|---|")
            for c in t["comparisons"]:
                p = "-" if c["holm_p"] is None else f"{c['holm_p']:.3g}"
                out.append(f"| {c['other']} | {c['mean']:+.2f} [{c['ci95'][0]:+.2f}, {c['ci95'][1]:+.2f}] | {p} |")
    return "\n".join(out) + "\n"


def plot_curves(out: pathlib.Path) -> None:
    """``curves.png``: test accuracy (as scored) against virtual seconds, mean over seeds, a panel per condition."""
    pairs = [json.loads(f.read_text()) for f in sorted((out / "runs").glob("*/*.json"))]
    conditions = [c for c in CONDITIONS if any(p["condition"] == c for p in pairs)]
    plt = report.pyplot()
    columns = min(4, len(conditions))
    rows = -(-len(conditions) // columns)
    fig, axes = plt.subplots(rows, columns, figsize=(3.6 * columns, 3.0 * rows), squeeze=False, sharey=True)
    for ax, condition in zip(axes.flat, conditions, strict=False):
        for pair in (p for p in pairs if p["condition"] == condition):
            length = min(len(c) for c in pair["curves"])  # seeds end at their own ticks: 20 or 21 evaluations
            seconds = np.mean([[pt["seconds"] for pt in c[:length]] for c in pair["curves"]], axis=0)
            accuracy = np.mean([[pt["test"] for pt in c[:length]] for c in pair["curves"]], axis=0)
            ax.plot(seconds, accuracy, label=pair["method"], marker=".")
        ax.set_title(condition, fontsize=9)
        ax.set_xlabel("virtual seconds")
        ax.grid(alpha=0.3)
    for ax in axes.flat[len(conditions):]:
        ax.axis("off")
    axes[0, 0].set_ylabel("test accuracy (%)")
    axes[0, 0].legend(fontsize=7)
    report.save_figure(fig, out / "curves.png")


def write_report(out: pathlib.Path | str, *, plots: bool = True) -> None:
    """``table.md`` from ``summary.json`` first, then the plot (a failing plot costs only a warning)."""
    out = pathlib.Path(out)
    (out / "table.md").write_text(table(json.loads((out / "summary.json").read_text())))
    if plots:
        report.draw(curves=lambda: plot_curves(out))


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["report"]:
        write_report(argv[1])
        return 0
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--preset", choices=sorted(PRESETS), default="smoke")
    parser.add_argument("--out", default="runs/own_pace")
    parser.add_argument("--data-dir", default=None)
    parser.add_argument("--conditions", nargs="*", default=list(CONDITIONS), choices=list(CONDITIONS))
    parser.add_argument("--methods", nargs="*", default=list(METHODS), choices=list(METHODS))
    args = parser.parse_args(argv)
    preset, out = PRESETS[args.preset](), pathlib.Path(args.out)
    dataset = data.load_mnist_sample() if preset.dataset == "mnist_sample" else \
        data.load_dataset(preset.dataset, args.data_dir)
    start = time.perf_counter()
    for condition in args.conditions:
        for name in args.methods:
            path = out / "runs" / condition / f"{name}.json"
            if path.exists():
                continue
            pair = run_pair(condition, name, preset, dataset)
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(json.dumps(pair) + "\n")
            print(f"{condition} {name}: {max(pair['ticks'])} ticks, test "
                  f"{np.mean([c[-1]['test'] for c in pair['curves']]):.2f} in {pair['seconds']:.0f} s", flush=True)
    summary = summarize(out, args.preset) | {
        "command": results.command_line(), "git_commit": results.git_commit(), "device": results.device_description(),
        "wall_seconds": time.perf_counter() - start, "preset": dataclasses.asdict(preset)}
    (out / "summary.json").write_text(json.dumps(summary, indent=1) + "\n")
    write_report(out)
    print(table(summary))
    return 0


if __name__ == "__main__":
    sys.exit(main())
