"""experiments/gpu_session.sh, the accelerator's stages, checked on CPU at their smoke size: each stage packs its
results into one tarball, also when it is stopped at its time limit."""

from __future__ import annotations

import json
import os
import pathlib
import subprocess
import sys
import tarfile

from experiments import outputs_exchange
from experiments.outputs_exchange import report as oe_report

ROOT = pathlib.Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "experiments" / "gpu_session.sh"


def _stage(stage: str, out: pathlib.Path, *overrides: str, **env: str) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", str(SCRIPT), stage, str(out), *overrides], capture_output=True, text=True, cwd=ROOT,
                          env={**os.environ, "SMOKE": "1", "PYTHON": sys.executable, **env}, timeout=600)


def _members(tgz: pathlib.Path) -> dict[str, bytes]:
    with tarfile.open(tgz) as tar:
        return {m.name.removeprefix("./"): tar.extractfile(m).read() for m in tar.getmembers() if m.isfile()}


def test_table21_in_two_calls_packs_each_half_and_unpacks_into_one_table(tmp_path):
    for stage in ("table21a", "table21b"):
        proc = _stage(stage, tmp_path)
        assert proc.returncode == 0, proc.stderr[-2000:]
    files = _members(tmp_path / "table21a.tgz")
    assert {"summary.json", "table.md", "curves.jsonl"} <= set(files)
    assert not any("checkpoints" in name for name in files)
    summary = json.loads(files["summary.json"])
    assert summary["preset"] == "smoke" and summary["config"]["num_seeds"] == 2 and len(summary["rows"]) == 4
    table = tmp_path / "table21"
    (table / "more").mkdir(parents=True)
    with tarfile.open(tmp_path / "table21a.tgz") as a, tarfile.open(tmp_path / "table21b.tgz") as b:
        a.extractall(table, filter="data")
        b.extractall(table / "more", filter="data")
    outputs_exchange.write_report(table, plots=False)
    markdown = (table / "table.md").read_text()
    assert all(f"| {row} |" in markdown for row in oe_report.ROWS)
    assert "Rows 10_nodes_features, 20_nodes_true_labels come from another run with the same settings" in markdown


def test_the_studies_stage_runs_the_nodes_study_at_the_counts_asked_beside_both_references(tmp_path):
    proc = _stage("studies5000", tmp_path, "study_node_counts=1,4")
    assert proc.returncode == 0, proc.stderr[-2000:]
    summary = json.loads(_members(tmp_path / "studies5000.tgz")["summary.json"])
    assert summary["config"]["studies"] == ["nodes"] and summary["config"]["study_node_counts"] == [1, 4]
    assert set(summary["rows"]) == {"10_nodes_no_sharing", "10_nodes_true_labels"}


def test_a_stage_stopped_at_its_limit_still_packs_what_it_has(tmp_path):
    proc = _stage("table21a", tmp_path, STAGE_SECONDS="1")
    assert proc.returncode != 0
    assert (tmp_path / "table21a.tgz").exists() and "packed" in proc.stdout


def test_an_unknown_stage_is_refused(tmp_path):
    proc = _stage("table99", tmp_path)
    assert proc.returncode == 2 and "unknown stage table99" in proc.stderr


def test_the_benchmark_stage_stopped_at_its_limit_packs_its_summary_and_the_backend_choices(tmp_path):
    """The stage's limit stops the benchmark with SIGTERM: it writes the rows measured so far (none here) and the
    rest as not run; the checkout's backends.json is packed beside (a smoke stage does not rewrite it)."""
    before = (ROOT / "jaxcomm" / "assets" / "backends.json").read_bytes()
    proc = _stage("bench", tmp_path, STAGE_SECONDS="8")
    assert "benchmark exit status 124" in proc.stdout  # timeout's status for a command it stopped, proc.stderr[-2000:]
    files = _members(tmp_path / "bench.tgz")
    assert files["backends.json"] == before
    summary = json.loads(files["summary.json"])
    assert summary["interrupted"] and summary["preset"] == "quick" and summary["not_run"][0] == "student_n8"
    assert "**Interrupted**" in files["table.md"].decode()
