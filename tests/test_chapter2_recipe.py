"""The chapter-2 recipe search on validation: the one-standard-error rule, the grid, a 2-seed smoke run end to end,
its seeds against the same runs alone, and resume."""

from __future__ import annotations

import dataclasses
import importlib
import json
import math
import pathlib
import types

import numpy as np
import pytest

from experiments import chapter2_recipe as c2r
from experiments.chapter2_recipe.report import format_value, table_markdown
from jaxcomm import driver, network, network_sweep, recipes

c2r_run = importlib.import_module("experiments.chapter2_recipe.run")  # where run() looks its helpers up

SMOKE = ["learning_rate=0.001 num_steps=10", "learning_rate=0.001 num_steps=20", "learning_rate=0.003 num_steps=10",
         "learning_rate=0.003 num_steps=20"]  # grid order: the last entry varies fastest


@pytest.fixture(scope="module")
def smoke(tmp_path_factory):
    """The smoke preset through the command line, its table and plot drawn by the run itself."""
    out = tmp_path_factory.mktemp("chapter2_recipe") / "run"
    assert c2r.main(["--preset", "smoke", "--out", str(out)]) == 0
    return out, json.loads((out / "summary.json").read_text())


def _accuracies(summary: dict) -> dict:
    """Every candidate's per-seed final (validation, test) accuracies."""
    return {name: [(p["val_accuracy"], p["test_accuracy"]) for p in row["per_seed"]]
            for name, row in summary["rows"].items()}


# --------------------------------------------------------------------------- the rule


def _row(val: float, se: float, steps: int, batch: int = 32) -> dict:
    return {"val_accuracy": val, "val_accuracy_se": se, "num_steps": steps, "batch_size": batch}


def test_the_best_candidate_is_chosen_when_it_is_also_the_cheapest():
    rows = {"a": _row(70.0, 0.5, 2000), "b": _row(68.0, 0.2, 5000), "c": _row(69.9, 0.1, 5000)}
    assert c2r.choose(rows) == ("a", "a")


def test_a_cheaper_candidate_within_one_standard_error_is_chosen():
    # best b: 70.0 - 0.5 = 69.5; a (2,000 steps, 69.6) clears it, c (69.4) does not
    rows = {"b": _row(70.0, 0.5, 5000), "c": _row(69.4, 0.1, 1000), "a": _row(69.6, 0.3, 2000)}
    assert c2r.choose(rows) == ("b", "a")


def test_a_cheaper_candidate_just_outside_one_standard_error_is_not_chosen():
    rows = {"a": _row(69.49, 0.1, 2000), "b": _row(70.0, 0.5, 5000)}  # floor 69.5
    assert c2r.choose(rows) == ("b", "b")
    rows["a"]["val_accuracy"] = 69.5  # on the floor: within
    assert c2r.choose(rows) == ("b", "a")


def test_ties_in_steps_are_broken_by_batch_size_then_grid_order():
    rows = {"big": _row(70.0, 1.0, 2000, 64), "small": _row(69.5, 1.0, 2000, 16), "best": _row(70.5, 1.0, 5000),
            "also_small": _row(69.8, 1.0, 2000, 16)}
    assert c2r.choose(rows) == ("best", "small")


def test_stopped_candidates_are_left_out_and_none_scored_chooses_nothing():
    rows = {"stopped": {"val_accuracy": None, "val_accuracy_se": None, "num_steps": 10, "batch_size": 32},
            "a": _row(60.0, 1.0, 20)}
    assert c2r.choose(rows) == ("a", "a")
    assert c2r.choose({"stopped": rows["stopped"]}) == (None, None)


# --------------------------------------------------------------------------- the grid


def test_the_cpu_grid_is_the_cartesian_product_with_the_recipes_types():
    config = c2r.cpu_config()
    assert (config.chapter2_preset, config.num_nodes, config.num_seeds, config.seeds(), config.eval_every,
            config.time_budget_s) == ("cpu", 1, 2, [0, 1], 500, 3600.0)
    found = config.candidates()
    assert len(found) == 16 and len({c.name for c in found}) == 16
    assert found[0].name == "learning_rate=0.001 lr_schedule=constant augment=false num_steps=2000"
    assert found[-1].name == "learning_rate=0.003 lr_schedule=cosine augment=true num_steps=5000"
    assert found[-1].overrides == {"learning_rate": 3e-3, "lr_schedule": "cosine", "augment": True,
                                   "num_steps": 5000}
    for candidate in found:
        assert [type(v) for v in candidate.overrides.values()] == [float, str, bool, int], candidate.name
        assert candidate.recipe == dataclasses.replace(recipes.cpu(), **candidate.overrides)
    # the preset itself is a candidate: the rule may keep it
    assert recipes.cpu() in [c.recipe for c in found]


def test_a_command_line_grid_split_at_every_comma_means_the_same():
    config = c2r.Chapter2RecipeSearchConfig(grid=("learning_rate=1e-3", "3e-3", "widths=8-16,16-32"))
    assert config.grid == ("learning_rate=1e-3,3e-3", "widths=8-16,16-32")
    assert [c.name for c in config.candidates()] == [
        "learning_rate=0.001 widths=8-16", "learning_rate=0.001 widths=16-32", "learning_rate=0.003 widths=8-16",
        "learning_rate=0.003 widths=16-32"]
    assert config.candidates()[1].recipe.widths == (16, 32)
    for candidate in config.candidates():  # a name's values parse back to its recipe
        texts = [pair.split("=") for pair in candidate.name.split(" ")]
        assert c2r.Chapter2RecipeSearchConfig(grid=tuple(f"{f}={t}" for f, t in texts)).candidates()[0].recipe \
            == candidate.recipe


@pytest.mark.parametrize("grid, named", [
    (("stepz=1,2",), "unknown config field 'stepz'"),
    (("learning_rate=-1e-3,1e-3",), "learning_rate"),
    (("augment=maybe",), "augment"),
    (("num_steps=10,x",), "num_steps"),
    (("lr_schedule=cosine,linear",), "lr_schedule"),
    (("num_steps=10,10",), "repeats a value"),
    (("learning_rate=1e-3,0.001",), "repeats a value once parsed"),
    (("num_steps=10", "num_steps=20"), "named twice"),
    (("num_steps=",), "empty value"),
    (("10,20",), "field=v1,v2"),
    (("seed=1,2",), "'seed' cannot be searched"),
    (("temperature=1,2",), "'temperature' cannot be searched"),
    ((), "grid"),
])
def test_a_bad_grid_fails_at_construction_naming_what(grid, named):
    with pytest.raises(ValueError, match=named):
        c2r.Chapter2RecipeSearchConfig(grid=grid)


def test_other_config_rules():
    for kwargs, field in [({"chapter2_preset": "gpu"}, "chapter2_preset"), ({"num_nodes": 0}, "num_nodes"),
                          ({"num_seeds": 1}, "num_seeds"), ({"eval_every": 0}, "eval_every"),
                          ({"time_budget_s": -1.0}, "time_budget_s")]:
        with pytest.raises(ValueError, match=field):
            c2r.Chapter2RecipeSearchConfig(**kwargs)


def test_a_bad_grid_on_the_command_line_exits_2_before_anything_trains(tmp_path, capsys):
    out = tmp_path / "run"
    assert c2r.main(["--preset", "smoke", "--out", str(out), "grid=num_steps=10,x"]) == 2
    assert "num_steps" in capsys.readouterr().err and not out.exists()


# --------------------------------------------------------------------------- the smoke run


def test_smoke_run_scores_every_candidate_on_validation_and_test(smoke):
    _, summary = smoke
    rows = summary["rows"]
    assert list(rows) == SMOKE and summary["skipped"] == [] and summary["seeds"] == [0, 1]
    assert summary["validation_size"] == 1000 and summary["dataset"] == "mnist_sample"
    for name, row in rows.items():
        assert row["seeds"] == 2 and [p["seed"] for p in row["per_seed"]] == [0, 1], name
        assert row["steps"] == row["num_steps"] == row["overrides"]["num_steps"] and row["batch_size"] == 32, name
        for key in ("val_accuracy", "test_accuracy"):
            values = [p[key] for p in row["per_seed"]]
            assert all(0 <= v <= 100 for v in values), name
            assert row[key] == pytest.approx(np.mean(values)), name
            assert row[f"{key}_sd"] == pytest.approx(np.std(values, ddof=1)), name
        assert row["val_accuracy_se"] == pytest.approx(row["val_accuracy_sd"] / math.sqrt(2)), name
        curve = row["curve"]
        assert curve["steps"] == list(range(10, row["num_steps"] + 1, 10)), name
        assert curve["val_accuracy"][-1] == pytest.approx(row["val_accuracy"], abs=1e-3), name
        assert row["best_val_accuracy"] == max(curve["val_accuracy"]) and row["best_val_step"] in curve["steps"]
    assert rows[SMOKE[1]]["per_seed"][0]["val_accuracy"] != rows[SMOKE[1]]["per_seed"][1]["val_accuracy"]


def test_smoke_run_chooses_by_the_rule_and_says_what_changed(smoke):
    _, summary = smoke
    rows = summary["rows"]
    assert (summary["best"], summary["chosen"]) == c2r.choose(rows) and summary["chosen"] in SMOKE
    assert summary["rule"] == c2r.RULE
    chosen, preset = rows[summary["chosen"]]["overrides"], dataclasses.asdict(recipes.smoke())
    assert summary["changes_from_preset"] == {f: [preset[f], v] for f, v in chosen.items() if preset[f] != v}
    assert summary["chosen_overrides"] == [f"{f}={format_value(new)}"
                                           for f, (_, new) in summary["changes_from_preset"].items()]


def test_smoke_table_sorts_by_validation_marks_the_choice_and_redraws_identically(smoke, tmp_path):
    out, summary = smoke
    table = (out / "table.md").read_text()
    lines = [line for line in table.splitlines() if line.startswith("| `")]
    names = [line.split("`")[1] for line in lines]
    rows = summary["rows"]
    assert sorted(names) == sorted(SMOKE) and [rows[n]["val_accuracy"] for n in names] == sorted(
        (rows[n]["val_accuracy"] for n in names), reverse=True)
    best = next(line for line in lines if f"`{summary['best']}`" in line)
    chosen = next(line for line in lines if f"`{summary['chosen']}`" in line)
    assert "best" in best.split("|")[-2] and "chosen" in chosen.split("|")[-2]
    assert f"{rows[summary['best']]['val_accuracy']:.2f} ± {rows[summary['best']]['val_accuracy_sd']:.2f}" in best
    assert f"Rule: {c2r.RULE}" in table and "Changes from the preset:" in table
    assert (out / "validation.png").stat().st_size > 10_000
    drawn = table
    (out / "table.md").unlink()
    assert c2r.main(["report", str(out), "--no-plots"]) == 0
    assert (out / "table.md").read_text() == drawn


def test_a_candidates_seeds_equal_those_configs_trained_alone(smoke):
    _, summary = smoke
    row = summary["rows"]["learning_rate=0.003 num_steps=10"]
    dataset = recipes.smoke().load()
    for seed, numbers in zip([0, 1], row["per_seed"], strict=True):
        recipe = dataclasses.replace(recipes.smoke(), learning_rate=3e-3, num_steps=10, seed=seed)
        alone = network.train_network(recipe.network(1, "none", eval_every=10), recipe.model(dataset.num_classes),
                                      dataset, eval_split=("test", "validation"), progress=False)
        assert numbers["val_accuracy"] == pytest.approx(alone["final"]["validation"]["avg_accuracy"], abs=1e-4)
        assert numbers["test_accuracy"] == pytest.approx(alone["final"]["avg_accuracy"], abs=1e-4)


def test_a_diverging_candidate_is_recorded_as_stopped_and_left_out(smoke, monkeypatch):
    def diverging(*args, **kwargs):
        raise driver.Diverged(7, 0, 1e9, bound=100.0, good_step=5, saved=None)

    monkeypatch.setattr(network_sweep, "train_networks", diverging)
    config = c2r.smoke_config()
    candidate = config.candidates()[0]
    row, curves = c2r.train_candidate(config, candidate, types.SimpleNamespace(num_classes=10), checkpoints=None,
                                      progress=False)
    assert curves == [] and row["val_accuracy"] is None and row["val_accuracy_se"] is None and row["steps"] == 7
    assert row["stopped"] == ["seed 0: diverged: loss above 100 (1e+09) at node 0 at step 7",
                              "seed 1: diverged: loss above 100 (1e+09) at node 0 at step 7"]
    rows = {"stopped one": row} | smoke[1]["rows"]
    assert c2r.choose(rows) == c2r.choose(smoke[1]["rows"])
    table = table_markdown(smoke[1] | {"rows": rows, "out_dir": "x"})
    last = [line for line in table.splitlines() if line.startswith("| `")][-1]  # sorted after every score
    assert last == "| `stopped one` | stopped | stopped | - | - | 7 | 0 |  |"
    assert "`stopped one` stopped: seed 0: diverged" in table


def test_the_time_budget_skips_candidates_by_seconds_per_step(monkeypatch):
    """A restored candidate's recorded seconds count: 1,000 s for 10 steps x 2 seeds makes a 20-step candidate
    an estimated 2,000 s, over a 1,500 s budget."""
    dataset = types.SimpleNamespace(name="d", validation=types.SimpleNamespace(labels=np.zeros(5)))
    monkeypatch.setattr(recipes.Chapter2Recipe, "load", lambda self: dataset)

    def restored(config, candidate, dataset, **kwargs):  # trained 1,000 s before, back at once
        return c2r.candidate_record(candidate, [{"seed": s, "val_accuracy": 50.0, "test_accuracy": 50.0,
                                                 "steps": candidate.recipe.num_steps, "wall_seconds": 500.0}
                                                for s in config.seeds()], None), []

    monkeypatch.setattr(c2r_run, "train_candidate", restored)
    config = c2r.Chapter2RecipeSearchConfig(chapter2_preset="smoke", grid=("num_steps=10,20,4",), time_budget_s=1500)
    out = c2r.run(config, progress=False)
    # 0 s spent + 1,000 s restored + 400 s estimated fits; + 2,000 s does not
    assert list(out["rows"]) == ["num_steps=10", "num_steps=4"]
    assert out["skipped"] == ["num_steps=20 (estimated 2000 s, over the time budget)"]
    # a tie on validation (sd 0): the best is the first, the chosen the cheaper
    assert (out["best"], out["chosen"], out["changes_from_preset"]) == ("num_steps=10", "num_steps=4",
                                                                        {"num_steps": [20, 4]})


# --------------------------------------------------------------------------- resume


def test_resume_after_every_candidate_trained_trains_nothing_more(smoke, tmp_path, monkeypatch, record_training):
    """Interrupted once every candidate is trained (before the summary): the resumed run restores each from its
    checkpoint without a training step and gives the smoke run's numbers and choice."""
    out = tmp_path / "run"
    args = ["--preset", "smoke", "--out", str(out)]
    monkeypatch.setenv("JAXCOMM_NO_REPORT", "1")

    def interrupted(rows):
        raise KeyboardInterrupt

    with monkeypatch.context() as patch:
        patch.setattr(c2r_run, "choose", interrupted)
        assert c2r.main(args) == 130
    assert not (out / "summary.json").exists()
    calls = record_training()
    assert c2r.main([*args, "--resume"]) == 0
    assert len(calls) >= len(SMOKE) and all(start == done > 0 for _, start, done in calls), calls
    summary = json.loads((out / "summary.json").read_text())
    assert _accuracies(summary) == _accuracies(smoke[1])
    assert (summary["best"], summary["chosen"]) == (smoke[1]["best"], smoke[1]["chosen"])


def test_resume_trains_only_the_unfinished_candidate(smoke, tmp_path, monkeypatch, record_training):
    """A grid given on the command line, interrupted in its second candidate: the first comes back from its
    checkpoint, only the second trains."""
    out = tmp_path / "run"
    args = ["--preset", "smoke", "--out", str(out), "grid=learning_rate=1e-3,num_steps=10,20"]
    monkeypatch.setenv("JAXCOMM_NO_REPORT", "1")
    train = network_sweep.train_networks

    def interrupted_at_the_second(configs, *args, **kwargs):
        if kwargs["desc"] == SMOKE[1]:
            raise KeyboardInterrupt
        return train(configs, *args, **kwargs)

    with monkeypatch.context() as patch:
        patch.setattr(network_sweep, "train_networks", interrupted_at_the_second)
        assert c2r.main(args) == 130
    calls = record_training()
    assert c2r.main([*args, "--resume"]) == 0
    assert {start == done for desc, start, done in calls if desc.startswith(SMOKE[0])} == {True}
    assert {(start, done) for desc, start, done in calls if desc.startswith(SMOKE[1])} == {(0, 20)}
    summary = json.loads((out / "summary.json").read_text())
    assert list(summary["rows"]) == SMOKE[:2]
    assert _accuracies(summary) == {name: _accuracies(smoke[1])[name] for name in SMOKE[:2]}


def test_the_search_imports_no_experiment():
    for path in pathlib.Path(c2r.__file__).parent.glob("*.py"):  # its own modules by relative imports only
        source = path.read_text()
        assert "import experiments" not in source and "from experiments" not in source and "sys.path" not in source
