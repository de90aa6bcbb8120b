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
    row = lambda w, n, **speeds: {"workload": w, "num_nodes": n, "batch_size": 32,
                                  **{f"{b}_node_steps_per_s": v for b, v in speeds.items()}}
    return {"rows": {
        "student_n8": row("student", 8, vmap=30.0, unrolled=10.0, map=20.0),
        "student_n256": row("student", 256, vmap=5.0, map=9.0),
        "cnn_n4": row("cnn", 4, vmap=1.0, unrolled=5.0, sharded=2.0),
        "broken": {"error": "boom"},
    }}


def test_choices_round_trip_and_nearest_row(tmp_path, monkeypatch):
    monkeypatch.setattr(speed, "_CHOICES_FILE", tmp_path / "backends.json")
    speed.write_backend_choices(fake_summary(), platform="cpu")
    written = json.loads((tmp_path / "backends.json").read_text())
    assert written["cpu"]["cnn"] == [{"num_nodes": 4, "batch_size": 32, "ranking": ["unrolled", "sharded", "vmap"]}]
    assert speed.choose_backend("student", 8, platform="cpu") == "vmap"
    assert speed.choose_backend("student", 4, platform="cpu") == "vmap"  # nearest measured: 8
    assert speed.choose_backend("student", 1024, platform="cpu") == "map"  # nearest measured: 256
    assert speed.choose_backend("cnn", 10, platform="cpu") == "unrolled"
    # Past the unroll limit the next-ranked backend is used.
    assert speed.choose_backend("cnn", 2 * speed.UNROLL_LIMIT, platform="cpu") == "sharded"
    # Other platforms keep their entries; unmeasured ones use the rule of thumb.
    speed.write_backend_choices({"rows": {}}, platform="gpu")
    assert json.loads((tmp_path / "backends.json").read_text())["cpu"] == written["cpu"]
    assert speed.choose_backend("cnn", 10, platform="tpu") == "vmap"


def test_rule_of_thumb_without_measurements(tmp_path, monkeypatch):
    monkeypatch.setattr(speed, "_CHOICES_FILE", tmp_path / "missing.json")
    assert speed.choose_backend("cnn", 10, platform="cpu") == "unrolled"
    assert speed.choose_backend("cnn", 1000, platform="cpu") == "vmap"
    assert speed.choose_backend("student", 64, platform="cpu") == "vmap"
    assert speed.choose_step_loop("cnn", platform="cpu") == "dispatch"
    assert speed.choose_step_loop("cnn", platform="gpu") == "scan"
    assert speed.choose_step_loop("student", platform="cpu") == "scan"


def test_network_resolves_auto_and_honours_overrides():
    make = lambda **kw: network.make_network(network.NetworkConfig(num_nodes=4, **kw), MLP(hidden=(8,), num_classes=4),
                                             image_shape=(8, 8, 1), num_classes=4)
    auto = make()
    assert auto.backend == speed.choose_backend("student", 4) and auto.step_loop == "scan"
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
        chosen = speed.choose_backend(row["workload"], row["num_nodes"], batch_size=row["batch_size"], platform="cpu")
        assert chosen == row["best_backend"], name
