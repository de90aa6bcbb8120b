"""The chapter-3 experiment: config rules, presets, table metrics, a smoke run and the committed table's redraw.

The engine it composes (teacher, student population, counting) is tested in ``tests/test_teacher.py``.
"""

from __future__ import annotations

import dataclasses
import json
import os

import pytest

from experiments import teacher_selection as ts
from experiments.teacher_selection.report import paired_markdown
from jaxcomm import data, teacher

# --------------------------------------------------------------------------- config rules

BASE = ts.smoke_config()


@pytest.mark.parametrize("field,value,message", [
    ("dataset", "cifar10", "dataset must be one of"),
    ("data_dir", 3, "data_dir must be a string"),
    ("teacher_patience", 1.5, "teacher_patience must be an integer >= 1"),  # inherited: tests/test_teacher.py
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


def test_the_config_adds_only_the_experiments_fields_to_the_engines():
    engine = {f.name for f in dataclasses.fields(teacher.SelectionConfig)}
    own = set(ts.TeacherSelectionConfig.__annotations__)
    assert issubclass(ts.TeacherSelectionConfig, teacher.SelectionConfig) and not own & engine
    assert own == {"dataset", "data_dir", "rows", "seeds", "max_updates", "study_stack_sizes", "study_seeds",
                   "study_max_updates", "warmup_updates", "timing_updates"}
    assert BASE.replace(eval_every=7).eval_every == 7 and isinstance(BASE.replace(seeds=1), ts.TeacherSelectionConfig)


# --------------------------------------------------------------------------- metrics

def student(steps, acc, n=5, warmup=0, best_val=97.0):
    return {"steps": steps, "val_accuracy": acc, "stack_size": n, "warmup": warmup, "soft": True,
            "distance": "cross_entropy", "best_val": best_val, "best_step": steps[-1], "test_accuracy": 97.0,
            "stop_step": steps[-1], "stopped_by_patience": False}


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


def test_table_students_share_seeds_across_rows():
    config = BASE
    students = ts.table_students(config)
    assert len(students) == len(config.rows) * config.seeds
    assert {s.seed for s in students if s.row == "stack5_ce_true"} == set(range(config.seeds))
    assert [s for s in students if s.row == "stack5_ce_true"][0] == teacher.Student("stack5_ce_true", 0, 5,
                                                                                     "cross_entropy", False, 0)
    study = ts.study_students(config, 10)
    assert [s.warmup for s in study] == [0] * config.study_seeds + [config.warmup_updates] * config.study_seeds


# --------------------------------------------------------------------------- smoke run and report

def smoke_config():
    config = ts.smoke_config()
    if os.environ.get(data.DATA_DIR_ENV):  # real MNIST when available, else the shipped real sample
        config = dataclasses.replace(config, dataset="mnist")
    return config


def test_smoke_run_end_to_end(tmp_path, monkeypatch):
    config = smoke_config()
    overrides = [f"dataset={config.dataset}"]
    monkeypatch.setattr("sys.argv", ["teacher_selection.py"])
    assert ts.main(["--preset", "smoke", "--out", str(tmp_path), *overrides]) == 0
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


def test_rows_are_paired_with_the_baseline_seed_by_seed():
    # Hand-computed: seeds 0 and 1; the baseline reaches 96.5 at 1,000 and 2,000 updates, the row at 500 and 500:
    # ratios 2 and 4, geometric mean sqrt(8) = 2.83; log-ratios' mean 1.040, sd 0.490, t(0.975, 1) = 12.706, so the
    # interval is exp(1.040 -/+ 4.404) = [0.03, 231.2]. Test accuracy differences +0.1 and +0.3: +0.20 -/+ 1.27.
    # The row's seed 1 never reaches 96.8: n.r. Compute: 3 units an update for the baseline, 5 + 2 for stack 5, so
    # the compute speedups are the update speedups times 3/7: 1.21 [0.01, 99.09]. Paired t-tests (1 df): accuracy
    # t = 0.2 / 0.1 = 2, p = 0.295; updates t = 1.040 / 0.347 = 3.0, p = 0.205; compute t = 0.193 / 0.347, p = 0.677;
    # Holm over the 3: 0.205 x 3 = 0.614, max(0.295 x 2, 0.614) = 0.614, max(0.677, 0.614) = 0.677.
    def student(row, seed, reach, test):
        steps = [500, 1000, 1500, 2000]
        return {"group": "table", "row": row, "seed": seed, "steps": steps, "test_accuracy": test,
                "val_accuracy": [96.6 if s >= reach else 90.0 for s in steps],
                "stack_size": 1 if row == "baseline" else 5, "warmup": 0}

    curves = [student("baseline", 0, 1000, 96.7), student("baseline", 1, 2000, 96.6),
              student("stack5_ce_soft", 0, 500, 96.8), student("stack5_ce_soft", 1, 500, 96.9)]
    curves[2]["val_accuracy"][-1] = 96.9  # seed 0 of the row reaches 96.8 at 2,000, seed 1 never
    lines = paired_markdown(curves)
    row = [line for line in lines if line.startswith("| stack 5, cross-entropy, soft labels")]
    assert row == ["| stack 5, cross-entropy, soft labels | 2 | +0.20 [-1.07, +1.47] p=0.61 no | 2.83 [0.03, 231.22] "
                   "p=0.61 no | n.r. | 1.21 [0.01, 99.09] p=0.68 no |"]
    assert paired_markdown(curves[:2]) == [] and paired_markdown(curves[::2]) == []  # nothing to pair; 1 seed
