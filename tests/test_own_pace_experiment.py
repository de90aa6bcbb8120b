"""experiments/own_pace/ and experiments/pace_benchmark/ on their smoke presets: what they write, read back."""

from __future__ import annotations

import json

import numpy as np
import pytest

from experiments import own_pace, pace_benchmark
from jaxcomm import stats


def test_the_own_pace_study_writes_paired_tables_and_resumes(tmp_path, record_training):
    out = tmp_path / "own_pace"
    args = ["--preset", "smoke", "--out", str(out), "--conditions", "lan_1g_0_stragglers", "wan_100m_1_stragglers",
            "--methods", "isolated", "outputs", "diloco_quorum"]
    assert own_pace.main(args) == 0
    summary = json.loads((out / "summary.json").read_text())
    lan = summary["tables"]["lan_1g_0_stragglers"]
    isolated = lan["rows"]["isolated"]
    assert summary["target_validation"] == int(np.floor(np.mean(isolated["validation"])))
    # every seed ran to the horizon (1 s): its last tick ends by then, the next one after
    assert all(0.9 <= s <= 1.0 for s in isolated["seconds_at_end"])
    # the comparisons are outputs minus each other row, paired by seed, Holm-adjusted over the whole table (every
    # condition's comparisons: one family)
    diffs = np.subtract(lan["rows"]["outputs"]["test"], lan["rows"]["diloco_quorum"]["test"])
    quorum = next(c for c in lan["comparisons"] if c["other"] == "diloco_quorum")
    assert quorum["mean"] == pytest.approx(diffs.mean())
    family = [c for t in summary["tables"].values() for c in t["comparisons"]]
    assert len(family) == 4 and summary["holm_family"] == "table"
    assert [c["holm_p"] for c in family] == stats.holm([c["p"] for c in family])
    # a straggler on the WAN: output sharing's straggler took about a third of the fast nodes' steps
    steps = np.asarray(summary["tables"]["wan_100m_1_stragglers"]["rows"]["outputs"]["node_steps"])
    assert steps.min() < 0.5 * steps.max()
    table = (out / "table.md").read_text()
    assert own_pace.main(["report", str(out)]) == 0 and (out / "table.md").read_text() == table
    calls = record_training()
    assert own_pace.main(args) == 0 and calls == []  # every pair already saved: nothing trains again


def test_the_pace_benchmark_measures_both_arms_side_by_side(tmp_path):
    out = tmp_path / "pace"
    assert pace_benchmark.main(["--quick", "--out", str(out), "--chunk", "10"]) == 0
    masked, gathered = json.loads((out / "summary.json").read_text())["rows"]
    assert (masked["capacity"], gathered["capacity"]) == (8, 2)
    for row in (masked, gathered):
        assert 0 < row["due_share"] < 1 and row["resolution_of_fastest_step"] == pytest.approx(0.75)
        assert row["ratio"] == pytest.approx(row["own_pace_useful_node_steps_per_second"]
                                             / row["lockstep_node_steps_per_second"])
        # at its own pace the fast nodes no longer wait for the straggler: more node-steps per virtual second
        assert row["virtual_node_steps_per_second"] > row["lockstep_virtual_node_steps_per_second"]
    assert "the due ones, 2 at a time" in (out / "table.md").read_text()


def test_a_seed_whose_loss_leaves_its_bounds_is_a_stopped_row_not_a_crash(tmp_path, monkeypatch):
    from experiments.own_pace import run
    from jaxcomm import driver

    train = run.methods.train

    def blows_up_at_seed_1(method, config, *args, **kwargs):
        if method.name == "diloco_quorum" and config.seed == 1:
            raise driver.Diverged(7, 2, 9.5, bound=4.0, good_step=5, saved=None)
        return train(method, config, *args, **kwargs)

    monkeypatch.setattr(run.methods, "train", blows_up_at_seed_1)
    out = tmp_path / "own_pace"
    args = ["--preset", "smoke", "--out", str(out), "--conditions", "lan_1g_0_stragglers",
            "--methods", "isolated", "outputs", "diloco_quorum"]
    assert own_pace.main(args) == 0
    pair = json.loads((out / "runs" / "lan_1g_0_stragglers" / "diloco_quorum.json").read_text())
    assert pair["curves"][1] is None and pair["curves"][0] is not None
    assert pair["stopped"] == ["seed 1: diverged: loss above 4 (9.5) at node 2 at step 7"]
    lan = json.loads((out / "summary.json").read_text())["tables"]["lan_1g_0_stragglers"]
    assert lan["rows"]["diloco_quorum"]["stopped"] == pair["stopped"]
    assert [c["other"] for c in lan["comparisons"]] == ["isolated"]  # nothing to pair with a stopped seed
    table = (out / "table.md").read_text()
    assert "| diloco_quorum | stopped (1 of 2 seeds) |" in table
    assert "diloco_quorum stopped: seed 1: diverged: loss above 4 (9.5) at node 2 at step 7." in table


def test_an_interrupted_run_saves_nothing_of_its_pair(tmp_path, monkeypatch):
    from experiments.own_pace import run

    train = run.methods.train

    def interrupted_at_seed_1(method, config, *args, **kwargs):
        result = train(method, config, *args, **kwargs)
        return result | {"status": "interrupted"} if config.seed == 1 else result

    monkeypatch.setattr(run.methods, "train", interrupted_at_seed_1)
    out = tmp_path / "own_pace"
    with pytest.raises(KeyboardInterrupt, match="lan_1g_0_stragglers isolated seed 1: interrupted after"):
        own_pace.main(["--preset", "smoke", "--out", str(out), "--conditions", "lan_1g_0_stragglers",
                       "--methods", "isolated"])
    assert not (out / "runs" / "lan_1g_0_stragglers" / "isolated.json").exists()


def test_more_seeds_train_only_what_a_saved_pair_lacks_and_the_table_reads_the_seeds_asked(tmp_path, record_training):
    out = tmp_path / "own_pace"
    args = ["--preset", "smoke", "--out", str(out), "--conditions", "lan_1g_0_stragglers", "--methods", "isolated",
            "outputs"]
    assert own_pace.main(args) == 0  # the smoke preset's seeds 0 and 1
    two = json.loads((out / "summary.json").read_text())
    before = json.loads((out / "runs" / "lan_1g_0_stragglers" / "outputs.json").read_text())
    calls = record_training()
    assert own_pace.main([*args, "--seeds", "0", "1", "2"]) == 0
    assert len(calls) == 2  # seed 2 of each pair, nothing else
    after = json.loads((out / "runs" / "lan_1g_0_stragglers" / "outputs.json").read_text())
    assert after["seeds"] == [0, 1, 2] and after["curves"][:2] == before["curves"]
    # every seed names the commit it trained at (both calls here: this checkout's)
    assert list(after["git_commits"]) == ["0", "1", "2"] and len(set(after["git_commits"].values())) == 1
    three = json.loads((out / "summary.json").read_text())
    (commit, read), = three["pairs_by_commit"].items()
    assert commit == after["git_commits"]["0"] and sorted(read) == [
        "lan_1g_0_stragglers/isolated [0, 1, 2]", "lan_1g_0_stragglers/outputs [0, 1, 2]"]
    assert three["seeds"] == [0, 1, 2] and len(three["tables"]["lan_1g_0_stragglers"]["rows"]["outputs"]["test"]) == 3
    assert own_pace.main([*args, "--seeds", "0", "1"]) == 0 and len(calls) == 2  # read again at 2: nothing trains
    again = json.loads((out / "summary.json").read_text())
    def without_wall(tables):  # a pair's training seconds count every seed it holds
        return {c: {**t, "rows": {m: {k: v for k, v in r.items() if k != "wall_seconds"} for m, r in t["rows"].items()}}
                for c, t in tables.items()}

    assert without_wall(again["tables"]) == without_wall(two["tables"])
    assert again["target_validation"] == two["target_validation"]


def test_verdicts_read_each_comparison_in_its_own_family_and_say_which_held():
    from experiments.own_pace.report import verdicts

    def summary(*rows):
        return {"tables": {"lan": {"comparisons": [{"other": o, "mean": m, "holm_p": p} for o, m, p in rows]}}}

    three = summary(("isolated", 0.9, 0.04), ("sgp", 0.7, 0.09), ("diloco", -1.0, 0.01), ("osgp", 0.1, None))
    five = summary(("isolated", 0.8, 0.003), ("sgp", 0.7, 0.02), ("diloco", 0.2, 0.6), ("sync_sgd", 1.0, 0.01))
    got = {(v["other"], v["before"], v["after"]): v["held"] for v in verdicts(three, five)}
    assert got == {("isolated", "ahead", "ahead"): True, ("sgp", "unresolved", "ahead"): False,
                   ("diloco", "behind", "unresolved"): False, ("osgp", "unresolved", "absent"): False,
                   ("sync_sgd", "absent", "ahead"): False}
