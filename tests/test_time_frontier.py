"""The frontier read in time: synchronous rows re-timed from their ledgers, output sharing rerun in flight."""

from __future__ import annotations

import json

import numpy as np
import pytest

from experiments import bandwidth_frontier as bf
from experiments import time_frontier as tf
from jaxcomm import clock


@pytest.fixture(scope="module")
def timed(tmp_path_factory):
    frontier, out = tmp_path_factory.mktemp("frontier"), tmp_path_factory.mktemp("time")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("JAXCOMM_NO_REPORT", "1")
        assert bf.main(["--preset", "smoke", "--out", str(frontier), "methods=outputs:none,outputs:true_labels,sync",
                       "num_seeds=2"]) == 0
        assert tf.main(["--preset", "smoke", "--out", str(out), f"frontier_dir={frontier}", "seconds_per_step=0.05",
                       "links=instant,lan_1g,wan_100m", "rerun=true_labels"]) == 0
    tf.write_report(out)
    return out, json.loads((out / "summary.json").read_text()), json.loads((frontier / "summary.json").read_text())


def test_instant_links_leave_the_compute_and_a_wide_area_link_prices_each_collective(timed):
    _, summary, frontier = timed
    instant, wan = summary["links"]["instant"]["rows"], summary["links"]["wan_100m"]["rows"]
    assert set(instant) == set(frontier["rows"]) == set(wan)
    for row in instant.values():  # 20 steps of 50 ms, nothing waited for
        assert row["seconds"] == pytest.approx(20 * 0.05) and not row["rerun"]
    p, link = frontier["rows"]["sync_sgd"]["num_params"], clock.WAN  # 4 nodes: 6 hops of a quarter of 4P
    assert wan["sync_sgd"]["seconds"] == pytest.approx(20 * (0.05 + 6 * (link.latency + p / link.bandwidth)))
    assert wan["isolated"]["seconds"] == pytest.approx(1.0) and not wan["isolated"]["rerun"]
    assert summary["target"] == min(p["accuracy"] for p in frontier["rows"]["isolated"]["per_seed"])


def test_output_sharing_reruns_with_its_messages_in_flight_paired_with_the_instant_run(timed):
    _, summary, frontier = timed
    row = summary["links"]["wan_100m"]["rows"]["true_labels"]
    assert row["rerun"] and row["instant_accuracy"] == frontier["rows"]["true_labels"]["accuracy"]
    assert row["delay_steps"]["mean_age"] >= 2  # 40 ms of latency: at least one 50-ms step in flight
    assert row["vs_instant"]["mean"] == pytest.approx(row["accuracy"] - row["instant_accuracy"], abs=1e-6)
    assert not summary["links"]["wan_100m"]["rows"]["true_labels_shared"]["rerun"]  # the twin is re-timed
    assert np.isfinite(row["seconds"]) and row["seconds"] >= 1.0
    # both links hold a message one 50-ms step: the wide-area row reads the LAN's rerun, trained once
    lan = summary["links"]["lan_1g"]["rows"]["true_labels"]
    assert row["delay_steps"]["median"] == lan["delay_steps"]["median"] == 1
    assert row["trained_under"] == lan["trained_under"] == "lan_1g" and row["accuracy"] == lan["accuracy"]
    assert len({(c["link"], c["seed"]) for c in _curves(timed)}) == 2  # one rerun, two seeds


def _curves(timed) -> list[dict]:
    out, _, _ = timed
    return [json.loads(line) for line in (out / "curves.jsonl").read_text().splitlines()]


def test_the_table_redraws_unchanged_from_its_summary(timed):
    out, _, _ = timed
    before = (out / "table.md").read_text()
    tf.write_report(out, plots=False)
    assert (out / "table.md").read_text() == before and "## wan_100m" in before
