"""The bandwidth-frontier experiment: method specs, the frontier, a smoke run end to end."""

from __future__ import annotations

import dataclasses
import json
import pathlib

import pytest

from experiments import bandwidth_frontier as bf

ROOT = pathlib.Path(__file__).resolve().parents[1]
ROW_FIELDS = {"accuracy", "bytes_per_node_step", "steps", "wall_seconds", "family", "total_bytes_per_node"}


@pytest.fixture(scope="module")
def smoke(tmp_path_factory):
    out = tmp_path_factory.mktemp("bandwidth_frontier")
    assert bf.cli(["--preset", "smoke", "--out", str(out)]) == 0
    bf.write_report(out)  # the command draws it too, unless JAXCOMM_NO_REPORT=1
    return out, json.loads((out / "summary.json").read_text())


def test_smoke_preset_runs_every_kind_of_method(smoke):
    out, summary = smoke
    config = summary["config"]
    assert list(summary["rows"]) == list(config["methods"]) and summary["skipped"] == []
    families = {row["family"] for row in summary["rows"].values()}
    assert families == set(bf.FAMILIES)
    for name, row in summary["rows"].items():
        assert ROW_FIELDS <= set(row), name
        assert row["steps"] == summary["chapter2_config"]["num_steps"]
        assert row["total_bytes_per_node"] == pytest.approx(row["bytes_per_node_step"] * row["steps"])
        assert 0 <= row["accuracy"] <= 100
    rows = summary["rows"]
    assert rows["sync"]["fraction_of_dense_allreduce"] == pytest.approx(1.0)
    assert rows["sign:whole"]["bytes_per_node_step"] < rows["top_k:0.05"]["bytes_per_node_step"] \
        < rows["sync"]["bytes_per_node_step"]
    # the low-communication methods of today: DiLoCo / local SGD at 1/H of the all-reduce, codistillation's
    # checkpoints, PowerSGD's factors (4 nodes: a ring all-reduce of 2 (N - 1) / N x message bytes)
    for name in ("diloco:5", "local_sgd:5"):
        assert rows[name]["fraction_of_dense_allreduce"] == pytest.approx(1 / 5), name
    assert rows["codistill:5"]["family"] == "codistillation" and rows["codistill:5"]["bytes_per_node_step"] > 0
    assert rows["powersgd:1"]["bytes_per_node_step"] == pytest.approx(1.5 * rows["powersgd:1"]["message_bytes"])
    assert rows["powersgd:1"]["bytes_per_node_step"] < rows["sync"]["bytes_per_node_step"]
    assert summary["frontier"] == bf.frontier(rows)
    for path in ("table.md", "frontier.png"):
        assert (out / path).is_file(), path


def test_frontier_keeps_the_methods_nothing_cheaper_beats():
    rows = {"a": {"bytes_per_node_step": 10, "accuracy": 50}, "b": {"bytes_per_node_step": 100, "accuracy": 48},
            "c": {"bytes_per_node_step": 1000, "accuracy": 60}, "d": {"bytes_per_node_step": 0, "accuracy": 45},
            "e": {"bytes_per_node_step": 10, "accuracy": 40}}
    assert bf.frontier(rows) == ["d", "a", "c"]


@pytest.mark.parametrize("spec, expected", [
    ("outputs:logits", {"family": "outputs", "content": "logits"}),
    ("gossip:10", {"family": "gossip", "gossip_every": 10}),
    ("diloco:50", {"family": "local_sgd", "sync_every": 50, "outer": "diloco"}),
    ("local_sgd:10", {"family": "local_sgd", "sync_every": 10, "outer": "average"}),
    ("codistill:100", {"family": "codistillation", "refresh_every": 100}),
    ("powersgd:4", {"family": "compressed", "compression": "powersgd", "rank": 4}),
    ("top_k:0.01", {"compression": "top_k", "fraction": 0.01, "per_layer": True, "feedback": True}),
    ("top_k:0.01:whole:noef", {"compression": "top_k", "per_layer": False, "feedback": False}),
    ("random_k:0.1", {"compression": "random_k", "fraction": 0.1, "feedback": False}),
    ("sign:whole", {"compression": "sign", "per_layer": False, "feedback": True}),
    ("qsgd:4:ef", {"compression": "qsgd", "levels": 4, "feedback": True}),
])
def test_method_specs_parse(spec, expected):
    method = bf.parse_method(spec)
    for field, value in expected.items():
        assert getattr(method, field) == value, field


@pytest.mark.parametrize("spec", ["outputs", "outputs:labels", "sync:1", "gossip:0", "gossip:x", "top_k",
                                  "top_k:2", "sign:0.1", "qsgd:0", "top_k:0.1:whole:whole", "sgd", "diloco:0",
                                  "codistill", "powersgd:r", "local_sgd:1:2"])
def test_bad_method_specs_are_rejected_by_the_config(spec):
    with pytest.raises(ValueError, match="method"):
        bf.BandwidthFrontierConfig(methods=(spec,))


def test_other_config_rules():
    for kwargs, field in [({"chapter2_preset": "gpu"}, "chapter2_preset"), ({"num_nodes": 1}, "num_nodes"),
                          ({"gossip_neighbours": 10}, "gossip_neighbours"), ({"methods": ()}, "methods"),
                          ({"methods": ("sync", "sync")}, "methods"), ({"time_budget_s": -1}, "time_budget_s"),
                          ({"chapter2_overrides": ("num_steps=-1",)}, "num_steps"),
                          ({"chapter2_overrides": ("stepz=3",)}, "unknown config field 'stepz'")]:
        with pytest.raises(ValueError, match=field):
            bf.BandwidthFrontierConfig(**kwargs)


def test_cpu_preset_pins_the_chapter2_recipe_of_the_committed_frontier():
    committed = json.loads((ROOT / "results/bandwidth_frontier/summary.json").read_text())["chapter2_config"]
    chapter2 = json.loads(json.dumps(dataclasses.asdict(bf.cpu_config().chapter2())))  # tuples as lists
    fields = ("widths", "hidden", "norm", "augment", "batch_size", "learning_rate", "num_steps", "consume_prob",
              "broadcast_factor", "inbox_capacity", "temperature")
    assert {f: chapter2[f] for f in fields} == {f: committed[f] for f in fields}
    assert chapter2["lr_schedule"] == committed.get("lr_schedule", "constant") == "constant"


def test_report_merges_runs_that_train_by_the_same_recipe(tmp_path):
    # The parent's chapter-2 config is an older summary's (the whole chapter-2 experiment config); a run
    # below it with the recipe alone joins it, a run with another learning rate does not.
    recipe = json.loads(json.dumps(dataclasses.asdict(bf.cpu_config().chapter2())))
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
    write(tmp_path / "other", recipe | {"learning_rate": 0.003}, {"sign": (10.0, 70.0)})
    summary = bf.merge_runs(tmp_path)
    assert set(summary["rows"]) == {"sync", "gossip:10"} and summary["skipped"] == []
    assert summary["frontier"] == ["gossip:10"]
    assert [extra["methods"] for extra in summary["extra_runs"]] == [["gossip:10"]]


def test_the_frontier_imports_no_experiment():
    source = (ROOT / "experiments/bandwidth_frontier.py").read_text()
    assert "import experiments" not in source and "from experiments" not in source and "sys.path" not in source
