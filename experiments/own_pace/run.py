"""The own-pace study's run: each (condition, method) pair trained to the horizon at its own pace and saved as
it finishes, the tables summarised from the saved pairs (:func:`summarize`), and :func:`main`, the command line
(``python -m experiments.own_pace``).
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib
import json
import math
import pathlib
import sys
import time

import numpy as np

from jaxcomm import clock, data, data_parallel, driver, exchange, inbox, local_sgd, methods, network, pace, sgp, stats
from jaxcomm.harness import results
from jaxcomm.models import MLP

from .pairs import GIT_COMMITS, merged, seeds_of, with_seeds
from .presets import CHURN, CONDITIONS, METHODS, NETWORKS, PRESETS, Preset
from .report import table, write_report


def method_of(name: str, preset: Preset) -> methods.Method:
    return {"isolated": lambda: network.output_sharing(exchange.none(), name="isolated"),
            "outputs": lambda: network.output_sharing(exchange.true_labels(), name="outputs"),
            "sync_sgd": data_parallel.sync_sgd,
            "diloco": lambda: local_sgd.diloco(preset.sync_every, name="diloco"),
            "diloco_quorum": lambda: local_sgd.diloco(preset.sync_every, quorum=preset.quorum,
                                                      grace=preset.step_seconds, name="diloco_quorum"),
            # push-sum gossip, whose claim is robustness to stragglers (Assran et al. 2019): no node waits
            "sgp": lambda: sgp.sgp(name="sgp"),
            # its delay from the links: a message enters its receiver's mix the receiver steps its transfer takes
            "osgp": lambda: sgp.osgp(None, name="osgp")}[name]()


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
    start, curves, shares, ticks, stopped = time.perf_counter(), [], [], [], []
    for seed in preset.seeds:
        count = ticks_within_horizon(probe, cluster, seed, preset)
        config = base.replace(num_steps=count, eval_every=max(1, count // preset.evaluations), seed=seed)
        ticks.append(count)
        try:
            run = methods.train(method, config, model, dataset, eval_split=("validation", "test"), progress=False,
                                cluster=cluster, own_pace=True)
        except driver.LossStop as stop:  # a method that blows up under a condition is a result, not a crash
            curves.append(None)
            shares.append(None)
            stopped.append(f"seed {seed}: {stop}")
            continue
        if run["status"] != "complete":  # interrupted (SIGINT/SIGTERM): a pair is saved whole or not at all
            raise KeyboardInterrupt(f"{condition} {name} seed {seed}: {run['status']} after {run['steps_done']} of "
                                    f"{count} ticks; nothing saved for this pair (the next run trains it again)")
        curves.append([curve_point(record, name) for record in run["history"]])
        shares.append(run["timeline"].due_share())
    return {"condition": condition, "method": name, "seeds": list(preset.seeds), "ticks": ticks,
            "seconds": time.perf_counter() - start, "curves": curves, "due_share": shares} | (
        {"stopped": stopped} if stopped else {})


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


def summarize(out: pathlib.Path, preset_name: str, seeds: tuple[int, ...] = (0, 1, 2)) -> dict:
    """The tables of the saved pairs, each read at ``seeds`` (a pair that lacks one is left out)."""
    saved = [json.loads(f.read_text()) for f in sorted((out / "runs").glob("*/*.json"))]
    read = [p for p in saved if set(seeds) <= set(seeds_of(p))]  # the pairs that hold every seed asked
    pairs = {(p["condition"], p["method"]): with_seeds(p, list(seeds)) for p in read}
    isolated = pairs.get(("lan_1g_0_stragglers", "isolated"))
    target = math.floor(float(np.mean([c[-1]["validation"] for c in isolated["curves"]]))) if isolated else None
    tables = {}
    for condition in CONDITIONS:
        rows = {}
        for name in METHODS:
            pair = pairs.get((condition, name))
            if pair is None:
                continue
            if pair.get("stopped"):  # a seed's loss left its bounds: no accuracy at the horizon to pair
                rows[name] = {"stopped": pair["stopped"], "ticks": pair["ticks"], "wall_seconds": pair["seconds"]}
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
                if other != "outputs" and other in rows and "stopped" not in rows[other]:
                    diffs = [a - b for a, b in zip(rows["outputs"]["test"], rows[other]["test"], strict=True)]
                    mean = float(np.mean(diffs))
                    comparisons.append({"other": other, "metric": "test accuracy at the horizon", "mean": mean,
                                        "ci95": list(stats.paired_ci95(diffs, digits=None)),
                                        "p": stats.paired_t_p_value(diffs)})
        tables[condition] = {"rows": rows, "comparisons": comparisons}
    # one Holm family: every comparison of every condition (the table's claims are read together)
    family = [c for t in tables.values() for c in t["comparisons"]]
    for c, p in zip(family, stats.holm([c["p"] for c in family]), strict=True):
        c["holm_p"] = p
    return {"experiment": "own_pace", "preset": preset_name, "target_validation": target, "tables": tables,
            "holm_family": "table", "seeds": list(seeds),
            "pairs_seconds": float(sum(p["seconds"] for p in read)),
            "pairs_by_commit": pairs_by_commit(pairs.values())}


def pairs_by_commit(pairs) -> dict[str, list[str]]:
    """``{commit: ["condition/method seeds", ...]}`` of the pairs read; "unrecorded" for seeds saved before
    pairs named their commit."""
    out: dict[str, list[str]] = {}
    for pair in pairs:
        by: dict[str, list[int]] = {}
        for seed in seeds_of(pair):
            by.setdefault(pair.get(GIT_COMMITS, {}).get(str(seed), "unrecorded"), []).append(seed)
        for commit, seeds in by.items():
            out.setdefault(commit, []).append(f"{pair['condition']}/{pair['method']} {seeds}")
    return dict(sorted(out.items()))


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["report"]:
        write_report(argv[1])
        return 0
    description = importlib.import_module(__package__).__doc__.splitlines()[0]
    parser = argparse.ArgumentParser(prog="python -m experiments.own_pace", description=description)
    parser.add_argument("--preset", choices=sorted(PRESETS), default="smoke")
    parser.add_argument("--out", default="runs/own_pace")
    parser.add_argument("--data-dir", default=None)
    parser.add_argument("--conditions", nargs="*", default=None, choices=list(CONDITIONS),
                        help="default: the preset's (every condition but on the smoke preset)")
    parser.add_argument("--methods", nargs="*", default=list(METHODS), choices=list(METHODS))
    parser.add_argument("--seeds", nargs="*", type=int, default=None,
                        help="default: the preset's; a saved pair trains only the seeds it lacks")
    args = parser.parse_args(argv)
    preset, out = PRESETS[args.preset](), pathlib.Path(args.out)
    if args.seeds is not None:
        if not args.seeds or len(set(args.seeds)) != len(args.seeds):
            parser.error(f"--seeds: distinct seeds, got {args.seeds}")
        preset = dataclasses.replace(preset, seeds=tuple(sorted(args.seeds)))
    conditions = args.conditions if args.conditions is not None else list(preset.conditions or CONDITIONS)
    dataset = data.load_mnist_sample() if preset.dataset == "mnist_sample" else \
        data.load_dataset(preset.dataset, args.data_dir)
    start = time.perf_counter()
    for condition in conditions:
        for name in args.methods:
            path = out / "runs" / condition / f"{name}.json"
            saved = json.loads(path.read_text()) if path.exists() else None
            missing = [seed for seed in preset.seeds if saved is None or seed not in seeds_of(saved)]
            if not missing:
                continue
            pair = run_pair(condition, name, dataclasses.replace(preset, seeds=tuple(missing)), dataset) | {
                GIT_COMMITS: dict.fromkeys(map(str, missing), results.git_commit())}
            pair = pair if saved is None else merged(saved, pair)
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(json.dumps(pair) + "\n")
            finals = [c[-1]["test"] for c in pair["curves"] if c is not None]
            print(f"{condition} {name}: {max(pair['ticks'])} ticks, test "
                  f"{np.mean(finals) if finals else float('nan'):.2f} in {pair['seconds']:.0f} s"
                  + "".join(f"; stopped, {s}" for s in pair.get("stopped", ())), flush=True)
    summary = summarize(out, args.preset, preset.seeds) | {
        "command": results.command_line(), "git_commit": results.git_commit(), "device": results.device_description(),
        "host_cpu": results.host_cpu(), "wall_seconds": time.perf_counter() - start,
        "preset": dataclasses.asdict(preset)}
    (out / "summary.json").write_text(json.dumps(summary, indent=1) + "\n")
    write_report(out)
    print(table(summary))
    return 0

