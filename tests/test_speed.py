"""The automatic choices: backend per model family from measurements, and scan vs dispatch."""

from __future__ import annotations

import json
import pathlib

import pytest

from jaxcomm import network, speed
from jaxcomm.models import MLP, StridedCNN

ROOT = pathlib.Path(__file__).resolve().parents[1]


def test_model_family():
    assert speed.model_family(MLP(hidden=(32, 32))) == "student"
    assert speed.model_family(MLP(hidden=(1200, 1200))) == "teacher"
    assert speed.model_family(StridedCNN()) == "cnn"


def fake_summary():
    def row(workload, n, **speeds):  # speeds: backend_loop=value
        return {"workload": workload, "num_nodes": n, "batch_size": 32,
                **{f"{pair}_node_steps_per_s": v for pair, v in speeds.items()}}

    return {"rows": {
        "student_n8": row("student", 8, vmap_scan=30.0, vmap_dispatch=8.0, unrolled_scan=10.0, map_scan=20.0),
        "student_n256": row("student", 256, vmap_scan=5.0, map_scan=9.0),
        "teacher_n8": row("teacher", 8, vmap_scan=5.0, vmap_dispatch=6.0, unrolled_dispatch=7.0),
        "cnn_n4": row("cnn", 4, vmap_dispatch=1.0, unrolled_dispatch=5.0, sharded_dispatch=2.0),
        "broken": {"error": "boom"},
    }}


def test_choices_round_trip_and_nearest_row(tmp_path, monkeypatch):
    monkeypatch.setattr(speed, "_CHOICES_FILE", tmp_path / "backends.json")
    speed.write_backend_choices(fake_summary(), platform="cpu")
    written = json.loads((tmp_path / "backends.json").read_text())
    assert written["cpu"]["cnn"] == [{"num_nodes": 4, "batch_size": 32, "ranking": [
        ["unrolled", "dispatch"], ["sharded", "dispatch"], ["vmap", "dispatch"]]}]
    choose = lambda family, n, **kw: speed.choose(family, n, platform="cpu", **kw)
    assert choose("student", 8) == ("vmap", "scan")
    assert choose("student", 4) == ("vmap", "scan")  # nearest measured: 8
    assert choose("student", 1024) == ("map", "scan")  # nearest measured: 256
    assert choose("teacher", 8) == ("unrolled", "dispatch")
    assert choose("cnn", 10) == ("unrolled", "dispatch")
    # A fixed half of the pair is honoured: the fastest pair consistent with it.
    assert choose("teacher", 8, backend="vmap") == ("vmap", "dispatch")
    assert choose("student", 8, step_loop="dispatch") == ("vmap", "dispatch")
    assert choose("student", 8, backend="sharded") == ("sharded", "scan")  # unmeasured: the rule of thumb
    # Past the unroll limit the next-ranked pair is used, unless unrolling was asked for.
    assert choose("cnn", 2 * speed.UNROLL_LIMIT) == ("sharded", "dispatch")
    assert choose("cnn", 2 * speed.UNROLL_LIMIT, backend="unrolled") == ("unrolled", "dispatch")
    # Other platforms keep their entries; unmeasured ones use the rule of thumb.
    speed.write_backend_choices({"rows": {}}, platform="gpu")
    assert json.loads((tmp_path / "backends.json").read_text())["cpu"] == written["cpu"]
    assert speed.choose("cnn", 10, platform="tpu") == ("vmap", "scan")


def test_rule_of_thumb_without_measurements(tmp_path, monkeypatch):
    monkeypatch.setattr(speed, "_CHOICES_FILE", tmp_path / "missing.json")
    assert speed.choose("cnn", 10, platform="cpu") == ("unrolled", "dispatch")
    assert speed.choose("cnn", 1000, platform="cpu") == ("vmap", "dispatch")
    assert speed.choose("student", 64, platform="cpu") == ("vmap", "scan")
    assert speed.choose("cnn", 10, platform="gpu") == ("vmap", "scan")


def test_network_resolves_auto_and_honours_overrides():
    make = lambda **kw: network.make_network(network.NetworkConfig(num_nodes=4, **kw), MLP(hidden=(8,), num_classes=4),
                                             image_shape=(8, 8, 1), num_classes=4)
    auto = make()
    assert (auto.backend, auto.step_loop) == speed.choose("student", 4)
    forced = make(backend="map", step_loop="dispatch")
    assert forced.backend == "map" and forced.step_loop == "dispatch"
    with pytest.raises(ValueError, match="step_loop must be one of"):
        network.NetworkConfig(step_loop="python")


BENCHMARK = ROOT / "results" / "benchmark" / "summary.json"


@pytest.mark.skipif(not BENCHMARK.is_file(), reason="no committed benchmark results")
def test_auto_picks_the_measured_best_backend_of_every_benchmark_row():
    summary = json.loads(BENCHMARK.read_text())
    for name, row in summary["rows"].items():
        if "error" in row:
            continue
        chosen = speed.choose(row["workload"], row["num_nodes"], batch_size=row["batch_size"], platform="cpu")
        assert chosen == (row["best_backend"], row["best_step_loop"]), name
