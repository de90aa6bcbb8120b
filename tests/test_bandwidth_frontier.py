"""The bandwidth-frontier experiment: method specs and row names, the Pareto fronts, a 2-seed smoke run end to
end, resume, and merges of the runs below a run."""

from __future__ import annotations

import dataclasses
import json
import pathlib
import shutil
import types

import numpy as np
import pytest

from experiments import bandwidth_frontier as bf
from jaxcomm import driver, ledger, methods, network, recipes, zoo
from jaxcomm.harness import frontier as fr
from jaxcomm.models import MLP

ROOT = pathlib.Path(__file__).resolve().parents[1]
ROW_FIELDS = {"family", "spec", "seeds", "per_seed", "accuracy", "accuracy_sd", "avg_accuracy", "bytes_per_node_step",
              "total_bytes_per_node", "fraction_of_dense_allreduce", "wall_seconds", "num_params", "steps"}
SMOKE_ROWS = ["isolated", "true_labels", "true_labels_shared", "sync_sgd", "gossip_5", "top_k_5pct", "diloco_h5",
              "codistill_k5", "powersgd_r1"]


@pytest.fixture(scope="module")
def smoke(tmp_path_factory):
    out = tmp_path_factory.mktemp("bandwidth_frontier")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("JAXCOMM_NO_REPORT", "1")  # drawn once, below
        assert bf.main(["--preset", "smoke", "--out", str(out)]) == 0
    bf.write_report(out)
    return out, json.loads((out / "summary.json").read_text())


# --------------------------------------------------------------------------- rows over seeds


def test_smoke_rows_average_two_seeds_of_every_family_at_one_horizon(smoke):
    _, summary = smoke
    rows = summary["rows"]
    assert list(rows) == SMOKE_ROWS and summary["skipped"] == [] and summary["seeds"] == [0, 1]
    assert {row["family"] for row in rows.values()} == set(zoo.FAMILIES)
    for name, row in rows.items():
        assert ROW_FIELDS <= set(row), name
        assert row["seeds"] == 2 and [p["seed"] for p in row["per_seed"]] == [0, 1], name
        accuracies = [p["accuracy"] for p in row["per_seed"]]
        assert row["accuracy"] == np.mean(accuracies) and row["accuracy_sd"] == pytest.approx(np.std(accuracies,
                                                                                                     ddof=1)), name
        assert row["avg_accuracy"] == np.mean([p["avg_accuracy"] for p in row["per_seed"]]), name
        assert row["wall_seconds"] == pytest.approx(sum(p["wall_seconds"] for p in row["per_seed"])), name
        assert row["steps"] == summary["chapter2_config"]["num_steps"] == 20, name  # every method at one horizon
        assert all(p["steps"] == 20 for p in row["per_seed"]), name
        assert row["total_bytes_per_node"] == pytest.approx(row["bytes_per_node_step"] * 20), name
        assert row["spec"] in summary["config"]["methods"] and zoo.parse(row["spec"]).name \
            == name.removesuffix("_shared"), name
        assert sum(row["bytes_by_kind"].values()) == pytest.approx(row["bytes_per_node_step"]), name
        assert 0 <= row["accuracy"] <= 100
    assert len({p["accuracy"] for p in rows["sync_sgd"]["per_seed"]}) == 2  # the seeds really differ
    assert rows["sync_sgd"]["fraction_of_dense_allreduce"] == pytest.approx(1.0)
    assert rows["isolated"]["bytes_per_node_step"] == 0 and rows["isolated"]["data_model"] == "private"
    # DiLoCo at 1/H of the all-reduce; PowerSGD's factors all-reduced (4 nodes: 2 (N - 1) / N x message bytes)
    assert rows["diloco_h5"]["fraction_of_dense_allreduce"] == pytest.approx(1 / 5)
    assert rows["powersgd_r1"]["bytes_by_kind"]["parameters"] == rows["powersgd_r1"]["bytes_per_node_step"] > 0
    assert rows["gossip_5"]["bytes_per_node_step"] == pytest.approx(  # a ring of one neighbour: its whole model
        4 * rows["gossip_5"]["num_params"] / 5)  # (an MLP: no statistics) every 5 steps
    assert 0 < rows["codistill_k5"]["bytes_per_node_step"] and rows["top_k_5pct"]["bytes_per_node_step"] \
        < rows["sync_sgd"]["bytes_per_node_step"]


def test_shared_rows_are_the_same_runs_counted_with_indices(smoke):
    _, summary = smoke
    private, shared = summary["rows"]["true_labels"], summary["rows"]["true_labels_shared"]
    assert (private["data_model"], shared["data_model"]) == ("private", "shared")
    assert [p["accuracy"] for p in shared["per_seed"]] == [p["accuracy"] for p in private["per_seed"]]
    assert shared["accuracy"] == private["accuracy"] and shared["wall_seconds"] == private["wall_seconds"]
    assert shared["spec"] == private["spec"] == "outputs:true_labels"
    # a message carries 32 MNIST images (784 B each) under the private model, 32 int32 indices under the shared
    mine, theirs = private["bytes_by_kind"], shared["bytes_by_kind"]
    assert theirs["inputs"] == 0 < mine["inputs"] and theirs["payload"] == mine["payload"] > 0
    copies = mine["inputs"] / (32 * 784)  # messages per node and step
    assert theirs["indices"] - mine["indices"] == pytest.approx(copies * 32 * 4)
    assert private["bytes_per_node_step"] - shared["bytes_per_node_step"] == pytest.approx(copies * 32 * (784 - 4))


def test_a_sweep_seed_equals_that_seed_trained_alone(smoke):
    _, summary = smoke
    recipe = dataclasses.replace(recipes.smoke(), seed=1)
    dataset = recipe.load()
    alone = network.train_network(recipe.network(4, "true_labels", eval_every=10), recipe.model(dataset.num_classes),
                                  dataset, progress=False)
    seed1 = summary["rows"]["true_labels"]["per_seed"][1]
    assert seed1["accuracy"] == pytest.approx(alone["final"]["collective_accuracy"]["negentropy"], abs=1e-6)
    assert seed1["avg_accuracy"] == pytest.approx(alone["final"]["avg_accuracy"], abs=1e-6)


def test_paired_differences_from_isolated_nodes_on_the_same_seed(smoke):
    _, summary = smoke
    rows = summary["rows"]
    base = [p["accuracy"] for p in rows["isolated"]["per_seed"]]
    assert "paired_diff_vs_isolated" not in rows["isolated"]
    for name, row in rows.items():
        if name == "isolated":
            continue
        diffs = [p["accuracy"] - b for p, b in zip(row["per_seed"], base, strict=True)]
        assert row["paired_diff_vs_isolated"] == pytest.approx(np.mean(diffs)), name
        lo, hi = row["paired_diff_vs_isolated_ci95"]
        # 2 seeds: mean -/+ t(0.975, 1) = 12.706 x sd / sqrt(2), sd / sqrt(2) = |d1 - d0| / 2
        assert (hi - lo) / 2 == pytest.approx(12.7062 * abs(diffs[1] - diffs[0]) / 2, rel=1e-4), name
        # 2 seeds: t = mean / (sd / sqrt(2)) with 1 degree of freedom, p = 1 - 2 arctan(|t|) / pi
        t = abs(np.mean(diffs)) / (abs(diffs[1] - diffs[0]) / 2)
        assert row["paired_diff_vs_isolated_p"] == pytest.approx(1 - 2 * np.arctan(t) / np.pi, rel=1e-6), name


def test_holm_over_the_rows_against_isolated_nodes():
    # Two tested rows make the family: the smaller raw p-value doubles, the larger stays (Holm, m = 2); a twin
    # takes its private row's value; a stopped seed and a zero spread are not tested. Raw p-values from scipy's
    # one-sample t-test on the paired differences, independent of jaxcomm.stats.
    from scipy import stats as scipy_stats

    base = [50.0, 51.0, 53.0]

    def row(diffs, **extra):
        return {"per_seed": [{"seed": s, "accuracy": None if d is None else b + d}
                             for s, (b, d) in enumerate(zip(base, diffs, strict=True))]} | extra

    rows = {"isolated": row([0, 0, 0]), "a": row([1.0, 2.0, 4.0]),
            "a_shared": row([1.0, 2.0, 4.0], data_model="shared"), "e": row([-3.0, -2.5, -3.25]),
            "stopped": row([1.0, None, 2.0]), "tie": row([2.0, 2.0, 2.0])}
    p_a = scipy_stats.ttest_1samp([1.0, 2.0, 4.0], 0).pvalue
    p_e = scipy_stats.ttest_1samp([-3.0, -2.5, -3.25], 0).pvalue
    assert p_e < p_a / 2  # so Holm orders them e, a and leaves a's unchanged
    fr.add_paired(rows)  # the raw tests, as merge_runs sets them
    held = bf.holm_vs_isolated(rows)
    assert held["e"] == pytest.approx(2 * p_e) and held["a"] == pytest.approx(p_a) and held["a_shared"] == held["a"]
    assert held["isolated"] is held["stopped"] is held["tie"] is None


def test_smoke_table_and_plot_name_the_pareto_front(smoke):
    out, summary = smoke
    rows = summary["rows"]
    assert summary["frontier"] == fr.pareto({n: r for n, r in rows.items() if not n.endswith("_shared")})
    assert summary["frontier_shared"] == fr.pareto({n: r for n, r in rows.items() if n != "true_labels"})
    table = (out / "table.md").read_text()
    assert "| Pareto front |" in table and "not trained again" in table
    sentence = next(line for line in table.splitlines() if line.startswith("Pareto front under the private"))
    assert [part.split(" (")[0] for part in sentence.split(": ", 1)[1].split(" → ")] == summary["frontier"]
    iso = next(line for line in table.splitlines() if line.startswith("| isolated |"))
    assert f"{rows['isolated']['accuracy']:.1f} ± {rows['isolated']['accuracy_sd']:.1f}" in iso
    assert (out / "frontier.png").stat().st_size > 10_000


def _stopped_sweep(*args, **kwargs):
    raise driver.Diverged(7, 2, 1e9, bound=100.0, good_step=5, saved=None)


def test_a_diverging_seed_is_recorded_as_stopped_and_the_next_one_runs(smoke, monkeypatch):
    """A sweep that diverges is trained seed by seed; seed 1 diverges, seeds 0 and 2 are rows."""
    built = types.SimpleNamespace(config=types.SimpleNamespace(num_nodes=4, data_model="private"),
                                  booking=lambda state, steps, data_model: ledger.Booking(parameters=4 * 100 * steps),
                                  traffic=())  # a Built states its traffic (methods.Built)

    def train(method, config, model, dataset, **kwargs):
        if config.seed == 1:
            raise driver.Diverged(7, 2, 1e9, bound=100.0, good_step=5, saved=None)
        return {"final": {"avg_accuracy": 40.0 + config.seed}, "steps_done": 20, "train_seconds": 2.0,
                "history": [], "built": built, "state": None}

    monkeypatch.setattr(methods, "sweep", _stopped_sweep)
    monkeypatch.setattr(methods, "train", train)
    config = fr.FrontierConfig(methods=("qsgd:4:ef",), num_nodes=4, gossip_neighbours=1)
    dataset = types.SimpleNamespace(num_classes=10, train=types.SimpleNamespace(images=np.zeros((1, 8, 8, 1))))
    monkeypatch.setattr(fr.bandwidth, "model_num_params", lambda model, shape: 10)
    out = fr.run_method(config, zoo.parse("qsgd:4:ef"), dataset, spec="qsgd:4:ef", checkpoints=None, progress=False)
    row = out["rows"]["qsgd_4lvl_ef"]
    assert [p["accuracy"] for p in row["per_seed"]] == [40.0, None, 42.0] and row["seeds"] == 3
    assert row["accuracy"] is None and row["accuracy_sd"] is None and row["wall_seconds"] == 4.0
    assert row["stopped"] == ["seed 1: diverged: loss above 100 (1e+09) at node 2 at step 7"]
    assert (row["bytes_per_node_step"], row["steps"], row["total_bytes_per_node"]) == (100.0, 20, 2000.0)
    assert row["fraction_of_dense_allreduce"] == pytest.approx(100 / 60)  # 2 (N - 1) / N x 4 x 10 parameters
    rows = smoke[1]["rows"] | out["rows"]
    fr.add_paired(rows)
    assert "paired_diff_vs_isolated" not in rows["qsgd_4lvl_ef"] and "qsgd_4lvl_ef" not in fr.pareto(rows)
    table = bf.table_markdown(smoke[1] | {"rows": rows, "out_dir": "x"})
    assert "| qsgd_4lvl_ef | `qsgd:4:ef` | compressed | - | stopped | - | - | - | 100 B |" in table  # no graph, no test
    assert "qsgd_4lvl_ef stopped: seed 1: diverged" in table


def test_a_row_whose_every_seed_stopped_still_counts_the_bytes_its_method_sends(smoke, monkeypatch):
    """Bytes depend on the method, not on training: every seed of top-k stopped, its bytes are the trained row's."""
    monkeypatch.setattr(methods, "sweep", _stopped_sweep)
    monkeypatch.setattr(methods, "train", _stopped_sweep)
    config = fr.smoke_config()
    row = fr.run_method(config, zoo.parse("top_k:0.05"), config.chapter2().load(), checkpoints=None,
                        progress=False)["rows"]["top_k_5pct"]
    trained = smoke[1]["rows"]["top_k_5pct"]
    assert row["accuracy"] is None and len(row["stopped"]) == 2
    assert row["bytes_per_node_step"] == trained["bytes_per_node_step"] > 0
    assert row["num_params"] == trained["num_params"]


# --------------------------------------------------------------------------- names and fronts


@pytest.mark.parametrize("spec, name", [
    ("outputs:none", "isolated"), ("outputs:true_labels", "true_labels"), ("outputs:logits", "logits"),
    ("outputs:features", "features"), ("sync", "sync_sgd"), ("gossip:100", "gossip_100"),
    ("top_k:0.01", "top_k_1pct"), ("top_k:0.001", "top_k_0.1pct"), ("top_k:0.05", "top_k_5pct"),
    ("top_k:0.125", "top_k_12.5pct"), ("top_k:0.01:layer:ef", "top_k_1pct"),
    ("top_k:0.01:whole", "top_k_1pct_whole"), ("top_k:0.01:whole:noef", "top_k_1pct_whole_noef"),
    ("random_k:0.1", "random_k_10pct"), ("random_k:0.01:ef", "random_k_1pct_ef"), ("sign", "sign"),
    ("sign:whole", "sign_whole"), ("sign:noef", "sign_noef"), ("qsgd:4", "qsgd_4lvl"), ("qsgd:4:ef", "qsgd_4lvl_ef"),
    ("qsgd:16:whole", "qsgd_16lvl_whole"), ("diloco:50", "diloco_h50"), ("local_sgd:50", "local_sgd_h50"),
    ("codistill:100", "codistill_k100"), ("powersgd:4", "powersgd_r4"), ("adacomp", "adacomp"),
    ("adacomp:50:whole", "adacomp_l50_whole"), ("natural", "natural"), ("natural_det:noef", "natural_det_noef"),
    ("induced:0.01", "induced_1pct"), ("induced:0.01:ef", "induced_1pct_ef"), ("osgp:2", "osgp_2"), ("sgp", "sgp"),
])
def test_row_names_say_the_method_and_its_setting(spec, name):
    assert zoo.parse(spec).name == name


def test_frontier_keeps_the_rows_nothing_cheaper_beats():
    rows = {"a": {"bytes_per_node_step": 10, "accuracy": 50}, "b": {"bytes_per_node_step": 100, "accuracy": 48},
            "c": {"bytes_per_node_step": 1000, "accuracy": 60}, "d": {"bytes_per_node_step": 0, "accuracy": 45},
            "e": {"bytes_per_node_step": 10, "accuracy": 40}, "f": {"bytes_per_node_step": 5, "accuracy": None},
            "g": {"bytes_per_node_step": None, "accuracy": None}}  # f, g: a seed stopped
    assert fr.pareto(rows) == ["d", "a", "c"]


def test_the_fronts_under_each_data_model():
    row = lambda b, a, model=None: {"bytes_per_node_step": b, "accuracy": a} | ({"data_model": model} if model else {})
    rows = {"isolated": row(0, 50, "private"), "true_labels": row(50_000, 55, "private"),
            "true_labels_shared": row(100, 55, "shared"), "top_k_0.1pct": row(13_000, 53),
            "sync_sgd": row(1_000_000, 60)}
    assert set(fr.under(rows, "private")) == {"isolated", "true_labels", "top_k_0.1pct", "sync_sgd"}
    assert set(fr.under(rows, "shared")) == {"isolated", "true_labels_shared", "top_k_0.1pct", "sync_sgd"}
    assert fr.fronts(rows) == {"frontier": ["isolated", "top_k_0.1pct", "true_labels", "sync_sgd"],
                               "frontier_shared": ["isolated", "true_labels_shared", "sync_sgd"]}
    assert bf.front_sentence(rows, fr.fronts(rows)["frontier_shared"], "shared") == (
        "Pareto front under the shared data model, by bytes per node and step: isolated (0 B, 50) → "
        "true_labels_shared (100 B, 55) → sync_sgd (1 MB, 60).")


# --------------------------------------------------------------------------- configs


@pytest.mark.parametrize("spec, family, attributes", [
    ("outputs:logits", "outputs", {"payload_dim": 4}),
    # every 10 steps a node's 556 float32 values along each of the ring's 8 edges
    ("gossip:10", "gossip", {"traffic": (ledger.Round("neighbours", 4.0 * 556, every=10, edges=8),)}),
    ("diloco:50", "local_sgd", {"sync_every": 50}), ("local_sgd:10", "local_sgd", {"sync_every": 10}),
    ("codistill:100", "codistillation", {"refresh_every": 100}), ("powersgd:4", "compressed", {"summed": True}),
    ("top_k:0.01", "compressed", {"dense": False, "summed": False}), ("sync", "sync", {"dense": True}),
    # 0.005 of the MLP's 556 parameters (3 float32 values) along each of the ring's 4 edges, every step
    ("sparta:0.005", "sparse_averaging", {"traffic": (ledger.Round("neighbours", 12.0, edges=4),)}),
])
def test_method_specs_make_method_values(spec, family, attributes):
    method = zoo.parse(spec)
    config = method.config_for(network.NetworkConfig(num_nodes=4, num_neighbours=1, batch_size=4, backend="vmap",
                                                     step_loop="scan"))
    built = method.build(config, MLP(hidden=(8,), num_classes=4), image_shape=(8, 8, 1), num_classes=4)
    assert method.family == family and built.config == config
    for field, value in attributes.items():
        assert getattr(built, field) == value, field
    if spec == "gossip:10":
        assert (config.topology, config.num_neighbours) == ("ring", 2)


@pytest.mark.parametrize("spec", ["outputs", "outputs:labels", "sync:1", "gossip:0", "gossip:x", "top_k",
                                  "top_k:2", "sign:0.1", "qsgd:0", "top_k:0.1:whole:whole", "sgd", "diloco:0",
                                  "codistill", "powersgd:r", "local_sgd:1:2"])
def test_bad_method_specs_are_rejected_by_the_config(spec):
    with pytest.raises(ValueError, match="method"):
        fr.FrontierConfig(methods=(spec,))


def test_other_config_rules():
    for kwargs, field in [({"chapter2_preset": "gpu"}, "chapter2_preset"), ({"num_nodes": 1}, "num_nodes"),
                          ({"gossip_neighbours": 10}, "gossip_neighbours"), ({"methods": ()}, "methods"),
                          ({"methods": ("sync", "sync")}, "methods"), ({"time_budget_s": -1}, "time_budget_s"),
                          ({"methods": ("top_k:0.01", "top_k:0.01:layer")}, "distinct rows"),
                          ({"num_seeds": 0}, "num_seeds"),
                          ({"chapter2_overrides": ("num_steps=-1",)}, "num_steps"),
                          ({"chapter2_overrides": ("stepz=3",)}, "unknown config field 'stepz'")]:
        with pytest.raises(ValueError, match=field):
            fr.FrontierConfig(**kwargs)


def test_cpu_preset_is_the_current_chapter2_cpu_recipe_at_1000_steps_with_every_method():
    config = fr.cpu_config()
    assert config.chapter2_preset == "cpu" and config.chapter2_overrides == ("num_steps=1000",)
    assert config.chapter2() == dataclasses.replace(recipes.cpu(), num_steps=1000)  # nothing else overridden
    assert (config.num_nodes, config.num_seeds, config.seeds(), config.eval_every, config.time_budget_s) \
        == (10, 3, [0, 1, 2], 500, 7200.0)
    names = [method.name for method in config.parsed()]
    assert names == ["isolated", "true_labels", "sync_sgd", "logits", "diloco_h50", "top_k_1pct", "codistill_k100",
                     "powersgd_r4", "gossip_100", "features", "sign", "qsgd_4lvl_ef", "diloco_h10", "diloco_h250",
                     "codistill_k500", "powersgd_r1"]  # issue 19's list, one setting of each first
    assert {method.family for method in config.parsed()} == set(zoo.FAMILIES)
    thesis = fr.thesis_config()
    assert thesis.chapter2() == recipes.thesis() and thesis.methods == config.methods
    assert (thesis.num_seeds, thesis.time_budget_s) == (3, 0.0)


# --------------------------------------------------------------------------- resume


def test_resume_trains_only_what_was_unfinished(smoke, tmp_path, monkeypatch, record_training):
    """A run interrupted in sync's sweep resumes: the finished true-labels sweep comes back from its checkpoint
    without a training step, only sync trains."""
    out = tmp_path / "run"
    args = ["--preset", "smoke", "--out", str(out), "methods=outputs:true_labels,sync"]
    monkeypatch.setenv("JAXCOMM_NO_REPORT", "1")
    sweep = methods.sweep

    def interrupted_at_sync(method, *args, **kwargs):
        if method.name == "sync_sgd":
            raise KeyboardInterrupt
        return sweep(method, *args, **kwargs)

    with monkeypatch.context() as patch:
        patch.setattr(methods, "sweep", interrupted_at_sync)
        assert bf.main(args) == 130
    assert not (out / "summary.json").exists()
    calls = record_training()
    assert bf.main([*args, "--resume"]) == 0
    assert [call for call in calls if call[1] != 20] == [("sync_sgd", 0, 20)]  # the one that trained
    assert any(desc.startswith("true_labels") and start == done == 20 for desc, start, done in calls)
    rows = json.loads((out / "summary.json").read_text())["rows"]
    for name in ("true_labels", "sync_sgd"):  # the same numbers as the smoke run's, trained in one go
        assert [p["accuracy"] for p in rows[name]["per_seed"]] \
            == [p["accuracy"] for p in smoke[1]["rows"][name]["per_seed"]], name


def test_resume_budget_counts_the_training_of_restored_methods(monkeypatch):
    """A method restored in no time still counts its recorded seconds against the time budget."""
    restored = lambda config, method, *args, **kwargs: {"rows": {method.name: {"wall_seconds": 1000.0}},
                                                        "curves": []}  # trained 1,000 s before, back at once
    monkeypatch.setattr(recipes.Chapter2Recipe, "load", lambda self: type("Dataset", (), {"name": "d"})())
    monkeypatch.setattr(fr, "run_method", restored)
    monkeypatch.setattr(fr, "add_paired", lambda rows: None)
    monkeypatch.setattr(fr, "fronts", lambda rows: {})
    config = fr.FrontierConfig(methods=("sync", "sign", "qsgd:4"), time_budget_s=1500.0)
    out = fr.run(config)  # without the restored 1,000 s, sign would start: 0 s + 1,000 s estimated < 1,500 s
    assert [s.split(" ")[0] for s in out["skipped"]] == ["sign", "qsgd:4"]


# --------------------------------------------------------------------------- merges of the runs below a run


def test_a_new_run_does_not_merge_the_superseded_one_and_says_where_it_is(smoke, tmp_path, capsys):
    out = tmp_path / "run"
    shutil.copytree(smoke[0], out)
    # a run of the format before seeds (one seed per method, no num_seeds) and another learning rate
    parent = json.loads((out / "summary.json").read_text())
    (out / "superseded").mkdir()
    (out / "superseded" / "summary.json").write_text(json.dumps(parent | {
        "command": "python experiments/bandwidth_frontier.py --preset cpu",
        "config": {k: v for k, v in parent["config"].items() if k != "num_seeds"} | {"seed": 0},
        "chapter2_config": parent["chapter2_config"] | {"learning_rate": 0.001}}))
    summary = fr.merge_runs(out)
    assert list(summary["rows"]) == SMOKE_ROWS and summary["extra_runs"] == []
    assert "not merged: " in capsys.readouterr().out
    [other] = summary["other_runs"]
    assert other["folder"] == "superseded" and "one seed per method" in other["reasons"][0]
    assert "learning_rate=0.001" in other["reasons"][1]
    table = bf.table_markdown(summary)
    assert "The superseded frontier is in `superseded/`" in table and "`superseded/table.md`" in table


def test_report_merges_new_runs_of_the_same_settings(smoke, tmp_path):
    out = tmp_path / "run"
    shutil.copytree(smoke[0], out)
    parent = json.loads((out / "summary.json").read_text())
    parent["skipped"] = ["sign (estimated 9 s, over the time budget)"]
    (out / "summary.json").write_text(json.dumps(parent))
    isolated = parent["rows"]["isolated"]
    sign = parent["rows"]["top_k_5pct"] | {  # 10 points over isolated nodes on every seed, for 1 byte
        "spec": "sign", "bytes_per_node_step": 1.0, "accuracy": isolated["accuracy"] + 10,
        "per_seed": [p | {"accuracy": p["accuracy"] + 10} for p in isolated["per_seed"]]}
    del sign["paired_diff_vs_isolated"], sign["paired_diff_vs_isolated_ci95"]
    (out / "extra").mkdir()
    (out / "extra" / "summary.json").write_text(json.dumps(
        parent | {"config": parent["config"] | {"methods": ["sign"], "eval_every": 5}, "rows": {"sign": sign},
                  "command": "extra"}))
    summary = fr.merge_runs(out)
    assert list(summary["rows"]) == [*SMOKE_ROWS, "sign"] and summary["skipped"] == []
    assert summary["frontier"][:2] == summary["frontier_shared"][:2] == ["isolated", "sign"]
    assert summary["rows"]["sign"]["paired_diff_vs_isolated"] == pytest.approx(10)
    assert "Rows sign come from a second run" in bf.table_markdown(summary)


def test_report_merges_single_seed_runs_that_train_by_the_same_recipe(tmp_path):
    # The parent's chapter-2 config is an older summary's (the whole chapter-2 experiment config); a run
    # below it with the recipe alone joins it, a run with another learning rate does not.
    recipe = json.loads(json.dumps(dataclasses.asdict(fr.cpu_config().chapter2())))
    old = recipe | {"rows": ["1_node_no_sharing"], "studies": [], "eval_every": 500, "target": 65.0,
                    "study_steps": 1000, "time_budget_s": 3240.0}

    def write(folder, chapter2, rows, **config):
        folder.mkdir(parents=True, exist_ok=True)
        config = {"chapter2_preset": "cpu", "num_nodes": 10, "methods": list(rows), "eval_every": 1000} | config
        (folder / "summary.json").write_text(json.dumps({
            "command": "c", "wall_seconds": 1.0, "git_commit": "g", "config": config, "chapter2_config": chapter2,
            "rows": {name: {"bytes_per_node_step": b, "accuracy": a} for name, (b, a) in rows.items()},
            "skipped": ["gossip:10 (estimated 9 s, over the time budget)"]}))
        (folder / "curves.jsonl").write_text("")

    write(tmp_path, old, {"sync": (1000.0, 60.0)})
    write(tmp_path / "extra", recipe | {"data_dir": "/elsewhere"}, {"gossip:10": (100.0, 61.0)}, eval_every=500)
    write(tmp_path / "other", recipe | {"learning_rate": recipe["learning_rate"] / 3}, {"sign": (10.0, 70.0)})
    summary = fr.merge_runs(tmp_path)
    assert set(summary["rows"]) == {"sync", "gossip:10"} and summary["skipped"] == []
    assert summary["frontier"] == ["gossip:10"]
    assert [extra["methods"] for extra in summary["extra_runs"]] == [["gossip:10"]]


@pytest.mark.parametrize("experiment", ["bandwidth_frontier", "time_frontier"])
def test_the_frontier_experiments_import_no_experiment(experiment):
    for path in (ROOT / "experiments" / experiment).glob("*.py"):  # its own modules by relative imports only
        source = path.read_text()
        assert "import experiments" not in source and "from experiments" not in source and "sys.path" not in source


def test_a_run_kept_by_the_experiment_loads_back_in_a_fresh_process(tmp_path):
    """Issue 59 item 4: one call loads a saved run with its config, model and method, without training."""
    import subprocess
    import sys

    out = tmp_path / "frontier"
    assert bf.main(["--preset", "smoke", "--out", str(out), "--keep-checkpoints", "methods=outputs:none,sync",
                   "num_seeds=2"]) == 0
    want = {p["seed"]: p for p in json.loads((out / "summary.json").read_text())["rows"]["sync_sgd"]["per_seed"]}
    code = ("import json, sys; from jaxcomm.harness import frontier; r = frontier.load_run(sys.argv[1], 'sync_sgd', 1);"
            " print(json.dumps({'accuracy': r['final']['avg_accuracy'], 'steps': r['steps_done'], 'resumed':"
            " r['resumed_from'], 'method': r['method'].name, 'nodes': r['config'].num_nodes}))")
    done = subprocess.run([sys.executable, "-c", code, str(out)], capture_output=True, text=True, timeout=300,
                          cwd=pathlib.Path(__file__).resolve().parents[1])
    assert done.returncode == 0, done.stderr[-2000:]
    got = json.loads(done.stdout.strip().splitlines()[-1])
    assert got["accuracy"] == pytest.approx(want[1]["avg_accuracy"]) and got["method"] == "sync_sgd"
    assert got["resumed"] == got["steps"] == want[1]["steps"] and got["nodes"] == 4
    with pytest.raises(KeyError, match="no row 'sinc_sgd'"):
        fr.load_run(out, "sinc_sgd", 1)


def test_rows_are_repriced_under_the_stored_encoding_by_hand():
    """One private message a node and step of 32 CIFAR-10 images (98,304 B raw) + 40 B: 32 x 920.85 + 40 stored; a
    shared twin and a gradient row carry no image; a row with kinds re-prices its inputs alone."""
    summary = {"dataset": "cifar10", "chapter2_config": {"batch_size": 32}}
    private = {"bytes_per_node_step": 98_344.0, "family": "outputs", "data_model": "private", "message_bytes": 98_344}
    assert bf.stored_bytes(summary, private) == pytest.approx(32 * 920.85 + 40)
    assert bf.stored_bytes(summary, private | {"data_model": "shared", "bytes_per_node_step": 168.0}) == 168.0
    assert bf.stored_bytes(summary, {"bytes_per_node_step": 1e6, "family": "sync"}) == 1e6
    kinds = {"bytes_per_node_step": 5000.0, "bytes_by_kind": {"inputs": 3072.0}}
    assert bf.stored_bytes(summary, kinds) == pytest.approx(5000 - 3072 + 920.85)
    assert bf.stored_bytes(summary | {"dataset": "synthetic"}, private) is None
