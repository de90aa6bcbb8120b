"""TensorBoard curves (issue 40): the event-file format by hand-checked values, every evaluation record written
while it trains (a run, a sweep's runs apart, a resumed run's new records only), and ``--log-dir`` on the CLI."""

from __future__ import annotations

import dataclasses
import pathlib

import jax.numpy as jnp
import numpy as np
import pytest

from jaxcomm import curves, driver, network, network_sweep
from jaxcomm.checkpoint import Checkpointer
from jaxcomm.harness import cli
from jaxcomm.models import MLP


@dataclasses.dataclass(frozen=True)
class Config:  # the smallest config the harness takes
    pass


def events_of(root: pathlib.Path) -> dict[str, list[tuple[int, str, float]]]:
    """Every run folder below ``root`` and the scalars of its event files, in the order written."""
    out: dict[str, list] = {}
    for path in sorted(root.rglob("events.out.tfevents.*")):
        out.setdefault(str(path.parent.relative_to(root)), []).extend(curves.read_events(path))
    return out


def as_events(history: list[dict]) -> dict[tuple[int, str], float]:
    """What a history should read as: every scalar of each record at its step, float32."""
    return {(rec["step"], tag): float(np.float32(value)) for rec in history
            for tag, value in curves.scalars(rec).items()}


def by_step(events: list[tuple[int, str, float]]) -> dict[tuple[int, str], float]:
    return {(step, tag): value for step, tag, value in events}


def counter_system() -> driver.System:
    def step(state, data):
        return state + data, state

    evaluate = lambda state, infos, done: {"total": float(state), "nested": {"half": float(state) / 2, "nan": np.nan},
                                           "skipped": [1.0], "flag": True, "name": "x"}
    return driver.System(lambda key: jnp.float32(0), step, evaluate, step_loop="scan")


def test_crc32c_and_the_frame_layout_match_their_published_check_values():
    assert curves.crc32c(b"123456789") == 0xE3069283  # the CRC-32C check value (RFC 3720, B.4)
    assert curves.crc32c(b"") == 0
    assert curves._varint(300) == b"\xac\x02" and curves._varint(1) == b"\x01"
    frame = curves._frame(b"abc")
    assert len(frame) == 8 + 4 + 3 + 4 and frame[:8] == (3).to_bytes(8, "little") and frame[12:15] == b"abc"


def test_scalars_flatten_numbers_and_leave_out_the_rest():
    record = {"step": 5, "loss": 1.5, "n": 2, "ok": True, "acc": {"vote": 3.0, "inf": float("inf")}, "xs": [1, 2],
              "s": "a", "none": None, "f32": np.float32(0.5), "i64": np.int64(7), "flag": np.bool_(True)}
    assert curves.scalars(record) == {"loss": 1.5, "n": 2.0, "acc/vote": 3.0, "f32": 0.5, "i64": 7.0}
    assert curves.run_name("study_0_n10 logits run 1/2") == "study_0_n10_logits_run_1_2"
    assert curves.run_name(None) == "run"


def test_a_corrupt_event_file_is_refused(tmp_path):
    with curves.tensorboard(tmp_path):
        curves.emit("a", {"step": 1, "x": 1.0})
    path = next(tmp_path.rglob("events.out.tfevents.*"))
    data = bytearray(path.read_bytes())
    data[-6] ^= 0xFF
    path.write_bytes(bytes(data))
    with pytest.raises(ValueError, match="checksum"):
        curves.read_events(path)


def test_every_evaluation_is_written_at_its_step_and_nothing_outside_the_scope(tmp_path):
    system = counter_system()
    data = jnp.float32(2)
    driver.train(system, data, num_steps=4, eval_every=2, key=None, progress=False, desc="before")
    with curves.tensorboard(tmp_path / "logs") as root:
        out = driver.train(system, data, num_steps=6, eval_every=2, key=None, progress=False, desc="counter run")
    driver.train(system, data, num_steps=4, eval_every=2, key=None, progress=False, desc="after")
    written = events_of(root)
    assert list(written) == ["counter_run"]
    assert by_step(written["counter_run"]) == as_events(out["history"])
    assert [(s, t, v) for s, t, v in written["counter_run"] if t == "total"] == [(2, "total", 4.0), (4, "total", 8.0),
                                                                               (6, "total", 12.0)]
    assert {t for _, t, _ in written["counter_run"]} == {"total", "nested/half", "seconds"}


def test_a_resumed_run_writes_only_its_new_records(tmp_path):
    stop_at = [6]  # the first part is interrupted (Ctrl-C) when it reaches step 6, after saving step 4

    def evaluate(state, infos, done):
        if done == stop_at[0]:
            raise KeyboardInterrupt
        return {"total": float(state)}

    system = driver.System(lambda key: jnp.float32(0), lambda s, d: (s + d, s), evaluate, step_loop="scan")
    with curves.tensorboard(tmp_path / "logs") as root:
        with pytest.raises(driver.Interrupted):
            driver.train(system, jnp.float32(1), num_steps=8, eval_every=2, key=None, progress=False, desc="r",
                         checkpointer=Checkpointer(tmp_path / "ckpt", every=2))
        stop_at[0] = -1
        out = driver.train(system, jnp.float32(1), num_steps=8, eval_every=2, key=None, progress=False, desc="r",
                           checkpointer=Checkpointer(tmp_path / "ckpt", every=2, resume=True))
    assert out["resumed_from"] == 4 and [rec["step"] for rec in out["history"]] == [2, 4, 6, 8]
    assert [(s, v) for s, t, v in events_of(root)["r"] if t == "total"] == [(2, 2.0), (4, 4.0), (6, 6.0), (8, 8.0)]


def test_a_network_and_a_population_sweep_write_each_run_as_its_history(tmp_path, tiny_dataset):
    config = network.NetworkConfig(num_nodes=3, content="true_labels", batch_size=8, num_steps=12, eval_every=4,
                                   backend="vmap", step_loop="scan")
    model = MLP(hidden=(16,), num_classes=4)
    with curves.tensorboard(tmp_path / "one") as root:
        alone = network.train_network(config, model, tiny_dataset, progress=False, desc="alone")
    assert list(events_of(root)) == ["alone"] and by_step(events_of(root)["alone"]) == as_events(alone["history"])
    runs = [config.replace(seed=s) for s in (0, 1)]
    with curves.tensorboard(tmp_path / "sweep") as root:
        outs = network_sweep.train_networks(runs, model, tiny_dataset, mode="population", progress=False, desc="sw")
    written = events_of(root)
    assert set(written) == {"sw/run_0", "sw/run_1"}
    for r, out in enumerate(outs):
        assert by_step(written[f"sw/run_{r}"]) == as_events(out["history"])


def test_the_command_line_writes_curves_under_log_dir(tmp_path):
    def run(config):
        out = driver.train(counter_system(), jnp.float32(1), num_steps=4, eval_every=2, key=None, progress=False,
                           desc="toy run")
        return {"rows": {"r": {"total": out["final"]["total"]}}}

    status = cli.main(["--out", str(tmp_path / "out"), "--log-dir", str(tmp_path / "tb")], experiment="toy",
                      presets={"cpu": lambda: Config()}, run=run, description="toy")
    assert status == 0
    assert [(s, t) for s, t, _ in events_of(tmp_path / "tb")["toy_run"] if t == "total"] == [(2, "total"),
                                                                                             (4, "total")]


def test_tensorboard_reads_what_is_written(tmp_path):
    accumulator = pytest.importorskip("tensorboard.backend.event_processing.event_accumulator")
    with curves.tensorboard(tmp_path) as root:
        out = driver.train(counter_system(), jnp.float32(3), num_steps=6, eval_every=3, key=None, progress=False,
                           desc="tb")
    acc = accumulator.EventAccumulator(str(root / "tb"))
    acc.Reload()
    assert [(e.step, e.value) for e in acc.Scalars("nested/half")] == [
        (rec["step"], rec["nested"]["half"]) for rec in out["history"]]
