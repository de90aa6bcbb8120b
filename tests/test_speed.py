"""The automatic choices: backend per model family from measurements, and scan vs dispatch."""

from __future__ import annotations

import json
import pathlib

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from jaxcomm import network, speed
from jaxcomm.models import MLP, StridedCNN

ROOT = pathlib.Path(__file__).resolve().parents[1]
MNIST = jnp.zeros((4, 28, 28, 1))
CIFAR = jnp.zeros((4, 32, 32, 3))
# The benchmark's workloads (experiments/benchmark/) and the family each is recorded under.
WORKLOADS = {"student": (MLP(hidden=(32, 32)), MNIST, "mlp"),
             "teacher": (MLP(hidden=(1200, 1200), dropout=0.5), MNIST, "wide_mlp"),
             "cnn": (StridedCNN(), CIFAR, "conv")}


class ResidualCNN(nn.Module):
    """A small residual CNN of one's own: two blocks with skip connections, global pooling."""

    width: int = 16

    @nn.compact
    def __call__(self, x, *, train: bool = False):
        h = nn.Conv(self.width, (3, 3))(x)
        for _ in range(2):
            skip = h
            h = nn.relu(nn.Conv(self.width, (3, 3))(h))
            h = nn.Dropout(0.1, deterministic=not train)(h)
            h = nn.relu(nn.Conv(self.width, (3, 3))(h) + skip)
        features = h.mean(axis=(1, 2))
        return nn.Dense(10)(features), features


def train_step_of(model, images):
    """A node's train step on pytrees and a PRNG key, as research code writes one; and its example arguments."""
    optimizer = optax.adam(1e-3)
    params = jax.eval_shape(model.init, jax.random.PRNGKey(0), images)["params"]  # shapes: nothing runs
    labels = jnp.zeros((images.shape[0],), jnp.int32)

    def train(state, images, labels, key):
        params, opt_state = state

        def loss_fn(params):
            logits, _ = model.apply({"params": params}, images, train=True, rngs={"dropout": key})
            return optax.softmax_cross_entropy_with_integer_labels(logits, labels).mean()

        loss, grads = jax.value_and_grad(loss_fn)(params)
        updates, opt_state = optimizer.update(grads, opt_state, params)
        return (optax.apply_updates(params, updates), opt_state), loss

    return train, ((params, jax.eval_shape(optimizer.init, params)), images, labels, jax.random.PRNGKey(1))


@pytest.mark.parametrize("model,images,family", [
    (StridedCNN(widths=(8, 16)), CIFAR, "conv"),
    (ResidualCNN(), CIFAR, "conv"),
    (MLP(hidden=(1024,)), MNIST, "wide_mlp"),
    (MLP(hidden=(100,)), MNIST, "mlp"),
    (MLP(hidden=(100, 600), dropout=0.5), MNIST, "wide_mlp"),
    (MLP(hidden=(511,), num_classes=10), CIFAR, "mlp"),  # 3,072 inputs: only output features count
])
def test_family_of_what_the_model_computes(model, images, family):
    assert speed.model_family(model, images) == family
    train, args = train_step_of(model, images)
    assert speed.family_of(train, *args) == family  # the backward pass's matmuls do not count
    assert speed.family_of(jax.jit(train), *args) == family


def test_family_of_a_train_step_on_concrete_pytrees_and_a_key():
    train, args = train_step_of(MLP(hidden=(16,)), MNIST)
    concrete = jax.tree_util.tree_map(lambda x: jnp.zeros(x.shape, x.dtype), args)
    concrete = (*concrete[:-1], jax.random.PRNGKey(1))
    assert speed.family_of(train, *concrete) == "mlp"
    typed_key = (*concrete[:-1], jax.random.key(1))  # new-style typed keys too
    assert speed.family_of(train, *typed_key) == "mlp"


def test_family_of_looks_inside_sub_jaxprs():
    kernel = jnp.zeros((3, 3, 3, 4))
    conv = lambda x: jax.lax.conv_general_dilated(x, kernel, (1, 1), "SAME", dimension_numbers=("NHWC", "HWIO", "NHWC"))
    wide = lambda x: x.reshape(x.shape[0], -1) @ jnp.zeros((3072, 512))
    for inner, family in ((conv, "conv"), (wide, "wide_mlp")):
        in_scan = lambda x, f=inner: jax.lax.scan(lambda c, _: (c, f(x)), 0.0, None, length=2)[1]
        in_cond = lambda x, f=inner: jax.lax.cond(x.sum() > 0, f, lambda x, f=f: jnp.zeros_like(f(x)), x)
        with_vjp = jax.custom_vjp(inner)
        with_vjp.defvjp(lambda x, f=inner: (f(x), None), lambda _, g: (jnp.zeros_like(CIFAR),))
        with_jvp = jax.custom_jvp(inner)
        with_jvp.defjvp(lambda primals, tangents, f=inner: (f(*primals), f(*tangents)))
        for fn in (inner, jax.jit(inner), in_scan, in_cond, with_vjp, with_jvp, jax.checkpoint(inner)):
            assert speed.family_of(fn, CIFAR) == family
        assert speed.family_of(jax.vmap(inner), CIFAR[None]) == family  # a lifted population too
        assert speed.family_of(jax.grad(lambda x, f=inner: f(x).sum()), CIFAR) == family
    assert speed.family_of(lambda x: x @ jnp.zeros((8, 511)), jnp.zeros((2, 8))) == "mlp"
    assert speed.family_of(lambda x: jnp.tanh(x), jnp.zeros((2, 8))) == "mlp"


def test_the_benchmark_workloads_families():
    for model, images, family in WORKLOADS.values():
        assert speed.model_family(model, images) == family
    assert set(speed.FAMILIES) == {family for _, _, family in WORKLOADS.values()}
    recorded = json.loads((ROOT / "jaxcomm" / "assets" / "backends.json").read_text())
    for platform in recorded.values():
        assert set(platform) <= set(speed.FAMILIES)


def fake_summary():
    def row(workload, n, **speeds):  # speeds: backend_loop=value
        return {"workload": workload, "num_nodes": n, "batch_size": 32,
                **{f"{pair}_node_steps_per_s": v for pair, v in speeds.items()}}

    return {"rows": {
        "student_n8": row("student", 8, sharded_scan=90.0, vmap_scan=30.0, vmap_dispatch=8.0, unrolled_scan=10.0,
                          map_scan=20.0),
        "student_n256": row("student", 256, vmap_scan=5.0, map_scan=9.0),
        "teacher_n8": row("teacher", 8, vmap_scan=5.0, vmap_dispatch=6.0, unrolled_dispatch=7.0),
        "cnn_n4": row("cnn", 4, vmap_dispatch=1.0, unrolled_dispatch=5.0, sharded_dispatch=2.0),
        "broken": {"error": "boom"},
    }}


FAMILY = {workload: family for workload, (_, _, family) in WORKLOADS.items()}


def test_choices_round_trip_and_nearest_row(tmp_path, monkeypatch):
    monkeypatch.setattr(speed, "_CHOICES_FILE", tmp_path / "backends.json")
    speed.write_backend_choices(fake_summary(), platform="cpu", families=FAMILY)
    written = json.loads((tmp_path / "backends.json").read_text())
    assert list(written["cpu"]) == ["mlp", "wide_mlp", "conv"]
    assert written["cpu"]["conv"] == [{"num_nodes": 4, "batch_size": 32, "ranking": [
        ["unrolled", "dispatch"], ["sharded", "dispatch"], ["vmap", "dispatch"]],
        "node_steps_per_s": {"vmap/dispatch": 1.0, "unrolled/dispatch": 5.0, "sharded/dispatch": 2.0}}]
    # the speeds predict a pair from pairs timed here: the nearest row measuring both, the least estimate
    shipped = speed.shipped_speeds("mlp", 8, platform="cpu")
    assert shipped[0][("vmap", "scan")] == 30.0 and shipped[1][("map", "scan")] == 9.0  # nearest row first
    assert speed.shipped_estimate(shipped, ("vmap", "dispatch"), {("vmap", "scan"): 0.1}) == pytest.approx(0.375)
    assert speed.shipped_estimate(shipped, ("vmap", "dispatch"), {("vmap", "scan"): 0.1, ("map", "scan"): 0.01}
                                  ) == pytest.approx(0.025)
    assert speed.shipped_estimate(shipped, ("map", "dispatch"), {("vmap", "scan"): 0.1}) is None  # never measured
    choose = lambda family, n, **kw: speed.choose(family, n, platform="cpu", **kw)
    assert choose("mlp", 8) == ("vmap", "scan")  # sharded inside a scan, though measured fastest, is skipped
    assert choose("mlp", 4) == ("vmap", "scan")  # nearest measured: 8
    assert choose("mlp", 1024) == ("map", "scan")  # nearest measured: 256
    assert choose("wide_mlp", 8) == ("unrolled", "dispatch")
    assert choose("conv", 10) == ("unrolled", "dispatch")
    # A fixed half of the pair is honoured: the fastest pair consistent with it.
    assert choose("wide_mlp", 8, backend="vmap") == ("vmap", "dispatch")
    assert choose("mlp", 8, step_loop="dispatch") == ("vmap", "dispatch")
    # sharded goes with one call per step unless a scan is asked for (in a scan it collapsed on one GPU)
    assert choose("mlp", 8, backend="sharded") == ("sharded", "dispatch")  # unmeasured: the rule of thumb
    assert choose("mlp", 8, backend="sharded", step_loop="scan") == ("sharded", "scan")
    # Past the unroll limit the next-ranked pair is used, unless unrolling was asked for.
    assert choose("conv", 2 * speed.UNROLL_LIMIT) == ("sharded", "dispatch")
    assert choose("conv", 2 * speed.UNROLL_LIMIT, backend="unrolled") == ("unrolled", "dispatch")
    # Other platforms keep their entries; unmeasured ones use the rule of thumb.
    speed.write_backend_choices({"rows": {}}, platform="gpu")
    assert json.loads((tmp_path / "backends.json").read_text())["cpu"] == written["cpu"]
    assert speed.choose("conv", 10, platform="tpu") == ("vmap", "scan")
    # Without a mapping the workload names are the families.
    speed.write_backend_choices(fake_summary(), platform="cpu")
    assert set(json.loads((tmp_path / "backends.json").read_text())["cpu"]) == {"mlp", "wide_mlp", "conv", "student",
                                                                                 "teacher", "cnn"}
    # A run of some rows (--only, or interrupted) replaces those rows and keeps the others.
    one = fake_summary()
    one["rows"] = {"cnn_n4": {**one["rows"]["cnn_n4"], "num_nodes": 8}}
    speed.write_backend_choices(one, platform="cpu", families=FAMILY)
    conv = json.loads((tmp_path / "backends.json").read_text())["cpu"]["conv"]
    assert [(row["num_nodes"], row["batch_size"]) for row in conv] == [(4, 32), (8, 32)]
    one["rows"]["cnn_n4"]["vmap_dispatch_node_steps_per_s"] = 9.0  # measured again: replaced
    speed.write_backend_choices(one, platform="cpu", families=FAMILY)
    conv = json.loads((tmp_path / "backends.json").read_text())["cpu"]["conv"]
    assert len(conv) == 2 and conv[1]["ranking"][0] == ["vmap", "dispatch"]
    assert json.loads((tmp_path / "backends.json").read_text())["cpu"]["mlp"] == written["cpu"]["mlp"]


def test_rule_of_thumb_without_measurements(tmp_path, monkeypatch):
    monkeypatch.setattr(speed, "_CHOICES_FILE", tmp_path / "missing.json")
    assert speed.choose("conv", 10, platform="cpu") == ("unrolled", "dispatch")
    assert speed.choose("conv", 1000, platform="cpu") == ("loop", "eager")  # one node compiled, whatever N
    assert speed.choose("mlp", 64, platform="cpu", backend="loop") == ("loop", "eager")
    assert speed.choose("mlp", 64, platform="cpu", step_loop="eager") == ("loop", "eager")
    assert speed.choose("mlp", 64, platform="cpu") == ("vmap", "scan")
    assert speed.choose("wide_mlp", 8, platform="cpu") == ("vmap", "scan")
    assert speed.choose("conv", 10, platform="gpu") == ("vmap", "scan")
    # a fixed half gets the other half that goes with it: never "eager" for a lift that would run op by op
    assert speed.choose("conv", 1000, platform="cpu", backend="vmap") == ("vmap", "dispatch")
    assert speed.choose("conv", 10, platform="cpu", backend="sharded") == ("sharded", "dispatch")
    assert speed.choose("conv", 10, platform="cpu", step_loop="scan") == ("unrolled", "scan")
    assert speed.choose("mlp", 64, platform="cpu", backend="map") == ("map", "scan")


def test_network_resolves_auto_and_honours_overrides():
    make = lambda **kw: network.make_network(network.NetworkConfig(num_nodes=4, **kw), MLP(hidden=(8,), num_classes=4),
                                             image_shape=(8, 8, 1), num_classes=4)
    auto = make()
    assert (auto.backend, auto.step_loop) == speed.choose("mlp", 4)
    forced = make(backend="map", step_loop="dispatch")
    assert forced.backend == "map" and forced.step_loop == "dispatch"
    with pytest.raises(ValueError, match="step_loop must be one of"):
        network.NetworkConfig(step_loop="python")


def test_candidates_follow_the_fixed_half_the_unroll_limit_and_the_devices():
    assert speed.candidates(4, devices=1) == [("vmap", "scan"), ("vmap", "dispatch"), ("unrolled", "scan"),
                                              ("unrolled", "dispatch"), ("map", "scan"), ("map", "dispatch"),
                                              ("loop", "eager")]
    # "loop" runs as itself only eagerly (jitted it is "unrolled"), and "eager" only pays off with "loop"
    assert speed.candidates(4, backend="loop", devices=1) == [("loop", "eager")]
    assert speed.candidates(4, step_loop="eager", devices=1) == [("loop", "eager")]
    assert speed.candidates(4, backend="loop", step_loop="scan", devices=1) == [("loop", "scan")]
    assert ("loop", "eager") in speed.candidates(2 * speed.UNROLL_LIMIT, devices=1)
    assert speed.candidates(4, backend="map", devices=1) == [("map", "scan"), ("map", "dispatch")]
    assert ("unrolled", "scan") not in speed.candidates(2 * speed.UNROLL_LIMIT, devices=1)
    # sharded: several devices dividing N, one call per step unless a scan is asked for
    assert ("sharded", "dispatch") in speed.candidates(16, devices=8)
    assert ("sharded", "scan") not in speed.candidates(16, devices=8)
    assert ("sharded", "dispatch") not in speed.candidates(12, devices=8)
    assert speed.candidates(16, backend="sharded", step_loop="scan", devices=1) == [("sharded", "scan")]


def test_auto_times_every_candidate_once_and_caches_the_fastest(tmp_path, monkeypatch):
    monkeypatch.setenv(speed.AUTOTUNE_ENV, "1")
    monkeypatch.setenv(speed.CACHE_ENV, str(tmp_path))
    monkeypatch.setattr(speed, "shipped_speeds", lambda *args, **kwargs: [])  # no speeds to rule a pair out untimed
    calls = []

    def seconds(backend, step_loop, limit=np.inf):
        calls.append((backend, step_loop))
        if backend == "unrolled":
            raise RuntimeError("this model cannot unroll")  # a failing candidate is skipped
        return {("map", "dispatch"): 1.0}.get((backend, step_loop), 2.0)

    timer = speed.Timer("a model", seconds)
    assert speed.choose("mlp", 4, timer=timer) == ("map", "dispatch")
    assert sorted(calls) == sorted(speed.candidates(4))
    cached = json.loads((tmp_path / "choices.json").read_text())["a model"]
    assert cached["seconds_per_step"]["map/dispatch"] == 1.0 and cached["seconds_per_step"]["vmap/scan"] == 2.0
    assert cached["failed"] == ["unrolled/dispatch", "unrolled/scan"]
    calls.clear()
    assert speed.choose("mlp", 4, timer=timer) == ("map", "dispatch") and calls == []  # cached: no timing
    # a fixed half narrows the candidates to pairs already measured; the fully automatic choice is unchanged
    assert speed.choose("mlp", 4, timer=timer, backend="vmap") == ("vmap", "scan")
    assert speed.choose("mlp", 4, timer=timer, backend="vmap", step_loop="dispatch") == ("vmap", "dispatch")
    assert speed.choose("mlp", 4, timer=timer) == ("map", "dispatch") and calls == []
    # both unrolled pairs failed: the shipped table decides (no timing again)
    assert speed.choose("mlp", 4, timer=timer, backend="unrolled") == speed.choose("mlp", 4, backend="unrolled")
    assert calls == []
    # asked not to measure: the shipped table / rule of thumb, no timing
    monkeypatch.setenv(speed.AUTOTUNE_ENV, "0")
    calls.clear()
    assert speed.choose("mlp", 4, timer=timer, platform="cpu") == speed.choose("mlp", 4, platform="cpu")
    assert calls == []



CONV_TABLE = {"cpu": {"conv": [{"num_nodes": 8, "batch_size": 32,
                                 "ranking": [["loop", "eager"], ["unrolled", "dispatch"], ["vmap", "dispatch"]],
                                 "node_steps_per_s": {"loop/eager": 10.0, "unrolled/dispatch": 9.0,
                                                      "vmap/dispatch": 2.0}}]}}


def test_a_cold_choice_times_the_likely_best_first_rules_out_slow_pairs_and_stops_at_its_budget(tmp_path,
                                                                                                 monkeypatch):
    monkeypatch.setenv(speed.AUTOTUNE_ENV, "1")
    monkeypatch.setenv(speed.CACHE_ENV, str(tmp_path))
    monkeypatch.setattr(speed, "_CHOICES_FILE", tmp_path / "backends.json")
    (tmp_path / "backends.json").write_text(json.dumps(CONV_TABLE))
    clock, calls, lines = [0.0], [], []
    monkeypatch.setattr(speed.time, "perf_counter", lambda: clock[0])
    fast = {("loop", "eager"): 0.1, ("map", "dispatch"): 0.12}

    def seconds(backend, step_loop, limit=np.inf):
        calls.append(((backend, step_loop), limit))
        clock[0] += 4.0  # compiling and timing a pair: 4 s of the budget
        return fast.get((backend, step_loop), 1.0)

    choose = lambda steps, report=None: speed.choose(  # noqa: E731
        "conv", 8, timer=speed.Timer("a cnn", seconds, 8), platform="cpu", planned_steps=steps, report=report)
    assert choose(100, lines.append) == ("loop", "eager")
    assert calls[0] == (("loop", "eager"), np.inf)  # the table's likely best first, with nothing to beat yet
    assert all(limit == pytest.approx(1.5 * 0.1) for _, limit in calls[1:])  # slower than 0.15 s: one call
    # 15 s of budget (a tenth of 100 steps at 0.1 s is 1 s): unrolled/dispatch (8 copies of a 4 s pair) is left for
    # later; vmap/dispatch, 5x slower than the loop in the table, is ruled out untimed, and so is the scan of a
    # backend whose dispatched step was ruled out (patches); CPU convolutions scan only as patches
    assert [pair for pair, _ in calls] == [("loop", "eager"), ("patches", "dispatch"), ("map", "dispatch")]
    entry = json.loads((tmp_path / "choices.json").read_text())["a cnn"]
    assert set(entry["ruled_out"]) == {"vmap/dispatch", "patches/dispatch", "patches/scan"}
    assert entry["timing_seconds"] == {"loop/eager": 4.0, "patches/dispatch": 4.0, "map/dispatch": 4.0}
    assert lines == ["loop/eager (3 of 6 pairs timed, 3 ruled out (2 untimed), 1 left for later, chosen in 12.0 s)"]
    # a later choice predicts from the costs kept: the pair left stays left under the same budget, pairs measured
    # or ruled out are not timed again, and a run planned long enough times it
    calls.clear()
    choose(100)
    assert calls == []
    choose(10_000)
    assert [pair for pair, _ in calls] == [("unrolled", "dispatch")]


def settling_choice(tmp_path, monkeypatch, timings):
    """``choose(planned_steps)`` of one pair of the "map" backend for a fake model whose pairs take ``timings``
    (pair: its successive timings, seconds a step), each timing 20 s on a fake clock: a run planned for no steps
    (15 s of budget) times map/dispatch and leaves map/scan for later, one planned for 10,000 steps times it.
    Returns the choice, the pairs timed and the report's lines."""
    monkeypatch.setenv(speed.AUTOTUNE_ENV, "1")
    monkeypatch.setenv(speed.CACHE_ENV, str(tmp_path))
    monkeypatch.setattr(speed, "shipped_speeds", lambda *args, **kwargs: [])
    monkeypatch.setattr(speed, "ranking", lambda *args, **kwargs: [])
    clock, calls, lines = [0.0], [], []
    monkeypatch.setattr(speed.time, "perf_counter", lambda: clock[0])

    def seconds(backend, step_loop, limit=np.inf):
        calls.append((backend, step_loop))
        clock[0] += 20.0
        return timings[(backend, step_loop)].pop(0)

    timer = speed.Timer("a model", seconds)
    choose = lambda steps=0: speed.choose("mlp", 4, timer=timer, backend="map", planned_steps=steps,  # noqa: E731
                                          report=lines.append)
    return choose, calls, lines


DISPATCH, SCAN = ("map", "dispatch"), ("map", "scan")
AMONG = "map/dispatch,map/scan"


def cached_entry(tmp_path):
    return json.loads((tmp_path / "choices.json").read_text())["a model"]


def test_a_kept_choice_survives_a_pair_5_percent_faster_without_timing_either_again(tmp_path, monkeypatch):
    choose, calls, _ = settling_choice(tmp_path, monkeypatch, {DISPATCH: [1.0], SCAN: [0.95]})
    assert choose() == DISPATCH and calls == [DISPATCH]  # map/scan left for later
    assert cached_entry(tmp_path)["chosen"] == {AMONG: "map/dispatch"}
    calls.clear()
    assert choose(10_000) == DISPATCH and calls == [SCAN]  # timed at last: 5 % faster is not clearly faster
    entry = cached_entry(tmp_path)
    assert entry["seconds_per_step"] == {"map/dispatch": 1.0, "map/scan": 0.95}
    assert entry["chosen"] == {AMONG: "map/dispatch"} and entry["history"] == []
    calls.clear()
    assert choose(10_000) == DISPATCH and calls == []  # settled: nothing timed again
    assert speed.clearly_faster(0.9, 1.0) and not speed.clearly_faster(0.91, 1.0)
    assert speed.clearly_faster(1.0, np.inf) and not speed.clearly_faster(np.inf, 1.0)


def test_a_pair_20_percent_faster_once_but_not_twice_does_not_replace_the_kept_choice(tmp_path, monkeypatch):
    choose, calls, lines = settling_choice(tmp_path, monkeypatch, {DISPATCH: [1.0, 1.0], SCAN: [0.8, 0.98]})
    assert choose() == DISPATCH
    calls.clear()
    assert choose(10_000) == DISPATCH
    assert calls == [SCAN, DISPATCH, SCAN]  # its first timing, then the kept choice and the challenger again
    entry = cached_entry(tmp_path)
    (record,) = entry["history"]
    assert record["outcome"] == "kept" and record["choice"] == "map/dispatch" and record["challenger"] == "map/scan"
    assert record["seconds_per_step"] == {"map/dispatch": [1.0, 1.0], "map/scan": [0.8, 0.98]}
    assert record["margin"] == speed.SWITCH_MARGIN and record["among"] == AMONG and record["date"]
    assert entry["seconds_per_step"] == {"map/dispatch": 1.0, "map/scan": 0.98}  # the second timings
    assert entry["chosen"] == {AMONG: "map/dispatch"}
    assert "map/scan (0.8, 0.98 s a step) did not replace map/dispatch (1, 1 s)" in lines[-1]
    calls.clear()
    assert choose(10_000) == DISPATCH and calls == []  # no longer clearly faster: not timed again


def test_a_pair_20_percent_faster_in_two_timings_replaces_the_kept_choice_and_the_cache_says_why(tmp_path,
                                                                                              monkeypatch):
    choose, calls, lines = settling_choice(tmp_path, monkeypatch, {DISPATCH: [1.0, 1.0], SCAN: [0.8, 0.8]})
    assert choose() == DISPATCH
    cache = json.loads((tmp_path / "choices.json").read_text())
    old = [{"outcome": "kept", "n": i} for i in range(speed.HISTORY_LENGTH)]  # a full history: the oldest goes
    cache["a model"]["history"] = old
    (tmp_path / "choices.json").write_text(json.dumps(cache))
    calls.clear()
    assert choose(10_000) == SCAN and calls == [SCAN, DISPATCH, SCAN]
    entry = cached_entry(tmp_path)
    assert entry["chosen"] == {AMONG: "map/scan"}
    assert len(entry["history"]) == speed.HISTORY_LENGTH and entry["history"][:-1] == old[1:]
    record = entry["history"][-1]
    assert {k: record[k] for k in ("choice", "challenger", "outcome", "margin", "among")} == {
        "choice": "map/dispatch", "challenger": "map/scan", "outcome": "replaced", "margin": 0.1, "among": AMONG}
    assert record["seconds_per_step"] == {"map/dispatch": [1.0, 1.0], "map/scan": [0.8, 0.8]}
    assert len(record["date"]) == len("2024-01-01 00:00:00")
    assert "map/scan (0.8, 0.8 s a step) replaced map/dispatch (1, 1 s)" in lines[-1]
    calls.clear()
    assert choose(10_000) == SCAN and calls == []  # the new choice is kept in turn


def test_a_cold_choice_is_still_the_fastest_pair_timed_however_close(tmp_path, monkeypatch):
    choose, calls, lines = settling_choice(tmp_path, monkeypatch, {DISPATCH: [1.0], SCAN: [0.97]})
    assert choose(10_000) == SCAN and calls == [DISPATCH, SCAN]  # both timed in one run: no margin, no re-timing
    entry = cached_entry(tmp_path)
    assert entry["chosen"] == {AMONG: "map/scan"} and entry["history"] == []
    assert lines == ["map/scan (2 of 2 pairs timed, 0 ruled out (0 untimed), 0 left for later, chosen in 40.0 s)"]


def test_a_pair_timed_under_a_fixed_half_challenges_the_choice_kept_among_more(tmp_path, monkeypatch):
    """A choice is kept per set of candidates: a pair timed for a narrower set (a fixed half) weighs against the
    fully automatic choice when that is next made, and must be clearly faster twice there too."""
    monkeypatch.setenv(speed.AUTOTUNE_ENV, "1")
    monkeypatch.setenv(speed.CACHE_ENV, str(tmp_path))
    monkeypatch.setattr(speed, "shipped_speeds", lambda *args, **kwargs: [])
    pairs = speed.candidates(4, family="mlp")
    timings = {pair: [1.0, 1.0] for pair in pairs}
    cache = {"a model": {"seconds_per_step": {speed._name(p): 1.0 for p in pairs if p != SCAN},
                         "chosen": {",".join(sorted(speed._name(p) for p in pairs)): "vmap/scan"}}}
    (tmp_path / "choices.json").write_text(json.dumps(cache))  # map/scan never timed for the automatic choice
    timings[SCAN] = [0.5, 0.5, 0.5]
    calls = []

    def seconds(backend, step_loop, limit=np.inf):
        calls.append((backend, step_loop))
        return timings[(backend, step_loop)].pop(0)

    timer = speed.Timer("a model", seconds)
    # among the "map" pairs, the fastest cached one (map/dispatch) is the kept choice: map/scan must beat it twice
    assert speed.choose("mlp", 4, timer=timer, backend="map") == SCAN and calls == [SCAN, DISPATCH, SCAN]
    calls.clear()
    assert speed.choose("mlp", 4, timer=timer) == SCAN and calls == [("vmap", "scan"), SCAN]
    entry = cached_entry(tmp_path)
    assert [(r["among"], r["choice"], r["outcome"]) for r in entry["history"]] == [
        (AMONG, "map/dispatch", "replaced"), (",".join(sorted(speed._name(p) for p in pairs)), "vmap/scan", "replaced")]
    assert set(entry["chosen"].values()) == {"map/scan"} and len(entry["chosen"]) == 2


def test_a_cold_choice_does_not_start_an_unrolled_population_it_cannot_afford(tmp_path, monkeypatch):
    """An unrolled program holds N copies of the step: predicted N times the first pair's cost, it is left for a
    later (or longer-planned) choice when that would overrun the budget, and timed when the budget allows."""
    monkeypatch.setenv(speed.AUTOTUNE_ENV, "1")
    monkeypatch.setattr(speed, "shipped_speeds", lambda *args, **kwargs: [])
    # the shipped ranking (a benchmark run's, which changes) starts with the eager loop here
    monkeypatch.setattr(speed, "ranking", lambda *args, **kwargs: [("loop", "eager")])
    clock, calls = [0.0], []
    monkeypatch.setattr(speed.time, "perf_counter", lambda: clock[0])

    def seconds(backend, step_loop, limit=np.inf):
        calls.append((backend, step_loop))
        clock[0] += 4.0
        return 0.1 if (backend, step_loop) == ("loop", "eager") else 1.0

    monkeypatch.setenv(speed.CACHE_ENV, str(tmp_path / "short"))
    speed.choose("conv", 8, timer=speed.Timer("a cnn", seconds, 8), platform="cpu", planned_steps=100)
    assert calls[0] == ("loop", "eager") and not any(b == "unrolled" for b, _ in calls)  # 8 x 4 s > 15 s
    assert len(calls) == 3  # loop/eager and two more: 12 s; a 4th would end at 16 s
    assert speed.predicted_cost(("unrolled", "scan"), {("loop", "eager"): 4.0}, 8) == 32.0
    assert speed.predicted_cost(("unrolled", "scan"), {("unrolled", "dispatch"): 9.0, ("loop", "eager"): 4.0}, 8) == 9.0
    assert speed.predicted_cost(("vmap", "dispatch"), {}, 8) == 0.0
    assert speed.predicted_cost(("map", "scan"), {("loop", "eager"): 4.0, ("vmap", "dispatch"): 20.0}, 8) == 20.0
    # a scan's calls run several steps: two of at least 2 steps (or MIN_TIMED_SECONDS) beyond its dispatch's cost
    assert speed.predicted_cost(("patches", "scan"), {("patches", "dispatch"): 4.7}, 8, 1.3) == pytest.approx(9.9)
    assert speed.predicted_cost(("patches", "scan"), {("patches", "dispatch"): 4.7}, 8, 0.01) == pytest.approx(5.1)
    calls.clear()
    monkeypatch.setenv(speed.CACHE_ENV, str(tmp_path / "long"))  # a run planned 100x longer: 100 s of budget
    speed.choose("conv", 8, timer=speed.Timer("a cnn", seconds, 8), platform="cpu", planned_steps=10_000)
    assert ("unrolled", "dispatch") in calls


def test_cpu_convolutions_scan_only_as_patches_unless_asked():
    pairs = speed.candidates(8, devices=1, family="conv", platform="cpu")
    assert [pair for pair in pairs if pair[1] == "scan"] == [("patches", "scan")]
    assert ("vmap", "scan") in speed.candidates(8, devices=1, family="conv", platform="gpu")
    assert speed.candidates(8, devices=1, family="conv", platform="cpu", step_loop="scan") == [
        ("vmap", "scan"), ("patches", "scan"), ("unrolled", "scan"), ("map", "scan")]


@pytest.mark.parametrize("backend,step_loop", [("unrolled", "dispatch"), ("unrolled", "scan"), ("vmap", "dispatch"),
                                               ("vmap", "scan"), ("loop", "eager")])
def test_the_timer_divides_by_the_steps_it_ran(monkeypatch, backend, step_loop):
    """A fake clock that every node-step advances by 1 ms: the timer reports 1 ms per step for N = 1 (fast steps
    are timed again in longer calls; a dispatched run once took 3 steps and was divided by 64)."""
    clock = [0.0]
    monkeypatch.setattr(speed.time, "perf_counter", lambda: clock[0])

    def tick():
        clock[0] += 1e-3

    def train(state, x):
        jax.debug.callback(tick)
        return {"w": state["w"] + x.sum()}, None

    timer = speed.step_timer(train, lambda key: {"w": jnp.zeros(())}, 1, [jax.ShapeDtypeStruct((2,), jnp.float32)])
    assert timer.seconds_per_step(backend, step_loop) == pytest.approx(1e-3)


@pytest.mark.parametrize("step_loop", ["dispatch", "scan"])
def test_the_first_pair_timed_is_not_read_from_its_cold_first_call(monkeypatch, step_loop):
    """A fake clock: a step takes 0.3 s (one call is long enough to time), the first run of a program 0.3 s more
    (memory faulted in afresh). With nothing timed before it, the pair is timed again, warm; a later pair far from
    the best so far (``limit``) keeps its one call."""
    clock, calls = [0.0], []
    monkeypatch.setattr(speed.time, "perf_counter", lambda: clock[0])

    def tick():
        clock[0] += 0.3 + (0.3 if not calls else 0.0)
        calls.append(1)

    def train(state, x):
        jax.debug.callback(tick)
        return {"w": state["w"] + x.sum()}, None

    timer = speed.step_timer(train, lambda key: {"w": jnp.zeros(())}, 1, [jax.ShapeDtypeStruct((2,), jnp.float32)],
                             steps=1)
    assert timer.seconds_per_step("vmap", step_loop) == pytest.approx(0.3)
    calls.clear()
    assert timer.seconds_per_step("vmap", step_loop, limit=0.01) == pytest.approx(0.6)  # ruled out on one call


def test_a_network_measures_its_own_model_where_it_runs(tmp_path, monkeypatch):
    monkeypatch.setenv(speed.AUTOTUNE_ENV, "1")
    monkeypatch.setenv(speed.CACHE_ENV, str(tmp_path))
    make = lambda model, **kw: network.make_network(  # noqa: E731
        network.NetworkConfig(num_nodes=3, batch_size=4, **kw), model, image_shape=(8, 8, 1), num_classes=4)
    net = make(MLP(hidden=(8,), num_classes=4))
    cache = json.loads((tmp_path / "choices.json").read_text())
    (key, entry), = cache.items()
    assert key.startswith("cpu|") and key.endswith(f"|N=3|timer {speed.TIMER_VERSION}")
    seconds = entry["seconds_per_step"]  # the pairs timed (or ruled out) within the budget; the others later
    assert seconds and set(seconds) <= {f"{b}/{s}" for b, s in speed.candidates(3)}
    assert f"{net.backend}/{net.step_loop}" == min(seconds, key=seconds.get)
    assert all(t > 0 for t in entry["seconds_per_step"].values())
    # the same model at another learning rate is the same model; another width is another
    make(MLP(hidden=(8,), num_classes=4), learning_rate=0.1)
    assert len(json.loads((tmp_path / "choices.json").read_text())) == 1
    make(MLP(hidden=(16,), num_classes=4))
    assert len(json.loads((tmp_path / "choices.json").read_text())) == 2
    # a fixed pair is not timed
    make(MLP(hidden=(24,), num_classes=4), backend="vmap", step_loop="scan")
    assert len(json.loads((tmp_path / "choices.json").read_text())) == 2


BENCHMARK = ROOT / "results" / "benchmark" / "summary.json"
GPU_BENCHMARKS = (ROOT / "results" / "benchmark" / "gpu_h100" / "summary.json",
                  ROOT / "results" / "benchmark" / "gpu_h100" / "cnn_n10" / "summary.json")


@pytest.mark.skipif(not BENCHMARK.is_file(), reason="no committed benchmark results")
@pytest.mark.parametrize("platform", ["cpu", "gpu"])
def test_auto_picks_the_measured_best_backend_of_every_benchmark_row(platform):
    """The shipped table (backends.json) ranks each committed row's pairs as that row measured them."""
    files = (BENCHMARK,) if platform == "cpu" else GPU_BENCHMARKS
    for summary in (json.loads(f.read_text()) for f in files):
        for name, row in summary["rows"].items():
            if "error" in row:
                continue
            chosen = speed.choose(FAMILY[row["workload"]], row["num_nodes"], batch_size=row["batch_size"],
                                  platform=platform)
            assert chosen == (row["best_backend"], row["best_step_loop"]), name


def test_the_benchmark_exits_non_zero_when_a_row_fails(tmp_path):
    """A row that times out is marked failed in the table, and the script says so by its exit status."""
    import subprocess
    import sys

    proc = subprocess.run([sys.executable, "-m", "experiments.benchmark", "--only", "student_n1",
                           "--timeout", "1", "--out", str(tmp_path)], capture_output=True, text=True, cwd=ROOT)
    assert proc.returncode == 1, proc.stderr
    assert "FAILED rows: student_n1" in proc.stderr
    assert "| student_n1 | failed |" in (tmp_path / "table.md").read_text()


def test_deterministic_sets_the_xla_flag_in_a_fresh_process_and_refuses_after_the_first_computation():
    import subprocess
    import sys

    code = ("import os; from jaxcomm import speed; speed.deterministic(); speed.deterministic(); "
            "print(os.environ['XLA_FLAGS'].split().count(speed.DETERMINISTIC_FLAG)); "
            "import jax.numpy as jnp; jnp.ones(2).sum().block_until_ready()\n"
            "try:\n    speed.deterministic()\nexcept RuntimeError as e:\n    print('refused')")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT,
                          env={k: v for k, v in __import__("os").environ.items() if k != "XLA_FLAGS"})
    assert proc.stdout.split() == ["1", "refused"], proc.stderr


def test_each_python_environment_keeps_its_own_measured_choices(monkeypatch, tmp_path):
    monkeypatch.delenv(speed.CACHE_ENV, raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    monkeypatch.setattr(speed.sys, "prefix", "/envs/a/.venv")
    first = speed.cache_file()
    monkeypatch.setattr(speed.sys, "prefix", "/envs/b/.venv")
    assert first != speed.cache_file() and first.parent.parent == tmp_path / "jaxcomm"
    package = str(pathlib.Path(speed.__file__).parent)
    assert first.parent.name.startswith(".venv-") and not str(first).startswith(package)
    monkeypatch.setenv(speed.CACHE_ENV, str(tmp_path / "mine"))
    assert speed.cache_file() == tmp_path / "mine" / "choices.json"
