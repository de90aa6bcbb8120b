"""The experiment harness: overrides, the envelope, where runs go, refusals, interrupts, reports."""

from __future__ import annotations

import ast
import dataclasses
import json
import os
import pathlib
import signal
import time

import pytest

from jaxcomm.data import DATA_DIR_ENV, DataError
from jaxcomm.harness import cli, report, results

ROOT = pathlib.Path(__file__).resolve().parents[1]


@dataclasses.dataclass(frozen=True)
class Config:
    steps: int = 10
    rate: float = 0.1
    name: str = "a"
    hidden: tuple[int, ...] = (32, 32)
    flag: bool = False
    budget: int | None = None

    def __post_init__(self):
        if self.steps < 0:
            raise ValueError(f"steps must be >= 0, got {self.steps}")


PRESETS = {"cpu": Config, "smoke": lambda: Config(steps=1)}


def toy_main(out, *argv, run, write_report=None):
    return cli.main(["--out", str(out), *argv], experiment="toy", presets=PRESETS, run=run, description="toy",
                    write_report=write_report)


def rows_of(config):
    return {"rows": {"r": {"acc": 1.5 * config.steps}}, "curves": [{"step": 1, "acc": 0.5}], "note": "x"}


def test_overrides_parse_by_type():
    config = cli.apply_overrides(
        Config(), ["steps=5", "rate=1e-3", "name=b", "hidden=64,16", "flag=true", "budget=7"])
    assert config == Config(steps=5, rate=1e-3, name="b", hidden=(64, 16), flag=True, budget=7)
    assert cli.apply_overrides(Config(budget=3), ["budget=none"]).budget is None
    assert cli.apply_overrides(Config(), ["name=none"]).name == "none"  # a string field: norm=none
    # an empty tuple default: each item an int, else a float, else a string; an empty value is ()
    assert cli.apply_overrides(Config(), ["hidden="]).hidden == ()
    assert cli.apply_overrides(Config(hidden=()), ["hidden=3,0.5,N=50"]).hidden == (3, 0.5, "N=50")


@pytest.mark.parametrize("pair,match", [
    ("stepz=3", "unknown config field 'stepz'; fields are: budget, flag, hidden"),
    ("steps", "must look like field=value"),
    ("steps=three", "cannot parse as int"),
    ("flag=maybe", "cannot parse as bool"),
    ("steps=-1", "steps must be >= 0"),  # the config's own validation runs
])
def test_bad_overrides(pair, match):
    with pytest.raises(ValueError, match=match):
        cli.apply_overrides(Config(), [pair])


def test_main_writes_envelope_and_curves(tmp_path):
    assert toy_main(tmp_path, "steps=2", run=rows_of) == 0
    summary = json.loads((tmp_path / "summary.json").read_text())
    for key in ("experiment", "preset", "command", "git_commit", "device", "host_cpu", "wall_seconds", "rows"):
        assert key in summary
    assert summary["experiment"] == "toy" and summary["preset"] == "cpu"
    assert summary["rows"] == {"r": {"acc": 3.0}} and summary["config"]["steps"] == 2 and summary["note"] == "x"
    assert json.loads((tmp_path / "curves.jsonl").read_text().splitlines()[0]) == {"step": 1, "acc": 0.5}
    assert results.read_run(tmp_path)[0]["out_dir"] == str(tmp_path)


def test_host_cpu_names_the_model_and_its_vector_instruction_sets():
    cpuinfo = ("processor\t: 0\nmodel name\t: Intel(R) Xeon(R) Processor\n"
               "flags\t\t: fpu sse2 sse4_1 avx2 fma avx512f avx512_bf16 amx_tile nx\n\n"
               "processor\t: 1\nmodel name\t: Intel(R) Xeon(R) Processor\n")
    assert results.host_cpu(cpuinfo) == "Intel(R) Xeon(R) Processor; amx_tile avx2 avx512_bf16 avx512f fma sse4_1"
    assert results.host_cpu("model name\t: Some ARM core\n") == "Some ARM core"  # no flags line: the model alone


def test_bad_override_is_one_line_before_running(tmp_path, capsys):
    ran = []
    assert toy_main(tmp_path / "out", "steps=-3", run=ran.append) == 2
    err = capsys.readouterr().err
    assert not ran and err.strip().count("\n") == 0 and "steps must be >= 0" in err
    assert not (tmp_path / "out").exists()


def test_default_out_is_a_fresh_run_folder_and_report_reads_the_newest(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    drawn = []
    write_report = lambda out_dir, plots=True: drawn.append(pathlib.Path(out_dir))
    kwargs = dict(experiment="toy", presets=PRESETS, run=rows_of, description="toy", write_report=write_report)
    monkeypatch.setenv("JAXCOMM_NO_REPORT", "1")
    assert cli.cli(["--preset", "smoke"], **kwargs) == 0
    first = cli.newest_run("toy")
    assert first.parent == pathlib.Path("runs", "toy") and first.name.startswith("smoke-")
    time.strptime(first.name[len("smoke-"):len("smoke-") + 15], "%Y%m%d-%H%M%S")
    assert cli.cli(["--preset", "smoke"], **kwargs) == 0  # the same second: a new folder all the same
    second = cli.newest_run("toy")
    assert second != first and not drawn
    os.utime(first / "summary.json", (time.time() + 5,) * 2)  # now the newest
    assert cli.cli(["report"], **kwargs) == 0 and drawn == [first]
    assert cli.cli(["report", str(second), "--no-plots"], **kwargs) == 0 and drawn == [first, second]
    capsys.readouterr()
    assert cli.cli(["report", str(tmp_path / "nothing")], **kwargs) == 2
    assert "no run to report" in capsys.readouterr().err


def test_another_presets_results_are_kept_unless_forced(tmp_path, capsys):
    assert toy_main(tmp_path, "--preset", "smoke", run=rows_of) == 0
    committed = (tmp_path / "summary.json").read_text()
    ran = []
    assert toy_main(tmp_path, run=lambda c: ran.append(c) or rows_of(c)) == 2
    err = capsys.readouterr().err
    assert "holds the results of preset 'smoke'" in err and "--force" in err and err.strip().count("\n") == 0
    assert not ran and (tmp_path / "summary.json").read_text() == committed
    assert toy_main(tmp_path, "--preset", "smoke", run=rows_of) == 0  # the same preset may rerun
    assert toy_main(tmp_path, "--force", run=rows_of) == 0
    assert json.loads((tmp_path / "summary.json").read_text())["preset"] == "cpu"


def interrupted_once(calls, *, seconds=(0.3, 0.2)):
    """A resumable run: the first part saves a 'checkpoint' and is interrupted, the next one finishes."""
    from jaxcomm import driver

    def run(config, *, checkpoints):
        calls.append((checkpoints.resume, checkpoints.every))
        time.sleep(seconds[len(calls) - 1])
        if len(calls) == 1:
            (checkpoints.directory / "run0").mkdir(parents=True)
            raise driver.Interrupted(4, str(checkpoints.directory / "run0"))
        return {"rows": {"r": {"steps": config.steps}}}

    return run


def test_interrupt_then_resume_with_the_same_config_only(tmp_path, capsys):
    calls = []
    run = interrupted_once(calls)
    assert toy_main(tmp_path, "steps=3", "--checkpoint-every", "7", run=run) == 130
    err = capsys.readouterr().err
    assert "interrupted" in err and f"--out {tmp_path} --resume" in err
    assert not (tmp_path / "summary.json").exists()
    state = json.loads((tmp_path / "checkpoints" / "config.json").read_text())
    assert state["preset"] == "cpu" and state["wall_seconds"] >= 0.3 and "--resume" not in state["command"]
    assert toy_main(tmp_path, "steps=4", "--resume", run=run) == 2  # another config cannot resume these
    assert "another config" in capsys.readouterr().err
    assert toy_main(tmp_path, "steps=3", "--resume", run=run) == 0
    assert calls == [(False, 7), (True, 1000)]
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["rows"] == {"r": {"steps": 3}}
    assert summary["wall_seconds"] >= 0.5  # both parts
    assert summary["command"] == state["command"] and "--resume" not in summary["command"]
    (resumed,) = summary["resumed_with"]  # the command that continued it, as typed
    assert resumed.endswith(f" -m experiments.toy --out {tmp_path} steps=3 --resume")
    assert not (tmp_path / "checkpoints").exists()  # removed once the results are written



def test_the_summary_names_the_commit_the_run_started_from(tmp_path, monkeypatch):
    """A commit made while a run trains is not the run's code; a resumed part on other code is named beside it."""
    checked_out = ["abc"]
    monkeypatch.setattr(results, "git_commit", lambda: checked_out[0])

    def run(config):
        checked_out[0] = "def+dirty"  # someone commits and edits while it trains
        return rows_of(config)

    assert toy_main(tmp_path / "alone", run=run) == 0
    assert json.loads((tmp_path / "alone" / "summary.json").read_text())["git_commit"] == "abc"
    calls = []
    checked_out[0] = "abc"
    resumable = interrupted_once(calls, seconds=(0.0, 0.0))
    assert toy_main(tmp_path / "resumed", run=resumable) == 130
    checked_out[0] = "def"
    assert toy_main(tmp_path / "resumed", "--resume", run=resumable) == 0
    assert json.loads((tmp_path / "resumed" / "summary.json").read_text())["git_commit"] == "abc; resumed at def"


def test_a_rerun_refuses_checkpoints_without_resume_or_fresh(tmp_path, capsys):
    calls = []
    run = interrupted_once(calls)
    assert toy_main(tmp_path, run=run) == 130
    capsys.readouterr()
    assert toy_main(tmp_path, run=run) == 2
    err = capsys.readouterr().err
    assert err.strip().count("\n") == 0 and "--resume" in err and "--fresh" in err
    assert (tmp_path / "checkpoints" / "run0").is_dir() and len(calls) == 1
    assert toy_main(tmp_path, "--fresh", "--resume", run=run) == 2
    assert toy_main(tmp_path, "--fresh", run=run) == 0  # deleted, then a fresh run (not a resumed one)
    assert calls == [(False, 1000), (False, 1000)] and not (tmp_path / "checkpoints").exists()


def test_resume_without_out_finds_the_newest_interrupted_run(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    calls = []
    kwargs = dict(experiment="toy", presets=PRESETS, run=interrupted_once(calls), description="toy")
    assert cli.main(["--preset", "smoke"], **kwargs) == 130
    folder = cli.newest_run("toy", preset="smoke", unfinished=True)
    assert folder is not None and f"--out {folder} --resume" in capsys.readouterr().err
    assert cli.main(["--preset", "smoke", "--resume"], **kwargs) == 0
    assert (folder / "summary.json").is_file() and calls[-1][0]


@pytest.mark.parametrize("error", [DataError("MNIST not found. Searched:\n/a\n/b\nFix: pass --data-dir DIR"),
                                   ValueError("num_nodes must be >= 1, got 0")])
def test_data_and_config_errors_are_one_line_and_leave_no_folder(tmp_path, capsys, error):
    def run(config, *, checkpoints):
        raise error

    out = tmp_path / "out"
    assert toy_main(out, run=run) == 2
    err = capsys.readouterr().err
    assert err.strip().count("\n") == 0 and "Traceback" not in err and str(error).split("\n")[0] in err
    assert not out.exists()  # no empty checkpoints/ folder
    assert toy_main(out, "--debug", run=run) == 2
    assert "Traceback" in capsys.readouterr().err


def test_an_interrupt_the_run_swallowed_writes_no_summary(tmp_path, capsys):
    def run(config):  # a loop without checkpoints stops on Ctrl-C and returns what it has
        try:
            os.kill(os.getpid(), signal.SIGINT)
            time.sleep(5)
        except KeyboardInterrupt:
            pass
        return rows_of(config)

    assert toy_main(tmp_path, run=run) == 130
    assert "interrupted" in capsys.readouterr().err and not (tmp_path / "summary.json").exists()


@pytest.mark.parametrize("stop", ["non-finite", "diverged"])
def test_a_loss_stop_exits_1_naming_node_and_step(tmp_path, capsys, stop):
    from jaxcomm import driver

    def run(config):
        if stop == "diverged":
            raise driver.Diverged(7, 2, 4e13, bound=230.0, good_step=5, saved=None)
        raise driver.NonFiniteLoss(7, 2, float("nan"), good_step=5, saved=None)

    assert toy_main(tmp_path, run=run) == 1
    assert "node 2 at step 7" in capsys.readouterr().err and not (tmp_path / "summary.json").exists()


def test_data_dir_sets_the_folder_loaders_read(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv(DATA_DIR_ENV, "/elsewhere")  # restored after the test
    seen = []
    run = lambda config: seen.append(os.environ[DATA_DIR_ENV]) or rows_of(config)
    assert toy_main(tmp_path / "out", "--data-dir", str(tmp_path), run=run) == 0
    assert seen == [str(tmp_path)]
    assert toy_main(tmp_path / "out2", "--data-dir", str(tmp_path / "missing"), run=run) == 2
    assert "not an existing folder" in capsys.readouterr().err and seen == [str(tmp_path)]


def test_a_failing_plot_still_writes_summary_and_table(tmp_path, monkeypatch, capsys):
    monkeypatch.delenv("JAXCOMM_NO_REPORT", raising=False)

    def write_report(out_dir, *, plots=True):
        summary, _ = results.read_run(out_dir)
        report.write_table(out_dir, f"| r | {summary['rows']['r']['acc']} |")
        if plots:
            report.draw(broken=lambda: 1 / 0, fine=lambda: (out_dir / "fine.txt").write_text("x"))

    assert toy_main(tmp_path, run=rows_of, write_report=write_report) == 0
    assert (tmp_path / "summary.json").is_file() and (tmp_path / "table.md").read_text() == "| r | 15.0 |\n"
    assert (tmp_path / "fine.txt").is_file()
    err = capsys.readouterr().err
    assert "warning: plot broken not drawn (ZeroDivisionError" in err and err.count("warning") == 1


def test_table_cells():
    assert report.cell(None) == "-" and report.cell(None, missing="N.A.") == "N.A."
    assert report.cell(1234.567) == "1,234.6" and report.cell(0.5, 2) == "0.50"
    assert report.cell(12345) == "12,345" and report.cell("tau=1") == "tau=1"


def test_same_settings_ignores_selection_fields_and_fields_one_side_lacks():
    a = {"steps": 10, "rows": ["x"], "augment": False}
    assert results.same_settings(a, {"steps": 10, "rows": []}, selection=("rows",))  # an older run lacks augment
    assert not results.same_settings(a, {"steps": 10, "rows": []})
    assert not results.same_settings(a, {"steps": 20, "rows": ["x"]}, selection=("rows",))
    assert results.changed_settings(a, {"steps": 20, "augment": True}) == {"augment": True, "steps": 20}


def imported_modules(path: pathlib.Path) -> set[str]:
    names = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module)
            names.update(f"{node.module}.{alias.name}" for alias in node.names)
    return names


def test_the_training_library_parses_no_flags_and_draws_no_plots():
    allowed = {ROOT / "jaxcomm" / "cli.py", ROOT / "jaxcomm" / "demo.py"}
    offenders = {}
    for path in sorted((ROOT / "jaxcomm").rglob("*.py")):
        if path in allowed or (ROOT / "jaxcomm" / "harness") in path.parents:
            continue
        bad = {name for name in imported_modules(path)
               if name.split(".")[0] in ("argparse", "matplotlib") or name.startswith("jaxcomm.harness")}
        if bad:
            offenders[str(path.relative_to(ROOT))] = sorted(bad)
    assert not offenders, offenders


def test_a_run_killed_outright_resumes_counting_the_wall_time_up_to_its_last_checkpoint(tmp_path):
    """kill -9 leaves no handler to record the time: every checkpoint records it (``Checkpoints.on_save``)."""
    calls = []

    class Killed(BaseException):  # nothing in the harness handles it, as nothing runs on SIGKILL
        pass

    def run(config, *, checkpoints):
        calls.append(checkpoints.resume)
        time.sleep(0.4)
        if len(calls) == 1:
            (checkpoints.directory / "run0").mkdir(parents=True)  # a checkpoint on disk
            checkpoints.on_save()  # what every Checkpointer calls once one is
            time.sleep(0.3)  # lost: after the last checkpoint
            raise Killed
        return {"rows": {"r": {"steps": config.steps}}}

    with pytest.raises(Killed):
        toy_main(tmp_path, "steps=3", run=run)
    state = json.loads((tmp_path / "checkpoints" / "config.json").read_text())
    assert 0.4 <= state["wall_seconds"] < 0.7
    assert toy_main(tmp_path, "steps=3", "--resume", run=run) == 0
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["wall_seconds"] >= 0.8  # the first part up to its checkpoint and all of the second


def test_keep_checkpoints_leaves_the_trained_states_beside_the_results(tmp_path, capsys):
    def run(config, *, checkpoints):
        (checkpoints.directory / "run0").mkdir(parents=True)
        return {"rows": {"r": {"steps": config.steps}}}

    assert toy_main(tmp_path, "--keep-checkpoints", run=run) == 0
    assert (tmp_path / "summary.json").is_file() and (tmp_path / "checkpoints" / "run0").is_dir()
    assert "kept the trained states in" in capsys.readouterr().out
