"""Learned Gradient Compression (jaxcomm.lgc): stage one is top-k synchronous SGD, the autoencoder learns, the bytes
per stage, end to end, jit."""

from __future__ import annotations

import dataclasses

import jax
import numpy as np
import pytest

from jaxcomm import compression, data_parallel, kit, ledger, lgc, methods
from jaxcomm.models import MLP

CONFIG = kit.RunConfig(num_nodes=4, batch_size=8, num_steps=8, eval_every=4, backend="vmap", step_loop="scan")
MODEL = MLP(hidden=(8,), num_classes=4)  # P = 8 x 8 x 8 + 8 + 8 x 4 + 4 = 556 on the 8 x 8 x 1 images
METHODS = {"ps": lgc.lgc_parameter_server(0.1, 3, innovation=0.02, width=8, ae_lr=1e-2),
           "ring": lgc.lgc_ring(0.1, 3, width=8, ae_lr=1e-2)}
KINDS = list(METHODS)


@pytest.fixture(scope="module")
def runs(tiny_dataset):
    """Each instance built once and its step jitted once (the hyperparameters are data: no recompilation)."""
    out = {}
    for kind, method in METHODS.items():
        built = methods.build(method, CONFIG, MODEL, tiny_dataset)
        out[kind] = (method, built, jax.jit(built.step))
    return out


def trajectory(run, dataset, steps, **hyper):
    method, built, step = run
    data = methods.shard_data(method, dataset, CONFIG, hyper)
    states = [built.init(jax.random.PRNGKey(CONFIG.seed))]
    for _ in range(steps):
        states.append(step(states[-1], data)[0])
    return states


def assert_equal(a, b):
    jax.tree_util.tree_map(lambda x, y: np.testing.assert_array_equal(np.asarray(x), np.asarray(y)), a, b)


@pytest.mark.parametrize("kind", KINDS)
def test_stage_one_is_top_k_sync_sgd_with_error_feedback_bit_for_bit(runs, tiny_dataset, kind):
    reference = data_parallel.sync_sgd(compression.make("top_k", fraction=0.1, per_layer=False))
    built = methods.build(reference, CONFIG, MODEL, tiny_dataset)
    data, step = methods.shard_data(reference, tiny_dataset, CONFIG), jax.jit(built.step)
    state = built.init(jax.random.PRNGKey(CONFIG.seed))
    states = trajectory(runs[kind], tiny_dataset, 4, warmup=3.0)
    for t in range(1, 4):  # the three steps of stage one
        state = step(state, data)[0]
        assert_equal(states[t].nodes, state.nodes)  # parameters, model and optimiser state
        assert_equal(states[t].extra.memory.residual, state.extra.residual)
    after = step(state, data)[0]  # step 4 is stage two: the code travels, the update is another
    assert not np.array_equal(states[4].nodes.params["Dense_0"]["kernel"], after.nodes.params["Dense_0"]["kernel"])


@pytest.mark.parametrize("kind", KINDS)
def test_the_autoencoders_reconstruction_error_falls_during_stage_one(tiny_dataset, kind):
    # plain gradients (fraction 1: top-k of all P values), whose order the 1-D convolutions can learn from; at
    # fraction 0.1 this 556-parameter model's top-k values, 56 of them, give the ring's autoencoder nothing to learn
    method = {"ps": lgc.lgc_parameter_server(1.0, 100, innovation=0.02, width=8, ae_lr=1e-2),
              "ring": lgc.lgc_ring(1.0, 100, width=8, ae_lr=1e-2)}[kind]
    built = methods.build(method, CONFIG, MODEL, tiny_dataset)
    run = (method, built, jax.jit(built.step))
    states, data = trajectory(run, tiny_dataset, 30), methods.shard_data(method, tiny_dataset, CONFIG)

    def errors(ae):  # of ``ae`` on every step's messages (stage one's update does not read the autoencoder)
        return np.array([float(run[2](s._replace(extra=s.extra._replace(ae=ae)), data)[0].extra.error)
                         for s in states[:-1]])

    before, after = errors(states[0].extra.ae), errors(states[-1].extra.ae)
    assert np.mean(after) < 0.9 * np.mean(before)
    assert np.mean(after < before) >= 0.8  # on nearly every step's messages


def test_the_bytes_of_each_stage_by_hand(runs):
    n, pairs = 4, 4 * 3  # all-gather: N (N - 1) copies of each node's message
    k, k_inn, code = 56, 11, 4 * 4  # round(0.1 x 556); round(0.02 x 556); 4 channels x ceil(56 / 16)
    # the autoencoder of width 8: Conv(kernel 3) weights 3 c_in c_out + c_out biases; 1x1 c_in c_out + c_out
    encoder = (3 * 1 * 8 + 8) + (3 * 8 * 16 + 16) + (3 * 16 * 32 + 32) + (3 * 32 * 8 + 8) + (8 * 4 + 4)
    decoder = (3 * 4 * 4 + 4) + (3 * 4 * 8 + 8) + (3 * 8 * 16 + 16) + (3 * 16 * 4 + 4)
    ae = {"ps": encoder + n * (decoder + 5 + 1), "ring": encoder + decoder + 4 + 1}  # + the 1x1 output layer
    one = {"parameters": pairs * 4 * k, "coordinates": pairs * 4 * k}
    two = {"ps": {"parameters": pairs * 4 * k_inn + 3 * 4 * (code + 1),  # innovations; the leader's code, scale
                  "coordinates": pairs * 4 * k_inn + 3 * 4 * k},  # and coordinates to the 3 others
           "ring": {"parameters": 2 * 3 * 4 * code + 3 * 4, "coordinates": 3 * 4 * k}}  # all-reduce: 2 (N - 1)
    assert one == {"parameters": 2688, "coordinates": 2688}
    assert two == {"ps": {"parameters": 732, "coordinates": 1200}, "ring": {"parameters": 396, "coordinates": 672}}
    for kind in KINDS:
        built = runs[kind][1]
        assert (built.k, built.k_innovation, built.code_floats, built.ae_params) == (
            k, k_inn if kind == "ps" else 0, code, ae[kind])
        booked = {stage: ledger.book(rounds, n, 1)._asdict() for stage, rounds in built.stages.items()}
        for stage, want in (("one", one), ("two", two[kind]), ("switch", {"parameters": 3 * 4 * ae[kind]})):
            assert {kind_: v for kind_, v in booked[stage].items() if v} == pytest.approx(want), (kind, stage)
        # the run's traffic: 3 steps of stage one, 5 of stage two and the switch, exact at its last step
        total = ledger.book(built.traffic, n, CONFIG.num_steps)
        for name in ("parameters", "coordinates"):
            want = 3 * one[name] + 5 * two[kind][name] + (3 * 4 * ae[kind] if name == "parameters" else 0)
            assert getattr(total, name) == pytest.approx(want)
        all_stage_one = ledger.book(dataclasses.replace(built, hyper={"warmup": 100.0}).traffic, n, CONFIG.num_steps)
        assert all_stage_one.total == pytest.approx(8 * (one["parameters"] + one["coordinates"]))


@pytest.mark.parametrize("kind", KINDS)
def test_it_trains_end_to_end(tiny_dataset, kind):
    result = methods.train(METHODS[kind], CONFIG, MODEL, tiny_dataset, progress=False)
    assert result["steps_done"] == 8 and len(result["history"]) == 2
    assert all(np.isfinite(record["loss"]) for record in result["history"])
    assert result["bytes"]["by_kind"]["coordinates"] > 0


@pytest.mark.parametrize("kind", KINDS)
def test_jit_equals_no_jit_over_both_stages(runs, tiny_dataset, kind):
    method, built, step = runs[kind]
    data = methods.shard_data(method, tiny_dataset, CONFIG, {"warmup": 1.0})  # step 0 stage one, step 1 stage two
    state = built.init(jax.random.PRNGKey(CONFIG.seed))
    jitted, eager = step(step(state, data)[0], data)[0], built.step(built.step(state, data)[0], data)[0]
    jax.tree_util.tree_map(lambda x, y: np.testing.assert_allclose(x, y, rtol=1e-5, atol=1e-6), jitted, eager)


@pytest.mark.parametrize("kind", KINDS)
def test_every_evaluation_reads_the_codes_error_and_cosine(tiny_dataset, kind):
    # fraction 1: stage one sends every value, so the nodes apply their mean gradient exactly (cosine 1)
    plain = {"ps": lgc.lgc_parameter_server(1.0, 100, innovation=0.02, width=8),
             "ring": lgc.lgc_ring(1.0, 100, width=8)}[kind]
    history = methods.train(plain, CONFIG, MODEL, tiny_dataset, progress=False)["history"]
    assert [set(r["readings"]) for r in history] == [{"ae_error", "cosine"}] * 2
    np.testing.assert_allclose([r["readings"]["cosine"] for r in history], 1.0, rtol=1e-5)
    result = methods.train(METHODS[kind], CONFIG, MODEL, tiny_dataset, progress=False)  # stage two from step 3
    last = result["state"].extra
    assert result["history"][-1]["readings"] == {"ae_error": float(last.error), "cosine": float(last.cosine)}
    assert -1.0 <= float(last.cosine) < 1.0 - 1e-3 and np.isfinite(float(last.error))


@pytest.mark.parametrize("kind", KINDS)
def test_retraining_every_r_steps_is_stage_one_again_and_booked_so(runs, tiny_dataset, kind):
    # warmup 3, R = 2 over 8 steps: stage one at steps 0, 1, 2, 4 and 6; the autoencoder moves on those only
    states = trajectory(runs[kind], tiny_dataset, 8, warmup=3.0, retrain_every=2.0)
    moved = [not all(np.array_equal(a, b) for a, b in zip(jax.tree.leaves(s.extra.ae), jax.tree.leaves(t.extra.ae),
                                                          strict=True))
             for s, t in zip(states[:-1], states[1:], strict=True)]
    assert moved == [True, True, True, False, True, False, True, False]
    assert lgc.retraining_steps(8, 3, 2) == 2 and lgc.retraining_steps(8, 3, 0) == 0
    built = runs[kind][1]
    one, two, switch = (ledger.book(built.stages[s], 4, 1).total for s in ("one", "two", "switch"))
    again = dataclasses.replace(built, hyper={"warmup": 3.0, "retrain_every": 2.0})
    assert ledger.book(again.traffic, 4, 8).total == pytest.approx(5 * one + 3 * two + 3 * switch)
    assert lgc.lgc_parameter_server(0.01, 100, 50).name == "lgc_ps_1pct_r50"
    with pytest.raises(ValueError, match="retrain_every"):
        lgc.lgc_ring(0.01, 100, -1)
