"""The demo and the command line, end to end on the shipped real sample."""

from __future__ import annotations

import pytest

from jaxcomm import cli, demo


def test_demo_runs_end_to_end_and_prints_a_table(capsys):
    code = cli.main(["demo", "--steps", "60", "--nodes", "4", "--hidden", "16", "--seeds", "2", "--no-progress"])
    assert code == 0
    out = capsys.readouterr().out
    assert "| isolated |" in out and "| sharing true labels |" in out
    assert "coll. negentropy" in out and "coll. vote" in out and "±" in out and "seeds 0..1" in out


def test_demo_sharing_consumes_and_isolated_does_not():
    result = demo.run(demo.DemoConfig(num_nodes=4, num_steps=40, hidden=(8,), num_seeds=1), progress=False)
    rows = result["rows"]
    assert rows["isolated"]["consumed"] == 0
    assert rows["sharing true labels"]["consumed"] > 0
    assert result["train_size"] == 4000 and result["test_size"] == 1000
    assert rows["isolated"]["avg_accuracy"][1] == 0.0  # one seed: no spread


@pytest.mark.parametrize("argv", [["--help"], ["demo", "--help"]])
def test_help(argv, capsys):
    with pytest.raises(SystemExit) as exit_info:
        cli.main(argv)
    assert exit_info.value.code == 0
    assert "demo" in capsys.readouterr().out


def test_bad_config_is_reported_before_training(capsys):
    assert cli.main(["demo", "--nodes", "3", "--neighbours", "3", "--no-progress"]) == 2
    assert "num_neighbours must be an integer in [0, num_nodes - 1] = [0, 2]" in capsys.readouterr().err


def test_missing_data_names_both_ways(tmp_path, monkeypatch, capsys):
    import sys
    monkeypatch.setitem(sys.modules, "tensorflow_datasets", None)
    assert cli.main(["demo", "--dataset", "mnist", "--data-dir", str(tmp_path), "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert "JAXCOMM_DATA_DIR" in err and "tfds" in err and err.strip().count("\n") == 0  # one line
