"""Every committed ``results/**/table.md`` redraws byte-identical from its ``summary.json`` (plots skipped)."""

from __future__ import annotations

import importlib
import json
import pathlib
import shutil

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]
TABLES = sorted(path.relative_to(ROOT / "results") for path in (ROOT / "results").rglob("table.md")
                if (path.parent / "summary.json").is_file())

def test_there_are_tables_to_redraw():
    assert len(TABLES) >= 7 and {t.parts[0] for t in TABLES} >= {"language", "teacher_selection", "benchmark"}


@pytest.mark.parametrize("table", TABLES, ids=str)
def test_table_redraws_byte_identical(table, tmp_path, monkeypatch):
    experiment = table.parts[0]  # the folder; the module that drew the table is the summary's experiment
    drawn_by = json.loads((ROOT / "results" / table.parent / "summary.json").read_text())["experiment"]
    module = importlib.import_module(f"experiments.{drawn_by}")
    copy = tmp_path / "results" / experiment
    shutil.copytree(ROOT / "results" / experiment, copy)
    monkeypatch.chdir(tmp_path)  # tables name their folder as the committed one: results/<experiment>/...
    folder = pathlib.Path("results", *table.parts[:-1])
    for stale in [folder / "table.md", *copy.rglob("*.png")]:
        stale.unlink()
    module.write_report(folder, plots=False)
    assert (folder / "table.md").read_bytes() == (ROOT / "results" / table).read_bytes()
    assert not list(copy.rglob("*.png"))  # plots skipped
