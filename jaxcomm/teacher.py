"""A trained teacher picks the hardest samples of the student's stack (thesis ch. 3).

The student forwards n minibatches of m samples; the teacher, holding its own
predictions on the same n*m samples, scores each one by a distance between its
predictive distribution P and the student's Q, and hands back the m highest
(:func:`select_hardest`). Everything here is pure and jittable: the distance is a
static Python string, or, for a population whose students use different
distances, an integer code into :data:`DISTANCES` (:func:`scores_by_code`), so
that one vmapped step serves every student.

Padded stacks: students with different stack sizes n share one population by
padding every stack to the largest n and passing a ``valid`` mask; invalid slots
score ``-inf`` and are never selected while at least m slots are valid.

The chapter's engine is here too, so research code needs nothing else:

* :func:`train_teacher` trains the teacher MLP (dropout, early stopping on
  validation accuracy, cached on disk by its config) through
  :func:`jaxcomm.driver.train`; :func:`train_arrays` holds its fixed
  probabilities on the training split;
* :func:`train_students` trains a population of :class:`Student` s (every stack
  size, distance, target type and warm-up in one jitted step, with per-student
  hyperparameters as arrays) through the same driver, with per-student
  best-by-validation and patience;
* :func:`forward_passes`, :func:`compute_units` and :func:`updates_to` count
  what a student spent to reach an accuracy.

Example::

    from jaxcomm import data, teacher
    dataset = data.load_mnist_sample()
    config = teacher.SelectionConfig(teacher_hidden=(64,), student_hidden=(32,), eval_every=100)
    params, info = teacher.train_teacher(config, dataset)
    arrays = teacher.train_arrays(config, params, dataset)
    students = [teacher.Student("baseline", seed=0), teacher.Student("stack2", seed=0, stack_size=2, soft=True)]
    result = teacher.train_students(config, students, dataset, arrays, max_updates=300)

References:
  Lacaille (2018), §3.2.3 (eqs. 3.2.1, 3.2.2, the teacher stack), §3.2-3.3 (the
  protocol, Table 3.1); Mindermann et al. (2022), "Prioritized training on points
  that are learnable, worth learning, and not yet learnt" (RHO-LOSS), for the
  "learnability" score.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import pathlib
import time
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

import flax.serialization
import jax
import jax.numpy as jnp
import numpy as np
import optax

from jaxcomm import driver, population
from jaxcomm.checkpoint import Checkpointer
from jaxcomm.data import ImageDataset, ImageSplit, accuracy_in_batches, padded_batches
from jaxcomm.models import MLP, to_unit_float
from jaxcomm.validation import is_int, is_real, named_fields, require

# The order fixes the integer codes used by populations (:func:`scores_by_code`).
DISTANCES = ("cross_entropy", "euclidean", "random", "learnability")
DISTANCE_CODES = {name: code for code, name in enumerate(DISTANCES)}

# Probabilities are clipped here before a log: a student that puts exactly zero
# mass on a class would otherwise score +inf and tie with every other such sample.
_TINY = 1e-12


def _check_distance(distance: str, key: jax.Array | None, labels: jax.Array | None) -> None:
    if distance not in DISTANCES:
        raise ValueError(f"distance must be one of {DISTANCES}, got {distance!r}")
    if distance == "random" and key is None:
        raise ValueError("distance 'random' needs a PRNG key (key=...)")
    if distance == "learnability" and labels is None:
        raise ValueError("distance 'learnability' needs the true labels (labels=...)")


def cross_entropy(teacher_probs: jax.Array, student_probs: jax.Array) -> jax.Array:
    """H(P_teacher, Q_student) = -sum_y P(y) log Q(y) per sample (eq. 3.2.1).

    Args:
      teacher_probs: ``[K, C]`` P, the teacher's class probabilities.
      student_probs: ``[K, C]`` Q, the student's.

    Returns:
      ``[K]`` float32.
    """
    return -jnp.sum(teacher_probs * jnp.log(jnp.maximum(student_probs, _TINY)), axis=-1)


def euclidean(teacher_probs: jax.Array, student_probs: jax.Array) -> jax.Array:
    """[sum_y (P(y) - Q(y))^2]^(1/2) per sample (eq. 3.2.2); ``[K, C]`` -> ``[K]``."""
    return jnp.sqrt(jnp.sum(jnp.square(teacher_probs - student_probs), axis=-1))


def learnability(teacher_probs: jax.Array, student_probs: jax.Array, labels: jax.Array) -> jax.Array:
    """Student loss minus teacher loss on the true label, per sample (RHO-LOSS).

    ``-log Q(y) + log P(y)``: high where the student is wrong but the teacher
    (the "irreducible loss" model) is right, so noisy or ambiguous samples that
    the teacher also gets wrong are not chosen.

    Args:
      teacher_probs: ``[K, C]``.
      student_probs: ``[K, C]``.
      labels: ``[K]`` int true labels.

    Returns:
      ``[K]`` float32.
    """
    pick = lambda probs: jnp.take_along_axis(probs, labels[:, None].astype(jnp.int32), axis=-1)[:, 0]
    return -jnp.log(jnp.maximum(pick(student_probs), _TINY)) + jnp.log(jnp.maximum(pick(teacher_probs), _TINY))


def scores(
    teacher_probs: jax.Array,
    student_probs: jax.Array,
    *,
    distance: str = "cross_entropy",
    key: jax.Array | None = None,
    labels: jax.Array | None = None,
) -> jax.Array:
    """Hardness of each stacked sample under one distance (higher = harder).

    Args:
      teacher_probs: ``[K, C]`` with K = n*m.
      student_probs: ``[K, C]``.
      distance: one of :data:`DISTANCES` (static).
      key: PRNG key, needed by "random" (uniform scores in [0, 1)).
      labels: ``[K]`` true labels, needed by "learnability".

    Returns:
      ``[K]`` float32 scores.
    """
    _check_distance(distance, key, labels)
    if distance == "cross_entropy":
        return cross_entropy(teacher_probs, student_probs)
    if distance == "euclidean":
        return euclidean(teacher_probs, student_probs)
    if distance == "random":
        return jax.random.uniform(key, teacher_probs.shape[:1])
    return learnability(teacher_probs, student_probs, labels)


def scores_by_code(
    code: jax.Array,
    teacher_probs: jax.Array,
    student_probs: jax.Array,
    key: jax.Array,
    labels: jax.Array,
) -> jax.Array:
    """:func:`scores` with the distance given as a traced integer code.

    For populations whose students use different distances in one vmapped step:
    every distance is computed (they are cheap next to the student's forward
    pass) and the code picks one. Needs both ``key`` and ``labels``.

    Args:
      code: ``[]`` int32 index into :data:`DISTANCES`.
      teacher_probs, student_probs: ``[K, C]``.
      key: PRNG key of "random".
      labels: ``[K]`` true labels of "learnability".

    Returns:
      ``[K]`` float32, equal to ``scores(..., distance=DISTANCES[code])``.
    """
    table = jnp.stack([scores(teacher_probs, student_probs, distance=d, key=key, labels=labels) for d in DISTANCES])
    return table[code]


def top_m(scores_: jax.Array, m: int, *, valid: jax.Array | None = None) -> jax.Array:
    """Indices of the m highest scores among the valid slots.

    ``lax.top_k`` returns m distinct positions by construction, so a sample is
    never returned twice in one minibatch. Ties go to the lower index.

    Args:
      scores_: ``[K]`` float scores.
      m: how many to keep (static), ``1 <= m <= K``.
      valid: optional ``[K]`` bool; invalid slots are ranked below every valid
        one. The caller guarantees at least m valid slots (a padded stack of
        n >= 1 minibatches has n*m).

    Returns:
      ``[m]`` int32, in decreasing order of score.
    """
    k = scores_.shape[0]
    if not 1 <= m <= k:
        raise ValueError(f"m must be in [1, n*m = {k}], got {m}")
    if valid is not None:
        scores_ = jnp.where(valid, scores_, -jnp.inf)
    return jax.lax.top_k(scores_, m)[1].astype(jnp.int32)


def select_hardest(
    teacher_probs: jax.Array,
    student_probs: jax.Array,
    m: int,
    *,
    distance: str = "cross_entropy",
    key: jax.Array | None = None,
    labels: jax.Array | None = None,
    valid: jax.Array | None = None,
) -> jax.Array:
    """The teacher's choice: the m hardest of the n*m stacked samples (§3.2.3.3).

    Args:
      teacher_probs: ``[n*m, C]`` the teacher's predictive distributions P.
      student_probs: ``[n*m, C]`` the student's Q on the same samples.
      m: the student's batch size (static).
      distance: "cross_entropy" (eq. 3.2.1), "euclidean" (eq. 3.2.2), "random"
        (needs ``key``), or "learnability" (student minus teacher loss on the
        true label, needs ``labels``; beyond the thesis).
      key: PRNG key for "random".
      labels: ``[n*m]`` int true labels for "learnability".
      valid: optional ``[n*m]`` bool mask of real (not padded) stack slots.

    Returns:
      ``[m]`` int32 distinct positions into the stack, hardest first.

    Raises:
      ValueError: unknown distance, "random" without key, "learnability"
        without labels, or m outside [1, n*m].
    """
    _check_distance(distance, key, labels)
    if teacher_probs.shape != student_probs.shape or teacher_probs.ndim != 2:
        raise ValueError(f"teacher_probs and student_probs must both be [n*m, C], got {teacher_probs.shape} and "
                         f"{student_probs.shape}")
    return top_m(scores(teacher_probs, student_probs, distance=distance, key=key, labels=labels), m, valid=valid)


# --------------------------------------------------------------------------- config

PADDINGS = ("by_stack", "all")


@named_fields
@dataclasses.dataclass(frozen=True)
class SelectionConfig:
    """The teacher, the students and their schedule: every field the engine reads; validated on construction.

    Attributes:
      teacher_hidden: hidden widths of the teacher MLP (thesis: 1200, 1200).
      teacher_dropout: drop probability after each teacher hidden layer (thesis: unstated).
      teacher_batch_size: teacher minibatch (thesis: unstated).
      teacher_max_epochs: cap on teacher epochs.
      teacher_patience: teacher epochs without validation improvement before it stops.
      teacher_seed: seeds the teacher's init, dropout and minibatches (part of the cache key).
      cache_dir: where the trained teacher is cached; "" disables the cache.
      student_hidden: hidden widths of the student MLP (thesis: 32, 32).
      batch_size: m, the student's minibatch and the teacher's answer size.
      learning_rate: Adam step size of teacher and students (thesis: Adam defaults, 1e-3).
      patience_epochs: a student stops after this many epochs (of ``train_size // m``
        updates) without validation improvement (thesis: 20).
      eval_every: updates between validation evaluations of the students (one jitted chunk).
      padding: "by_stack" pads each run of consecutive equal-n students only to its own n
        (no wasted forward passes); "all" pads every stack to the population's largest n.
      backend: how per-student code is lifted (:data:`jaxcomm.population.BACKENDS`).
      map_batch_size: students vmapped together per ``lax.map`` iteration (backend "map").
      seed: base seed; a student of seed s starts from ``fold_in(PRNGKey(seed), s)`` whatever
        its other hyperparameters, so configurations are compared seed by seed.
    """

    teacher_hidden: tuple[int, ...] = (1200, 1200)
    teacher_dropout: float = 0.5
    teacher_batch_size: int = 128
    teacher_max_epochs: int = 20
    teacher_patience: int = 5
    teacher_seed: int = 0
    cache_dir: str = "~/.cache/jaxcomm"
    student_hidden: tuple[int, ...] = (32, 32)
    batch_size: int = 32
    learning_rate: float = 1e-3
    patience_epochs: int = 20
    eval_every: int = 250
    padding: str = "by_stack"
    backend: str = "map"
    map_batch_size: int = 8
    seed: int = 0

    def __post_init__(self):
        for name in ("teacher_hidden", "student_hidden"):
            value = getattr(self, name)
            require(isinstance(value, tuple) and len(value) >= 1 and all(is_int(w) and w >= 1 for w in value),
                    name, "a non-empty tuple of integers >= 1", value)
        require(is_real(self.teacher_dropout) and 0.0 <= self.teacher_dropout < 1.0, "teacher_dropout",
                "a probability in [0, 1)", self.teacher_dropout)
        for name in ("teacher_batch_size", "teacher_max_epochs", "teacher_patience", "batch_size", "patience_epochs",
                     "eval_every", "map_batch_size"):
            value = getattr(self, name)
            require(is_int(value) and value >= 1, name, "an integer >= 1", value)
        require(is_int(self.teacher_seed), "teacher_seed", "an integer", self.teacher_seed)
        require(isinstance(self.cache_dir, str), "cache_dir", "a string (\"\" disables the cache)", self.cache_dir)
        require(is_real(self.learning_rate) and self.learning_rate > 0, "learning_rate", "a number > 0",
                self.learning_rate)
        require(self.padding in PADDINGS, "padding", f"one of {PADDINGS}", self.padding)
        population.check_backend(self.backend)
        require(is_int(self.seed), "seed", "an integer", self.seed)

    def replace(self, **changes) -> SelectionConfig:
        """A copy with ``changes`` (validated again)."""
        return dataclasses.replace(self, **changes)


def _correct(logits: jax.Array, labels: jax.Array, weight: jax.Array) -> jax.Array:
    return jnp.sum((jnp.argmax(logits, -1) == labels) * weight)


def _teacher_accuracy(correct, params: Any, split: ImageSplit) -> float:
    """The teacher's accuracy (%) on ``split``."""
    # float64, as the teacher's early stop has always compared it
    return float(accuracy_in_batches(lambda *batch: np.float64(correct(params, *batch)), split))


# --------------------------------------------------------------------------- teacher


def teacher_model(config: SelectionConfig, num_classes: int) -> MLP:
    """The teacher MLP of ``config`` (dropout after each hidden layer)."""
    return MLP(hidden=config.teacher_hidden, num_classes=num_classes, dropout=config.teacher_dropout)


def teacher_cache_key(config: SelectionConfig, dataset: ImageDataset) -> str:
    """Cache key: everything that changes the trained teacher."""
    fields = {"dataset": dataset.name, "train": len(dataset.train.labels), "hidden": list(config.teacher_hidden),
              "dropout": config.teacher_dropout, "batch": config.teacher_batch_size,
              "epochs": config.teacher_max_epochs, "patience": config.teacher_patience, "seed": config.teacher_seed,
              "lr": config.learning_rate}
    return hashlib.sha256(json.dumps(fields, sort_keys=True).encode()).hexdigest()[:16]


def teacher_system(config: SelectionConfig, dataset: ImageDataset) -> driver.System:
    """The teacher's training as a :class:`jaxcomm.driver.System`, evaluated every epoch.

    The state is ``(NodeState, key)``; a step draws ``teacher_batch_size`` training
    samples uniformly with replacement (as the students' minibatches are) and takes one
    Adam step with dropout. Its data is ``(images [M, H, W, 1] uint8, labels [M] int32)``
    of the training split; ``evaluate`` records ``val_accuracy`` as a list of one (%),
    ``epoch`` and the chunk's mean ``loss``.
    """
    model = teacher_model(config, dataset.num_classes)
    optimizer = optax.adam(config.learning_rate)
    dummy = jnp.zeros((1, *dataset.train.images.shape[1:]), jnp.float32)
    steps_per_epoch = max(1, len(dataset.train.labels) // config.teacher_batch_size)

    def loss_fn(params, model_state, images, labels, key):
        logits, _ = model.apply({"params": params}, to_unit_float(images), train=True, rngs={"dropout": key})
        return optax.softmax_cross_entropy_with_integer_labels(logits, labels).mean(), (model_state, None)

    train_step = population.make_train_step(loss_fn, optimizer)

    def init(key):
        init_key, run_key = jax.random.split(key)
        params = model.init(init_key, dummy)["params"]
        return population.NodeState(params, {}, optimizer.init(params)), run_key

    def step(carry, data):
        state, key = carry
        key, k_batch, k_drop = jax.random.split(key, 3)
        idx = jax.random.randint(k_batch, (config.teacher_batch_size,), 0, data[1].shape[0])
        state, (loss, _) = train_step(state, data[0][idx], data[1][idx], k_drop)
        return (state, key), loss

    correct = jax.jit(lambda params, images, labels, weight: _correct(
        model.apply({"params": params}, to_unit_float(images))[0], labels, weight))

    def evaluate(carry, losses, done):
        accuracy = _teacher_accuracy(correct, carry[0].params, dataset.validation)
        return {"epoch": done // steps_per_epoch, "val_accuracy": [accuracy], "loss": float(jnp.mean(losses))}

    return driver.System(init, step, evaluate, postfix=lambda record: {"val": f"{record['val_accuracy'][0]:.2f}"})


@driver.interruptible
def train_teacher(config: SelectionConfig, dataset: ImageDataset, *, progress: bool = True) -> tuple[Any, dict]:
    """Trains (or loads from the cache) the teacher, early-stopped on validation accuracy.

    One epoch is ``len(train) // teacher_batch_size`` steps; validation accuracy is checked
    after each; the run stops once ``teacher_patience`` epochs pass without improvement (a
    :class:`jaxcomm.driver.Tracker` of one member) or after ``teacher_max_epochs``.

    Args:
      config: its ``teacher_*`` fields, ``learning_rate`` and ``cache_dir`` are read.
      dataset: train, validation and test splits.
      progress: draw a progress bar.

    Returns:
      ``(params, info)``: the best-validation parameters and a dict with ``val_accuracy``,
      ``test_accuracy`` (%), ``epochs`` (run), ``best_epoch``, ``seconds``, ``cache_key`` and
      ``cached``.

    Raises:
      KeyboardInterrupt: the training was interrupted (nothing is cached).
    """
    model = teacher_model(config, dataset.num_classes)
    cache = None
    if config.cache_dir:
        cache = pathlib.Path(config.cache_dir).expanduser() / f"teacher-{teacher_cache_key(config, dataset)}"
        if cache.with_suffix(".msgpack").is_file() and cache.with_suffix(".json").is_file():
            dummy = jnp.zeros((1, *dataset.train.images.shape[1:]), jnp.float32)
            template = model.init(jax.random.PRNGKey(0), dummy)["params"]
            params = flax.serialization.from_bytes(template, cache.with_suffix(".msgpack").read_bytes())
            return params, {**json.loads(cache.with_suffix(".json").read_text()), "cached": True}

    steps_per_epoch = max(1, len(dataset.train.labels) // config.teacher_batch_size)
    single = lambda tree: jax.tree_util.tree_map(lambda leaf: leaf[None], tree)  # a population of one
    tracker = driver.Tracker(score=lambda record: record["val_accuracy"], keep=lambda carry: single(carry[0].params),
                             patience=config.teacher_patience * steps_per_epoch)
    data = (jnp.asarray(dataset.train.images), jnp.asarray(dataset.train.labels))
    start = time.perf_counter()
    result = driver.train(teacher_system(config, dataset), data, num_steps=config.teacher_max_epochs * steps_per_epoch,
                          eval_every=steps_per_epoch, key=jax.random.PRNGKey(config.teacher_seed), tracker=tracker,
                          divergence=None, progress=progress, desc="teacher")
    if result["status"] == "interrupted":
        raise KeyboardInterrupt(f"teacher training interrupted after {result['steps_done']} steps")
    best = result["best"]
    params = population.node(best.kept, 0)
    correct = jax.jit(lambda p, images, labels, weight: _correct(
        model.apply({"params": p}, to_unit_float(images))[0], labels, weight))
    info = {"val_accuracy": float(best.score[0]),
            "test_accuracy": _teacher_accuracy(correct, params, dataset.test),
            "epochs": result["steps_done"] // steps_per_epoch, "best_epoch": int(best.step[0]) // steps_per_epoch,
            "seconds": time.perf_counter() - start, "cache_key": teacher_cache_key(config, dataset)}
    if cache is not None:
        cache.parent.mkdir(parents=True, exist_ok=True)
        cache.with_suffix(".msgpack").write_bytes(flax.serialization.to_bytes(params))
        cache.with_suffix(".json").write_text(json.dumps(info))
    return params, {**info, "cached": False}


def teacher_probs(config: SelectionConfig, params: Any, images: np.ndarray, num_classes: int) -> jax.Array:
    """The teacher's class probabilities ``[M, C]`` (softmax at temperature 1) on ``images [M, ...]``."""
    model = teacher_model(config, num_classes)
    predict = jax.jit(lambda p, x: jax.nn.softmax(model.apply({"params": p}, to_unit_float(x))[0]))
    split = ImageSplit(images, np.zeros(len(images), np.int32))
    out = [predict(params, x)[np.asarray(w) > 0] for x, _, w in padded_batches(split, 2000)]
    return jnp.concatenate(out)


# --------------------------------------------------------------------------- students


class Student(NamedTuple):
    """One student of a population: its name (row), seed and hyperparameters.

    ``Student(row, seed)`` is the baseline: a stack of one minibatch (the teacher
    returns it), true labels.
    """

    row: str
    seed: int
    stack_size: int = 1  # n minibatches the teacher chooses from
    distance: str = "cross_entropy"  # one of DISTANCES
    soft: bool = False  # targets: the teacher's soft labels (True) or the true labels
    warmup: int = 0  # plain updates (first minibatch, true labels) before selection starts


class Hyper(NamedTuple):
    """Per-student hyperparameters as arrays, so one jitted step serves every configuration."""

    stack_size: jax.Array  # [S] int32, n <= the group's padded stack
    distance: jax.Array  # [S] int32 codes into DISTANCES
    soft: jax.Array  # [S] bool
    warmup: jax.Array  # [S] int32


class TrainArrays(NamedTuple):
    """What a student step reads, on the device once."""

    images: jax.Array  # [M, H, W, 1] uint8 training split
    labels: jax.Array  # [M] int32
    teacher_probs: jax.Array  # [M, C] float32, the fixed teacher's predictions


class PopulationState(NamedTuple):
    """Every student's training state."""

    nodes: population.NodeState  # leaves [S, ...]
    keys: jax.Array  # [S, 2] uint32 per-student PRNG keys
    step: jax.Array  # [] int32 updates done (the same for every student)


def train_arrays(config: SelectionConfig, params: Any, dataset: ImageDataset) -> TrainArrays:
    """The training split and the teacher's probabilities on it, computed once (the teacher is fixed)."""
    return TrainArrays(jnp.asarray(dataset.train.images), jnp.asarray(dataset.train.labels),
                       teacher_probs(config, params, dataset.train.images, dataset.num_classes))


def check_students(config: SelectionConfig, students: Sequence[Student], train_size: int | None = None) -> None:
    """Raises ``ValueError`` naming the field of the first bad student (and the student).

    ``train_size``, if given, bounds the stack: n * batch_size samples must fit the training split.
    """
    require(len(students) >= 1, "students", "a non-empty sequence of Student", students)
    for s in students:
        require(is_int(s.seed), "seed", f"an integer (student {s.row!r})", s.seed)
        require(is_int(s.stack_size) and s.stack_size >= 1, "stack_size", f"an integer >= 1 (student {s.row!r})",
                s.stack_size)
        if train_size is not None:
            require(s.stack_size * config.batch_size <= train_size, "stack_size",
                    f"a stack whose n * batch_size ({config.batch_size}) fits the {train_size:,} training images "
                    f"(student {s.row!r})", s.stack_size)
        require(s.distance in DISTANCES, "distance", f"one of {DISTANCES} (student {s.row!r})", s.distance)
        require(is_int(s.warmup) and s.warmup >= 0, "warmup", f"an integer >= 0 (student {s.row!r})", s.warmup)


def hyper_arrays(students: Sequence[Student]) -> Hyper:
    """The students' hyperparameters as ``[S]`` arrays."""
    return Hyper(jnp.asarray([s.stack_size for s in students], jnp.int32),
                 jnp.asarray([DISTANCE_CODES[s.distance] for s in students], jnp.int32),
                 jnp.asarray([s.soft for s in students], bool),
                 jnp.asarray([s.warmup for s in students], jnp.int32))


def segments(stack_sizes: Sequence[int], padding: str) -> list[tuple[int, int, int]]:
    """Static groups of students that share one padded stack: ``(start, stop, padded n)``.

    "by_stack": each run of consecutive students with the same n is its own group, so a
    student never forwards more than its own n minibatches; "all": one group padded to the
    largest n (every student pays for the largest stack).
    """
    if padding == "all":
        return [(0, len(stack_sizes), max(stack_sizes))]
    out, start = [], 0
    for i in range(1, len(stack_sizes) + 1):
        if i == len(stack_sizes) or stack_sizes[i] != stack_sizes[start]:
            out.append((start, i, stack_sizes[start]))
            start = i
    return out


def _selection_step(model: MLP, train_step: Callable, m: int, num_classes: int, max_stack: int) -> Callable:
    """One student's update with a stack padded to ``max_stack`` minibatches of ``m``:
    ``(node, key, hyper, step, data) -> (node, loss)``, per node (lift it)."""
    random_code = DISTANCE_CODES["random"]

    def student_step(node: population.NodeState, key, hyper: Hyper, step, data: TrainArrays):
        k_sample, k_select = jax.random.split(key)
        # Minibatch j is drawn from fold_in(key, j), so a student's first n minibatches do not
        # depend on how far its group pads the stack.
        draw = lambda j: jax.random.randint(jax.random.fold_in(k_sample, j), (m,), 0, data.labels.shape[0])
        batches = jax.vmap(draw)(jnp.arange(max_stack))  # [n_max, m]
        # One minibatch at a time: forwarding the whole [n_max * m] stack at once was 6x
        # slower on CPU for n = 100 (its float32 copy of the images leaves the caches).
        forward = lambda b: jax.nn.softmax(model.apply({"params": node.params}, to_unit_float(data.images[b]))[0])
        student_probs = jax.lax.map(forward, batches).reshape(max_stack * m, num_classes)
        idx = batches.reshape(-1)  # [n_max * m]
        # Warm-up: a plain update (the first minibatch, true labels) instead of a selection.
        plain = step < hyper.warmup
        n = jnp.where(plain, 1, hyper.stack_size)
        code = jnp.where(plain, random_code, hyper.distance)
        hardness = scores_by_code(code, data.teacher_probs[idx], student_probs, k_select, data.labels[idx])
        chosen = idx[top_m(hardness, m, valid=jnp.arange(max_stack * m) < n * m)]
        targets = jnp.where(hyper.soft & ~plain, data.teacher_probs[chosen],
                            jax.nn.one_hot(data.labels[chosen], num_classes))
        node, (loss, _) = train_step(node, data.images[chosen], targets)
        return node, loss

    return student_step


def make_students(config: SelectionConfig, image_shape: tuple[int, ...], num_classes: int,
                  stack_sizes: Sequence[int]):
    """The pure functions of a population of students with stacks of ``stack_sizes[i]`` minibatches.

    Each update a student forwards its n random minibatches (n*m samples), the teacher keeps
    the m hardest (:func:`top_m` of :func:`scores_by_code`) and the student takes one Adam
    step on them with the teacher's soft labels or the true labels as targets; during its
    warm-up it takes a plain update on its first minibatch instead. Students are split into
    static groups (:func:`segments`, ``config.padding``); within a group every stack is
    padded to the group's largest n and masked. All groups advance in the same step.

    Returns:
      ``(init, step, accuracy)``: ``init(keys [S, 2]) -> PopulationState``;
      ``step(state, (TrainArrays, Hyper)) -> (state, loss [S])``, pure (jit it);
      ``accuracy(params, images [B, ...] uint8, labels [B], weight [B]) -> correct [S]``, jitted.

    References:
      Lacaille (2018), §3.2.3.3 (the teacher stack).
    """
    m = config.batch_size
    model = MLP(hidden=config.student_hidden, num_classes=num_classes)
    optimizer = optax.adam(config.learning_rate)
    dummy = jnp.zeros((1, *image_shape), jnp.float32)

    def init_student(key):
        params = model.init(key, dummy)["params"]
        return population.NodeState(params, {}, optimizer.init(params))

    def loss_fn(params, model_state, images, targets):
        logits, _ = model.apply({"params": params}, to_unit_float(images))
        return -jnp.mean(jnp.sum(targets * jax.nn.log_softmax(logits), axis=-1)), (model_state, None)

    train_step = population.make_train_step(loss_fn, optimizer)

    def lifted_step(max_stack: int):
        student_step = _selection_step(model, train_step, m, num_classes, max_stack)
        return population.lift(student_step, backend=config.backend, in_axes=(0, 0, 0, None, None),
                               map_batch_size=config.map_batch_size)

    groups = [(start, stop, lifted_step(n)) for start, stop, n in segments(stack_sizes, config.padding)]

    def init(keys: jax.Array) -> PopulationState:
        init_keys, run_keys = jnp.swapaxes(jax.vmap(jax.random.split)(keys), 0, 1)
        nodes = population.lift(init_student, backend=config.backend)(init_keys)
        return PopulationState(nodes, run_keys, jnp.zeros((), jnp.int32))

    def step(state: PopulationState, data: tuple[TrainArrays, Hyper]):
        arrays, hyper = data
        keys, step_keys = jnp.swapaxes(jax.vmap(jax.random.split)(state.keys), 0, 1)
        outs = []
        for start, stop, lifted in groups:
            part = lambda tree, a=start, b=stop: jax.tree_util.tree_map(lambda leaf: leaf[a:b], tree)
            outs.append(lifted(part(state.nodes), step_keys[start:stop], part(hyper), state.step, arrays))
        nodes, loss = jax.tree_util.tree_map(lambda *leaves: jnp.concatenate(leaves), *outs)
        return PopulationState(nodes, keys, state.step + 1), loss

    def correct(params, images, labels, weight):
        logits, _ = model.apply({"params": params}, to_unit_float(images))
        return _correct(logits, labels, weight)

    accuracy = jax.jit(population.lift(correct, backend=config.backend, in_axes=(0, None, None, None)))
    return init, step, accuracy


def student_keys(config: SelectionConfig, students: Sequence[Student]) -> jax.Array:
    """``[S, 2]``: seed s gets the same key in every configuration (shared initialisation and data order)."""
    base = jax.random.PRNGKey(config.seed)
    return jnp.stack([jax.random.fold_in(base, s.seed) for s in students])


def _population_accuracy(accuracy, params, split: ImageSplit) -> np.ndarray:
    """``[S]`` float32 accuracies (%) of every student on ``split`` (float32 as the committed curves)."""
    return accuracy_in_batches(lambda *batch: accuracy(params, *batch), split)


def students_system(config: SelectionConfig, students: Sequence[Student], dataset: ImageDataset) -> driver.System:
    """The student population as a :class:`jaxcomm.driver.System`.

    ``init(key)`` starts student i from ``fold_in(key, students[i].seed)`` (train it with
    ``key=PRNGKey(config.seed)``); its data is ``(TrainArrays, hyper_arrays(students))``;
    ``evaluate`` records per-student ``val_accuracy`` (%) and mean ``loss`` as lists ``[S]``;
    the losses ``[L, S]`` are watched for non-finite values.
    """
    return _students_parts(config, students, dataset)[0]


def _students_parts(config: SelectionConfig, students: Sequence[Student], dataset: ImageDataset
                    ) -> tuple[driver.System, Any]:
    """``(system, accuracy)``: :func:`students_system` and its jitted per-student ``accuracy``."""
    init_students, step, accuracy = make_students(config, dataset.train.images.shape[1:], dataset.num_classes,
                                                  [s.stack_size for s in students])

    def init(key):
        return init_students(jnp.stack([jax.random.fold_in(key, s.seed) for s in students]))

    def evaluate(state, losses, done):
        val = _population_accuracy(accuracy, state.nodes.params, dataset.validation)
        return {"val_accuracy": val.tolist(), "loss": np.asarray(jnp.mean(losses, axis=0)).tolist()}

    system = driver.System(init, step, evaluate, losses=lambda losses: losses,
                           postfix=lambda record: {"val": f"{np.median(record['val_accuracy']):.2f}"})
    return system, accuracy


@driver.interruptible
def train_students(
    config: SelectionConfig,
    students: Sequence[Student],
    dataset: ImageDataset,
    arrays: TrainArrays,
    *,
    max_updates: int,
    stop_at: float | None = None,
    progress: bool = True,
    desc: str | None = None,
    checkpointer: Checkpointer | None = None,
) -> dict:
    """Trains every student together, evaluating validation accuracy every ``eval_every`` updates.

    A student stops after ``patience_epochs`` epochs (of ``len(train) // batch_size`` updates)
    without improvement: its later evaluations are ignored (training past that point cannot
    change what it reports), and the population ends once every student has stopped, or,
    with ``stop_at``, once every student has reached ``stop_at`` % validation accuracy
    (:class:`jaxcomm.driver.Tracker`).

    Args:
      config: its student fields (``student_hidden``, ``batch_size``, ``learning_rate``,
        ``patience_epochs``, ``eval_every``, ``padding``, ``backend``, ``map_batch_size``, ``seed``).
      students: the population; consecutive students with equal stacks share a padded group.
      dataset: validation split (evaluation) and test split (the reported accuracy).
      arrays: :func:`train_arrays` of the teacher.
      max_updates: update budget.
      stop_at: validation accuracy (%) at which the run may end early.
      progress: draw a progress bar; ``desc`` labels it.
      checkpointer: checkpoints students and best-validation parameters (bit-identical resume).

    Returns:
      A dict: ``students``, one dict per student with its fields, the validation curve
      (``steps``, ``val_accuracy``) up to its stop, ``best_val``, ``best_step``,
      ``test_accuracy`` (%) at its best-validation parameters, ``stop_step`` and
      ``stopped_by_patience``; ``seconds`` (wall time), ``updates_done``, ``status``, the
      driver's ``history`` and ``best`` (:class:`jaxcomm.driver.Best`, ``kept`` = the
      best-validation parameters ``[S, ...]``) and the final ``state``.
    """
    check_students(config, students, len(dataset.train.labels))
    patience = config.patience_epochs * max(1, len(dataset.train.labels) // config.batch_size)
    tracker = driver.Tracker(score=lambda record: record["val_accuracy"], keep=lambda state: state.nodes.params,
                             patience=patience, stop_at=stop_at)
    system, accuracy = _students_parts(config, students, dataset)
    start = time.perf_counter()
    result = driver.train(system, (arrays, hyper_arrays(students)), num_steps=max_updates,
                          eval_every=config.eval_every, key=jax.random.PRNGKey(config.seed), tracker=tracker,
                          divergence=None, progress=progress, desc=desc, checkpointer=checkpointer)
    seconds = time.perf_counter() - start
    best, history = result["best"], result["history"]
    updates_done = history[-1]["step"] if history else 0
    test = _population_accuracy(accuracy, best.kept, dataset.test)
    steps = np.asarray([r["step"] for r in history], np.int64)
    val = np.asarray([r["val_accuracy"] for r in history], np.float32).reshape(len(history), len(students))
    out = []
    for i, s in enumerate(students):
        stop = int(best.stop[i]) if best.stop[i] >= 0 else updates_done
        keep = steps <= stop
        out.append({**s._asdict(), "steps": steps[keep].tolist(), "val_accuracy": np.round(val[keep, i], 3).tolist(),
                    "best_val": float(best.score[i]), "best_step": int(best.step[i]),
                    "test_accuracy": float(test[i]), "stop_step": stop, "stopped_by_patience": bool(best.stop[i] >= 0)})
    return {"students": out, "seconds": seconds, "updates_done": updates_done, "status": result["status"],
            "history": history, "best": best, "state": result["state"]}


def time_per_update(config: SelectionConfig, dataset: ImageDataset, arrays: TrainArrays, stack_size: int, *,
                    updates: int) -> float:
    """Wall seconds per update of ONE student with stack n alone (not padded), after compilation."""
    student = Student("timing", 0, stack_size, "cross_entropy", True, 0)
    init, step, _ = make_students(config, dataset.train.images.shape[1:], dataset.num_classes, [stack_size])
    state = init(student_keys(config, [student]))
    run = driver.scan_steps(step, lambda loss: ())
    data = (arrays, hyper_arrays([student]))
    jax.block_until_ready(run(state, data, updates))  # compile
    start = time.perf_counter()
    jax.block_until_ready(run(state, data, updates))
    return (time.perf_counter() - start) / updates


# --------------------------------------------------------------------------- counting


def forward_passes(updates: float, *, stack_size: int, warmup: int = 0) -> float:
    """Student forward passes (in minibatches of m) spent by ``updates`` updates.

    A selecting update forwards its n minibatches; the update's own forward pass reuses the
    selected samples' activations (§3.2.3.3: "a gain of (n-1)*m backward passes"), so a plain
    (warm-up) update costs 1 forward and 1 backward pass.
    """
    plain = min(updates, warmup)
    return plain + (updates - plain) * stack_size


def compute_units(updates: float, *, stack_size: int, warmup: int = 0) -> float:
    """Training compute: a forward pass of a minibatch = 1 unit, a backward pass = 2 (teacher cached)."""
    return forward_passes(updates, stack_size=stack_size, warmup=warmup) + 2.0 * updates


def updates_to(steps: Sequence[int], accuracies: Sequence[float], threshold: float) -> float:
    """Updates until validation accuracy first reaches ``threshold`` %, inf if never (on that curve)."""
    for step, acc in zip(steps, accuracies, strict=True):
        if acc >= threshold:
            return float(step)
    return float("inf")
