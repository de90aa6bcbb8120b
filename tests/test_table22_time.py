"""Table 2.2 in time (issue 38): a chapter-2 run's steps to the target re-timed on links, checked by hand."""

from __future__ import annotations

import json

import numpy as np
import pytest

from experiments import table22_time as t22
from jaxcomm import clock, recipes


def curve(run, seed, nodes, test, validation, seconds):
    return {"kind": "row", "run": run, "seed": seed, "nodes": nodes, "steps": [100, 200, 300],
            "avg_accuracy": test, "collective_accuracy": {"negentropy": test}, "validation_avg_accuracy": validation,
            "validation_collective_accuracy": {"negentropy": validation}, "seconds": seconds}


@pytest.fixture
def outputs(tmp_path):
    """A run of two rows: one node (10 ms a step after compiling), and 4 nodes sending 125,000 B per node-step in
    messages of 50,000 B."""
    rows = {"1_node_no_sharing": {"nodes": 1, "content": "none", "bytes_sent_per_node_step": 0.0, "message_bytes": 0},
            "4_nodes_true_labels": {"nodes": 4, "content": "true_labels", "bytes_sent_per_node_step": 125_000.0,
                                    "message_bytes": 50_000}}
    curves = [curve("1_node_no_sharing", s, 1, [50, 60, 70], [51, 59, 71], [5.0, 6.0, 7.0 + s]) for s in (0, 1, 2)]
    curves += [curve("4_nodes_true_labels", 0, 4, [61, 66, 70], [62, 70, 71], [1, 2, 3]),
               curve("4_nodes_true_labels", 1, 4, [55, 64, 70], [50, 60, 72], [1, 2, 3]),
               curve("4_nodes_true_labels", 2, 4, [50, 50, 50], [50, 50, 50], [1, 2, 3])]
    summary = {"rows": rows, "config": {"target": 65.0, "num_steps": 300}, "command": "x", "git_commit": "c",
               "device": "d"}
    (tmp_path / "summary.json").write_text(json.dumps(summary))
    (tmp_path / "curves.jsonl").write_text("".join(json.dumps(c) + "\n" for c in curves))
    return tmp_path


def test_steps_to_the_target_become_seconds_on_each_link(outputs):
    out = t22.run(t22.Table22TimeConfig(outputs_dir=str(outputs), links=("instant", "wan_100m")))
    # the single node's step: (7 + s - 5) s over 200 steps, median over seeds 0, 1, 2 -> 3 s / 200 = 15 ms
    assert out["seconds_per_step"] == pytest.approx(0.015)
    # validation target: the single node's final validation accuracy, 71 on every seed
    assert out["targets"] == {"validation": 71.0, "test": 65.0} == {
        "validation": recipes.validation_target([json.loads(line) for line in
                                                 (outputs / "curves.jsonl").read_text().splitlines()]), "test": 65.0}
    single, shared = out["rows"]["1_node_no_sharing"], out["rows"]["4_nodes_true_labels"]
    assert single["steps"] == {"validation": [300, 300, 300], "test": [300, 300, 300]}
    assert shared["steps"] == {"validation": [300, 300, None], "test": [200, 300, None]}
    instant = shared["links"]["instant"]
    # the median seed (upper of two middles, None slowest): validation 300, test 300 steps, at 15 ms each
    assert instant["seconds"] == {"validation": pytest.approx(4.5), "test": pytest.approx(4.5)}
    assert instant["delay_steps"] == 0 and not instant["held_back"]
    wan = shared["links"]["wan_100m"]
    # 125,000 B a step on 12.5 MB/s: 10 ms of uplink, under the 15 ms step: not held back
    assert wan["uplink_seconds"] == pytest.approx(0.010) and not wan["held_back"]
    # a broadcast: 3 copies of 50,000 B (12 ms) + 40 ms latency = 52 ms, 4 receiver steps of 15 ms (ceil 3.47)
    assert wan["delay_steps"] == 4
    assert t22.speedup(out, "4_nodes_true_labels", "wan_100m", "test") == pytest.approx(1.0)


def test_a_fast_device_is_held_back_by_its_uplink(outputs):
    out = t22.run(t22.Table22TimeConfig(outputs_dir=str(outputs), links=("wan_100m",), seconds_per_step=0.005))
    wan = out["rows"]["4_nodes_true_labels"]["links"]["wan_100m"]
    assert wan["held_back"] and wan["step_seconds"] == pytest.approx(0.010)  # the uplink's 10 ms, not the 5 ms step
    assert wan["seconds"]["test"] == pytest.approx(3.0)  # 300 steps x 10 ms
    assert out["rows"]["1_node_no_sharing"]["links"]["wan_100m"]["seconds"]["test"] == pytest.approx(1.5)
    assert t22.speedup(out, "4_nodes_true_labels", "wan_100m", "test") == pytest.approx(0.5)
    assert clock.LINKS["wan_100m"].bandwidth == 12.5e6


def test_the_command_line_writes_the_table(outputs, tmp_path):
    out_dir = tmp_path / "t22"
    assert t22.main(["--out", str(out_dir), f"outputs_dir={outputs}", "links=instant,wan_100m"]) == 0
    table = (out_dir / "table.md").read_text()
    assert "## wan_100m: 0.1 Gbit/s, 40 ms" in table
    assert "| 4_nodes_true_labels | 125,000 | 10.00 ms | 15.00 ms | 4 | 4.5 s | 1.00x | 4.5 s | 1.00x |" in table


@pytest.fixture(scope="module")
def chapter2_run(tmp_path_factory):
    """A smoke chapter-2 run of two rows (one node; 10 nodes sharing true labels), 2 seeds, 20 steps."""
    from experiments import outputs_exchange

    out = tmp_path_factory.mktemp("outputs_exchange")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("JAXCOMM_NO_REPORT", "1")
        assert outputs_exchange.main(["--preset", "smoke", "--out", str(out), "studies=",
                                     "rows=1_node_no_sharing,10_nodes_true_labels"]) == 0
    return out


def test_a_row_trained_again_with_its_messages_in_flight_is_paired_with_the_instant_run(chapter2_run, tmp_path):
    out_dir = tmp_path / "t22"
    assert t22.main(["--out", str(out_dir), f"outputs_dir={chapter2_run}", "links=instant,lan_1g,wan_100m",
                    "rerun=10_nodes_true_labels", "seconds_per_step=0.02"]) == 0
    summary = json.loads((out_dir / "summary.json").read_text())
    instant = json.loads((chapter2_run / "summary.json").read_text())["rows"]["10_nodes_true_labels"]
    row = summary["rows"]["10_nodes_true_labels"]
    assert "rerun" not in row["links"]["instant"] and "rerun" not in summary["rows"]["1_node_no_sharing"]["links"][
        "wan_100m"]
    for link in ("lan_1g", "wan_100m"):
        spec = clock.LINKS[link]
        # a broadcast to the 9 others leaves the uplink one copy after another: 9 x bytes / bandwidth + latency,
        # in whole receiver steps of 20 ms
        seconds = 9 * instant["message_bytes"] / spec.bandwidth + spec.latency
        assert row["links"][link]["delay_steps"] == int(np.ceil(seconds / 0.02 - 1e-9)) >= 1
        again = row["links"][link]["rerun"]
        assert again["link"] == link and [p["seed"] for p in again["per_seed"]] == instant["seeds"]
        # a consumed message waited at least its delay
        assert all(p["mean_age"] >= row["links"][link]["delay_steps"] for p in again["per_seed"])
        diffs = [p["collective_accuracy"] - q["collective_accuracy"]
                 for p, q in zip(again["per_seed"], instant["per_seed"], strict=True)]
        assert again["vs_instant"]["collective_accuracy"]["mean"] == pytest.approx(np.mean(diffs))
    assert row["links"]["lan_1g"]["delay_steps"] < row["links"]["wan_100m"]["delay_steps"]  # two runs, not one
    curves = [json.loads(line) for line in (out_dir / "curves.jsonl").read_text().splitlines()]
    assert sorted((c["link"], c["seed"]) for c in curves) == [(link, s) for link in ("lan_1g", "wan_100m")
                                                              for s in instant["seeds"]]
    table = (out_dir / "table.md").read_text()
    assert "## Trained with the messages in flight" in table and "| 10_nodes_true_labels, in flight |" in table
    assert "Holm-adjusted over the 6 comparisons" in table  # 2 links x 3 accuracies


def test_speed_ups_are_paired_by_seed():
    """Hand-computed: on the instant link a step is 1 s; the single node reaches the target at 1,000 and 2,000 steps,
    the row at 500 and 500: ratios 2 and 4, geometric mean 2.83, log-ratios 0.693 and 1.386 (mean 1.040, sd 0.490,
    t(0.975, 1) = 12.706: exp(1.040 -/+ 4.404) = [0.03, 231.2]); a row with a seed that never got there is n.r.;
    one whose seeds all gave the same ratio is not tested."""
    rows = {t22.SINGLE: {"nodes": 1, "bytes_per_node_step": 0.0, "steps": {"test": [1000, 2000]}},
            "fast": {"nodes": 10, "bytes_per_node_step": 0.0, "steps": {"test": [500, 500]}},
            "stuck": {"nodes": 10, "bytes_per_node_step": 0.0, "steps": {"test": [500, None]}},
            "tied": {"nodes": 10, "bytes_per_node_step": 0.0, "steps": {"test": [250, 500]}}}
    summary = {"rows": rows, "seconds_per_step": 1.0, "links": {"instant": clock.INSTANT._asdict()}}
    fast, stuck, tied = t22.paired_speedups(summary, "instant")
    assert np.exp(fast["mean"]) == pytest.approx(np.sqrt(8)) and fast["seeds"] == 2
    assert np.exp(fast["ci"][0]) == pytest.approx(0.0345, abs=1e-3) and np.exp(fast["ci"][1]) == pytest.approx(
        231.2, rel=1e-3)
    assert stuck["mean"] is None and tied["p"] is None and np.exp(tied["mean"]) == pytest.approx(4.0)
    assert fast["holm"] == pytest.approx(fast["p"])  # the only tested comparison of its family
    assert "| fast | test | 2 | 2.83x [0.03, 231.22] | 0.205 |" in "\n".join(t22.paired_markdown(summary))
