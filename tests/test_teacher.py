"""The teacher's selection (thesis eqs. 3.2.1, 3.2.2) against hand-computed rankings, and the chapter-3 engine:
the teacher's early stop, the student population == separate runs, bit-identical resume, the counting."""

from __future__ import annotations

import os
import signal

import chex
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxcomm import data, driver, population, teacher
from jaxcomm.checkpoint import Checkpointer

# A stack of n*m = 4 samples over C = 3 classes (rows sum to 1).
P = jnp.asarray([[0.8, 0.1, 0.1],
                 [0.1, 0.8, 0.1],
                 [0.2, 0.2, 0.6],
                 [1.0, 0.0, 0.0]])
Q = jnp.asarray([[0.7, 0.2, 0.1],   # close to P
                 [0.6, 0.2, 0.2],   # confidently wrong on the teacher's class
                 [0.3, 0.4, 0.3],   # unsure
                 [0.5, 0.5, 0.0]])  # half right
LABELS = jnp.asarray([0, 1, 2, 1])  # the last sample: the teacher is wrong too


def hand_cross_entropy():
    p, q = np.asarray(P, np.float64), np.asarray(Q, np.float64)
    return [-sum(p[i, y] * np.log(q[i, y]) for y in range(3) if p[i, y] > 0) for i in range(4)]


def test_cross_entropy_scores_match_hand_values():
    # Row 1: -(0.1 ln 0.6 + 0.8 ln 0.2 + 0.1 ln 0.2) = 1.4996; row 3: -ln 0.5 = 0.6931.
    expected = hand_cross_entropy()
    np.testing.assert_allclose(teacher.cross_entropy(P, Q), expected, rtol=1e-6)
    np.testing.assert_allclose(expected[1], 1.499577, rtol=1e-5)
    np.testing.assert_allclose(expected[3], np.log(2), rtol=1e-6)


def test_euclidean_scores_match_hand_values():
    expected = [np.sqrt(0.01 + 0.01), np.sqrt(0.25 + 0.36 + 0.01), np.sqrt(0.01 + 0.04 + 0.09),
                np.sqrt(0.25 + 0.25)]
    np.testing.assert_allclose(teacher.euclidean(P, Q), expected, rtol=1e-6)


@pytest.mark.parametrize("distance,ranking", [
    # cross-entropy: 1.500 (1) > 1.146 (2) > 0.693 (3) > 0.676 (0)
    ("cross_entropy", [1, 2, 3, 0]),
    # euclidean: 0.787 (1) > 0.707 (3) > 0.374 (2) > 0.141 (0): not the same order as cross-entropy
    ("euclidean", [1, 3, 2, 0]),
])
def test_select_hardest_returns_the_hand_ranking(distance, ranking):
    for m in range(1, 5):
        chosen = teacher.select_hardest(P, Q, m, distance=distance)
        chex.assert_shape(chosen, (m,))
        assert chosen.dtype == jnp.int32
        assert chosen.tolist() == ranking[:m]


def test_learnability_is_student_minus_teacher_loss():
    # -ln Q(y) + ln P(y): [-ln .7 + ln .8, -ln .2 + ln .8, -ln .3 + ln .6, -ln .5 + ln 1e-12]
    expected = [np.log(0.8 / 0.7), np.log(0.8 / 0.2), np.log(0.6 / 0.3), np.log(1e-12 / 0.5)]
    np.testing.assert_allclose(teacher.learnability(P, Q, LABELS), expected, rtol=1e-5)
    # The sample the teacher also gets wrong (3) ranks last, unlike under cross-entropy.
    assert teacher.select_hardest(P, Q, 4, distance="learnability", labels=LABELS).tolist() == [1, 2, 0, 3]


def test_random_selection_is_distinct_and_depends_on_the_key():
    picks = set()
    for seed in range(20):
        chosen = np.asarray(teacher.select_hardest(P, Q, 2, distance="random", key=jax.random.PRNGKey(seed)))
        assert len(set(chosen.tolist())) == 2
        picks.add(tuple(sorted(chosen.tolist())))
    assert len(picks) > 3  # not one fixed answer


def test_never_returns_a_sample_twice_even_with_ties():
    rng = np.random.default_rng(0)
    probs = jnp.asarray(rng.dirichlet(np.ones(10), size=8 * 32), jnp.float32)
    tied = jnp.tile(probs[:32], (8, 1))  # every sample appears 8 times: all scores tie in groups
    for distance in ("cross_entropy", "euclidean"):
        chosen = np.asarray(teacher.select_hardest(tied, tied[::-1], 32, distance=distance))
        assert len(np.unique(chosen)) == 32
    flat = jnp.full((64, 10), 0.1)  # every score equal
    assert len(np.unique(np.asarray(teacher.select_hardest(flat, flat, 32)))) == 32


@pytest.mark.parametrize("distance", teacher.DISTANCES)
def test_masked_padding_is_never_selected(distance):
    # 2 real minibatches of m = 4 padded to 5; padded slots are made the "hardest" of all.
    rng = np.random.default_rng(1)
    m, n_real, n_pad = 4, 2, 5
    p = jnp.asarray(rng.dirichlet(np.ones(3), size=n_pad * m), jnp.float32)
    q = jnp.asarray(rng.dirichlet(np.ones(3), size=n_pad * m), jnp.float32)
    q = q.at[n_real * m:].set(jnp.asarray([1.0, 0.0, 0.0]))  # far from p: high CE and distance
    p = p.at[n_real * m:].set(jnp.asarray([0.0, 0.0, 1.0]))
    labels = jnp.full((n_pad * m,), 2)
    valid = jnp.arange(n_pad * m) < n_real * m
    for seed in range(5):
        chosen = teacher.select_hardest(p, q, m, distance=distance, key=jax.random.PRNGKey(seed), labels=labels,
                                        valid=valid)
        assert (np.asarray(chosen) < n_real * m).all()
        assert len(np.unique(np.asarray(chosen))) == m
    # With only m valid slots, exactly those are returned.
    only = teacher.select_hardest(p, q, m, distance=distance, key=jax.random.PRNGKey(0), labels=labels,
                                  valid=jnp.arange(n_pad * m) < m)
    assert sorted(np.asarray(only).tolist()) == list(range(m))


def test_masked_selection_equals_selection_on_the_unpadded_stack():
    rng = np.random.default_rng(2)
    p = jnp.asarray(rng.dirichlet(np.ones(10), size=160), jnp.float32)
    q = jnp.asarray(rng.dirichlet(np.ones(10), size=160), jnp.float32)
    valid = jnp.arange(160) < 64
    padded = teacher.select_hardest(p, q, 32, valid=valid)
    assert padded.tolist() == teacher.select_hardest(p[:64], q[:64], 32).tolist()


@pytest.mark.parametrize("distance", teacher.DISTANCES)
def test_scores_by_code_equals_the_static_distance_and_jit(distance):
    key = jax.random.PRNGKey(3)
    static = teacher.scores(P, Q, distance=distance, key=key, labels=LABELS)
    code = jnp.asarray(teacher.DISTANCE_CODES[distance])
    np.testing.assert_allclose(jax.jit(teacher.scores_by_code)(code, P, Q, key, LABELS), static, rtol=1e-6)
    jitted = jax.jit(teacher.select_hardest, static_argnums=2, static_argnames="distance")
    assert jitted(P, Q, 2, distance=distance, key=key, labels=LABELS).tolist() == \
        teacher.select_hardest(P, Q, 2, distance=distance, key=key, labels=LABELS).tolist()
    chex.assert_tree_all_finite(static)


def test_zero_student_probability_gives_a_finite_score():
    q = Q.at[1].set(jnp.asarray([1.0, 0.0, 0.0]))
    chex.assert_tree_all_finite(teacher.cross_entropy(P, q))


@pytest.mark.parametrize("kwargs,message", [
    ({"distance": "kl"}, "distance must be one of"),
    ({"distance": "random"}, "needs a PRNG key"),
    ({"distance": "learnability"}, "needs the true labels"),
])
def test_bad_arguments_raise(kwargs, message):
    with pytest.raises(ValueError, match=message):
        teacher.select_hardest(P, Q, 2, **kwargs)


@pytest.mark.parametrize("m", [0, 5])
def test_m_outside_the_stack_raises(m):
    with pytest.raises(ValueError, match=r"m must be in \[1, n\*m = 4\]"):
        teacher.select_hardest(P, Q, m)


def test_mismatched_shapes_raise():
    with pytest.raises(ValueError, match="must both be"):
        teacher.select_hardest(P, Q[:3], 2)


# --------------------------------------------------------------------------- the engine's config


@pytest.mark.parametrize("field,value,message", [
    ("teacher_hidden", (), "teacher_hidden must be a non-empty tuple"),
    ("student_hidden", (32, 0), "student_hidden must be a non-empty tuple"),
    ("teacher_dropout", 1.0, r"teacher_dropout must be a probability in \[0, 1\)"),
    ("teacher_batch_size", 0, "teacher_batch_size must be an integer >= 1"),
    ("teacher_max_epochs", 0, "teacher_max_epochs must be an integer >= 1"),
    ("teacher_patience", 1.5, "teacher_patience must be an integer >= 1"),
    ("teacher_seed", "0", "teacher_seed must be an integer"),
    ("cache_dir", None, "cache_dir must be a string"),
    ("batch_size", 0, "batch_size must be an integer >= 1"),
    ("learning_rate", 0.0, "learning_rate must be a number > 0"),
    ("patience_epochs", 0, "patience_epochs must be an integer >= 1"),
    ("eval_every", 0, "eval_every must be an integer >= 1"),
    ("padding", "none", "padding must be one of"),
    ("backend", "pmap", "backend must be one of"),
    ("map_batch_size", 0, "map_batch_size must be an integer >= 1"),
    ("seed", 1.0, "seed must be an integer"),
])
def test_selection_config_rejects_bad_values(field, value, message):
    with pytest.raises(ValueError, match=message) as error:
        teacher.SelectionConfig().replace(**{field: value})
    assert repr(value) in str(error.value)


@pytest.mark.parametrize("student,train_size,message", [
    (teacher.Student("x", 0, 0), None, "stack_size must be an integer >= 1 .student 'x'."),
    (teacher.Student("x", 0, 200), 4000, "stack_size must be a stack whose n . batch_size .32. fits the 4,000"),
    (teacher.Student("x", 0, 2, "kl"), None, "distance must be one of"),
    (teacher.Student("x", 0, 2, warmup=-1), None, "warmup must be an integer >= 0"),
    (teacher.Student("x", 0.5), None, "seed must be an integer"),
])
def test_bad_students_are_refused_naming_the_field(student, train_size, message):
    with pytest.raises(ValueError, match=message):
        teacher.check_students(teacher.SelectionConfig(), [student], train_size)
    teacher.check_students(teacher.SelectionConfig(), [teacher.Student("x", 0, 125)], 4000)  # 125 * 32 = 4000 fits


# --------------------------------------------------------------------------- the teacher


@pytest.fixture(scope="module")
def split_dataset(tiny_dataset):
    """The tiny images with a validation split of its own (the first 32 test images, a distinct object)."""
    validation = data.ImageSplit(tiny_dataset.test.images[:32], tiny_dataset.test.labels[:32])
    return data.ImageDataset("synthetic", tiny_dataset.train, validation, tiny_dataset.test, 4)


def test_teacher_stops_after_patience_epochs_without_improvement(split_dataset, monkeypatch):
    """Validation accuracy scripted per epoch: best at epoch 2, patience 2 -> stops after epoch 4."""
    dataset, validation = split_dataset, split_dataset.validation
    scripted, accuracy, calls = iter([50.0, 60.0, 55.0, 59.0, 99.0, 99.0]), teacher._teacher_accuracy, []

    def fake(correct, params, split):
        calls.append("val" if split is validation else "test")
        return next(scripted) if split is validation else accuracy(correct, params, split)

    monkeypatch.setattr(teacher, "_teacher_accuracy", fake)
    config = teacher.SelectionConfig(teacher_hidden=(8,), teacher_batch_size=60, teacher_max_epochs=6,
                                     teacher_patience=2, cache_dir="")
    params, info = teacher.train_teacher(config, dataset, progress=False)
    assert calls == ["val"] * 4 + ["test"]  # 4 epochs (of 240 // 60 steps) evaluated, then the test split once
    assert (info["epochs"], info["best_epoch"], info["val_accuracy"], info["cached"]) == (4, 2, 60.0, False)
    chex.assert_tree_all_finite(params)
    assert 0.0 <= info["test_accuracy"] <= 100.0


def test_teacher_is_cached_by_its_config(split_dataset, tmp_path):
    config = teacher.SelectionConfig(teacher_hidden=(8,), teacher_batch_size=60, teacher_max_epochs=2,
                                     cache_dir=str(tmp_path))
    params, info = teacher.train_teacher(config, split_dataset, progress=False)
    again, cached = teacher.train_teacher(config, split_dataset, progress=False)
    assert not info["cached"] and cached["cached"] and cached["cache_key"] == info["cache_key"]
    chex.assert_trees_all_equal(params, again)
    other = teacher.teacher_cache_key(config.replace(teacher_seed=1), split_dataset)
    assert other != info["cache_key"] and len(list(tmp_path.iterdir())) == 2
    probs = teacher.teacher_probs(config, params, split_dataset.test.images, 4)
    chex.assert_shape(probs, (len(split_dataset.test.labels), 4))
    np.testing.assert_allclose(probs.sum(-1), 1.0, rtol=1e-5)


# --------------------------------------------------------------------------- students: population == separate runs

STUDENTS = [
    teacher.Student("baseline", 0, 1, "cross_entropy", False, 0),
    teacher.Student("a", 1, 2, "cross_entropy", True, 0),
    teacher.Student("b", 0, 2, "random", True, 0),
    teacher.Student("c", 2, 2, "euclidean", False, 0),
    teacher.Student("d", 0, 3, "learnability", False, 2),  # warm-up: 2 plain updates, then selection
]
STEPS = 4
CONFIG = teacher.SelectionConfig(student_hidden=(8,), batch_size=4, map_batch_size=2, cache_dir="")


@pytest.fixture(scope="module")
def arrays(tiny_dataset):
    rng = np.random.default_rng(0)
    probs = jnp.asarray(rng.dirichlet(np.ones(4), size=len(tiny_dataset.train.labels)), jnp.float32)
    return teacher.TrainArrays(jnp.asarray(tiny_dataset.train.images), jnp.asarray(tiny_dataset.train.labels), probs)


def train(config, arrays, students, steps=STEPS):
    init, step, _ = teacher.make_students(config, (8, 8, 1), 4, [s.stack_size for s in students])
    state = init(teacher.student_keys(config, students))
    step = jax.jit(step)
    losses = []
    for _ in range(steps):
        state, loss = step(state, (arrays, teacher.hyper_arrays(students)))
        losses.append(loss)
    return state, jnp.stack(losses)


@pytest.fixture(scope="module")
def alone(arrays):
    """Each student trained by itself (a population of one, its own stack, no padding)."""
    return [train(CONFIG.replace(backend="vmap"), arrays, [s]) for s in STUDENTS]


@pytest.mark.parametrize("padding,backend", [("by_stack", "map"), ("all", "vmap")])
def test_population_equals_separate_single_student_runs(arrays, alone, padding, backend):
    together, losses = train(CONFIG.replace(padding=padding, backend=backend), arrays, STUDENTS)
    chex.assert_shape(losses, (STEPS, len(STUDENTS)))
    chex.assert_tree_all_finite(together.nodes)
    for i, (student, (alone_state, alone_losses)) in enumerate(zip(STUDENTS, alone, strict=True)):
        if padding == "all" and student.distance == "random":
            continue  # its random scores are drawn over the padded stack: a different (equally valid) stream
        chex.assert_trees_all_close(population.node(together.nodes, i), population.node(alone_state.nodes, 0),
                                    rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(losses[:, i], alone_losses[:, 0], rtol=1e-5, atol=1e-6)


def test_stack_of_one_with_true_labels_is_plain_training(arrays):
    """n = 1: the teacher hands back the only minibatch, so distance and warm-up change nothing."""
    runs = [train(CONFIG, arrays, [teacher.Student("x", 0, 1, d, False, w)])[1] for d, w in
            (("cross_entropy", 0), ("euclidean", 3), ("random", 0))]
    for other in runs[1:]:
        np.testing.assert_allclose(other, runs[0], rtol=1e-6)


def test_segments_group_consecutive_equal_stacks():
    assert teacher.segments([1, 1, 2, 2, 2, 5], "by_stack") == [(0, 2, 1), (2, 5, 2), (5, 6, 5)]
    assert teacher.segments([1, 1, 2, 5], "all") == [(0, 4, 5)]


# --------------------------------------------------------------------------- students through the driver

# Two students, two groups (n = 1 and n = 2 with a one-update warm-up): enough for what the driver adds,
# and each population compiles in a fraction of the five students' time.
PAIR = [teacher.Student("baseline", 0), teacher.Student("a", 1, 2, "cross_entropy", True, 1)]


def tiny_run(split_dataset, arrays, students=PAIR, **kwargs):
    kwargs = {"max_updates": 40, "progress": False, **kwargs}
    config = CONFIG.replace(eval_every=kwargs.pop("eval_every", 10), patience_epochs=kwargs.pop("patience_epochs", 20))
    return teacher.train_students(config, students, split_dataset, arrays, **kwargs)


@pytest.fixture(scope="module")
def straight(split_dataset, arrays):
    return tiny_run(split_dataset, arrays)


def test_train_students_equals_the_population_step_and_records_every_evaluation(straight, arrays):
    assert straight["status"] == "complete" and straight["updates_done"] == 40
    assert [r["step"] for r in straight["history"]] == [10, 20, 30, 40]
    state, _ = train(CONFIG, arrays, PAIR, steps=40)  # the same students stepped by hand
    chex.assert_trees_all_close(straight["state"].nodes, state.nodes, rtol=1e-5, atol=1e-6)
    chex.assert_trees_all_equal_shapes(straight["best"].kept, state.nodes.params)  # [S, ...] best parameters
    for i, s in enumerate(straight["students"]):
        assert s["row"] == PAIR[i].row and s["steps"] == [10, 20, 30, 40]
        curve = [r["val_accuracy"][i] for r in straight["history"]]
        np.testing.assert_allclose(s["val_accuracy"], curve, atol=1e-3)  # rounded to 3 decimals
        assert s["best_val"] == max(curve) and s["stop_step"] == 40 and not s["stopped_by_patience"]
        assert 0.0 <= s["test_accuracy"] <= 100.0


def test_patience_stops_students_and_cuts_their_curves(split_dataset, arrays):
    """patience_epochs = 1 on 240 images and m = 4: a student stops 60 updates after its best."""
    result = tiny_run(split_dataset, arrays, max_updates=600, patience_epochs=1)
    best, stopped = result["best"], [s for s in result["students"] if s["stopped_by_patience"]]
    assert stopped  # the tiny task is learnt within the budget, then stops improving
    for i, s in enumerate(result["students"]):
        if s["stopped_by_patience"]:
            assert s["stop_step"] == s["best_step"] + 60 == int(best.stop[i])
            assert s["steps"][-1] == s["stop_step"]  # the curve ends at the stop; later evaluations are ignored
        assert s["best_val"] == pytest.approx(max(s["val_accuracy"]), abs=1e-3)
    if result["status"] == "stopped":  # every student ran out of patience: the run ends at the last stop
        assert len(stopped) == len(PAIR) and result["updates_done"] == max(s["stop_step"] for s in stopped)


def test_the_run_ends_once_every_student_reaches_stop_at(split_dataset, arrays):
    result = tiny_run(split_dataset, arrays, students=PAIR[:1], max_updates=400, stop_at=0.0)
    assert result["status"] == "stopped" and result["updates_done"] == 10 and len(result["history"]) == 1


def test_population_killed_by_sigterm_resumes_to_the_uninterrupted_result(split_dataset, arrays, straight, tmp_path,
                                                                          monkeypatch):
    """Checkpoint = student states + the best-validation parameters and curves tracked between evaluations."""
    accuracy, calls = teacher._population_accuracy, []

    def kill_on_third(*args, **kwargs):
        calls.append(1)
        if len(calls) == 3:
            os.kill(os.getpid(), signal.SIGTERM)
        return accuracy(*args, **kwargs)

    monkeypatch.setattr(teacher, "_population_accuracy", kill_on_third)
    with pytest.raises(driver.Interrupted):
        tiny_run(split_dataset, arrays, checkpointer=Checkpointer(tmp_path, every=10))
    monkeypatch.setattr(teacher, "_population_accuracy", accuracy)
    resumed = tiny_run(split_dataset, arrays, checkpointer=Checkpointer(tmp_path, every=10, resume=True))
    assert resumed["students"] == straight["students"]
    untimed = lambda history: [{k: v for k, v in r.items() if k != "seconds"} for r in history]
    assert untimed(resumed["history"]) == untimed(straight["history"])
    chex.assert_trees_all_equal(resumed["state"], straight["state"])


# --------------------------------------------------------------------------- counting


def test_updates_to_threshold_and_compute_counts():
    steps, acc = [100, 200, 300], [96.0, 96.5, 96.9]
    assert teacher.updates_to(steps, acc, 96.5) == 200 and teacher.updates_to(steps, acc, 96.8) == 300
    assert teacher.updates_to(steps, acc, 97) == float("inf")
    # 150 plain updates (1 forward each) + 50 selecting updates of 5 forward passes.
    assert teacher.forward_passes(200, stack_size=5, warmup=150) == 150 + 50 * 5
    assert teacher.compute_units(200, stack_size=5, warmup=150) == 400 + 2 * 200
    assert teacher.compute_units(10, stack_size=1) == 30  # a plain update: 1 forward + 2 for the backward pass
