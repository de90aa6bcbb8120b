"""Every number in the findings of README.md and results/README.md is computed from the summary it cites.

Each finding is a template of the sentence as the page prints it, the results folder whose ``summary.json`` (or, where
the folder keeps them, its ``curves.jsonl`` or subfolder runs) it cites, and a function that computes the numbers
from there (``jaxcomm.stats`` or plain numpy). The test renders the template with the computed numbers and finds the
rendered text on the page: a number that no longer follows from its summary fails. A second test holds every
verdict of results/README.md and every finding bullet of README.md to these templates: no digit of theirs is left
outside a rendered finding, so a number added to a page without its computation fails too. Digits that stay literal
in a template name a condition (a node count, a temperature, a failure rate, a row's name), not a measurement; where
it is cheap, the function also checks the words around the numbers (a direction read after Holm, a count of rows).

A folder without a ``summary.json`` (``benchmark/compile_cache/``) is read from the one record it keeps, its table.
"""

from __future__ import annotations

import functools
import json
import math
import pathlib
import re
from collections.abc import Callable, Sequence
from typing import NamedTuple

import numpy as np
import pytest

from jaxcomm import stats

ROOT = pathlib.Path(__file__).resolve().parents[1]
RESULTS = ROOT / "results"
PAGES = {"results/README.md": RESULTS / "README.md", "README.md": ROOT / "README.md"}


# --------------------------------------------------------------------------- reading summaries


@functools.cache
def summary(folder: str) -> dict:
    return json.loads((RESULTS / folder / "summary.json").read_text())


@functools.cache
def curves(folder: str) -> tuple[dict, ...]:
    text = (RESULTS / folder / "curves.jsonl").read_text()
    return tuple(json.loads(line) for line in text.splitlines() if line.strip())


@functools.cache
def merged_frontier(folder: str) -> dict:
    """A bandwidth-frontier table's rows: its run and the runs below it, paired with isolated nodes (as its report)."""
    from jaxcomm.harness import frontier  # noqa: PLC0415

    return frontier.merge_runs(RESULTS / folder)


def per_seed(row: dict, key: str, nodes: str | None = None) -> list[float]:
    seeds = row["per_seed"] if nodes is None else row["per_seed"][nodes]
    return [p[key] for p in seeds]


def paired(a: Sequence[float], b: Sequence[float]) -> tuple[float, float, float]:
    """Mean of a - b over seeds and its Student-t 95 % interval, at full precision."""
    d = np.subtract(a, b)
    lo, hi = stats.paired_ci95(d, digits=None)
    return float(d.mean()), lo, hi


def paired_p(a: Sequence[float], b: Sequence[float]) -> float:
    return stats.paired_t_p_value(np.subtract(a, b))


def study_point(folder: str, label: str) -> dict:
    (point,) = [p for p in summary(folder)["studies"] if p["label"] == label]
    return point


# --------------------------------------------------------------------------- the findings


class Finding(NamedTuple):
    page: str  # a key of PAGES
    folder: str  # the results folder the sentence cites
    template: str  # the sentence as printed, numbers as format fields
    values: Callable[[], Sequence]  # the numbers, computed from the folder's summary (checks may assert inside)


def _outputs_exchange():
    rows = summary("outputs_exchange")["rows"]
    from experiments.outputs_exchange.report import THESIS_TABLE  # noqa: PLC0415

    tl, iso, one = rows["10_nodes_true_labels"], rows["10_nodes_no_sharing"], rows["1_node_no_sharing"]
    node = paired(per_seed(tl, "avg_accuracy"), per_seed(iso, "avg_accuracy"))[0]
    coll = paired(per_seed(tl, "collective_accuracy"), per_seed(iso, "collective_accuracy"))[0]
    vs_one = paired(per_seed(tl, "collective_accuracy"), per_seed(one, "collective_accuracy"))
    gaps = [thesis - rows[name][key] for name, (avg, collective, *_) in THESIS_TABLE.items()
            for thesis, key in ((avg, "avg_accuracy"), (collective, "collective_accuracy")) if thesis is not None]
    return node, coll, *vs_one, min(gaps), max(gaps)


def _augmented():
    base, aug = summary("outputs_exchange")["rows"], summary("outputs_exchange/augmented")["rows"]
    gain = lambda rows: np.subtract(per_seed(rows["10_nodes_true_labels"], "collective_accuracy"),  # noqa: E731
                                    per_seed(rows["10_nodes_no_sharing"], "collective_accuracy"))
    with_aug = paired(gain(aug), np.zeros(3))
    smaller = -paired(gain(aug), gain(base))[0]
    return (*with_aug, smaller)


def _recipe():
    s = summary("outputs_exchange/recipe")
    assert s["chosen"] == s["best"] and not s["changes_from_preset"], "the cpu recipe is kept"
    row = s["rows"][s["chosen"]]
    return row["val_accuracy"], row["val_accuracy_sd"]


def _recipe_stage1():
    s = summary("outputs_exchange/recipe_stage1")
    assert s["changes_from_preset"] == {"batch_size": [32, 128], "augment": [False, True]}
    chosen, cpu = s["rows"][s["chosen"]], s["rows"]["widths=16-32-64 batch_size=32 norm=batch augment=false"]
    half_width = [name for name in s["skipped"] if name.startswith("widths=32-64-128")]
    assert half_width == s["skipped"]
    return (chosen["val_accuracy"], chosen["val_accuracy_sd"], cpu["val_accuracy"], cpu["val_accuracy_sd"],
            len(half_width))


def _recipe_stage2():
    s = summary("outputs_exchange/recipe_stage2")
    rate = lambda lr: s["rows"][f"widths=16-32-64 batch_size=128 norm=batch augment=true learning_rate={lr}"]  # noqa: E731
    assert s["chosen"] == s["best"] and s["rows"][s["chosen"]] is rate(0.003)
    return rate(0.003)["val_accuracy"], rate(0.003)["val_accuracy_sd"], rate(0.01)["val_accuracy"], \
        rate(0.001)["val_accuracy"]


def _width_pairs() -> list[float]:
    """recipe_stage1: half width minus quarter width on validation, each candidate both widths ran."""
    rows = summary("outputs_exchange/recipe_stage1")["rows"]
    return [rows[name.replace("widths=16-32-64", "widths=32-64-128")]["val_accuracy"] - row["val_accuracy"]
            for name, row in rows.items()
            if name.startswith("widths=16-32-64") and name.replace("widths=16-32-64", "widths=32-64-128") in rows]


def _thesis_h100():
    wide, cpu = summary("outputs_exchange/thesis_h100")["rows"], summary("outputs_exchange")["rows"]
    from experiments.outputs_exchange.report import THESIS_TABLE  # noqa: PLC0415

    one = wide["1_node_no_sharing"]
    for key in ("avg_accuracy", "collective_accuracy"):  # sharing beats isolation (Holm over 24 in its notes: < 0.01)
        assert paired_p(per_seed(wide["10_nodes_true_labels"], key), per_seed(wide["10_nodes_no_sharing"], key)) < 0.001
    pairs = _width_pairs()
    assert len(pairs) == 5
    return (one["avg_accuracy"], one["avg_accuracy_sd"], THESIS_TABLE["1_node_no_sharing"][0],
            cpu["1_node_no_sharing"]["avg_accuracy"], cpu["1_node_no_sharing"]["avg_accuracy_sd"], min(pairs),
            max(pairs))


def _studies_small():
    labels = {p["label"] for folder in ("outputs_exchange/studies_small", "outputs_exchange/studies_n50",
                                        "outputs_exchange/studies_n100") for p in summary(folder)["studies"]}
    assert {"N=20", "N=30", "N=100", "tau=4", "tau=0.25"} <= labels, labels
    return ()


def _temperature():
    folder = "outputs_exchange/studies_5000/temperature"
    hot, one, cold = (study_point(folder, label) for label in ("tau=4", "tau=1", "tau=0.25"))
    node = paired(per_seed(hot, "avg_accuracy"), per_seed(one, "avg_accuracy"))
    coll = paired(per_seed(hot, "collective_accuracy"), per_seed(one, "collective_accuracy"))
    for key in ("avg_accuracy", "collective_accuracy"):  # tau = 0.25 no better than 1: no mean above it
        assert paired(per_seed(cold, key), per_seed(one, key))[0] <= 0
    return node[0], coll[0]


def _points(*points: tuple[str, str]):
    """The study points a verdict names (the folder and its subfolder runs), each present."""
    for folder, label in points:
        assert label in {p["label"] for p in summary(folder)["studies"]}, (folder, label)
    return ()


def _frequency():
    folder = "outputs_exchange/studies_5000/frequency"
    low, thesis = study_point(folder, "p_c=0.25"), study_point(folder, "p_c=0.5")
    return (-paired(per_seed(low, "avg_accuracy"), per_seed(thesis, "avg_accuracy"))[0],)


def _table22_time():
    from experiments.table22_time.report import rerun_tests  # noqa: PLC0415

    s = summary("table22_time")
    assert s["horizon"] == 5000, s["horizon"]
    # no row's uplink binds on any named link
    assert not any(timed["held_back"] for row in s["rows"].values() for timed in row["links"].values())
    tests = rerun_tests(summary("table22_time/in_flight"))
    assert tests and all(t["holm"] is None or t["holm"] >= 0.05 for t in tests)  # no delay changes an accuracy
    return ()


def _unsupervised():
    rows = summary("unsupervised_exchange")["rows"]
    vae = paired(per_seed(rows["vae_10_nodes_full_comm"], "collective_accuracy"),
                 per_seed(rows["vae_10_nodes_no_comm"], "collective_accuracy"))[0]
    bigan = paired(per_seed(rows["bigan_10_nodes_full_comm"], "avg_accuracy"),
                   per_seed(rows["bigan_10_nodes_no_comm"], "avg_accuracy"))[0]
    iso = rows["vae_10_nodes_no_comm"]
    untrained = paired(per_seed(iso, "avg_accuracy"), per_seed(iso, "untrained_avg_accuracy"))[0]
    return vae, bigan, untrained


def _reliability_family() -> tuple[list[tuple[str, str, str]], list[float | None]]:
    """The reliability table's family: each failure level minus none per N, and the largest N's drop minus the
    smallest's, on both accuracies; raw p-values (None for a zero spread)."""
    rows = summary("reliability")["rows"]
    levels = [name for name in rows if name.startswith("failure_") and name != "failure_0"]
    nodes = sorted(rows["failure_0"]["per_seed"], key=int)
    found, raw = [], []
    for level in levels:
        for key in ("avg_accuracy", "collective_accuracy"):
            drops = {n: np.subtract(per_seed(rows[level], key, n), per_seed(rows["failure_0"], key, n)) for n in nodes}
            for n in nodes:
                found.append((level, n, key))
                raw.append(stats.paired_t_p_value(drops[n]) if np.std(drops[n]) > 0 else None)
            found.append((level, "drop", key))
            gap = drops[nodes[-1]] - drops[nodes[0]]
            raw.append(stats.paired_t_p_value(gap) if np.std(gap) > 0 else None)
    return found, raw


def _reliability(with_count: bool):
    rows = summary("reliability")["rows"]
    found, raw = _reliability_family()
    held = dict(zip(found, stats.holm(raw), strict=True))
    drops = []
    for n in rows["failure_30"]["per_seed"]:
        mean, lo, hi = paired(per_seed(rows["failure_30"], "avg_accuracy", n),
                              per_seed(rows["failure_0"], "avg_accuracy", n))
        assert hi < 0 and held[("failure_30", n, "avg_accuracy")] >= 0.05  # raw below 0, not after Holm
        drops.append(-mean)
    assert all(round(d) == 2 for d in drops)
    assert all(q >= 0.05 for (level, *_), q in held.items() if level == "failure_10" and q is not None)
    count = sum(p is not None for p in raw)
    return (30, float(np.mean(drops)), count) if with_count else (float(np.mean(drops)),)


def _frontier_1000():
    rows = merged_frontier("bandwidth_frontier")["rows"]
    iso = rows["isolated"]["accuracy"]
    outputs = [r["accuracy"] for name, r in rows.items() if r.get("family") == "outputs" and name != "isolated"]
    assert max(outputs) < iso
    return rows["powersgd_r1"]["accuracy"], rows["diloco_h50"]["accuracy"], rows["true_labels"]["accuracy"], iso


def _frontier_5000():
    from experiments.bandwidth_frontier.report import holm_vs_isolated  # noqa: PLC0415
    from jaxcomm.harness import frontier  # noqa: PLC0415

    rows = merged_frontier("bandwidth_frontier/horizon_5000")["rows"]
    held = holm_vs_isolated(rows)
    beat = {name for name in ("true_labels", "logits", "features", "gossip_100")  # the node networks' rows
            if held[name] < 0.05 and rows[name]["paired_diff_vs_isolated"] > 0}
    assert beat == {"true_labels", "logits"}, beat  # the sentence names exactly these (gossip every 100 steps: not)
    tests = sum(row.get("paired_diff_vs_isolated_p") is not None for row in frontier.under(rows, "private").values())
    tl, r1 = rows["true_labels"], rows["powersgd_r1"]
    mean, lo, hi = paired(per_seed(tl, "accuracy"), per_seed(r1, "accuracy"))
    assert lo < 0 < hi  # no difference detected
    return tests, tl["paired_diff_vs_isolated"], r1["accuracy"]


def _horizon_5000():
    rows = merged_frontier("bandwidth_frontier/horizon_5000")["rows"]
    mean, lo, hi = paired(per_seed(rows["true_labels"], "accuracy"), per_seed(rows["powersgd_r1"], "accuracy"))
    assert lo < 0 < hi
    return (rows["powersgd_r1"]["bytes_per_node_step"] / rows["true_labels_shared"]["bytes_per_node_step"],)


def _bytes():
    row = summary("outputs_exchange")["rows"]["10_nodes_true_labels"]
    sent, allreduce = row["bytes_sent_per_node_step"], row["allreduce_bytes_per_node_step"]
    return sent / 1e3, math.floor(allreduce / sent), allreduce / 1e6


def _time_links(folder: str, datacenter: tuple[str, ...] = ("diloco_h10",), lan: tuple[str, ...] = ("diloco_h10",),
                wan: tuple[str, ...] = ("isolated",)):
    from experiments.time_frontier.report import fastest, swapped  # noqa: PLC0415

    links = summary(folder)["links"]
    assert fastest(links["datacenter"]["rows"]) == list(datacenter)
    assert fastest(links["lan_1g"]["rows"]) == list(lan)
    assert fastest(links["wan_100m"]["rows"]) == list(wan)
    pairs = [len(swapped(link["rows"])) for link in links.values()]
    sizes = {len(link["rows"]) * (len(link["rows"]) - 1) // 2 for link in links.values()}
    assert len(sizes) == 1
    return max(pairs), sizes.pop()


def _time_frontier_cpu():
    links = summary("time_frontier/cpu")["links"]
    reruns = [(name, row_name, row) for name, link in links.items() for row_name, row in link["rows"].items()
              if row["rerun"]]
    held = stats.holm([stats.p_value_from_ci95(r["vs_instant"]["mean"], r["vs_instant"]["ci95"], r["seeds"])
                       for *_, r in reruns])
    read = [(name, row_name, r) for (name, row_name, r), q in zip(reruns, held, strict=True) if q < 0.05]
    assert [(name, row_name) for name, row_name, _ in read] == [("wan_100m", "features")]
    (_, _, late), = read
    assert late["delay_steps"]["median"] == 32 and late["vs_instant"]["mean"] < 0
    return (*_time_links("time_frontier/cpu"), late["vs_instant"]["mean"])


def _step_ms(folder: str) -> float:
    """The one local step (ms) every link of a re-timed frontier reads."""
    steps = {link["seconds_per_step"] for link in summary(folder)["links"].values()}
    assert len(steps) == 1
    return steps.pop() * 1e3


def _time_frontier_retimed():
    return (*_time_links("time_frontier/retimed", ("osgp_1", "diloco_h10")), _step_ms("time_frontier/retimed"))


def _time_frontier_5000():
    folder = "time_frontier/horizon_5000"
    return (*_time_links(folder, ("sync_sgd",), ("diloco_h50",), ("true_labels_shared",)), _step_ms(folder))


def _own_pace_comparisons(other: str) -> dict[str, dict]:
    """Output sharing minus ``other`` in every condition that has the comparison (a stopped row has none)."""
    return {condition: c for condition, table in summary("own_pace")["tables"].items()
            for c in table["comparisons"] if c["other"] == other}


def _own_pace(with_range: bool):
    tables = summary("own_pace")["tables"]
    assert summary("own_pace")["holm_family"] == "table"
    seeds = len(summary("own_pace")["seeds"])
    family = sum(len(t["comparisons"]) for t in tables.values())
    ahead = lambda c: c["holm_p"] < 0.05 and c["mean"] > 0  # noqa: E731
    behind = lambda c: c["holm_p"] < 0.05 and c["mean"] < 0  # noqa: E731
    iso = _own_pace_comparisons("isolated")
    assert all(map(ahead, iso.values()))  # ahead of isolated nodes after Holm everywhere
    wan = {(k, o): c for o in ("diloco", "diloco_quorum", "sync_sgd")
           for k, c in _own_pace_comparisons(o).items() if k.startswith("wan_")}
    wan_conditions = len({k for k, _ in wan})
    assert all(map(ahead, wan.values()))  # beats every waiting method on the WAN
    lan = {k: c for k, c in _own_pace_comparisons("diloco_quorum").items() if k.startswith("lan_")}
    assert all(map(behind, lan.values()))  # trails quorum DiLoCo on the LAN
    assert behind(_own_pace_comparisons("diloco")["lan_1g_0_stragglers"])  # and synchronous DiLoCo, no straggler
    churn = [t["rows"][m] for k, t in tables.items() if k.startswith("lan_") and k.endswith("_churn")
             for m in ("sgp", "osgp")]
    assert churn and all(len(r["stopped"]) == seeds for r in churn)  # every seed diverged
    sgp = _own_pace_comparisons("sgp")
    assert sgp and all(map(ahead, sgp.values()))  # SGP behind wherever it trains
    means = [c["mean"] for c in iso.values()]
    if with_range:
        return len(iso), family, seeds, min(means), max(means), wan_conditions, len(lan), len(sgp)
    return len(iso), family, seeds, wan_conditions, len(sgp)


def _teacher():
    from jaxcomm import teacher  # noqa: PLC0415

    runs = {(c["row"], c["seed"]): c for c in curves("teacher_selection") if c["group"] == "table"}
    seeds = sorted(seed for row, seed in runs if row == "baseline")
    updates = {row: [teacher.updates_to(runs[row, s]["steps"], runs[row, s]["val_accuracy"], 96.5) for s in seeds]
               for row in ("baseline", "stack5_ce_soft")}
    units = {row: [teacher.compute_units(u, stack_size=runs[row, s]["stack_size"], warmup=runs[row, s]["warmup"])
                   for s, u in zip(seeds, updates[row], strict=True)] for row in updates}
    logs = np.log(np.divide(updates["baseline"], updates["stack5_ce_soft"]))
    lo, hi = stats.paired_ci95(logs, digits=None)
    compute = np.log(np.divide(units["baseline"], units["stack5_ce_soft"])).mean()
    acc = paired([runs["stack5_ce_soft", s]["test_accuracy"] for s in seeds],
                 [runs["baseline", s]["test_accuracy"] for s in seeds])
    assert acc[1] < 0 < acc[2]  # the same test accuracy
    rows = summary("teacher_selection")["rows"]
    assert all(rows[f"stack{n}_ce_soft"]["collapsed_seeds"] > 0 == rows[f"stack{n}_ce_soft_warmup"]["collapsed_seeds"]
               for n in (10, 20, 50, 100))  # large stacks collapse without a warm-up
    return math.exp(logs.mean()), math.exp(lo), math.exp(hi), math.exp(compute)


def _language_levels():
    from experiments.language.report import holm_levels  # noqa: PLC0415

    rows = summary("language")["rows"]
    assert all(q >= 0.05 for q in holm_levels(rows).values())
    return ()


def _primary(rows: dict) -> list[dict]:
    """The pre-registered family of the confirmation (Holm over its cells), as its report computes it."""
    from experiments.language.report import confirm_families  # noqa: PLC0415

    (family,) = [f for title, f in confirm_families(rows).items() if title.startswith("Primary")]
    return family


def _horizon():
    from experiments.language.report import holm_ablations, holm_levels  # noqa: PLC0415

    rows, confirm = summary("language/horizon_10000")["rows"], summary("language/confirm_10000")["rows"]
    assert set(holm_levels(rows).values()) == {1.0}
    fixed = rows["fixed_temperature/both_feedback"]  # minus the annealed table, and minus its own baseline
    adjusted = holm_ablations(rows)["fixed_temperature/both_feedback"]
    assert fixed["paired_diff_vs_table_ci95"][0] > 0 and adjusted < 0.05
    assert fixed["paired_diff_ci95"][0] > 0  # a raw interval above 0, in no family
    (cell,) = [f for f in _primary(confirm) if f["cell"] == "fixed_temperature"]
    assert cell["p_holm"] >= 0.05
    return fixed["paired_diff_vs_table"], adjusted, fixed["paired_diff_vs_baseline"], cell["mean"], cell["p_holm"]


def _confirm():
    primary = {f["cell"]: f for f in _primary(summary("language/confirm_10000")["rows"])}
    assert primary["halves_sum"]["verdict"].startswith("confirmed")
    assert primary["full_sum"]["verdict"].startswith("refuted")
    assert primary["fixed_temperature"]["verdict"].startswith("not confirmed")
    row = summary("language/confirm_10000")["rows"]["confirm/halves_sum/both_feedback"]
    return row["paired_diff_vs_baseline"], *row["paired_diff_ci95"]


def _benchmark():
    rows = summary("benchmark")["rows"]
    x_loop = {name: r["best_node_steps_per_s"] / r["loop_node_steps_per_s"] for name, r in rows.items()}
    students = [v for name, v in x_loop.items() if name.startswith("student_")]
    cnns = [v for name, v in x_loop.items() if name.startswith("cnn_")]
    cold = min(r["cold_choice"]["of_fastest"] for r in rows.values())
    peer = lambda name: rows[name]["best_node_steps_per_s"] / rows[name]["peer"]["best_node_steps_per_s"]  # noqa: E731
    return (min(students), max(students), min(cnns), max(cnns), math.floor(cold * 10) / 10, peer("student_n64"),
            peer("cnn_n10"))


def _method_sweeps():
    sweeps = summary("benchmark")["method_sweeps"]
    return tuple(sweeps[f"{name}_student_r8_n10"]["speedup"] for name in ("diloco_h50", "sync_sgd", "codistill_k100"))


def _compile_cache():
    """No summary.json: the folder's one record is its table of seconds."""
    text = (RESULTS / "benchmark" / "compile_cache" / "compile_cache.md").read_text()
    seconds = {label: float(value) for label, value in re.findall(r"^\| ([^|]+?) \| ([0-9.]+) \|$", text, re.M)}
    seeds = int(re.search(r"\| (\d+) DiLoCo seeds one by one \|", text).group(1))
    none = seconds["no cache"]
    return seeds, none / seconds["cache, empty at the start"], none / seconds["cache, full (a second run)"]


def _scale():
    scale = summary("benchmark/scale")["scale"]
    confirmed = [scale[name]["confirmed"] for name in ("student_scale", "cnn_scale")]
    assert all(c["trained"] for c in confirmed)
    budgets = {scale[name]["budget_mb"] / 1024 for name in scale}
    assert len(budgets) == 1
    return confirmed[0]["num_nodes"], confirmed[1]["num_nodes"], budgets.pop()


def _vs_pytorch():
    rows = summary("benchmark/vs_pytorch")["rows"]
    return tuple(rows[name]["best_node_steps_per_s"] / rows[name]["peer"]["best_node_steps_per_s"]
                 for name in ("student_n64", "cnn_n10"))


def _gpu_h100():
    row = summary("benchmark/gpu_h100/cnn_n10")["rows"]["cnn_n10"]
    assert row["num_nodes"] == 10
    return (row["patches_node_steps_per_s"] / row["vmap_node_steps_per_s"],)


def _gpu_h200():
    rows = summary("benchmark/gpu_h200")["rows"]
    cnn, student = rows["cnn_n10"], rows["student_n64"]
    assert student["num_nodes"] == 64
    return (cnn["patches_node_steps_per_s"] / cnn["vmap_node_steps_per_s"],
            student["best_node_steps_per_s"] / student["loop_node_steps_per_s"])


def _pace():
    rows = summary("benchmark/pace")["rows"]
    pick = lambda **kw: next(r["ratio"] for r in rows if all(r[k] == v for k, v in kw.items()))  # noqa: E731
    return (pick(workload="cnn", backend="loop"), pick(workload="cnn", backend="unrolled"),
            pick(cluster="straggler", workload="student", resolution_of_fastest_step=0.75),
            pick(cluster="straggler", workload="student", resolution_of_fastest_step=1.0),
            pick(cluster="straggler", workload="student", resolution_of_fastest_step=1.5),
            pick(cluster="profiles_10x", capacity=64), pick(cluster="profiles_10x", capacity=16))


def _peers():
    """Median end to end seconds of each peer over jaxcomm's (rows of 50 rounds or more, and the 4-round row) and
    jaxcomm's warm share of the step floor, as ``experiments.peers.report`` draws them."""
    from experiments.peers import report  # noqa: PLC0415

    peers = summary("benchmark/peers")
    x, floors, short = {"flower": [], "pfl": []}, [], None
    for row in peers["rows"].values():
        got = {fw: report.stats(runs) for fw, runs in row["runs"].items()}
        base = got["jaxcomm"]
        for fw in x:
            assert report.agrees(got[fw], base) or row["arm"]["rounds"] < 50  # a time compared at equal accuracy
        if row["arm"]["rounds"] >= 50:
            for fw in x:
                x[fw].append(got[fw]["total_seconds"] / base["total_seconds"])
            warm = base["warm_round_seconds"] * row["arm"]["rounds"]
            floors.append(100 * report.floor_seconds(row, peers["machine"]["gflops"]) / warm)
        else:
            short = got["pfl"]["total_seconds"] / base["total_seconds"]
    return (min(x["flower"]), max(x["flower"]), min(x["pfl"]), max(x["pfl"]), short, min(floors), max(floors))


def _demo():
    """README's demo table (the demo writes no summary: its printed table is the record): avg acc, then the
    collective under negentropy, entropy (Algorithm 3 as printed), mean and vote."""
    lines = PAGES["README.md"].read_text().splitlines()
    header = [c.strip() for c in next(line for line in lines if line.startswith("| network |")).split("|")[2:7]]
    assert header[:3] == ["avg acc", "coll. negentropy", "coll. entropy"], header
    cells = {name: [float(c.split("±")[0]) for c in line.split("|")[2:7]] for line in lines
             for name in ("isolated", "sharing true labels") if line.startswith(f"| {name} |")}
    iso, shared = cells["isolated"], cells["sharing true labels"]
    for row in (iso, shared):  # "entropy" is the worst weighting ...
        assert min(row[1:]) == row[2]
    assert max(iso[1:]) - iso[2] > max(shared[1:]) - shared[2]  # ... most of all for the isolated nodes
    return shared[0] - iso[0], shared[1] - iso[1]


R, M = "results/README.md", "README.md"
FINDINGS = [
    Finding(R, "outputs_exchange", "sharing true labels beats isolated nodes ({:+.1f} node average, {:+.1f} "
            "collective); no difference detected between the collective and one node on all the data ({:+.1f} "
            "[{:+.1f}, {:+.1f}]); {:.0f}-{:.0f} points below the thesis", _outputs_exchange),
    Finding(R, "outputs_exchange/augmented", "with flips and crops, true labels show no collective gain over isolated "
            "nodes ({:+.1f} [{:+.1f}, {:+.1f}]); the gain is {:.1f} points smaller than without", _augmented),
    Finding(R, "outputs_exchange/recipe", "the `cpu` recipe is kept: best on validation ({:.1f} ± {:.1f})", _recipe),
    Finding(R, "outputs_exchange/recipe_stage1", "chosen on validation: batch 128 with flips and crops ({:.2f} ± "
            "{:.2f} against the `cpu` recipe's {:.2f} ± {:.2f}); Table 2.1 not yet retrained on it; {} half-width "
            "candidates skipped by the budget", _recipe_stage1),
    Finding(R, "outputs_exchange/recipe_stage2", "the rate stays at 3e-3 ({:.2f} ± {:.2f} on validation; 1e-2: "
            "{:.2f}, 1e-3: {:.2f}); Table 2.1 at 5 seeds on it fits about 10 CPU-hours, running", _recipe_stage2),
    Finding(R, "outputs_exchange/thesis_h100", "at the thesis' width and optimiser one node reaches {:.1f} ± {:.1f} % "
            "against the thesis' {:.1f} % (the `cpu` recipe: {:.1f} ± {:.1f} %), so width with that optimiser does "
            "not close the gap; width alone is not measured here (`recipe_stage1/`: half width {:.2f}-{:.2f} points "
            "above quarter width on validation, 2 seeds, not read); sharing beats isolation here too", _thesis_h100),
    Finding(R, "outputs_exchange/studies_small", "after Holm (read in `outputs_exchange/notes.md`): 20, 30 and 100 "
            "nodes lower the node average; tau = 4 lowers the node average and tau = 0.25 the collective",
            _studies_small),
    Finding(R, "outputs_exchange/studies_5000/temperature", "tau = 4 lowers the node average ({:+.1f}) and the "
            "collective ({:+.1f}); tau = 0.25 is no better than 1", _temperature),
    Finding(R, "outputs_exchange/studies_5000/neighbours", "at 10 nodes no difference detected between rings and the "
            "full graph; at 100 nodes the ring loses to full connection",
            lambda: _points(("outputs_exchange/studies_5000/neighbours", "p=1"),
                            ("outputs_exchange/studies_5000/neighbours/ring_h200", "N=100,p=5"))),
    Finding(R, "outputs_exchange/studies_5000/frequency", "no p_c beats the thesis' 0.5; p_c = 0.25 lowers the node "
            "average {:.1f} points", _frequency),
    Finding(R, "outputs_exchange/studies_5000/nodes", "no collective gain past 10 nodes and a drop by 100",
            lambda: _points(("outputs_exchange/studies_5000/nodes", "N=10"),
                            ("outputs_exchange/studies_5000/nodes/n100_h200", "N=100"))),
    Finding(R, "table22_time", "no row's uplink binds on any named link; the thesis' 2.19x for 20 nodes is not "
            "reproduced; the validation target is out of reach at 5,000 steps; no delay changes a final accuracy "
            "detectably", _table22_time),
    Finding(R, "unsupervised_exchange", "exchanging features (`replace`) lowers the VAE collective ({:+.1f}) and the "
            "BiGAN node average ({:+.1f}); isolated VAE nodes beat their untrained encoders ({:+.1f})", _unsupervised),
    Finding(R, "reliability", "30 % failures: the node average about {:.0f} points lower, no direction read after "
            "Holm; 10 %: no effect resolved", lambda: _reliability(False)),
    Finding(R, "bandwidth_frontier/horizon_5000", "shared data: no difference detected from PowerSGD r1 at {:.0f}x "
            "fewer bytes", _horizon_5000),
    Finding(R, "time_frontier/cpu", "fastest to the target: DiLoCo H 10 on the datacenter and LAN links, isolated "
            "nodes on the WAN; bytes and time disagree on up to {} of {} pairs; messages in flight: only features 32 "
            "steps late lose ({:+.1f} points, Holm)", _time_frontier_cpu),
    Finding(R, "time_frontier/retimed", "fastest to the target: overlap SGP and DiLoCo H 10 on the datacenter link, "
            "DiLoCo H 10 on the LAN, isolated nodes on the WAN; bytes and time disagree on up to {} of {} pairs; at a "
            "{:.2f} ms step the WAN's uplink holds output sharing back", _time_frontier_retimed),
    Finding(R, "time_frontier/horizon_5000", "fastest to the target: synchronous SGD on the datacenter link, DiLoCo H "
            "50 on the LAN, true labels under shared data on the WAN; bytes and time disagree on up to {} of {} pairs; "
            "a {:.2f} ms step", _time_frontier_5000),
    Finding(R, "own_pace", "output sharing ahead of isolated nodes in all {} conditions after Holm over {} comparisons "
            "at {} seeds; it beats every waiting method in all {} WAN conditions and SGP, timed by its push, in all "
            "{} where it trains; quorum DiLoCo leads on the LAN; SGP and OSGP diverge under churn on the LAN",
            lambda: _own_pace(False)),
    Finding(R, "teacher_selection", "stack 5: {:.2f}x [{:.2f}, {:.2f}] fewer updates to 96.5 %, {:.2f}x in compute, "
            "the same test accuracy; large stacks collapse without a warm-up", _teacher),
    Finding(R, "language/horizon_10000", "no level differs from the baseline (Holm p = 1); a fixed temperature raises "
            "both feedback over the annealed table ({:+.2f}, Holm p {:.3f}); under it both feedback's {:+.2f} over "
            "its own baseline is a raw interval, not confirmed on new seeds (`confirm_10000/`: {:+.2f}, Holm p "
            "{:.3f})", _horizon),
    Finding(R, "language/confirm_10000", "halves_sum confirmed ({:+.2f} [{:+.2f}, {:+.2f}]); full_sum refuted; fixed "
            "temperature not confirmed", _confirm),
    Finding(R, "benchmark", "best pair {:.2f}-{:.2f}x the thesis' loop for student MLPs, {:.2f}-{:.2f}x for CNNs; the "
            "cold choice >= {:.1f}x its fastest pair on every row; student_n64 {:.2f}x and cnn_n10 {:.2f}x PyTorch",
            _benchmark),
    Finding(R, "benchmark/method_sweeps", "method sweeps: DiLoCo {:.2f}x, synchronous SGD {:.2f}x, codistillation "
            "{:.2f}x", _method_sweeps),
    Finding(R, "benchmark/compile_cache", "{} DiLoCo seeds {:.2f}x faster with it, {:.2f}x with the cache full",
            _compile_cache),
    Finding(R, "benchmark/scale", "{:,} student MLPs and {:,} CNNs confirmed in {:.0f} GiB", _scale),
    Finding(R, "benchmark/vs_pytorch", "{:.2f}x (student MLP) and {:.2f}x (CNN) PyTorch", _vs_pytorch),
    Finding(R, "benchmark/gpu_h100", "batched conv nodes (`patches`) {:.1f}x `vmap`'s grouped convolutions at 10 CNN "
            "nodes (`cnn_n10/`)", _gpu_h100),
    Finding(R, "benchmark/gpu_h200", "`patches` {:.2f}x `vmap`; 64 student MLPs {:.0f}x the per-node loop", _gpu_h200),
    Finding(R, "benchmark/peers", "FedAvg end to end: Flower {:.1f}-{:.1f}x and pfl-research {:.2f}-{:.2f}x "
            "jaxcomm's seconds on the rows of 50 rounds or more, pfl-research {:.2f}x on 4 rounds; jaxcomm's warm "
            "rounds at {:.1f}-{:.1f} % of the step floor", _peers),
    Finding(R, "benchmark/pace", "10 CNNs {:.2f}x (eager loop), {:.2f}x unrolled; 64 MLPs {:.2f}x at the default "
            "resolution, {:.2f}x at a full step, {:.2f}x at 1.5 steps; profiles 10x apart {:.2f}x, {:.2f}x gathered",
            _pace),
    Finding(M, "outputs_exchange", "sharing true labels among 10 chapter-2 CNNs moves about {:.0f} kB per node and "
            "step, {}x less than a ring all-reduce of the same CNN's gradients ({:.2f} MB)", _bytes),
    Finding(M, "bandwidth_frontier", "At 1,000 steps, PowerSGD rank 1 and DiLoCo every 50 steps reach {:.1f} and "
            "{:.1f} % against true labels' {:.1f} %, and every output-sharing row sits below the isolated nodes' "
            "{:.1f} % by mean", _frontier_1000),
    Finding(M, "bandwidth_frontier/horizon_5000", "at the thesis' 5,000 steps true labels and logits beat "
            "isolation after Holm over the table's {} tests (true labels {:+.1f} points), and true labels show "
            "no difference detected against PowerSGD rank 1 ({:.1f} %)", _frontier_5000),
    Finding(M, "own_pace", "At their own pace (10 MNIST MLP nodes, stragglers, 20 % jitter, LAN/WAN, churn), output "
            "sharing's collective is ahead of isolated nodes in all {} conditions after Holm's adjustment over the "
            "table's {} comparisons at {} seeds ({:+.2f} to {:+.2f} points); it beats synchronous DiLoCo, quorum "
            "DiLoCo and synchronous SGD in all {} WAN conditions, trails quorum DiLoCo on the LAN in all {} (and "
            "synchronous DiLoCo there without stragglers), and beats SGP in all {} conditions where SGP trains; SGP "
            "and overlap SGP diverge under churn on the LAN in every seed",
            lambda: _own_pace(True)),
    Finding(M, "benchmark/peers", "FedAvg end to end, at equal accuracy: Flower takes {:.1f}-{:.1f}x and pfl-research "
            "{:.2f}-{:.2f}x jaxcomm's seconds on rows of 50 rounds or more; pfl-research is faster on 4 rounds "
            "({:.2f}x), where jaxcomm's start-up dominates", lambda: _peers()[:5]),
    Finding(M, "reliability", "{} % node failures lower the node average about {:.0f} points (raw paired intervals "
            "exclude 0; not after Holm's adjustment over the table's {} tests, so no direction is read)",
            lambda: _reliability(True)),
    Finding(M, "(README's demo table)", "Sharing lifts the average node by {:.0f} points and the collective decision "
            "by {:.0f}; Algorithm 3 read literally", _demo),
]


def _squash(text: str) -> str:
    return " ".join(text.split())


def rendered(finding: Finding) -> str:
    return _squash(finding.template.format(*finding.values()))


@pytest.mark.parametrize("finding", FINDINGS, ids=lambda f: f"{f.page}:{f.folder}")
def test_each_finding_is_computed_from_its_summary(finding):
    page = _squash(PAGES[finding.page].read_text())
    text = rendered(finding)
    assert text in page, f"{finding.page} does not print what {finding.folder} computes:\n  {text}"
    if finding.page == R and not finding.folder.startswith("("):
        row = next(line for line in PAGES[R].read_text().splitlines()
                   if line.startswith("| [") and text in _squash(line))
        assert f"[{finding.folder}/]" in row or f"`{finding.folder.rsplit('/', 1)[-1]}/`" in row, row  # cites it


def findings_text() -> list[tuple[str, str]]:
    """The finding sentences: results/README.md's verdicts and README.md's "Some of what they found" and demo."""
    out = []
    for line in PAGES[R].read_text().splitlines():
        if line.startswith("| ["):
            out.append((R, line.strip().strip("|").split("|")[-1].strip()))
    text = PAGES[M].read_text()
    found = text.split("Some of what they found:", 1)[1].split("\n## ", 1)[0]
    out += [(M, _squash(bullet)) for bullet in found.split("\n- ")[1:]]
    out += [(M, _squash(s)) for s in re.findall(r"Sharing lifts the average node[^.]*\.", _squash(text))]
    return out


def test_no_number_in_a_finding_is_left_without_its_computation():
    fragments = {page: [rendered(f) for f in FINDINGS if f.page == page] for page in PAGES}
    loose = []
    for page, sentence in findings_text():
        rest = _squash(sentence)
        for fragment in sorted(fragments[page], key=len, reverse=True):
            rest = rest.replace(fragment, "")
        rest = re.sub(r"\[[^\]]*/\]\([^)]*\)", "[]", rest)  # links to folders name them, not numbers
        rest = re.sub(r"Table \d\.\d", "Table", rest)  # the thesis' table numbers
        if re.search(r"\d", rest):
            loose.append(f"{page}: {rest}")
    assert not loose, "numbers no finding computes:\n" + "\n".join(loose)
