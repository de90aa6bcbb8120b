"""The benchmark's scale suite: the line through the peaks, one measurement, its table, its merge, its failures."""

from __future__ import annotations

import importlib
import itertools
import json
import pathlib
import signal
import subprocess
import sys
import time

import jax
import pytest

from experiments import benchmark
from experiments.benchmark import bench
from experiments.benchmark import report as benchmark_report

ROOT = pathlib.Path(__file__).resolve().parents[1]
benchmark_run = importlib.import_module("experiments.benchmark.run")  # where measure_row looks its helpers up


def test_predict_max_nodes_fits_the_line_through_the_peaks_and_extrapolates_it_to_the_budget():
    per_node, intercept, predicted = bench.predict_max_nodes((10, 20, 40), (110, 210, 410), 1010)
    assert per_node == pytest.approx(10) and intercept == pytest.approx(10)
    assert predicted == 100  # (1010 - 10) / 10: the fit's float rounding costs no node
    # least squares: noisy peaks around the same line give about the same prediction
    assert bench.predict_max_nodes((10, 20, 40), (111, 209, 410), 1010)[2] in range(98, 103)
    # memory that does not grow with N predicts nothing; a budget under the intercept fits no node
    assert bench.predict_max_nodes((8, 32), (500, 500), 1000)[2] is None
    assert bench.predict_max_nodes((10, 20), (110, 210), 5)[2] == 0
    with pytest.raises(ValueError, match="two sizes"):
        bench.predict_max_nodes((10,), (110,), 1000)


def test_measure_scale_trains_the_population_and_reports_its_peak():
    result = bench.measure_scale("student", 4, 2, 1)
    assert result["num_nodes"] == 4 and result["seconds"] > 0
    assert result["peak_mb"] > 0 and result["memory"] in ("host_rss", "device")
    if result["memory"] == "host_rss":
        assert result["budget_mb"] == 24 * 1024


def test_with_train_size_repeats_the_training_split_to_hold_every_node():
    _, dataset = bench.model_and_data("student")
    held = len(dataset.train.labels)
    assert bench.with_train_size(dataset, held) is dataset
    grown = bench.with_train_size(dataset, held + 10)
    assert grown.train.images.shape[0] == held + 10 and grown.train.images.dtype == dataset.train.images.dtype
    assert (grown.train.labels[held:] == dataset.train.labels[:10]).all() and grown.test is dataset.test


def test_run_scale_confirms_at_90_percent_of_the_prediction_only_when_asked():
    """Children stubbed by a line of 10 MB per node over 10 MB: the prediction, the confirmation, its failure."""
    asked = []

    def child(args, timeout):  # the script's --measure-scale in a fresh interpreter
        assert args[0] == "--measure-scale"
        measure = json.loads(args[1])
        num_nodes = measure["num_nodes"]
        asked.append(num_nodes)
        if num_nodes > 40 and fail:
            return subprocess.CompletedProcess(args, -9, "", "")  # killed for memory: only the status
        return subprocess.CompletedProcess(args, 0, json.dumps({
            "num_nodes": num_nodes, "seconds": 1.0, "peak_mb": 10.0 + 10 * num_nodes, "memory": "host_rss",
            "budget_mb": measure["memory_gib"] * 1024}) + "\n", "")

    row, fail = bench.ScaleRow("student", (10, 20, 40), 2, 1), False
    r = bench.run_scale([row], 60, 1010 / 1024, child=child)["student_scale"]
    assert asked == [10, 20, 40] and r["predicted_max_nodes"] == 100 and r["confirmed"] is None
    assert r["per_node_mb"] == pytest.approx(10) and r["budget_mb"] == pytest.approx(1010)
    r = bench.run_scale([row], 60, 1010 / 1024, child=child, confirm=True)["student_scale"]
    assert asked[-1] == 90 and r["confirmed"] == {"num_nodes": 90, "trained": True, "peak_mb": 910.0, "seconds": 1.0}
    fail = True  # a confirmation that dies is recorded, and the fitted row stands
    r = bench.run_scale([row], 60, 1010 / 1024, child=child, confirm=True)["student_scale"]
    assert r["confirmed"]["trained"] is False and r["confirmed"]["error"] == "exit status -9"
    assert r["predicted_max_nodes"] == 100 and "error" not in r


def _scale_row(workload: str, confirmed: dict | None) -> dict:
    return {"workload": workload, "sizes": [256, 1024], "num_steps": 4, "eval_every": 2, "peaks_mb": [500.4, 740.2],
            "seconds": [3.0, 9.0], "per_node_mb": 0.3122, "intercept_mb": 420.5, "budget_mb": 24 * 1024.0,
            "memory": "host_rss", "predicted_max_nodes": 77_374, "confirmed": confirmed}


def _summary(**extra) -> dict:
    return {"device": "cpu", "matmul_gflops": 100.0, "command": "python experiments/benchmark.py --scale",
            "git_commit": "abc", "wall_seconds": 12.0, "rows": {}, **extra}


def test_the_scale_table_shows_the_prediction_and_the_confirmation_or_that_it_was_not_run():
    table = benchmark_report.format_table(_summary(scale={
        "student_scale": _scale_row("student", {"num_nodes": 69_636, "trained": True, "peak_mb": 21_000.2,
                                                "seconds": 50.0}),
        "cnn_scale": _scale_row("cnn", None),
        "teacher_scale": {"error": "timed out"}}))
    assert "| student_scale | 4 | 256 / 1,024 | 500 / 740 | 0.312 | 420 | 77,374 in 24.0 GiB (host_rss) | " \
           "69,636: 21000 |" in table
    assert "| cnn_scale | 4 | 256 / 1,024 | 500 / 740 | 0.312 | 420 | 77,374 in 24.0 GiB (host_rss) | not run |" \
           in table
    assert "| teacher_scale | failed |" in table
    assert "Scale:" not in benchmark_report.format_table(_summary())  # runs without the suite draw no section


def test_merge_scale_copies_the_suite_and_names_the_run_it_came_from(tmp_path):
    part, into = tmp_path / "scale", tmp_path / "into"
    for folder, summary in ((part, _summary(scale={"cnn_scale": _scale_row("cnn", None)})), (into, _summary())):
        folder.mkdir()
        (folder / "summary.json").write_text(json.dumps(summary))
    benchmark_report.merge_scale(part, into)
    merged = json.loads((into / "summary.json").read_text())
    assert merged["scale"] == {"cnn_scale": _scale_row("cnn", None)}
    assert merged["scale_run"] == {"command": "python experiments/benchmark.py --scale", "git_commit": "abc",
                                   "wall_seconds": 12.0, "device": "cpu", "out_dir": str(part)}
    table = (into / "table.md").read_text()
    assert "| cnn_scale |" in table and f"its own table: `{part}/table.md`" in table


def test_merge_rows_replaces_rows_by_name_and_names_the_runs_they_came_from(tmp_path):
    into, first, second = tmp_path / "into", tmp_path / "first", tmp_path / "second"
    failed = lambda why: {"error": why}  # noqa: E731  (rows drawn as failed: no fields needed)
    for folder, rows in ((into, {"a": failed("1"), "b": failed("2")}), (first, {"b": failed("3"), "c": failed("4")}),
                         (second, {"b": failed("5")})):
        folder.mkdir()
        (folder / "summary.json").write_text(json.dumps(_summary(rows=rows, command=f"run {folder.name}")))
    benchmark_report.merge_rows(first, into)
    benchmark_report.merge_rows(second, into)
    merged = json.loads((into / "summary.json").read_text())
    assert merged["rows"] == {"a": failed("1"), "b": failed("5"), "c": failed("4")}  # the summary's order kept
    assert [(run["rows"], run["command"], run["out_dir"]) for run in merged["rows_runs"]] == [
        (["c"], "run first", str(first)), (["b"], "run second", str(second))]
    assert merged["command"] == "run into"
    table = (into / "table.md").read_text()
    assert "Rows c are from a later run" in table and f"`{second}/table.md`" in table


def test_the_benchmark_exits_non_zero_when_a_scale_row_fails(tmp_path):
    """A scale row whose child times out is marked failed in the table, and the script says so by its exit status."""
    proc = subprocess.run([sys.executable, "-m", "experiments.benchmark", "--quick", "--only",
                           "student_scale", "--timeout", "1", "--out", str(tmp_path)],
                          capture_output=True, text=True, cwd=ROOT)
    assert proc.returncode == 1, proc.stderr
    assert "FAILED rows: student_scale" in proc.stderr
    assert "| student_scale | failed |" in (tmp_path / "table.md").read_text()
    assert "error" in json.loads((tmp_path / "summary.json").read_text())["scale"]["student_scale"]


def test_a_row_measures_the_engines_per_node_loop_and_tables_it(monkeypatch):
    """The engine's eager per-node loop is measured beside the lifted backends and may be the row's best."""
    monkeypatch.setattr(bench, "MIN_SECONDS", 0.05)
    row = benchmark.Row("student", 2, backends=("vmap",), step_loops=("dispatch",), cold=False)
    result = benchmark.measure_row(row)
    assert result["eager_node_steps_per_s"] == result["loop_eager_node_steps_per_s"] > 0
    assert set(result["compile_seconds"]) == {"vmap_dispatch", "loop_eager"}
    best = max(("vmap_dispatch", "loop_eager"), key=lambda pair: result[f"{pair}_node_steps_per_s"])
    assert f"{result['best_backend']}_{result['best_step_loop']}" == best
    table = benchmark_report.format_table(_summary(rows={"student_n2": result}))
    assert "| row | loop | eager | vmap |" in table
    assert f"| student_n2 | {result['loop_node_steps_per_s']:.1f} | {result['eager_node_steps_per_s']:.1f} | " in table


def test_a_row_with_parts_times_each_part_against_its_floor_and_names_the_peer(monkeypatch):
    """Issue 41: the draw, forward + backward and Adam timed apart, each with its floor; PyTorch beside it, or
    "not installed"; old summaries (no parts, no peer) draw no such sections."""
    import importlib.util

    from experiments.benchmark import step_parts

    monkeypatch.setattr(bench, "MIN_SECONDS", 0.05)
    monkeypatch.setattr(step_parts, "MIN_SECONDS", 0.05)
    row = benchmark.Row("student", 2, backends=("vmap",), step_loops=("scan",), baseline=False, parts=True,
                        cold=False)
    result = benchmark.measure_row(row)
    parts = result["parts"]
    assert set(parts["parts"]) == {"draw", "forward_backward", "optimizer", "step"}
    # the engine's whole step, against the parts' floors summed
    whole = parts["parts"]["step"]
    assert whole["floor"] == "parts" and whole["floor_seconds"] == pytest.approx(
        sum(p["floor_seconds"] for k, p in parts["parts"].items() if k != "step"))
    assert parts["params_per_node"] == 784 * 32 + 32 + 32 * 32 + 32 + 32 * 10 + 10  # the 784-32-32-10 student
    # Adam moves 7 float32 per parameter; forward + backward of a dense layer costs 3 matmuls (x W, dY W', X' dY)
    optimizer = parts["parts"]["optimizer"]
    assert optimizer["floor_seconds"] == pytest.approx(7 * 4 * 2 * parts["params_per_node"]
                                                       / parts["bandwidth_gbs"] / 1e9)
    dense = 2 * 32 * (784 * 32 + 32 * 32 + 32 * 10)  # B = 32, forward
    assert 2 * dense <= parts["flops_per_node_step"] <= 3 * dense
    assert all(p["seconds"] > 0 and p["floor_seconds"] > 0 for p in parts["parts"].values())
    assert parts["machine"]["cores"] >= 1 and parts["machine"]["cpu"]

    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None)
    result["peer"] = benchmark.measure_peer(row, timeout=60)
    assert result["peer"] == {"error": "not installed"}
    table = benchmark_report.format_table(_summary(rows={"student_n2": result}))
    assert "| student_n2 | " + f"{result['best_node_steps_per_s']:.1f} | not installed |" in table
    assert "| student_n2 | Adam update | vmap | " in table
    rest = whole["seconds"] - sum(p["seconds"] for k, p in parts["parts"].items() if k != "step")
    assert f"| student_n2 | rest of the step (whole - parts) | vmap | {rest * 1e3:.2f} | | | | - |" in table
    plain = {k: v for k, v in result.items() if k not in ("parts", "peer")}
    assert "Against PyTorch" not in benchmark_report.format_table(_summary(rows={"student_n2": plain}))
    assert "Parts of a step" not in benchmark_report.format_table(_summary(rows={"student_n2": plain}))


def test_the_parts_table_sets_the_whole_step_and_its_rest_beside_pytorchs():
    """Hand-computed: jaxcomm's whole step 220 ms against parts of 1 + 200 + 9 = 210 (rest 10); PyTorch's whole
    step is its best recipe's, 10 nodes at 50 node-steps/s = 200 ms, against its parts 1 + 180 + 9 (rest 10)."""
    part = lambda s, f: {"seconds": s, "floor_seconds": f, "floor": "matmul"}  # noqa: E731
    parts = {"draw": part(0.001, 0.0005), "forward_backward": part(0.2, 0.1), "optimizer": part(0.009, 0.004),
             "step": {"seconds": 0.22, "floor_seconds": 0.1045, "floor": "parts"}}
    row = {"parts": {"backend": "unrolled", "num_nodes": 10, "matmul_gflops": 300.0, "bandwidth_gbs": 50.0,
                     "parts": parts, "machine": {"cpu": "x", "cores": 2, "vector_extensions": []}},
           "best_node_steps_per_s": 45.0,
           "peer": {"best_node_steps_per_s": 50.0, "best_recipe": "loop", "torch": "2", "threads": 2,
                    "parts": {"draw": 0.001, "forward_backward": 0.18, "optimizer": 0.009}}}
    table = "\n".join(benchmark_report.parts_table({"cnn_n10": row}))
    assert "| cnn_n10 | whole step (the engine's network, one call per step) | unrolled | 220.00 | 104.50 | parts | " \
           "48% | 200.00 |" in table
    assert "| cnn_n10 | rest of the step (whole - parts) | unrolled | 10.00 | | | | 10.00 |" in table


def test_a_row_times_autos_first_choice_from_an_empty_cache_and_tables_it(monkeypatch, tmp_path):
    """Issue 40: the pair auto picks with nothing cached, the seconds choosing took, and that pair's speed against
    the fastest pair, timed alike; the user's cache is neither read nor written."""
    from jaxcomm import speed

    monkeypatch.setattr(bench, "MIN_SECONDS", 0.05)
    monkeypatch.setattr(speed, "MIN_BUDGET_S", 2.0)
    monkeypatch.setenv(speed.CACHE_ENV, str(tmp_path))  # the "user's" cache: must stay untouched
    row = benchmark.Row("student", 2, backends=("vmap",), step_loops=("scan",), baseline=False)
    result = benchmark.measure_row(row)
    cold = result["cold_choice"]
    assert cold["seconds"] > 0 and tuple(cold["pair"]) in speed.candidates(2, family="mlp")
    # what the chooser printed and timed is kept with the row (a row's stderr is not)
    assert len(cold["printed"]) == 1 and cold["printed"][0].startswith(f"jaxcomm: auto chose {'/'.join(cold['pair'])}")
    assert set(cold["timings"]["seconds_per_step"]) <= {"/".join(p) for p in speed.candidates(2, family="mlp")}
    assert cold["node_steps_per_s"] == result[f"{cold['pair'][0]}_{cold['pair'][1]}_node_steps_per_s"]
    fastest = max(result[f"{pair}_node_steps_per_s"] for pair in result["compile_seconds"])
    assert cold["of_fastest_once"] == pytest.approx(cold["node_steps_per_s"] / fastest) and cold["of_fastest_once"] <= 1
    if cold["pair"] == [result["best_backend"], result["best_step_loop"]]:
        assert cold["of_fastest"] == 1.0 and cold["rounds"] is None
    else:  # the pick and the fastest pair again, in interleaved rounds: the best of each
        assert len(cold["rounds"]["picked"]) == len(cold["rounds"]["fastest"]) == benchmark.ROUNDS
        assert cold["of_fastest"] == max(cold["rounds"]["picked"]) / max(cold["rounds"]["fastest"])
    assert not (tmp_path / "choices.json").exists() and __import__("os").environ[speed.CACHE_ENV] == str(tmp_path)
    table = benchmark_report.format_table(_summary(rows={"student_n2": result}))
    assert (f"| student_n2 | {'/'.join(cold['pair'])} | {cold['seconds']:.1f} | {cold['node_steps_per_s']:.1f} | "
            f"{cold['of_fastest']:.2f}x | {cold['of_fastest_once']:.2f}x |") in table
    plain = {k: v for k, v in result.items() if k != "cold_choice"}
    assert "A first run's choice" not in benchmark_report.format_table(_summary(rows={"student_n2": plain}))


def test_a_cold_pick_that_is_not_the_fastest_pair_is_timed_again_in_interleaved_rounds_with_it(monkeypatch):
    """The pick and the fastest pair, both timed again alternately: of_fastest is the best of each's rounds."""
    monkeypatch.setattr(benchmark_run, "cold_choice", lambda make, base: {"pair": ["loop", "eager"], "seconds": 1.0})
    # vmap/scan, then the pick (not the fastest), then the row's later timings (inbox, ...)
    once = itertools.chain([100.0, 50.0], itertools.repeat(70.0))
    rounds = itertools.chain([10.0, 20.0, 30.0, 40.0, 50.0, 60.0], itertools.repeat(1.0))  # pick, fastest, ...

    def timed(run, state, data, chunk):
        return 0.0, next(once), jax.block_until_ready(run(state, data, chunk))[0]

    monkeypatch.setattr(benchmark_run, "timed", timed)
    monkeypatch.setattr(benchmark_run, "rate", lambda run, state, data, chunk: (state, next(rounds)))
    row = benchmark.Row("student", 2, backends=("vmap",), step_loops=("scan",), baseline=False)
    cold = benchmark.measure_row(row)["cold_choice"]
    assert cold["of_fastest_once"] == 0.5
    assert cold["rounds"] == {"picked": [20.0, 60.0, 100.0], "fastest": [40.0, 80.0, 120.0]}  # steps/s x 2 nodes
    assert cold["of_fastest"] == 100.0 / 120.0


def test_the_peer_is_tabled_against_jaxcomms_best():
    r = {"best_node_steps_per_s": 300.0, "peer": {"torch": "2.13.0", "threads": 2, "best_recipe": "stacked_bmm",
                                                  "best_node_steps_per_s": 120.0}}
    assert "| student_n64 | 300.0 | 120.0 | stacked_bmm | 2.50x | 2.13.0, 2 |" in benchmark_report.peer_table(
        {"student_n64": r})
    # a GPU row beside PyTorch on the host's cores compares machines, not libraries: listed, not compared
    assert "| student_n64 | 300.0 | 120.0 | stacked_bmm | not compared: PyTorch on the cpu, jaxcomm on the gpu | " \
           in "\n".join(benchmark_report.peer_table({"student_n64": r}, "gpu"))
    assert benchmark_report.jaxcomm_platform("1 x NVIDIA H100 80GB HBM3 (gpu), host x86_64 with 16 CPU cores") == "gpu"
    assert benchmark_report.jaxcomm_platform("x86_64 with 2 CPU cores (cpu), jax 0.10.2") == "cpu"


def test_the_gpu_suite_measures_sweeps_of_160_and_640_student_nodes_and_50_and_200_cnn_nodes():
    sweeps = {(r.workload, r.runs * r.num_nodes) for r in benchmark.sweep_rows("gpu") if not r.method}
    assert sweeps == {("student", 160), ("student", 640), ("cnn", 50), ("cnn", 200)}
    # the CPU table's sweeps are the 16 student networks and 5 CNN networks of 10 nodes, and 8 seeds of
    # DiLoCo, synchronous SGD and codistillation on 10 student nodes (issue 37)
    assert {r.name for r in benchmark.sweep_rows("full")} == {
        "student_r16_n10", "cnn_r5_n10", "diloco_h50_student_r8_n10", "sync_sgd_student_r8_n10",
        "codistill_k100_student_r8_n10"}
    gpu_rows = {r.name: r for r in benchmark.rows("gpu")}
    assert {"student_n1024", "teacher_n32", "cnn_n20", "cnn_n256"} <= set(gpu_rows)
    assert gpu_rows["cnn_n20"].step_loops == ("scan", "dispatch")  # only CPU convolutions avoid the scan body


def test_a_run_selects_its_suites_rows_or_the_named_ones():
    rows, sweeps, scale = benchmark.selection("gpu")
    assert [r.name for r in scale] == ["student_scale", "cnn_scale"]  # the gpu suite measures scale unasked
    assert benchmark.selection("full")[2] == [] and benchmark.selection("full", scale=True)[2]
    assert benchmark.selection("gpu", sweeps=False)[1] == []
    # a name the suites share takes the chosen suite's definition: cnn_n10 is dispatched only on CPU
    assert benchmark.selection("gpu", ["cnn_n10"])[0][0].step_loops == ("scan", "dispatch")
    assert benchmark.selection("full", ["cnn_n10"])[0][0].step_loops == ("dispatch",)
    named = benchmark.selection("quick", ["cnn_r20_n10", "student_scale"])  # found in another suite
    assert named[0] == [] and [r.runs for r in named[1]] == [20] and named[2][0].sizes == (8, 32)
    with pytest.raises(KeyError, match="unknown rows"):
        benchmark.selection("full", ["cnn_n7"])


def test_the_gpu_suite_names_its_own_rows_and_fails_loudly(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "experiments.benchmark", "--suite", "gpu", "--only",
                           "cnn_r20_n10", "--timeout", "1", "--out", str(tmp_path)],
                          capture_output=True, text=True, cwd=ROOT)
    assert proc.returncode == 1, proc.stderr
    assert "FAILED rows: cnn_r20_n10" in proc.stderr
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["preset"] == "gpu" and "error" in summary["sweeps"]["cnn_r20_n10"]


def test_an_interrupted_benchmark_writes_what_it_measured_and_lists_the_rest(tmp_path):
    """SIGTERM (a time limit) while a row's process runs: the summary and table are written, the rows not measured
    listed, the exit status 130."""
    proc = subprocess.Popen([sys.executable, "-m", "experiments.benchmark", "--quick", "--only",
                             "student_n8", "student_r4_n4", "--out", str(tmp_path)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT)
    assert "float32 matmul" in proc.stdout.readline()  # the rows start after the matmul rate
    time.sleep(1.0)
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err
    assert "INTERRUPTED; not run: student_n8, student_r4_n4" in err
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["interrupted"] and summary["not_run"] == ["student_n8", "student_r4_n4"]
    assert summary["rows"] == {} and summary["sweeps"] == {}
    assert "**Interrupted** before it ended; not run: student_n8, student_r4_n4." in (tmp_path / "table.md").read_text()


def test_a_signal_before_the_suite_starts_is_held_and_still_writes_the_summary(tmp_path):
    """SIGTERM while the benchmark still imports JAX (a stage's limit on a loaded machine): held from the entry
    point's first line, it stops the suite as soon as the suite starts; nothing runs, the summary is written."""
    proc = subprocess.Popen([sys.executable, "-m", "experiments.benchmark", "--quick", "--only", "student_n8",
                             "--out", str(tmp_path)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            cwd=ROOT)
    time.sleep(0.5)  # past the interpreter's start (tens of ms), before the matmul rate's JAX import ends
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 130, err
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["interrupted"] and summary["not_run"] == ["student_n8"] and summary["rows"] == {}


def test_a_method_sweep_arm_reports_the_ledgers_bytes_and_equals_one_by_one():
    row = bench.SweepRow("student", 2, 3, 6, 3, "diloco:2")
    together, one = bench.measure_sweep(row, "sweep"), bench.measure_sweep(row, "one_by_one")
    assert row.name == "diloco_h2_student_r2_n3" and together["mode"] == "sequential"  # DiLoCo sweeps run by run
    assert together["counters"] == one["counters"] and together["counters"][0]["by_kind"]["parameters"] > 0
    assert together["avg_accuracy"] == pytest.approx(one["avg_accuracy"], abs=1e-6)


def test_report_redraws_a_runs_table_from_its_summary_and_notes(tmp_path, capsys):
    committed, folder = ROOT / "results" / "benchmark" / "vs_pytorch", tmp_path / "vs_pytorch"
    folder.mkdir()
    for name in ("summary.json", "notes.md"):
        (folder / name).write_bytes((committed / name).read_bytes())
    assert benchmark.main(["report", str(folder)]) == 0
    assert (folder / "table.md").read_bytes() == (committed / "table.md").read_bytes()
    assert benchmark.main(["report", str(tmp_path / "missing")]) == 2
    assert f"benchmark: error: no run to report in {tmp_path / 'missing'} (no summary.json)" in \
        capsys.readouterr().err


def test_a_sweep_row_times_the_mode_auto_passed_over_and_the_table_shows_it():
    """Issue 37: each sweep row's arms are one by one, the sweep under mode="auto", and the other mode; a refused
    other mode (an eager loop cannot be a population) is recorded, not a failed row."""
    row = bench.SweepRow("student", 2, 3, 6, 3)
    seconds = {"one_by_one": 30.0, "sweep": 20.0, "sequential": 16.0}
    asked = []

    def child(args, timeout):
        arm = args[2]
        asked.append(arm)
        if arm == "population":
            return subprocess.CompletedProcess(args, 1, "", "ValueError: an 'eager' step loop runs one call per node")
        out = {"seconds": seconds[arm], "mode": "population" if arm == "sweep" else None, "counters": [1, 2],
               "avg_accuracy": [50.0, 51.0], "peak_rss_mb": 100.0}
        return subprocess.CompletedProcess(args, 0, json.dumps(out) + "\n", "")

    measured = bench.run_sweeps([row], 60, child=child)[row.name]
    assert asked == ["one_by_one", "sweep", "sequential"]
    assert measured["other_mode"] == "sequential" and measured["other_mode_s"] == 16.0
    assert measured["speedup"] == pytest.approx(1.5)
    table = benchmark_report.format_table(_summary(sweeps={row.name: measured}))
    assert "| student_r2_n3 | 2 x 3 | 6 | population | 20.0 | 30.0 | 1.50x | 16.0 (sequential, 1.25x) | yes | 0 |" \
        in table

    seconds["sweep"], seconds["population"] = 20.0, None
    refused = bench.run_sweeps([row], 60, child=lambda args, t: (
        child(args, t) if args[2] != "sequential" else child([*args[:2], "population"], t)))[row.name]
    assert "other_mode_s" not in refused and "eager" in refused["other_mode_error"]
    assert "failed (sequential)" in benchmark_report.format_table(_summary(sweeps={row.name: refused}))
    # a summary from before these arms draws its table without the column
    old = {k: v for k, v in measured.items() if not k.startswith("other_mode")}
    assert "other mode s" not in benchmark_report.format_table(_summary(sweeps={row.name: old}))


def test_in_fresh_process_reads_the_last_printed_line_with_the_environment_added(tmp_path, monkeypatch):
    """The helper the scripts beside the results use: a child's last line as JSON, ``env`` on top of this process'
    own, and a failure raised with the child's stderr."""
    script = tmp_path / "child.py"
    script.write_text("import json, os, sys\nprint('noise')\nprint(json.dumps({'args': sys.argv[1:], "
                      "'added': os.environ['ADDED'], 'kept': os.environ['KEPT']}))\n")
    monkeypatch.setenv("KEPT", "yes")
    assert bench.in_fresh_process(script, "a", "b", env={"ADDED": "1"}) == {"args": ["a", "b"], "added": "1",
                                                                           "kept": "yes"}
    script.write_text("import sys\nsys.exit('went wrong')\n")
    with pytest.raises(RuntimeError, match="exited with 1:\nwent wrong"):
        bench.in_fresh_process(script)
