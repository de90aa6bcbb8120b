"""Every committed summary names the clean commit it ran at, or is a stated exception with its reason
(results/PROVENANCE.md tells each one's story)."""

from __future__ import annotations

import json
import pathlib
import re

RESULTS = pathlib.Path(__file__).resolve().parents[1] / "results"

EXCEPTIONS = {
    "benchmark/sweeps": "timings (draws do not change them); its dirt was the shipped choices table, see PROVENANCE",
    "benchmark/gpu_h100/sweeps": "an H100 lease's sweeps, run with the donation fix committed next (PROVENANCE)",
}


def commits() -> dict[str, str]:
    return {str(path.parent.relative_to(RESULTS)): json.loads(path.read_text()).get("git_commit") or ""
            for path in sorted(RESULTS.rglob("summary.json"))}


def test_every_summary_names_a_clean_commit_or_a_stated_exception():
    found = commits()
    dirty = {folder for folder, commit in found.items() if not commit or "+dirty" in commit}
    assert dirty - set(EXCEPTIONS) == set(), "a summary names no clean commit and states no reason"
    assert set(EXCEPTIONS) - dirty == set(), "an exception is clean now (or gone): take it off the list"
    # a commit, or a run's commit and those it was resumed at
    named = re.compile(r"[0-9a-f]{40}(\+dirty)?(; resumed at [0-9a-f]{40}(\+dirty)?)*")
    assert [folder for folder, commit in found.items() if not named.fullmatch(commit)] == []
