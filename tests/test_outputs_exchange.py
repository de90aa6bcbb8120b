"""Thesis ch. 2 outputs-exchange experiment: smoke run, schema, same-prediction collective, bytes, config rules."""

from __future__ import annotations

import dataclasses
import functools
import importlib.util
import json
import pathlib

import jax
import numpy as np
import pytest

from experiments import outputs_exchange as oe
from experiments.outputs_exchange import report as oe_report
from jaxcomm import bandwidth, exchange, network, recipes
from jaxcomm.harness import cli as harness_cli
from jaxcomm.harness import report, results
from jaxcomm.models.cnn import StridedCNN

ROOT = pathlib.Path(__file__).resolve().parents[1]

ROW_FIELDS = {"avg_accuracy", "collective_accuracy", "collective_accuracy_by_weighting", "steps", "target",
              "steps_to_target_avg", "steps_to_target_collective", "bytes_sent_per_node_step",
              "allreduce_bytes_per_node_step"}


@pytest.fixture(scope="module")
def smoke(tmp_path_factory):
    out = tmp_path_factory.mktemp("outputs_exchange")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("JAXCOMM_NO_REPORT", "1")  # drawn once, below
        assert oe.main(["--preset", "smoke", "--out", str(out)]) == 0
    oe.write_report(out)
    return out, json.loads((out / "summary.json").read_text())


def test_smoke_preset_runs_end_to_end_with_the_schema(smoke):
    out, summary = smoke
    assert summary["experiment"] == "outputs_exchange" and summary["preset"] == "smoke"
    assert set(summary["rows"]) == set(oe_report.ROWS)
    for name, row in summary["rows"].items():
        assert ROW_FIELDS <= set(row), name
        assert set(row["collective_accuracy_by_weighting"]) == {"entropy", "negentropy", "mean", "vote"}
        assert row["collective_accuracy"] == row["collective_accuracy_by_weighting"]["negentropy"]
        assert row["steps"] == summary["config"]["num_steps"] and row["target"] == summary["config"]["target"]
        for key in ("steps_to_target_avg", "steps_to_target_collective"):
            assert row[key] is None or (isinstance(row[key], int) and 0 < row[key] <= row["steps"])
        assert 0 <= row["avg_accuracy"] <= 100 and np.isfinite(row["bytes_sent_per_node_step"])
        # Every row ran as one sweep of the preset's two seeds: the mean and spread of their own runs.
        assert row["seeds"] == [0, 1] and len(row["per_seed"]) == 2
        per_seed = [p["avg_accuracy"] for p in row["per_seed"]]
        assert row["avg_accuracy"] == pytest.approx(np.mean(per_seed))
        assert row["avg_accuracy_sd"] == pytest.approx(np.std(per_seed, ddof=1))
        assert row["steps_to_target_avg"] in [p["steps_to_target_avg"] for p in row["per_seed"]]
    curves = [json.loads(line) for line in (out / "curves.jsonl").read_text().splitlines()]
    rows = [(c["run"], c["seed"]) for c in curves if c["kind"] == "row"]
    assert rows == [(name, seed) for name in oe_report.ROWS for seed in (0, 1)]
    assert {s["study"] for s in summary["studies"]} == set(oe_report.STUDIES) and summary["skipped_studies"] == []
    for path in ("table.md", "rows.png", "studies.png"):
        assert (out / path).is_file(), path
    table = (out / "table.md").read_text()
    assert "Table 2.1" in table and "84.5" in table and "87.7" in table and "all-reduce" in table


def test_steps_to_target_is_the_first_evaluation_reaching_it():
    history = [{"step": 10, "a": 40.0}, {"step": 20, "a": 55.0}, {"step": 30, "a": 50.0}]
    assert recipes.steps_to_target(history, 50.0, lambda h: h["a"]) == 20
    assert recipes.steps_to_target(history, 60.0, lambda h: h["a"]) is None


def test_one_node_collective_equals_its_accuracy_for_every_weighting(smoke):
    _, summary = smoke
    row = summary["rows"]["1_node_no_sharing"]
    for weighting, value in row["collective_accuracy_by_weighting"].items():
        assert value == pytest.approx(row["avg_accuracy"], abs=1e-4), weighting  # float32 sums
    assert row["bytes_sent_per_node_step"] == 0 and row["allreduce_bytes_per_node_step"] == 0


def test_collective_and_average_come_from_the_same_predictions():
    # Three nodes' predictions on four examples, by hand: node accuracies 75, 50, 50 -> average 58.3;
    # the mean distribution is right on examples 0 and 1 only -> 50; the majority vote on 0, 1, 3 -> 75.
    probs = np.array([
        [[0.9, 0.1], [0.2, 0.8], [0.6, 0.4], [0.3, 0.7]],
        [[0.6, 0.4], [0.4, 0.6], [0.7, 0.3], [0.8, 0.2]],
        [[0.2, 0.8], [0.45, 0.55], [0.9, 0.1], [0.45, 0.55]],
    ], np.float32)
    labels = np.array([0, 1, 1, 1])
    metrics = network.evaluate(probs, labels)
    assert metrics["node_accuracies"] == pytest.approx([75.0, 50.0, 50.0])
    assert metrics["avg_accuracy"] == pytest.approx(175 / 3)
    assert metrics["collective_accuracy"]["mean"] == pytest.approx(50.0)
    assert metrics["collective_accuracy"]["vote"] == pytest.approx(75.0)
    one = network.evaluate(probs[:1], labels)
    assert all(v == pytest.approx(one["avg_accuracy"]) for v in one["collective_accuracy"].values())


def test_bytes_accounting_against_a_hand_count():
    # shared data: 32 int32 indices (128 B) + 32 uint8 class ids + 8 B header = 168 B per message (the figure the
    # tables printed before the data was counted); private shards: 32 CIFAR-10 images (98,304 B) instead
    shared = functools.partial(exchange.message_bytes, sample_bytes=3072, data_model="shared")
    private = functools.partial(exchange.message_bytes, sample_bytes=3072)
    assert shared(exchange.named("true_labels"), 32, 10) == 168
    assert private(exchange.named("true_labels"), 32, 10) == 98_304 + 32 + 8
    # logits: 128 B of indices + 32 x 10 float32 (1,280 B) + 8 = 1,416 B; 128-wide features 16,520 B.
    assert shared(exchange.named("logits"), 32, 10) == 1416
    assert shared(exchange.named("features"), 32, 128) == 128 + 32 * 128 * 4 + 8
    assert private(exchange.named("none"), 32, 10) == 0
    # 90 copies sent in 100 steps by 10 nodes: 90 x 168 / 1,000 B per node and step.
    assert bandwidth.bytes_per_node_step(90, 168, num_nodes=10, steps=100) == pytest.approx(15.12)
    assert bandwidth.bytes_per_node_step(90, 0, num_nodes=10, steps=100) == 0
    # ring all-reduce: 2 (N - 1) / N x 4 B x P; P of the 16-32-64 CNN with BatchNorm and a 128-wide dense layer:
    # conv 4*4*3*16 + 16 = 784; 4*4*16*32 + 2*32 = 8,256; 4*4*32*64 + 2*64 = 32,896 (no conv bias under BN);
    # dense 1,024*128 + 128 = 131,200; logits 128*10 + 10 = 1,290 -> 174,426; its features: the 128-wide layer.
    cnn = oe.cpu_config().model(10)
    params = bandwidth.model_num_params(cnn, (32, 32, 3))
    assert (params, network.feature_dim(cnn, (32, 32, 3))) == (174_426, 128)
    assert bandwidth.allreduce_bytes(10, params) == pytest.approx(2 * 9 / 10 * 4 * 174_426)
    assert bandwidth.allreduce_bytes(1, params) == 0
    mlp = oe.smoke_config().model(10)
    assert (bandwidth.model_num_params(mlp, (28, 28, 1)), network.feature_dim(mlp, (28, 28, 1))) \
        == (784 * 16 + 16 + 16 * 10 + 10, 16)


def test_measured_bytes_match_the_sent_counter(smoke):
    _, summary = smoke
    for name, row in summary["rows"].items():
        expected = row["counters"]["sent"] * row["message_bytes"] / (row["nodes"] * row["steps"])
        assert row["bytes_sent_per_node_step"] == pytest.approx(expected), name
        if row["content"] == "none":
            assert row["bytes_sent_per_node_step"] == 0 and row["counters"]["sent"] == 0
        else:  # broadcast p_c / (N - 1) to N - 1 receivers: p_c = 0.5 copies per node and step on average
            assert 0.2 < row["counters"]["sent"] / (row["nodes"] * row["steps"]) < 0.9, name
        params = row["num_params"]
        assert row["allreduce_bytes_per_node_step"] == pytest.approx(2 * (row["nodes"] - 1) / row["nodes"] * 4 * params)


def test_identical_study_points_are_trained_once(smoke):
    _, summary = smoke
    by_run = {}
    for point in summary["studies"]:
        by_run.setdefault(point["run"], []).append(point["label"])
    # The smoke studies' points are the rows' networks but for the ring p = 1: trained once, shared.
    assert sorted(by_run["10_nodes_true_labels"]) == ["N=10", "p=9", "p_c=0.5"]
    assert by_run["1_node_no_sharing"] == ["N=1"] and by_run["10_nodes_logits"] == ["tau=1"]
    assert [run for run in by_run if run.startswith("study_")] == ["study_0_n10_true_labels"]  # the ring


def test_a_spent_time_budget_skips_studies_but_never_rows():
    config = oe.smoke_config().__class__(**{**oe.smoke_config().__dict__, "rows": ("1_node_no_sharing",),
                                             "studies": ("temperature",), "time_budget_s": 1e-9})
    result = oe.run(config, progress=False)
    assert list(result["rows"]) == ["1_node_no_sharing"] and result["studies"] == []
    assert len(result["skipped_studies"]) == 1 and "temperature" in result["skipped_studies"][0]


def test_study_points_select_labels_and_the_costly_ones_stay_last():
    config = oe.OutputsExchangeConfig(rows=(), study_points=("N=50", "p_b=2x", "tau=4"))
    assert [label for _, label, _, _ in oe.study_runs(config)] == ["tau=4", "p_b=2x", "N=50"]
    assert len(oe.study_runs(oe.OutputsExchangeConfig())) == 18  # all, N=30 and the 100-node ring among them


def test_report_merges_the_points_of_a_later_run_and_clears_them_from_skipped(tmp_path):
    def point(study, label, x):
        return {"study": study, "label": label, "x": x, "avg_accuracy": x}

    def write(folder, summary, **config):
        folder.mkdir(parents=True, exist_ok=True)
        config = {"augment": False, "num_steps": 5000, "rows": ["1_node_no_sharing"], "time_budget_s": 60.0} | config
        (folder / "summary.json").write_text(json.dumps({"command": "c", "wall_seconds": 1.0, "git_commit": "g",
                                                         "config": config, "rows": {}, **summary}))
        (folder / "curves.jsonl").write_text("")

    write(tmp_path, {"studies": [point("nodes", "N=1", 1), point("nodes", "N=10", 10),
                                 point("frequency", "p_c=0.5", 0.5)],
                     "skipped_studies": ["frequency p_b=2x (estimated 66 s, over the time budget)",
                                         "nodes N=50 (estimated 871 s, over the time budget)"]})
    # what it runs and how long it may take differ: merged
    write(tmp_path / "extra", {"studies": [point("nodes", "N=50", 50), point("temperature", "tau=4", 4)],
                               "skipped_studies": []}, rows=[], time_budget_s=0.0)
    # how it trains differs: not merged, its rows set beside
    write(tmp_path / "augmented", {"studies": [point("nodes", "N=20", 20)]}, augment=True, num_steps=3000)
    # the same rows run again (to time them alone): set beside, neither merged nor listed as extra points
    row = {"avg_accuracy": 60.0, "collective_accuracy": 66.0, "seeds": [0, 1, 2]}
    write(tmp_path / "timing", {"studies": [], "rows": {"1_node_no_sharing": row}}, seed=0, num_seeds=3)
    summary, _ = oe_report.merge_runs(tmp_path)
    # merged points sit in their study, the studies in the preset's order (a new study is not appended last)
    assert [s["label"] for s in summary["studies"]] == ["N=1", "N=10", "N=50", "tau=4", "p_c=0.5"]
    assert summary["skipped_studies"] == ["frequency p_b=2x (estimated 66 s, over the time budget)"]
    assert [(e["points"], e["rows"]) for e in summary["extra_runs"]] == [(["nodes N=50", "temperature tau=4"], [])]
    assert [pathlib.Path(o["out_dir"]).name for o in summary["other_runs"]] == ["augmented"]
    assert [pathlib.Path(r["out_dir"]).name for r in summary["reruns"]] == ["timing"]
    summary["rows"] = {"1_node_no_sharing": {"avg_accuracy": 59.94, "collective_accuracy": 66.2, "seeds": [0, 1, 2]}}
    lines = oe_report.reruns_markdown(summary)
    assert lines[1] == "## The same settings run again (`timing/`)" and "seeds 0, 1, 2, as this run's" in lines[3]
    assert lines[-1] == "| 1_node_no_sharing | 59.9 / 60.0 | 66.2 / 66.0 | - / - | - / - |"


def test_points_from_another_device_name_it_and_points_from_this_one_do_not():
    """A study split over machines (N = 100 on a lent GPU beside the CPU's points) says which device trained what."""
    extra = {"out_dir": "n100", "command": "c", "wall_seconds": 82.0, "git_commit": "g", "points": ["nodes N=100"],
             "rows": []}
    cpu, gpu = {"device": "1 x cpu"}, "1 x NVIDIA H200 (gpu)"
    assert oe_report._another_run({**extra, "device": gpu}, cpu).endswith(f"commit `g`, on {gpu})")
    assert oe_report._another_run({**extra, "device": "1 x cpu"}, cpu).endswith("commit `g`)")


def test_report_merges_the_rows_a_run_split_over_calls_did_not_train(tmp_path):
    """A table run as two calls (``rows=`` the first three, then ``--out DIR/more rows=`` the others): one table, its
    rows in the thesis' order, their curves drawn, the other call named under Table 2.1; a row trained in both is a
    rerun, set beside."""
    def write(folder, rows, **config):
        folder.mkdir(parents=True, exist_ok=True)
        config = {"augment": False, "num_steps": 5000, "rows": list(rows)} | config
        (folder / "summary.json").write_text(json.dumps({
            "command": f"c {folder.name}", "wall_seconds": 2.0, "git_commit": "g", "device": "1 x H100",
            "config": config, "studies": [], "rows": {name: {"avg_accuracy": 1.0} for name in rows}}))
        (folder / "curves.jsonl").write_text("".join(json.dumps({"kind": "row", "run": name}) + "\n" for name in rows))

    first, second = ["1_node_no_sharing", "10_nodes_logits"], ["20_nodes_true_labels", "10_nodes_no_sharing"]
    write(tmp_path, first)
    write(tmp_path / "more", second)
    write(tmp_path / "again", ["10_nodes_logits"])
    summary, curves = oe_report.merge_runs(tmp_path)
    assert list(summary["rows"]) == ["1_node_no_sharing", "10_nodes_no_sharing", "10_nodes_logits",
                                     "20_nodes_true_labels"]
    assert sorted(c["run"] for c in curves) == sorted(first + second)
    assert [(e["out_dir"], e["rows"]) for e in summary["extra_runs"]] == [("more", second)]
    assert [pathlib.Path(r["out_dir"]).name for r in summary["reruns"]] == ["again"]
    line = ("Rows 20_nodes_true_labels, 10_nodes_no_sharing come from another run with the same settings (`more/`): "
            "`c more` (2 s, commit `g`, on 1 x H100).")
    extra = summary["extra_runs"][0]
    assert f"Rows {', '.join(extra['rows'])} come from {oe_report._another_run(extra, summary)}." == line


def test_other_runs_table_sets_each_runs_rows_beside_this_ones_and_averages_seeds():
    def run(avg, coll, folder="x", **config):
        config = {"dataset": "cifar10", "widths": [16], "hidden": 8, "norm": "batch", "batch_size": 32,
                  "learning_rate": 0.001, "num_steps": 100} | config
        return {"config": config, "rows": {"10_nodes_no_sharing": {"avg_accuracy": avg, "collective_accuracy": coll}},
                "command": "c", "wall_seconds": 9.0, "out_dir": f"results/{folder}"}

    summary = run(60.0, 66.0, augment=False, seed=0)
    summary["other_runs"] = [run(51.2, 60.5, "augmented", augment=True, seed=0),
                             run(62.0, 67.0, "seed1", augment=False, seed=1)]
    lines = oe_report.other_recipes_markdown(summary)
    # the thesis, this run, each subfolder run, and the mean over the runs that differ only in seed: (60 + 62) / 2
    assert "| 10_nodes_no_sharing | 71.1 / 72.9 | 60.0 / 66.0 | 51.2 / 60.5 | 62.0 / 67.0 | 61.0 / 66.5 (2) |" in lines
    assert any("`augmented/`: strided CNN, channels (16,), dense 8, norm batch, augmentation True; batch 32, "
               "Adam 0.001 (constant); 100 steps (differs in augment=True)" in line for line in lines)
    assert oe_report.other_recipes_markdown(summary | {"other_runs": []}) == []


def test_other_runs_are_paired_with_this_run_seed_by_seed():
    def run(accuracies, folder="x", **config):
        per_seed = [{"avg_accuracy": a, "collective_accuracy": a + 5} for a in accuracies]
        row = {"avg_accuracy": float(np.mean(accuracies)), "collective_accuracy": float(np.mean(accuracies)) + 5,
               "seeds": [0, 1, 2], "per_seed": per_seed}
        return {"config": {"dataset": "cifar10", "widths": [16], "hidden": 8, "norm": "batch", "batch_size": 32,
                           "learning_rate": 0.001, "num_steps": 100, "seed": 0, **config},
                "rows": {"10_nodes_no_sharing": row}, "command": "c", "wall_seconds": 9.0, "out_dir": f"r/{folder}"}

    summary = run([60.0, 61.0, 62.0], augment=False)
    summary["other_runs"] = [run([62.0, 64.0, 63.0], "augmented", augment=True)]
    lines = oe_report.other_recipes_markdown(summary)
    # differences 2, 3, 1: mean 2, sd 1, half-width t(0.975, 2) x 1 / sqrt(3) = 4.303 / 1.732 = 2.48; t = 3.46,
    # p = 1 - t / sqrt(t^2 + 2) = 0.074 (2 degrees of freedom), Holm over the 2 tests 0.148
    assert any(line.startswith("## Other runs against this one, paired (seeds 0, 1, 2:") for line in lines)
    assert "| `augmented/` vs this run: 10_nodes_no_sharing | avg | +2.0 | [-0.5, +4.5] | 0.074 | 0.148 | no |" in lines
    assert ("| `augmented/` vs this run: 10_nodes_no_sharing | collective | +2.0 | [-0.5, +4.5] | 0.074 | 0.148 | no |"
            in lines)
    one_seed = run([62.0, 64.0, 63.0], "augmented", augment=True)
    one_seed["rows"]["10_nodes_no_sharing"]["seeds"] = [0]
    assert not any("paired" in line for line in oe_report.other_recipes_markdown(summary | {"other_runs": [one_seed]}))



def test_other_runs_interaction_is_the_difference_of_each_comparisons_paired_differences():
    def rows(sharing, isolated):  # only the rows are read; a subfolder run is {"rows": ...} here
        def row(accuracies):
            return {"seeds": [0, 1, 2], "per_seed": [{"avg_accuracy": a, "collective_accuracy": a + 5}
                                                     for a in accuracies]}
        return {"10_nodes_true_labels": row(sharing), "10_nodes_no_sharing": row(isolated)}

    here = rows([70.0, 71.0, 72.0], [60.0, 61.0, 62.0])  # sharing gains 10, 10, 10
    other = {"rows": rows([63.0, 64.0, 66.0], [60.0, 61.0, 62.0])}  # gains 3, 3, 4
    lines = oe_report.interactions_markdown(here, [other], ["augmented"])
    # interactions -7, -7, -6: mean -6.67, sd 0.577, half-width 4.303 x 0.577 / sqrt(3) = 1.43; t = -20.0,
    # p = 1 - 20 / sqrt(20^2 + 2) = 0.0025 (2 degrees of freedom); Holm over the 2 tests: 2 x 0.0025 = 0.005
    row = ("| `augmented/` minus this run: sharing true labels vs isolated nodes | {} | -6.7 | [-8.1, -5.2] | 0.002 | "
           "0.005 | yes |")
    assert row.format("avg") in lines and row.format("collective") in lines
    assert len([line for line in lines if line.startswith("| `augmented/`")]) == 2  # no other comparison has both rows
    other["rows"]["10_nodes_no_sharing"]["seeds"] = [0, 1]  # a run whose rows do not share seeds is left out
    assert oe_report.interactions_markdown(here, [other], ["augmented"]) == []


def test_study_points_are_paired_with_their_studys_reference_point():
    def point(study, label, accuracies, seeds=(0, 1, 2)):
        return {"study": study, "label": label, "seeds": list(seeds),
                "per_seed": [{"avg_accuracy": a, "collective_accuracy": a + 1} for a in accuracies]}

    studies = [point("neighbours", "p=1", [52.0, 54.0, 53.0]), point("neighbours", "p=9", [50.0, 51.0, 52.0]),
               point("temperature", "tau=4", [50.0, 50.0, 50.0], seeds=(0,)), point("temperature", "tau=1", [49.0])]
    lines = oe_report.study_paired_markdown(studies)
    # differences 2, 3, 1: mean 2, half-width t(0.975, 2) x sd 1 / sqrt(3) = 2.48, p 0.074, Holm (2 tests) 0.148;
    # one seed pairs nothing
    assert "| neighbours: p=1 vs p=9 | avg | +2.0 | [-0.5, +4.5] | 0.074 | 0.148 | no |" in lines
    assert "| neighbours: p=1 vs p=9 | collective | +2.0 | [-0.5, +4.5] | 0.074 | 0.148 | no |" in lines
    assert not any("p=9 vs" in line or "tau=" in line for line in lines)


def test_every_study_point_is_paired_with_isolated_nodes_of_its_horizon():
    def point(study, label, accuracies, steps=5000):
        return {"study": study, "label": label, "seeds": [0, 1, 2], "steps": steps,
                "per_seed": [{"avg_accuracy": a, "collective_accuracy": a + 1} for a in accuracies]}

    isolated = point("rows", "isolated", [50.0, 51.0, 52.0])
    studies = [point("neighbours", "p=1", [52.0, 54.0, 53.0]), point("neighbours", "p=9", [50.0, 51.0, 52.5])]
    lines = oe_report.study_vs_isolated_markdown(studies, {oe_report.ISOLATED: isolated})
    # p=1: differences 2, 3, 1 (as above, p 0.0742); p=9: 0, 0, 0.5 (mean 0.17, sd 0.29, p 0.423); Holm over 4
    # tests: 4 x 0.0742 = 0.297 for both p=1 rows, 2 x 0.423 = 0.845 for both p=9 rows
    assert "| neighbours p=1 vs 10 isolated nodes | avg | +2.0 | [-0.5, +4.5] | 0.074 | 0.297 | no |" in lines
    assert "| neighbours p=9 vs 10 isolated nodes | avg | +0.2 | [-0.6, +0.9] | 0.423 | 0.845 | no |" in lines
    assert "5,000 steps each" in lines[1]
    # isolated nodes trained for another horizon pair nothing
    assert oe_report.study_vs_isolated_markdown(studies, {oe_report.ISOLATED: isolated | {"steps": 1000}}) == []
    assert oe_report.study_vs_isolated_markdown(studies, {}) == []


def test_strided_cnn_defaults_are_unchanged():
    # 4x4 convs 3->64->128->256 with biases, stride 2, then 4*4*256 -> 10: 699,850 parameters, no model state.
    model = StridedCNN()
    variables = jax.eval_shape(lambda: model.init(jax.random.PRNGKey(0), np.zeros((1, 32, 32, 3), np.float32)))
    assert set(variables) == {"params"}
    assert sum(int(np.prod(x.shape)) for x in jax.tree_util.tree_leaves(variables)) == 699_850
    with pytest.raises(ValueError, match="norm"):
        StridedCNN(norm="group").init(jax.random.PRNGKey(0), np.zeros((1, 32, 32, 3), np.float32))


def test_batchnorm_cnn_trains_in_a_network(tiny_dataset):
    dataset = tiny_dataset
    model = StridedCNN(widths=(4, 8), hidden=8, norm="batch", num_classes=dataset.num_classes)
    config = network.NetworkConfig(num_nodes=1, topology="full", content="none", num_steps=2, eval_every=2)
    out = network.train_network(config, model, dataset, progress=False)
    assert "batch_stats" in out["state"].nodes.model_state and np.isfinite(out["final"]["loss"])


BAD = [
    ("dataset", {"dataset": "svhn"}),
    ("widths", {"widths": ()}),
    ("study_widths", {"study_widths": (0,)}),
    ("hidden", {"hidden": -1}),
    ("norm", {"norm": "group"}),
    ("augment", {"augment": "yes"}),
    ("batch_size", {"batch_size": 0}),
    ("num_steps", {"num_steps": 0}),
    ("eval_every", {"eval_every": 0}),
    ("learning_rate", {"learning_rate": 0.0}),
    ("consume_prob", {"consume_prob": 1.5}),
    ("broadcast_factor", {"broadcast_factor": 0.0}),
    ("temperature", {"temperature": -1.0}),
    ("target", {"target": 101.0}),
    ("rows", {"rows": ("2_nodes_gradients",)}),
    ("studies", {"studies": ("width",)}),
    ("studies", {"studies": ("nodes", "nodes")}),
    ("study_node_counts", {"study_node_counts": (0,)}),
    ("study_neighbours", {"study_neighbours": (10,)}),
    ("study_rings", {"study_rings": ((10, 10),)}),
    ("study_consume", {"study_consume": (0.0,)}),
    ("study_broadcast_factors", {"study_broadcast_factors": (-1.0,)}),
    ("study_temperatures", {"study_temperatures": (0.0,)}),
    ("study_points", {"study_points": ("N=7",)}),
    ("backend", {"backend": "gpu"}),
    ("time_budget_s", {"time_budget_s": -5.0}),
    ("seed", {"seed": 1.5}),
]


@pytest.mark.parametrize("field, change", BAD, ids=[f"{f}-{i}" for i, (f, _) in enumerate(BAD)])
def test_bad_config_is_rejected_naming_the_field(field, change):
    with pytest.raises(ValueError, match=field) as error:
        oe.OutputsExchangeConfig(**change)
    assert "must be" in str(error.value) and "got" in str(error.value)


def test_presets_are_valid_and_the_thesis_preset_has_the_thesis_settings():
    for build in oe.PRESETS.values():
        build()
    thesis = oe.thesis_config()
    assert thesis.widths == (64, 128, 256) and thesis.num_steps == 5000 and thesis.target == 85.0
    assert thesis.consume_prob == 0.5 and thesis.learning_rate == 1e-3 and thesis.dataset == "cifar10"
    assert oe.cpu_config().study_node_counts == (1, 10, 20, 30, 50, 100)
    # the thesis' 100-node network whose nodes broadcast to their 5 adjacent neighbours (§2.3.1.1)
    ring = {label: kwargs for study, label, _, kwargs in oe.study_runs(oe.cpu_config()) if study == "neighbours"}
    assert ring["N=100,p=5"] == {"num_nodes": 100, "content": "true_labels", "topology": "ring", "num_neighbours": 5}
    assert oe.study_runs(oe.cpu_config())[-1][1] in ("N=100", "N=100,p=5")  # the costliest points run last
    # the rings alone (a label with a comma cannot pass through study_points on the command line)
    rings_alone = dataclasses.replace(oe.cpu_config(), studies=("neighbours",), study_neighbours=())
    assert [label for _, label, _, _ in oe.study_runs(rings_alone)] == ["N=100,p=5"]
    with pytest.raises(ValueError, match="study_neighbours"):
        dataclasses.replace(oe.cpu_config(), study_neighbours=(), study_rings=())


def test_the_config_extends_the_chapter2_recipe_with_flat_fields():
    # The recipe's fields are inherited, not restated; overrides reach both kinds of field by name.
    recipe_fields = {f.name for f in dataclasses.fields(recipes.Chapter2Recipe)}
    own = {f.name for f in dataclasses.fields(oe.OutputsExchangeConfig)} - recipe_fields
    assert issubclass(oe.OutputsExchangeConfig, recipes.Chapter2Recipe)
    assert own == {"eval_every", "target", "rows", "studies", "study_points", "study_widths", "study_steps",
                   "study_eval_every", "study_node_counts", "study_neighbours", "study_rings", "study_consume",
                   "study_broadcast_factors", "study_temperatures", "time_budget_s", "num_seeds"}
    for name, preset in oe.PRESETS.items():
        config = preset()
        assert {f: getattr(config, f) for f in recipe_fields} == dataclasses.asdict(recipes.PRESETS[name]()), name
    changed = harness_cli.apply_overrides(oe.cpu_config(), ["learning_rate=0.001", "study_steps=10"])
    assert (changed.learning_rate, changed.study_steps) == (0.001, 10)
    # The committed rows were trained by the cpu preset (their run picked the rows alone: SELECTION fields differ).
    committed = json.loads((ROOT / "results/outputs_exchange/summary.json").read_text())["config"]
    preset = json.loads(json.dumps(dataclasses.asdict(oe.cpu_config())))
    assert results.changed_settings(committed, preset, selection=oe_report.SELECTION) == {}
    assert committed.keys() <= preset.keys()


def test_networks_built_from_the_committed_config_have_the_committed_settings():
    # Every committed study point's sharing settings, rebuilt by the recipe from the committed config.
    summary = json.loads((ROOT / "results/outputs_exchange/studies_small/summary.json").read_text())  # its studies
    config = results.config_from(oe.OutputsExchangeConfig, summary["config"])  # nested lists back into tuples
    points = {label: kwargs for _, label, _, kwargs in oe.study_runs(config)}
    assert len(summary["studies"]) >= 10
    for point in summary["studies"]:
        kwargs = dict(points[point["label"]])
        net = config.network(kwargs.pop("num_nodes"), kwargs.pop("content"), steps=config.study_steps,
                             eval_every=config.study_eval_every, **kwargs)
        degree = net.num_nodes - 1 if net.topology == "full" else net.num_neighbours
        assert (net.num_nodes, net.content, net.topology, degree, net.consume_prob, net.broadcast_prob,
                net.temperature) == (point["nodes"], point["content"], point["topology"], point["num_neighbours"],
                                     point["consume_prob"], point["broadcast_prob"], point["temperature"]), point


def test_paired_comparisons_by_hand():
    def row(*pairs):  # (avg, collective) per seed
        return {"seeds": [0, 1, 2], "per_seed": [{"avg_accuracy": a, "collective_accuracy": c} for a, c in pairs]}

    rows = {"10_nodes_true_labels": row((50, 60), (52, 61), (51, 62)),
            "10_nodes_no_sharing": row((48, 55), (49, 57), (47, 56)),
            "10_nodes_logits": row((50, 56), (48, 57), (49, 58))}
    lines = oe_report.paired_markdown(rows)
    # avg differences 2, 3, 4: mean 3, sd 1, half-width t(0.975, 2) / sqrt(3) = 4.303 / 1.732 = 2.48, t = 5.20,
    # p = 1 - t / sqrt(t^2 + 2) = 0.035 (2 degrees of freedom); collective 5, 4, 6: t = 8.66, p = 0.013; logits -
    # isolated avg 2, -1, 2: mean 1, sd 1.73, t = 1, p = 0.423; true labels - logits collective 4, 4, 4: zero spread,
    # not tested. Holm over the 5 tests: 5 x 0.013 = 0.065, 4 x 0.035 = 0.140, then 0.676: nothing is read
    assert "| sharing true labels vs isolated nodes | avg | +3.0 | [+0.5, +5.5] | 0.035 | 0.140 | no |" in lines
    assert "| sharing true labels vs isolated nodes | collective | +5.0 | [+2.5, +7.5] | 0.013 | 0.065 | no |" in lines
    assert "| sharing logits vs isolated nodes | avg | +1.0 | [-3.3, +5.3] | 0.423 | 0.676 | no |" in lines
    assert "| true labels vs logits | collective | +4.0 | [+4.0, +4.0] | zero spread | zero spread | no |" in lines
    # one comparison, a clear difference: 10, 11, 12 -> t = 19.05, p = 0.003, its own family: read
    alone = report.paired_comparisons({"a": row((60, 0), (61, 0), (62, 0)), "b": row((50, 0), (50, 0), (50, 0))},
                                      [("a", "b", "a vs b")], ["avg_accuracy"], why_paired="w")
    assert "| a vs b | avg | +11.0 | [+8.5, +13.5] | 0.003 | 0.003 | yes |" in alone
    assert any(line.startswith("## Paired comparisons (seeds 0, 1, 2") for line in lines)
    # one seed, or seeds that differ: nothing to pair
    assert oe_report.paired_markdown({k: {"seeds": [0], "per_seed": v["per_seed"][:1]} for k, v in rows.items()}) == []
    assert oe_report.paired_markdown(rows | {"10_nodes_no_sharing": rows["10_nodes_no_sharing"] | {"seeds": [3, 4, 5]}}
                                     )[-1].startswith("| true labels vs logits")


def test_run_names_name_rows_then_each_distinct_study_network_once():
    config = harness_cli.apply_overrides(oe.cpu_config(), [
        "rows=10_nodes_no_sharing,10_nodes_true_labels", "study_steps=5000", "study_eval_every=500",
        "study_points=p_c=0.25,p_c=0.5,p=1,p=9,tau=1"])
    names = oe.run_names(config)
    # at 5,000 steps and the same channels the fully connected p = 9 and p_c = 0.5 points are the true-labels row
    assert config.study_widths == config.widths and (config.study_steps, config.study_eval_every) == (
        config.num_steps, config.eval_every)
    # studies in config.studies' order (temperature, neighbours, frequency here), numbered as they come
    assert list(names.values()) == ["10_nodes_no_sharing", "10_nodes_true_labels", "study_0_n10_logits",
                                    "study_1_n10_true_labels", "study_2_n10_true_labels"]
    nets = dict(zip(names.values(), (net for net, _ in names), strict=True))
    assert nets["10_nodes_true_labels"] == oe.row_network(config, "10_nodes_true_labels")
    assert nets["study_0_n10_logits"].temperature == 1.0
    assert nets["study_1_n10_true_labels"].topology == "ring"
    assert nets["study_2_n10_true_labels"].consume_prob == 0.25


def test_a_ring_of_another_size_is_paired_with_the_fully_connected_network_of_its_size():
    """The 100-node ring against 100 fully connected nodes when the run holds them (only the graph differs), else
    against the study's reference (the 10-node network); 10-node rings always against p = 9."""
    ring = {"study": "neighbours", "label": "N=100,p=5", "nodes": 100}
    points = {"neighbours p=9": {}, "nodes N=10": {}}
    assert oe_report.study_reference(ring, points) == "neighbours p=9"
    assert oe_report.study_reference(ring, {**points, "nodes N=100": {}}) == "nodes N=100"
    assert oe_report.study_reference({"study": "neighbours", "label": "p=1", "nodes": 10},
                                     {**points, "nodes N=100": {}}) == "neighbours p=9"
    assert oe_report.study_reference({"study": "nodes", "label": "N=100", "nodes": 100}, points) == "nodes N=10"


def test_compare_points_pairs_two_runs_points_by_seed(tmp_path, capsys):
    """results/.../compare_points.py: per-seed differences of two runs' points, hand-computed: [1, 2, 3] has mean 2
    and half-width t(0.975, 2) x 1 / sqrt(3) = 2.48."""
    spec = importlib.util.spec_from_file_location(
        "compare_points", ROOT / "experiments/outputs_exchange/tools/compare_points.py")
    compare = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(compare)
    keys = list(oe_report.PAIRED_KEYS)
    for name, values in (("a", [11.0, 12.0, 13.0]), ("b", [10.0, 10.0, 10.0])):
        point = {"label": "N=100", "seeds": [0, 1, 2], "per_seed": [dict.fromkeys(keys, v) for v in values]}
        (tmp_path / f"{name}.json").write_text(json.dumps({"device": name, "studies": [point]}))
    compare.main(str(tmp_path / "a.json"), "N=100", str(tmp_path / "b.json"), "N=100")
    assert "| N=100 vs N=100 | avg | +2.0 | [-0.5, +4.5] |" in capsys.readouterr().out


def test_a_row_split_by_seeds_over_runs_merges_into_the_row_one_run_of_every_seed_wrote(tmp_path):
    """A table whose rows are trained seed by seed in runs of their own (a 20-node row does not fit one session): the
    committed 3-seed run (``results/outputs_exchange/augmented``) cut into seed 0 and seeds 1-2, each part
    summarised as its own run, merges back into exactly the rows that one run of the three seeds wrote."""
    whole = json.loads((ROOT / "results/outputs_exchange/augmented/summary.json").read_text())
    steps = ("steps_to_target_avg", "steps_to_target_collective")

    def part(folder, seeds):
        rows = {}
        for name, row in whole["rows"].items():
            per_seed = [p for seed, p in zip(row["seeds"], row["per_seed"], strict=True) if seed in seeds]
            summary = recipes.summarize_seeds([{k: v for k, v in p.items() if k not in steps} for p in per_seed],
                                              seeds)
            rows[name] = oe_report.row_of(summary | {"per_seed": per_seed}, row["target"])
        folder.mkdir(parents=True, exist_ok=True)
        config = whole["config"] | {"seed": seeds[0], "num_seeds": len(seeds)}
        (folder / "summary.json").write_text(json.dumps(whole | {"rows": rows, "config": config,
                                                                 "command": f"c {folder.name}"}))
        (folder / "curves.jsonl").write_text("".join(json.dumps({"kind": "row", "run": name, "seed": seed}) + "\n"
                                                     for name in rows for seed in seeds))

    part(tmp_path, [0])
    part(tmp_path / "seeds_1_2", [1, 2])
    part(tmp_path / "then_seed_1", [1])  # read after seeds_1_2, it overlaps the merged seeds: not merged, set beside
    summary, curves = oe_report.merge_runs(tmp_path)
    assert json.loads(json.dumps(summary["rows"])) == whole["rows"]
    assert sorted((c["run"], c["seed"]) for c in curves) == sorted((n, s) for n in whole["rows"] for s in (0, 1, 2))
    assert [e["seeds"] for e in summary["extra_runs"]] == [{name: [1, 2] for name in whole["rows"]}]
    assert [pathlib.Path(o["out_dir"]).name for o in summary["other_runs"]] == ["then_seed_1"]
    table = oe_report.table_markdown(summary, curves)
    assert "Seeds 1, 2 of row 10_nodes_logits come from another run with the same settings but its seeds " \
           "(`seeds_1_2/`): `c seeds_1_2`" in table
