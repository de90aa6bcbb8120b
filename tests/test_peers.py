"""The peers benchmark (experiments/peers/): jaxcomm's side of the smoke preset end to end (its child process, the
summary, the table), the cohort arm's fallback where jaxcomm has no cohort API, the report redrawn from a synthetic
summary, and the PyTorch models the peers train (where torch is installed)."""

from __future__ import annotations

import json
import sys

import numpy as np
import pytest

from experiments.peers import jaxcomm_fedavg, presets, report, run
from jaxcomm import models


def _tiny_mnist(name, folder):
    """A synthetic stand-in for MNIST (28x28x1 uint8, a bright pixel per class), so the test needs no data folder."""
    rng = np.random.default_rng(0)
    arrays = {}
    for split, size in (("train", 256), ("test", 100)):
        labels = rng.integers(0, 10, size).astype(np.int32)
        images = (rng.random((size, 28, 28, 1)) * 60).astype(np.uint8)
        images[np.arange(size), 2 * labels, 2 * labels, 0] = 255
        arrays |= {f"x_{split}": images, f"y_{split}": labels}
    path = folder / f"{name}.npz"
    np.savez(path, **arrays)
    return path


def test_smoke_preset_jaxcomm_side_writes_summary_and_table(tmp_path, monkeypatch):
    monkeypatch.setattr(run, "write_dataset", _tiny_mnist)
    out = tmp_path / "smoke"
    assert run.main(["--preset", "smoke", "--out", str(out), "frameworks=jaxcomm", "probe_size=64"]) == 0
    summary = json.loads((out / "summary.json").read_text())
    (record,) = summary["rows"]["smoke"]["runs"]["jaxcomm"]
    assert "error" not in record, record
    assert record["client_steps"] == 2 * 2 * 5 and 0 <= record["accuracy"] <= 100
    assert record["total_seconds"] >= record["seconds"]["first_round"] > 0
    assert set(record["seconds"]) >= {"interpreter", "import", "setup", "build", "first_round", "rest", "evaluation"}
    assert summary["rows"]["smoke"]["flops_per_client_step"] > 2 * 32 * 784 * 64  # forward + backward
    assert summary["versions"]["jaxcomm"]["jax"] and summary["workload_lines"]["jaxcomm"] > 10
    table = (out / "table.md").read_text()
    assert "| jaxcomm | 1 |" in table and "% of floor" in table


def test_cohort_arm_reports_not_available_without_the_cohort_api(monkeypatch):
    import jaxcomm

    monkeypatch.delattr(jaxcomm, "federated", raising=False)
    monkeypatch.setitem(sys.modules, "jaxcomm.federated", None)  # "from jaxcomm import federated" fails
    arm = presets.arms()["smoke_cohort"]
    out = jaxcomm_fedavg.run(arm, "unread.npz", "unread.npz", 0, clock=None)
    assert out == {"unavailable": "not available in this jaxcomm (no jaxcomm.federated, the cohort API)"}


def _record(framework, seed, accuracy, total, warm):
    seconds = {"interpreter": 0.1, "import": 1.0, "setup": 2.0, "build": 0.5, "first_round": 3.0,
               "rest": warm * 3, "evaluation": 0.2, "other": 0.1, "warm_round": warm}
    return {"framework": framework, "arm": "a", "seed": seed, "accuracy": accuracy, "seconds": seconds,
            "total_seconds": total, "client_steps": 200, "client_steps_per_s": 200 / total,
            "warm_client_steps_per_s": 50 / warm, "peak_rss_mb": 500.0, "peak_rss_children_mb": 0.0}


def test_report_redraws_the_table_from_a_synthetic_summary(tmp_path):
    arm = presets.Arm("a", "mnist", "mlp", 10, 4, about="(x) ten clients")
    cohort = presets.Arm("c", "mnist", "mlp", 100, 4, cohort=10, about="(y) a cohort")
    runs = {"jaxcomm": [_record("jaxcomm", s, 90.0 + 0.1 * s, 10.0 + s, 0.01) for s in range(3)],
            "flower": [_record("flower", s, 90.2, 70.0, 0.5) for s in range(3)],
            "pfl": [_record("pfl", s, 80.0, 20.0, 0.1) for s in range(2)]
            + [{"framework": "pfl", "arm": "a", "seed": 2, "error": "RuntimeError: boom"}]}
    rows = {"a": {"arm": vars(arm), "client_steps": arm.client_steps, "flops_per_client_step": 6.5e6, "runs": runs},
            "c": {"arm": vars(cohort), "client_steps": cohort.client_steps, "flops_per_client_step": 6.5e6,
                  "runs": {"jaxcomm": [{"framework": "jaxcomm", "arm": "c", "seed": 0,
                                        "unavailable": "not available in this jaxcomm (no jaxcomm.federated)"}],
                           "flower": [_record("flower", 0, 90.0, 80.0, 0.6)], "pfl": []}}}
    summary = {"experiment": "peers", "preset": "cpu", "command": "python -m experiments.peers --preset cpu",
               "git_commit": "abc", "device": "1 x cpu", "host_cpu": "a CPU", "wall_seconds": 1.0, "rows": rows,
               "machine": {"gflops": 100.0, "jax_gflops": 100.0, "numpy_gflops": 90.0, "size": 2048},
               "frameworks": ["jaxcomm", "flower", "pfl"], "skipped": {"pfl": "pfl not installed"},
               "versions": {"jaxcomm": {"jax": "0.10.2"}}, "workload_lines": {"jaxcomm": 40, "flower": 90, "pfl": 95},
               "failed": ["a/pfl/seed 2"]}
    (tmp_path / "summary.json").write_text(json.dumps(summary))
    (tmp_path / "notes.md").write_text("Hand-written notes.")
    assert run.main(["report", str(tmp_path)]) == 0
    table = (tmp_path / "table.md").read_text()
    # Flower: accuracies agree (90.2 against 90.1 +- 0.1): median 70 s over jaxcomm's 11 s, 0.5 s a round over 0.01
    assert "| Flower | 3 | 70.0 |" in table and "| 6.36x | 50.00x |" in table
    assert "accuracy differs" in table  # pfl-research's 80 % against 90 %: no time compared
    assert "| pfl-research | 2 (1 failed) |" in table and "90.10 ± 0.10" in table
    assert "not available in this jaxcomm" in table and "pfl not installed" in table
    # the floor: 200 client-steps x 6.5 MFLOP at 100 GFLOP/s = 0.013 s; jaxcomm's warm rounds 4 x 0.01 s: 32.5 %
    assert "32.5 %" in table and table.rstrip().endswith("Hand-written notes.")
    s = report.stats(runs["jaxcomm"])
    assert s["runs"] == 3 and s["total_seconds"] == 11.0 and s["seconds"]["setup"] == 2.5
    assert report.agrees(s, report.stats(runs["flower"])) and not report.agrees(s, report.stats(runs["pfl"]))


def test_peer_models_match_the_flax_models_parameter_counts_and_initial_scale():
    torch = pytest.importorskip("torch")
    import jax
    import jax.numpy as jnp

    from experiments.peers import torch_models

    for name, flax_model, shape in (("mlp", models.MLP(hidden=(64,)), (1, 28, 28, 1)),
                                    ("cnn", jaxcomm_fedavg.SimpleCNN(), (1, 32, 32, 3))):
        params = flax_model.init(jax.random.PRNGKey(0), jnp.zeros(shape))["params"]
        net = torch_models.make_model(name)
        assert sum(p.numel() for p in net.parameters()) == sum(a.size for a in jax.tree_util.tree_leaves(params))
        assert net(torch.zeros(shape, dtype=torch.uint8)).shape == (1, 10)
    first = torch_models.make_model("mlp")[2].weight  # 784 -> 64: sd 784 ** -0.5, as flax's lecun_normal
    assert abs(first.std().item() * 28 - 1) < 0.05 and first.abs().max().item() <= 2 / 0.8796 / 28 + 1e-6
