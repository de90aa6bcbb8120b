"""Experiment plumbing: overrides parse by field type, bad ones fail early, the envelope is complete."""

from __future__ import annotations

import dataclasses
import json

import pytest

from jaxcomm import experiment


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


def test_overrides_parse_by_type():
    config = experiment.apply_overrides(
        Config(), ["steps=5", "rate=1e-3", "name=b", "hidden=64,16", "flag=true", "budget=7"])
    assert config == Config(steps=5, rate=1e-3, name="b", hidden=(64, 16), flag=True, budget=7)
    assert experiment.apply_overrides(Config(budget=3), ["budget=none"]).budget is None
    assert experiment.apply_overrides(Config(), ["name=none"]).name == "none"  # a string field: norm=none
    # an empty tuple default: each item an int, else a float, else a string; an empty value is ()
    assert experiment.apply_overrides(Config(), ["hidden="]).hidden == ()
    assert experiment.apply_overrides(Config(hidden=()), ["hidden=3,0.5,N=50"]).hidden == (3, 0.5, "N=50")


@pytest.mark.parametrize("pair,match", [
    ("stepz=3", "unknown config field 'stepz'; fields are: budget, flag, hidden"),
    ("steps", "must look like field=value"),
    ("steps=three", "cannot parse as int"),
    ("flag=maybe", "cannot parse as bool"),
    ("steps=-1", "steps must be >= 0"),  # the config's own validation runs
])
def test_bad_overrides(pair, match):
    with pytest.raises(ValueError, match=match):
        experiment.apply_overrides(Config(), [pair])


def test_main_writes_envelope_and_curves(tmp_path, capsys):
    def run(config):
        return {"rows": {"r": {"acc": 1.5 * config.steps}}, "curves": [{"step": 1, "acc": 0.5}], "note": "x"}

    code = experiment.main(["--out", str(tmp_path), "steps=2"], experiment="toy", presets={"cpu": Config},
                           run=run, description="toy")
    assert code == 0
    summary = json.loads((tmp_path / "summary.json").read_text())
    for key in ("experiment", "preset", "command", "git_commit", "device", "wall_seconds", "rows"):
        assert key in summary
    assert summary["experiment"] == "toy" and summary["preset"] == "cpu"
    assert summary["rows"] == {"r": {"acc": 3.0}} and summary["config"]["steps"] == 2 and summary["note"] == "x"
    assert json.loads((tmp_path / "curves.jsonl").read_text().splitlines()[0]) == {"step": 1, "acc": 0.5}


def test_main_rejects_bad_override_before_running(tmp_path):
    ran = []
    with pytest.raises(SystemExit) as info:
        experiment.main(["--out", str(tmp_path), "steps=-3"], experiment="toy", presets={"cpu": Config},
                        run=ran.append, description="toy")
    assert info.value.code == 2 and not ran


def test_main_interrupt_then_resume_with_the_same_config_only(tmp_path, capsys):
    from jaxcomm import runner

    seen = []

    def run(config, *, checkpoints):
        seen.append((checkpoints.resume, checkpoints.every))
        if not checkpoints.resume:
            raise runner.Interrupted(4, str(checkpoints.directory))
        return {"rows": {"r": {"steps": config.steps}}}

    main = lambda *argv: experiment.main(["--out", str(tmp_path), *argv], experiment="toy", presets={"cpu": Config},
                                         run=run, description="toy")
    assert main("steps=3", "--checkpoint-every", "7") == 130
    assert "--resume" in capsys.readouterr().err and (tmp_path / "checkpoints" / "config.json").is_file()
    with pytest.raises(SystemExit) as info:  # another config cannot resume these checkpoints
        main("steps=4", "--resume")
    assert info.value.code == 2 and "another config" in capsys.readouterr().err
    assert main("steps=3", "--resume") == 0
    assert seen == [(False, 7), (True, 1000)]
    assert json.loads((tmp_path / "summary.json").read_text())["rows"] == {"r": {"steps": 3}}
    assert not (tmp_path / "checkpoints").exists()  # removed once the results are written


def test_table_cells():
    assert experiment.cell(None) == "-" and experiment.cell(None, missing="N.A.") == "N.A."
    assert experiment.cell(1234.567) == "1,234.6" and experiment.cell(0.5, 2) == "0.50"
    assert experiment.cell(12345) == "12,345" and experiment.cell("tau=1") == "tau=1"


def test_same_settings_ignores_selection_fields_and_fields_one_side_lacks():
    a = {"steps": 10, "rows": ["x"], "augment": False}
    assert experiment.same_settings(a, {"steps": 10, "rows": []}, selection=("rows",))  # an older run lacks augment
    assert not experiment.same_settings(a, {"steps": 10, "rows": []})
    assert not experiment.same_settings(a, {"steps": 20, "rows": ["x"]}, selection=("rows",))
