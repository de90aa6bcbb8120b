"""The chapter-3 experiment: config rules, population == separate runs, metrics, and a smoke run."""

from __future__ import annotations

import dataclasses
import importlib.util
import json
import math
import os
import pathlib
import sys

import chex
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxcomm import data, population


def _load_experiment():
    """Imports experiments/teacher_selection.py by path (experiments/ is not an installed package)."""
    path = pathlib.Path(__file__).resolve().parents[1] / "experiments" / "teacher_selection.py"
    spec = importlib.util.spec_from_file_location("teacher_selection", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses resolve their module by name
    spec.loader.exec_module(module)
    return module


ts = _load_experiment()

# --------------------------------------------------------------------------- config rules

BASE = ts.smoke_config()


@pytest.mark.parametrize("field,value,message", [
    ("dataset", "cifar10", "dataset must be one of"),
    ("data_dir", 3, "data_dir must be a string"),
    ("teacher_hidden", (), "teacher_hidden must be a non-empty tuple"),
    ("student_hidden", (32, 0), "student_hidden must be a non-empty tuple"),
    ("teacher_dropout", 1.0, r"teacher_dropout must be a probability in \[0, 1\)"),
    ("teacher_batch_size", 0, "teacher_batch_size must be an integer >= 1"),
    ("teacher_max_epochs", 0, "teacher_max_epochs must be an integer >= 1"),
    ("teacher_patience", 1.5, "teacher_patience must be an integer >= 1"),
    ("teacher_seed", "0", "teacher_seed must be an integer"),
    ("cache_dir", None, "cache_dir must be a string"),
    ("batch_size", 0, "batch_size must be an integer >= 1"),
    ("learning_rate", 0.0, "learning_rate must be a number > 0"),
    ("rows", ("stack2_ce_soft",), "rows must be distinct names .* including 'baseline'"),
    ("rows", ("baseline", "stack3_ce_soft"), "rows must be distinct names"),
    ("rows", ("baseline", "baseline"), "rows must be distinct names"),
    ("seeds", 0, "seeds must be an integer >= 1"),
    ("max_updates", -1, "max_updates must be an integer >= 1"),
    ("patience_epochs", 0, "patience_epochs must be an integer >= 1"),
    ("eval_every", 0, "eval_every must be an integer >= 1"),
    ("study_stack_sizes", (10, 0), "study_stack_sizes must be a tuple of integers >= 1"),
    ("study_seeds", 0, "study_seeds must be an integer >= 1"),
    ("study_max_updates", 0, "study_max_updates must be an integer >= 1"),
    ("warmup_updates", -1, "warmup_updates must be an integer >= 0"),
    ("timing_updates", -1, "timing_updates must be an integer >= 0"),
    ("padding", "none", "padding must be one of"),
    ("backend", "pmap", "backend must be one of"),
    ("map_batch_size", 0, "map_batch_size must be an integer >= 1"),
    ("seed", 1.0, "seed must be an integer"),
    ("study_stack_sizes", (200,), "study_stack_sizes must be stacks whose n \\* batch_size fits the 4,000"),
])
def test_config_rejects_bad_values(field, value, message):
    with pytest.raises(ValueError, match=message) as error:
        dataclasses.replace(BASE, **{field: value})
    assert repr(value) in str(error.value)  # the message names the value


def test_presets_are_valid_and_the_cpu_preset_covers_table_3_1():
    for make in ts.PRESETS.values():
        make()
    cpu = ts.cpu_config()
    assert set(ts.THESIS_ROWS) <= set(cpu.rows) and cpu.seeds >= 5
    assert (cpu.student_hidden, cpu.teacher_hidden, cpu.batch_size) == ((32, 32), (1200, 1200), 32)
    assert {1, 2, 5, *cpu.study_stack_sizes} == {1, 2, 5, 10, 20, 50, 100}


# --------------------------------------------------------------------------- population == separate runs

STUDENTS = [
    ts.Student("baseline", 0, 1, "cross_entropy", False, 0),
    ts.Student("a", 1, 2, "cross_entropy", True, 0),
    ts.Student("b", 0, 2, "random", True, 0),
    ts.Student("c", 2, 2, "euclidean", False, 0),
    ts.Student("d", 0, 3, "learnability", False, 2),  # warm-up: 2 plain updates, then selection
]
STEPS = 4


@pytest.fixture(scope="module")
def tiny(tiny_dataset):
    rng = np.random.default_rng(0)
    probs = jnp.asarray(rng.dirichlet(np.ones(4), size=len(tiny_dataset.train.labels)), jnp.float32)
    arrays = ts.TrainArrays(jnp.asarray(tiny_dataset.train.images), jnp.asarray(tiny_dataset.train.labels), probs)
    config = dataclasses.replace(BASE, student_hidden=(8,), batch_size=4, map_batch_size=2)
    return config, arrays


def train(config, arrays, students, steps=STEPS):
    init, step, _ = ts.make_students(config, (8, 8, 1), 4, [s.stack_size for s in students])
    state = init(ts.student_keys(config, students))
    step = jax.jit(step)
    losses = []
    for _ in range(steps):
        state, loss = step(state, (arrays, ts.hyper_arrays(students)))
        losses.append(loss)
    return state, jnp.stack(losses)


@pytest.fixture(scope="module")
def alone(tiny):
    """Each student trained by itself (a population of one, its own stack, no padding)."""
    config, arrays = tiny
    return [train(dataclasses.replace(config, backend="vmap"), arrays, [s]) for s in STUDENTS]


@pytest.mark.parametrize("padding,backend", [("by_stack", "map"), ("all", "vmap")])
def test_population_equals_separate_single_student_runs(tiny, alone, padding, backend):
    config, arrays = tiny
    config = dataclasses.replace(config, padding=padding, backend=backend)
    together, losses = train(config, arrays, STUDENTS)
    chex.assert_shape(losses, (STEPS, len(STUDENTS)))
    chex.assert_tree_all_finite(together.nodes)
    for i, (student, (alone_state, alone_losses)) in enumerate(zip(STUDENTS, alone, strict=True)):
        if padding == "all" and student.distance == "random":
            continue  # its random scores are drawn over the padded stack: a different (equally valid) stream
        chex.assert_trees_all_close(population.node(together.nodes, i), population.node(alone_state.nodes, 0),
                                    rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(losses[:, i], alone_losses[:, 0], rtol=1e-5, atol=1e-6)


def test_stack_of_one_with_true_labels_is_plain_training(tiny):
    """n = 1: the teacher hands back the only minibatch, so distance and warm-up change nothing."""
    config, arrays = tiny
    runs = [train(config, arrays, [ts.Student("x", 0, 1, d, False, w)])[1] for d, w in
            (("cross_entropy", 0), ("euclidean", 3), ("random", 0))]
    for other in runs[1:]:
        np.testing.assert_allclose(other, runs[0], rtol=1e-6)


def test_segments_group_consecutive_equal_stacks():
    assert ts.segments([1, 1, 2, 2, 2, 5], "by_stack") == [(0, 2, 1), (2, 5, 2), (5, 6, 5)]
    assert ts.segments([1, 1, 2, 5], "all") == [(0, 4, 5)]


# --------------------------------------------------------------------------- metrics

def student(steps, acc, n=5, warmup=0, best_val=97.0):
    return {"steps": steps, "val_accuracy": acc, "stack_size": n, "warmup": warmup, "soft": True,
            "distance": "cross_entropy", "best_val": best_val, "best_step": steps[-1], "test_accuracy": 97.0,
            "stop_step": steps[-1], "stopped_by_patience": False}


def test_updates_to_threshold_and_compute_counts():
    s = student([100, 200, 300], [96.0, 96.5, 96.9], n=5, warmup=150)
    assert ts.updates_to(s, 96.5) == 200 and ts.updates_to(s, 96.8) == 300 and ts.updates_to(s, 97) == math.inf
    # 150 plain updates (1 forward each) + 50 selecting updates of 5 forward passes.
    assert ts.forward_passes(s, 200) == 150 + 50 * 5
    assert ts.compute_units(s, 200) == 400 + 2 * 200


def test_row_metrics_medians_nulls_and_speedups():
    base = [student([100, 200, 300, 400], [95, 96, 96.6, 96.9], n=1) for _ in range(3)]
    fast = [student([100, 200], [96.6, 96.9], n=5), student([100, 200], [96.0, 96.6], n=5),
            student([100, 200], [85.0, 89.0], n=5, best_val=89.0)]
    timing = {1: 0.001, 5: 0.002}
    rows = {"baseline": ts.row_metrics(base, timing), "fast": ts.row_metrics(fast, timing)}
    ts.add_speedups(rows)
    fast_row = rows["fast"]
    assert fast_row["updates_to_96_5"] == 200  # median of (100, 200, inf)
    assert fast_row["updates_to_96_8"] is None  # only 1 of 3 seeds gets there
    assert fast_row["collapsed_seeds"] == 1 and fast_row["seeds_reaching_96_5"] == 2
    assert rows["baseline"]["updates_to_96_5"] == 300
    assert fast_row["update_speedup_96_5"] == 1.5
    # baseline: 300 forward + 600 backward units; stack 5: 1000 forward + 400.
    assert fast_row["compute_speedup_96_5"] == round(900 / 1400, 2)
    assert fast_row["wall_seconds_to_96_5"] == pytest.approx(0.4)


# --------------------------------------------------------------------------- smoke run

def smoke_config():
    config = ts.smoke_config()
    if os.environ.get(data.DATA_DIR_ENV):  # real MNIST when available, else the shipped real sample
        config = dataclasses.replace(config, dataset="mnist")
    return config


def test_smoke_run_end_to_end(tmp_path, monkeypatch):
    config = smoke_config()
    overrides = [f"dataset={config.dataset}"]
    monkeypatch.setattr("sys.argv", ["teacher_selection.py"])
    assert ts.cli(["--preset", "smoke", "--out", str(tmp_path), *overrides]) == 0
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["experiment"] == "teacher_selection" and summary["preset"] == "smoke"
    expected = set(config.rows) | {f"stack{n}_ce_soft{w}" for n in config.study_stack_sizes for w in ("", "_warmup")}
    assert set(summary["rows"]) == expected
    schema = {"seeds", "collapsed_seeds", "test_accuracy", "test_accuracy_std", "backward_passes", "updates_to_96_5",
              "updates_to_96_8", "forward_passes_to_96_5", "wall_seconds_to_96_5", "compute_speedup_96_5"}
    for row in summary["rows"].values():
        assert schema <= set(row)
        assert 10.0 < row["test_accuracy"] <= 100.0
    assert summary["rows"]["baseline"]["thesis_backward_passes"] == 39_000
    curves = (tmp_path / "curves.jsonl").read_text().splitlines()
    assert len(curves) == config.seeds * len(config.rows) + 2 * config.study_seeds * len(config.study_stack_sizes)
    for name in ("table.md", "fig3_1.png", "stack_size.png"):
        assert (tmp_path / name).stat().st_size > 0
    assert "| stack 2, cross-entropy, soft labels | 96.9 | 25,000 |" in (tmp_path / "table.md").read_text()


def test_population_killed_by_sigterm_resumes_to_the_uninterrupted_result(tiny_dataset, tiny, tmp_path, monkeypatch):
    """Checkpoint = student states + the best-validation parameters and curves tracked between chunks."""
    import signal

    from jaxcomm import runner
    from jaxcomm.checkpoint import Checkpointer

    config, arrays = tiny
    config = dataclasses.replace(config, eval_every=10)
    dataset = data.ImageDataset("synthetic", tiny_dataset.train, tiny_dataset.test, tiny_dataset.test, 4)
    train_population = lambda **kw: ts.train_population(config, STUDENTS, dataset, arrays, max_updates=40,
                                                        progress=False, **kw)
    straight = train_population()
    accuracy, calls = ts._population_accuracy, []

    def kill_on_third(*args, **kwargs):
        calls.append(1)
        if len(calls) == 3:
            os.kill(os.getpid(), signal.SIGTERM)
        return accuracy(*args, **kwargs)

    monkeypatch.setattr(ts, "_population_accuracy", kill_on_third)
    with pytest.raises(runner.Interrupted):
        train_population(checkpointer=Checkpointer(tmp_path, every=10))
    monkeypatch.setattr(ts, "_population_accuracy", accuracy)
    resumed = train_population(checkpointer=Checkpointer(tmp_path, every=10, resume=True))
    assert resumed["students"] == straight["students"]
