"""Numbers in generated prose come from the summary they describe: no interval is typed into an experiment's code
or its report's, and the sentences that quote one change with the summary."""

from __future__ import annotations

import copy
import json
import pathlib
import re

from experiments.language import report as language

ROOT = pathlib.Path(__file__).resolve().parents[1]
TYPED_INTERVAL = re.compile(r"[+-]?\d+\.\d+ \[[+-]?\d+\.\d+, [+-]?\d+\.\d+\]")  # e.g. "+4.01 [+1.32, +6.69]"


def test_no_experiment_types_an_interval_into_its_prose():
    # every experiment's presets, run and report (its tables and generated reading)
    for path in sorted((ROOT / "experiments").rglob("*.py")):
        hits = TYPED_INTERVAL.findall(path.read_text())
        assert not hits, f"{path.name} types {hits}: compute them from the summary"


def test_the_chapter4_reading_quotes_the_summary_it_is_given():
    summary = json.loads((ROOT / "results" / "language" / "summary.json").read_text())
    row = summary["rows"]["study/halves_sum/both_feedback"]
    quoted = "{:+.2f} [{:+.2f}, {:+.2f}]".format(row["paired_diff_vs_baseline"], *row["paired_diff_ci95"])
    changed = copy.deepcopy(summary)
    post = changed["rows"]["study/halves_sum/both_feedback"]
    post["paired_diff_vs_baseline"], post["paired_diff_ci95"] = 9.87, [8.76, 10.98]
    changed["rows"]["fixed_temperature/both_feedback"]["paired_diff_vs_table_ci95"] = [0.5, 1.5]
    before, after = "\n".join(language.reading(summary)), "\n".join(language.reading(changed))
    assert quoted in before and "+9.87 [+8.76, +10.98]" in after
    assert quoted not in after
    assert before != after


def test_the_chapter4_reading_reads_no_direction_from_a_raw_interval():
    # outside a Holm family an interval is labelled raw and not adjusted, never "(above zero)" as a finding
    for folder in ("language", "language/horizon_10000"):
        summary = json.loads((ROOT / "results" / folder / "summary.json").read_text())
        text = "\n".join(language.reading(summary))
        assert not re.search(r"\((above|below) zero\)", text), folder
        for label in re.findall(r"\((?:raw interval )?(?:above|below) zero[^)]*\)", text):
            assert "Holm p" in label or "not adjusted" in label, label
        assert "under it" not in text or "(raw interval, not adjusted)" in text
    answer = language.study_answer(json.loads((ROOT / "results" / "language" / "summary.json").read_text()))
    assert "raw 95 % interval above zero (not adjusted)" in answer and "no direction read" in answer
