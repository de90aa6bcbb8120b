"""Thesis ch. 3: a trained teacher selects the student's training data (MNIST), Table 3.1 and Fig. 3.1.

    JAXCOMM_DATA_DIR=/work/shared/data python experiments/teacher_selection.py --preset cpu
    python experiments/teacher_selection.py --preset smoke --out /tmp/ts    # seconds, shipped MNIST sample
    python experiments/teacher_selection.py report results/teacher_selection  # redraw plots and table

A teacher MLP 784-1200-1200-10 with dropout is trained once (early stopping on validation
accuracy) and cached on disk; its class probabilities on the whole training split are computed
once, since it never changes. Students MLP 784-32-32-10 (Adam defaults, batch m = 32) then
train as ONE population: every configuration of Table 3.1 and every seed in one jitted step,
with per-student hyperparameters as arrays (stack size n padded to the largest n with a
validity mask, distance code, target type, warm-up length). Each update a student forwards n
random minibatches (n*m samples), the teacher keeps the m hardest (:mod:`jaxcomm.teacher`)
and the student takes one Adam step on them with the teacher's soft labels (temperature 1)
or the true labels as targets. The stack-size study (n in 10..100, with and without a
warm-up of plain updates before selection starts) runs one population per n, so the padding
of n = 100 never slows the small stacks.

References:
  Lacaille (2018), §3.2-3.3, Table 3.1, Figure 3.1.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import pathlib
import sys
import time
from collections.abc import Sequence
from typing import Any, NamedTuple

import flax.serialization
import jax
import jax.numpy as jnp
import numpy as np
import optax

from jaxcomm import experiment, population, runner, teacher
from jaxcomm.checkpoint import Checkpointer, Checkpoints
from jaxcomm.data import ImageDataset, ImageSplit, load_mnist, load_mnist_sample, padded_batches
from jaxcomm.models import MLP, to_unit_float
from jaxcomm.validation import is_int, is_real, require

EXPERIMENT = "teacher_selection"
DATASETS = ("mnist", "mnist_sample")
TRAIN_SIZES = {"mnist": 50_000, "mnist_sample": 4_000}  # training images after the validation split
PADDINGS = ("by_stack", "all")
THRESHOLDS = (96.5, 96.8)  # validation accuracy (%) of the headline "updates to X" metrics
COLLAPSE_ACCURACY = 90.0  # a seed whose best validation accuracy stays below this has collapsed

# Table 3.1's configurations: row -> (stack size n, distance, soft-label targets).
TABLE_ROWS: dict[str, tuple[int, str, bool]] = {
    "baseline": (1, "cross_entropy", False),  # n = 1: the teacher returns the only minibatch, true labels
    "stack2_ce_soft": (2, "cross_entropy", True),
    "stack2_ce_true": (2, "cross_entropy", False),
    "stack2_euclid_soft": (2, "euclidean", True),
    "stack2_random_soft": (2, "random", True),
    "stack5_ce_soft": (5, "cross_entropy", True),
    "stack5_ce_true": (5, "cross_entropy", False),
    "stack5_learn_true": (5, "learnability", False),  # beyond the thesis: RHO-LOSS score
}
THESIS_ROWS = ("baseline", "stack2_ce_soft", "stack2_ce_true", "stack2_euclid_soft", "stack2_random_soft",
               "stack5_ce_soft", "stack5_ce_true")
# Thesis Table 3.1: row -> (test accuracy %, backward passes at the best validation accuracy).
THESIS_TABLE = {
    "baseline": (96.4, 39_000),
    "stack2_ce_soft": (96.9, 25_000),
    "stack2_ce_true": (96.5, 18_700),
    "stack2_euclid_soft": (96.8, 18_700),
    "stack2_random_soft": (96.7, 32_800),
    "stack5_ce_soft": (96.8, 13_700),
    "stack5_ce_true": (96.8, 9_100),
}


# --------------------------------------------------------------------------- config


@dataclasses.dataclass(frozen=True)
class TeacherSelectionConfig:
    """Teacher, students and schedule of the chapter-3 study; validated on construction.

    Attributes:
      dataset: "mnist" (50k/10k/10k, §3.2.2.1) or "mnist_sample" (the shipped real sample, for smoke runs).
      data_dir: folder holding MNIST; "" reads ``$JAXCOMM_DATA_DIR``.
      teacher_hidden: hidden widths of the teacher (thesis: 1200, 1200).
      teacher_dropout: drop probability after each teacher hidden layer (thesis: unstated).
      teacher_batch_size: teacher minibatch (thesis: unstated).
      teacher_max_epochs: cap on teacher epochs.
      teacher_patience: teacher epochs without validation improvement before it stops.
      teacher_seed: seeds the teacher's init, dropout and minibatches (part of the cache key).
      cache_dir: where the trained teacher is cached; "" disables the cache.
      student_hidden: hidden widths of the student (thesis: 32, 32).
      batch_size: m, the student's minibatch and the teacher's answer size.
      learning_rate: Adam step size of both (thesis: Adam defaults, 1e-3).
      rows: the Table-3.1 rows to train (keys of :data:`TABLE_ROWS`); "baseline" is required.
      seeds: seeds per table row.
      max_updates: update budget of every table student.
      patience_epochs: a student stops after this many epochs (of ``train_size // m``
        updates) without validation improvement (thesis: 20).
      eval_every: updates between validation evaluations (one jitted chunk).
      study_stack_sizes: stack sizes n of the study beyond the table's 1, 2 and 5 (empty: no study).
      study_seeds: seeds per study row.
      study_max_updates: update budget of study students.
      warmup_updates: plain updates (random minibatch, true labels) before selection starts,
        the remedy the study measures against collapse.
      timing_updates: updates of the solo timing run per stack size (wall seconds per update);
        0 skips it (wall-clock metrics are then null).
      padding: "by_stack" pads each group of equal-n students only to its own n (same step, no
        wasted forward passes); "all" pads every stack to the population's largest n.
      backend: how per-student code is lifted (:data:`jaxcomm.population.BACKENDS`).
      map_batch_size: students vmapped together per ``lax.map`` iteration (backend "map").
      seed: base seed; student seed s uses ``fold_in(PRNGKey(seed), s)`` in every row, so rows
        share initialisations and are compared seed by seed.
    """

    dataset: str = "mnist"
    data_dir: str = ""
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
    rows: tuple[str, ...] = tuple(TABLE_ROWS)
    seeds: int = 10
    max_updates: int = 30_000
    patience_epochs: int = 20
    eval_every: int = 250
    study_stack_sizes: tuple[int, ...] = (10, 20, 50, 100)
    study_seeds: int = 5
    study_max_updates: int = 10_000
    warmup_updates: int = 1000
    timing_updates: int = 300
    padding: str = "by_stack"
    backend: str = "map"
    map_batch_size: int = 8
    seed: int = 0

    def __post_init__(self):
        require(self.dataset in DATASETS, "dataset", f"one of {DATASETS}", self.dataset)
        require(isinstance(self.data_dir, str), "data_dir", "a string", self.data_dir)
        for name in ("teacher_hidden", "student_hidden"):
            value = getattr(self, name)
            require(isinstance(value, tuple) and len(value) >= 1 and all(is_int(w) and w >= 1 for w in value),
                     name, "a non-empty tuple of integers >= 1", value)
        require(is_real(self.teacher_dropout) and 0.0 <= self.teacher_dropout < 1.0, "teacher_dropout",
                 "a probability in [0, 1)", self.teacher_dropout)
        for name in ("teacher_batch_size", "teacher_max_epochs", "teacher_patience", "batch_size", "seeds",
                     "max_updates", "patience_epochs", "eval_every", "study_seeds", "study_max_updates",
                     "map_batch_size"):
            value = getattr(self, name)
            require(is_int(value) and value >= 1, name, "an integer >= 1", value)
        require(is_int(self.teacher_seed), "teacher_seed", "an integer", self.teacher_seed)
        require(isinstance(self.cache_dir, str), "cache_dir", "a string (\"\" disables the cache)", self.cache_dir)
        require(is_real(self.learning_rate) and self.learning_rate > 0, "learning_rate", "a number > 0",
                 self.learning_rate)
        require(isinstance(self.rows, tuple) and all(r in TABLE_ROWS for r in self.rows) and "baseline" in self.rows
                 and len(set(self.rows)) == len(self.rows), "rows",
                 f"distinct names from {tuple(TABLE_ROWS)} including 'baseline'", self.rows)
        require(isinstance(self.study_stack_sizes, tuple) and all(is_int(n) and n >= 1
                                                                   for n in self.study_stack_sizes),
                 "study_stack_sizes", "a tuple of integers >= 1", self.study_stack_sizes)
        require(is_int(self.timing_updates) and self.timing_updates >= 0, "timing_updates",
                 "an integer >= 0 (0 skips the timing)", self.timing_updates)
        require(is_int(self.warmup_updates) and self.warmup_updates >= 0, "warmup_updates", "an integer >= 0",
                 self.warmup_updates)
        require(self.padding in PADDINGS, "padding", f"one of {PADDINGS}", self.padding)
        largest = max((*self.study_stack_sizes, *(TABLE_ROWS[r][0] for r in self.rows)), default=1)
        require(largest * self.batch_size <= TRAIN_SIZES[self.dataset], "study_stack_sizes",
                f"stacks whose n * batch_size fits the {TRAIN_SIZES[self.dataset]:,} training images of "
                f"{self.dataset} (largest n here: {largest})", self.study_stack_sizes)
        population.check_backend(self.backend)
        require(is_int(self.seed), "seed", "an integer", self.seed)


def cpu_config() -> TeacherSelectionConfig:
    """The thesis protocol scaled to finish in under 30 minutes on 2 CPU cores (see table.md)."""
    return TeacherSelectionConfig(seeds=8, max_updates=40_000, eval_every=250, study_seeds=5,
                                  study_max_updates=8000, study_stack_sizes=(10, 20, 50, 100))


def thesis_config() -> TeacherSelectionConfig:
    """The thesis' settings (for an accelerator): students stop only by the 20-epoch patience rule."""
    return TeacherSelectionConfig(teacher_max_epochs=100, teacher_patience=10, seeds=10, max_updates=200_000,
                                  eval_every=100, study_seeds=10, study_max_updates=100_000)


def smoke_config() -> TeacherSelectionConfig:
    """Seconds: a tiny teacher on the shipped real MNIST sample, a few hundred updates."""
    return TeacherSelectionConfig(dataset="mnist_sample", teacher_hidden=(64,), teacher_max_epochs=2,
                                  teacher_patience=1, cache_dir="", rows=("baseline", "stack2_ce_soft",
                                                                          "stack5_ce_true"),
                                  seeds=2, max_updates=200, patience_epochs=20, eval_every=100,
                                  study_stack_sizes=(10,), study_seeds=1, study_max_updates=100,
                                  warmup_updates=50, timing_updates=0)


PRESETS = {"smoke": smoke_config, "cpu": cpu_config, "thesis": thesis_config}


# --------------------------------------------------------------------------- data


def load_dataset(config: TeacherSelectionConfig) -> ImageDataset:
    """Real MNIST (50k/10k/10k) or the shipped real sample; never synthetic data."""
    if config.dataset == "mnist_sample":
        return load_mnist_sample()
    return load_mnist(config.data_dir or None)


def _accuracy_counts(logits: jax.Array, labels: jax.Array, weight: jax.Array) -> jax.Array:
    return jnp.sum((jnp.argmax(logits, -1) == labels) * weight)


# --------------------------------------------------------------------------- teacher


def _teacher_key(config: TeacherSelectionConfig, dataset: ImageDataset) -> str:
    """Cache key: everything that changes the trained teacher."""
    fields = {"dataset": dataset.name, "train": len(dataset.train.labels), "hidden": list(config.teacher_hidden),
              "dropout": config.teacher_dropout, "batch": config.teacher_batch_size,
              "epochs": config.teacher_max_epochs, "patience": config.teacher_patience, "seed": config.teacher_seed,
              "lr": config.learning_rate}
    return hashlib.sha256(json.dumps(fields, sort_keys=True).encode()).hexdigest()[:16]


def train_teacher(config: TeacherSelectionConfig, dataset: ImageDataset, *, progress: bool = True
                  ) -> tuple[Any, dict]:
    """Trains (or loads from the cache) the teacher, early-stopped on validation accuracy.

    Returns:
      ``(params, info)``: the best-validation parameters and a dict with ``val_accuracy``,
      ``test_accuracy`` (%), ``epochs``, ``best_epoch``, ``seconds`` and ``cached``.
    """
    model = MLP(hidden=config.teacher_hidden, num_classes=dataset.num_classes, dropout=config.teacher_dropout)
    optimizer = optax.adam(config.learning_rate)
    dummy = jnp.zeros((1, *dataset.train.images.shape[1:]), jnp.float32)
    template = model.init(jax.random.PRNGKey(0), dummy)["params"]
    cache = None
    if config.cache_dir:
        cache = pathlib.Path(config.cache_dir).expanduser() / f"teacher-{_teacher_key(config, dataset)}"
        if cache.with_suffix(".msgpack").is_file() and cache.with_suffix(".json").is_file():
            params = flax.serialization.from_bytes(template, cache.with_suffix(".msgpack").read_bytes())
            return params, {**json.loads(cache.with_suffix(".json").read_text()), "cached": True}

    def loss_fn(params, model_state, images, labels, key):
        logits, _ = model.apply({"params": params}, to_unit_float(images), train=True, rngs={"dropout": key})
        return optax.softmax_cross_entropy_with_integer_labels(logits, labels).mean(), (model_state, None)

    train_step = population.make_train_step(loss_fn, optimizer)

    def step(carry, data):
        state, key = carry
        key, k_batch, k_drop = jax.random.split(key, 3)
        # Minibatches drawn uniformly with replacement (as the students' are).
        idx = jax.random.randint(k_batch, (config.teacher_batch_size,), 0, data[1].shape[0])
        state, (loss, _) = train_step(state, data[0][idx], data[1][idx], k_drop)
        return (state, key), loss

    predict = jax.jit(lambda params, images, labels, weight: _accuracy_counts(
        model.apply({"params": params}, to_unit_float(images))[0], labels, weight))

    def accuracy(params, split: ImageSplit) -> float:
        return 100.0 * float(sum(predict(params, *b) for b in padded_batches(split, 2000))) / len(split.labels)

    init_key, run_key = jax.random.split(jax.random.PRNGKey(config.teacher_seed))
    params = model.init(init_key, dummy)["params"]
    state = (population.NodeState(params, {}, optimizer.init(params)), run_key)
    steps_per_epoch = max(1, len(dataset.train.labels) // config.teacher_batch_size)
    best = {"acc": -1.0, "epoch": 0, "params": params, "epochs": 0}

    def on_chunk(done, state, _):
        epoch = done // steps_per_epoch
        acc = accuracy(state[0].params, dataset.validation)
        best["epochs"] = epoch
        if acc > best["acc"]:
            best.update(acc=acc, epoch=epoch, params=state[0].params)
        if epoch - best["epoch"] >= config.teacher_patience:
            raise runner.StopRun
        return {"val": f"{acc:.2f}"}

    data = (jnp.asarray(dataset.train.images), jnp.asarray(dataset.train.labels))
    start = time.perf_counter()
    runner.run_in_chunks(step, state, data, num_steps=config.teacher_max_epochs * steps_per_epoch,
                         chunk_size=steps_per_epoch, on_chunk=on_chunk, progress=progress, desc="teacher")
    info = {"val_accuracy": best["acc"], "test_accuracy": accuracy(best["params"], dataset.test),
            "epochs": best["epochs"], "best_epoch": best["epoch"], "seconds": time.perf_counter() - start,
            "cache_key": _teacher_key(config, dataset)}
    if cache is not None:
        cache.parent.mkdir(parents=True, exist_ok=True)
        cache.with_suffix(".msgpack").write_bytes(flax.serialization.to_bytes(best["params"]))
        cache.with_suffix(".json").write_text(json.dumps(info))
    return best["params"], {**info, "cached": False}


def teacher_probs(config: TeacherSelectionConfig, params: Any, images: np.ndarray, num_classes: int) -> jax.Array:
    """The teacher's class probabilities ``[M, C]`` on ``images``, computed once (it is fixed)."""
    model = MLP(hidden=config.teacher_hidden, num_classes=num_classes, dropout=config.teacher_dropout)
    predict = jax.jit(lambda p, x: jax.nn.softmax(model.apply({"params": p}, to_unit_float(x))[0]))
    split = ImageSplit(images, np.zeros(len(images), np.int32))
    out = [predict(params, x)[np.asarray(w) > 0] for x, _, w in padded_batches(split, 2000)]
    return jnp.concatenate(out)


# --------------------------------------------------------------------------- students


class Student(NamedTuple):
    """One student of a population: its row, seed and hyperparameters."""

    row: str
    seed: int
    stack_size: int  # n minibatches the teacher chooses from
    distance: str  # one of jaxcomm.teacher.DISTANCES
    soft: bool  # targets: teacher soft labels (True) or true labels
    warmup: int  # plain updates before selection starts


class Hyper(NamedTuple):
    """Per-student hyperparameters as arrays, so one jitted step serves every configuration."""

    stack_size: jax.Array  # [S] int32, n <= the population's padded stack
    distance: jax.Array  # [S] int32 codes into jaxcomm.teacher.DISTANCES
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


def hyper_arrays(students: Sequence[Student]) -> Hyper:
    return Hyper(jnp.asarray([s.stack_size for s in students], jnp.int32),
                 jnp.asarray([teacher.DISTANCE_CODES[s.distance] for s in students], jnp.int32),
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


def make_students(config: TeacherSelectionConfig, image_shape: tuple[int, ...], num_classes: int,
                  stack_sizes: Sequence[int]):
    """The pure functions of a population of students with stacks of ``stack_sizes[i]`` minibatches.

    Students are split into static groups (:func:`segments`, ``config.padding``); within a
    group every stack is padded to the group's largest n and masked. All groups advance in
    the same jitted step.

    Returns:
      ``(init, step, accuracy)``: ``init(keys [S, 2]) -> PopulationState``;
      ``step(state, (TrainArrays, Hyper)) -> (state, loss [S])``, pure (jit it);
      ``accuracy(params, images [B, ...] uint8, labels [B], weight [B]) -> correct [S]``, jitted.
    """
    m = config.batch_size
    model = MLP(hidden=config.student_hidden, num_classes=num_classes)
    optimizer = optax.adam(config.learning_rate)
    dummy = jnp.zeros((1, *image_shape), jnp.float32)
    random_code = teacher.DISTANCE_CODES["random"]

    def init_student(key):
        params = model.init(key, dummy)["params"]
        return population.NodeState(params, {}, optimizer.init(params))

    def loss_fn(params, model_state, images, targets):
        logits, _ = model.apply({"params": params}, to_unit_float(images))
        return -jnp.mean(jnp.sum(targets * jax.nn.log_softmax(logits), axis=-1)), (model_state, None)

    train_step = population.make_train_step(loss_fn, optimizer)

    def make_student_step(max_stack: int):
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
            hardness = teacher.scores_by_code(code, data.teacher_probs[idx], student_probs, k_select,
                                              data.labels[idx])
            chosen = idx[teacher.top_m(hardness, m, valid=jnp.arange(max_stack * m) < n * m)]
            targets = jnp.where(hyper.soft & ~plain, data.teacher_probs[chosen],
                                jax.nn.one_hot(data.labels[chosen], num_classes))
            node, (loss, _) = train_step(node, data.images[chosen], targets)
            return node, loss

        return population.lift(student_step, backend=config.backend, in_axes=(0, 0, 0, None, None),
                               map_batch_size=config.map_batch_size)

    groups = [(start, stop, make_student_step(n)) for start, stop, n in segments(stack_sizes, config.padding)]

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
        return _accuracy_counts(logits, labels, weight)

    accuracy = jax.jit(population.lift(correct, backend=config.backend, in_axes=(0, None, None, None)))
    return init, step, accuracy


def student_keys(config: TeacherSelectionConfig, students: Sequence[Student]) -> jax.Array:
    """Seed s gets the same key in every row: rows share initialisations and data order (paired comparison)."""
    base = jax.random.PRNGKey(config.seed)
    return jnp.stack([jax.random.fold_in(base, s.seed) for s in students])


def _population_accuracy(accuracy, params, split: ImageSplit) -> np.ndarray:
    counts = sum(accuracy(params, *b) for b in padded_batches(split, 2000))
    return 100.0 * np.asarray(counts) / len(split.labels)


def train_population(
    config: TeacherSelectionConfig,
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

    A student "stops" after ``patience_epochs`` epochs without improvement: its later
    evaluations are ignored (training past that point cannot change what it reports), and the
    whole population ends once every student has stopped, or, with ``stop_at``, once every
    student has reached ``stop_at`` % validation accuracy.

    Returns:
      ``{"students": [per-student dict], "seconds": training wall time, "updates_done": int}``;
      each student dict has its row, seed, the validation ``curve`` (steps, accuracies) up to its
      stop, ``best_val``, ``best_step``, ``test_accuracy`` at the best-validation parameters
      and ``stop_step``.
    """
    init, step, accuracy = make_students(config, dataset.train.images.shape[1:], dataset.num_classes,
                                         [s.stack_size for s in students])
    state = init(student_keys(config, students))
    size = len(students)
    patience = config.patience_epochs * max(1, len(dataset.train.labels) // config.batch_size)
    track = {"best_val": np.full(size, -1.0), "best_step": np.zeros(size, np.int64),
             "stop_step": np.full(size, -1, np.int64), "best_params": state.nodes.params, "steps": [], "val": []}

    def on_chunk(done, state, _):
        acc = _population_accuracy(accuracy, state.nodes.params, dataset.validation)
        active = track["stop_step"] < 0
        improved = active & (acc > track["best_val"])
        track["best_val"] = np.where(improved, acc, track["best_val"])
        track["best_step"] = np.where(improved, done, track["best_step"])
        track["best_params"] = population.where(improved, state.nodes.params, track["best_params"])
        track["steps"].append(done)
        track["val"].append(acc)
        stopping = active & (done - track["best_step"] >= patience)
        track["stop_step"] = np.where(stopping, done, track["stop_step"])
        if (track["stop_step"] >= 0).all() or (stop_at is not None and (track["best_val"] >= stop_at).all()):
            raise runner.StopRun
        return {"val": f"{np.median(acc):.2f}"}

    def metrics() -> dict:
        return {name: np.asarray(track[name]).tolist() for name in ("best_val", "best_step", "stop_step", "steps",
                                                                     "val")}

    def restore_metrics(saved: dict) -> None:
        for name in ("best_val", "best_step", "stop_step"):
            track[name] = np.asarray(saved[name], track[name].dtype)
        track["steps"], track["val"] = list(saved["steps"]), [np.asarray(v, np.float32) for v in saved["val"]]

    start = time.perf_counter()
    runner.run_in_chunks(step, state, (arrays, hyper_arrays(students)), num_steps=max_updates,
                         chunk_size=config.eval_every, summarize=lambda loss: loss, on_chunk=on_chunk,
                         progress=progress, desc=desc, loss_of=lambda loss: loss, checkpointer=checkpointer,
                         metrics=metrics, restore_metrics=restore_metrics,
                         aux=lambda: track["best_params"], restore_aux=lambda saved: track.update(best_params=saved))
    seconds = time.perf_counter() - start
    updates_done = track["steps"][-1] if track["steps"] else 0
    test = _population_accuracy(accuracy, track["best_params"], dataset.test)
    steps, val = np.asarray(track["steps"]), np.asarray(track["val"]).reshape(len(track["steps"]), size)
    out = []
    for i, s in enumerate(students):
        stop = int(track["stop_step"][i]) if track["stop_step"][i] >= 0 else updates_done
        keep = steps <= stop
        out.append({**s._asdict(), "steps": steps[keep].tolist(), "val_accuracy": np.round(val[keep, i], 3).tolist(),
                    "best_val": float(track["best_val"][i]), "best_step": int(track["best_step"][i]),
                    "test_accuracy": float(test[i]), "stop_step": stop,
                    "stopped_by_patience": bool(track["stop_step"][i] >= 0)})
    return {"students": out, "seconds": seconds, "updates_done": updates_done}


def time_per_update(config: TeacherSelectionConfig, dataset: ImageDataset, arrays: TrainArrays, stack_size: int
                    ) -> float:
    """Wall seconds per update of ONE student with stack n alone (not padded), after compilation."""
    student = Student("timing", 0, stack_size, "cross_entropy", True, 0)
    init, step, _ = make_students(config, dataset.train.images.shape[1:], dataset.num_classes, [stack_size])
    state = init(student_keys(config, [student]))
    run = runner.scan_steps(step, lambda loss: ())
    data = (arrays, hyper_arrays([student]))
    jax.block_until_ready(run(state, data, config.timing_updates))  # compile
    start = time.perf_counter()
    jax.block_until_ready(run(state, data, config.timing_updates))
    return (time.perf_counter() - start) / config.timing_updates


# --------------------------------------------------------------------------- metrics


def forward_passes(student: dict, updates: float) -> float:
    """Student forward passes (in minibatches of m) spent by ``updates`` updates.

    A selecting update forwards its n minibatches; the update's own forward pass reuses the
    selected samples' activations (§3.2.3.3: "a gain of (n-1)*m backward passes"), so a plain
    update costs 1 forward and 1 backward pass.
    """
    plain = min(updates, student["warmup"])
    return plain + (updates - plain) * student["stack_size"]


def compute_units(student: dict, updates: float) -> float:
    """Training compute: a forward pass of a minibatch = 1 unit, a backward pass = 2 (teacher cached)."""
    return forward_passes(student, updates) + 2.0 * updates


def updates_to(student: dict, threshold: float) -> float:
    """Updates until validation accuracy first reaches ``threshold`` %, inf if never (before the stop)."""
    for step, acc in zip(student["steps"], student["val_accuracy"], strict=True):
        if acc >= threshold:
            return float(step)
    return float("inf")


def _median_or_none(values: Sequence[float]) -> float | None:
    """Median over seeds, None where it is not reached (fewer than half the seeds get there)."""
    if not values:
        return None
    med = float(np.median(np.asarray(values, float)))
    return med if np.isfinite(med) else None


def _tag(value: float | None) -> str:
    return f"{value:g}".replace(".", "_")


def row_metrics(students: Sequence[dict], seconds_per_update: dict[int, float]) -> dict:
    """Table-3.1 metrics of one row from its seeds (see the issue's summary.json schema)."""
    first = students[0]
    test = np.asarray([s["test_accuracy"] for s in students])
    out = {"stack_size": first["stack_size"], "distance": first["distance"],
           "targets": "soft" if first["soft"] else "true", "warmup_updates": first["warmup"],
           "seeds": len(students),
           "collapsed_seeds": int(sum(s["best_val"] < COLLAPSE_ACCURACY for s in students)),
           "test_accuracy": round(float(test.mean()), 3),
           "test_accuracy_std": round(float(test.std(ddof=1)) if len(test) > 1 else 0.0, 3),
           "best_val_accuracy": round(float(np.mean([s["best_val"] for s in students])), 3),
           "backward_passes": _median_or_none([s["best_step"] for s in students]),
           "stop_step_median": _median_or_none([s["stop_step"] for s in students]),
           "stopped_by_patience": int(sum(s["stopped_by_patience"] for s in students))}
    for threshold in THRESHOLDS:
        per_seed = [updates_to(s, threshold) for s in students]
        out[f"updates_to_{_tag(threshold)}"] = _median_or_none(per_seed)
        out[f"seeds_reaching_{_tag(threshold)}"] = int(np.isfinite(per_seed).sum())
    med = out["updates_to_96_5"]
    n = first["stack_size"]
    out["forward_passes_to_96_5"] = None if med is None else forward_passes(first, med)
    out["compute_units_to_96_5"] = None if med is None else compute_units(first, med)
    if med is None or n not in seconds_per_update or 1 not in seconds_per_update:
        out["wall_seconds_to_96_5"] = None
    else:
        plain = min(med, first["warmup"])
        out["wall_seconds_to_96_5"] = round(plain * seconds_per_update[1] + (med - plain) * seconds_per_update[n], 2)
    return out


def add_speedups(rows: dict[str, dict]) -> None:
    """Baseline over row: updates to each threshold, and compute units and wall seconds to 96.5 %."""
    base = rows["baseline"]
    ratio = lambda b, r: None if b is None or r is None or r == 0 else round(b / r, 2)
    for row in rows.values():
        for threshold in THRESHOLDS:
            key = f"updates_to_{_tag(threshold)}"
            row[f"update_speedup_{_tag(threshold)}"] = ratio(base[key], row[key])
        row["compute_speedup_96_5"] = ratio(base["compute_units_to_96_5"], row["compute_units_to_96_5"])
        row["wall_speedup_96_5"] = ratio(base["wall_seconds_to_96_5"], row["wall_seconds_to_96_5"])


# --------------------------------------------------------------------------- run


def table_students(config: TeacherSelectionConfig) -> list[Student]:
    return [Student(row, seed, *TABLE_ROWS[row], 0) for row in config.rows for seed in range(config.seeds)]


def study_students(config: TeacherSelectionConfig, n: int) -> list[Student]:
    """Stack n, cross-entropy, soft labels: without and with the warm-up remedy."""
    return [Student(f"stack{n}_ce_soft{suffix}", seed, n, "cross_entropy", True, warmup)
            for suffix, warmup in (("", 0), ("_warmup", config.warmup_updates)) for seed in range(config.study_seeds)]


def run(config: TeacherSelectionConfig, *, checkpoints: Checkpoints | None = None, progress: bool = True) -> dict:
    """Trains the teacher (or loads it), the Table-3.1 population and the stack-size study.

    Returns:
      ``{"rows", "curves", "teacher", "groups", "seconds_per_update", "protocol"}`` for
      :func:`jaxcomm.experiment.main`.
    """
    dataset = load_dataset(config)
    params, teacher_info = train_teacher(config, dataset, progress=progress)
    arrays = TrainArrays(jnp.asarray(dataset.train.images), jnp.asarray(dataset.train.labels),
                         teacher_probs(config, params, dataset.train.images, dataset.num_classes))
    teacher_info["train_accuracy"] = 100.0 * float(
        np.mean(np.argmax(np.asarray(arrays.teacher_probs), -1) == dataset.train.labels))

    resumable = lambda name: checkpoints.run(name) if checkpoints is not None else None
    groups = {"table": train_population(config, table_students(config), dataset, arrays,
                                        max_updates=config.max_updates, progress=progress, desc="table",
                                        checkpointer=resumable("table"))}
    for n in config.study_stack_sizes:
        groups[f"stack{n}"] = train_population(config, study_students(config, n), dataset, arrays,
                                               max_updates=config.study_max_updates, stop_at=max(THRESHOLDS),
                                               progress=progress, desc=f"stack {n}",
                                               checkpointer=resumable(f"stack{n}"))
    stack_sizes = sorted({1, *(s for s, _, _ in (TABLE_ROWS[r] for r in config.rows)), *config.study_stack_sizes})
    seconds_per_update = {n: time_per_update(config, dataset, arrays, n) for n in stack_sizes
                          if config.timing_updates}

    by_row: dict[str, list[dict]] = {}
    for group in groups.values():
        for student in group["students"]:
            by_row.setdefault(student["row"], []).append(student)
    rows = {row: row_metrics(students, seconds_per_update) for row, students in by_row.items()}
    add_speedups(rows)
    for row, (acc, backward) in THESIS_TABLE.items():
        if row in rows:
            rows[row]["thesis_test_accuracy"], rows[row]["thesis_backward_passes"] = acc, backward
    curves = [{"group": name, **s} for name, group in groups.items() for s in group["students"]]
    return {"rows": rows, "curves": curves, "teacher": teacher_info,
            "groups": {name: {"students": len(g["students"]), "updates_done": g["updates_done"],
                              "seconds": round(g["seconds"], 1)} for name, g in groups.items()},
            "seconds_per_update": {str(n): t for n, t in seconds_per_update.items()},
            "protocol": {"eval_every": config.eval_every, "thresholds": THRESHOLDS,
                         "collapse_below": COLLAPSE_ACCURACY, "soft_label_temperature": 1.0,
                         "compute_units": "forward pass of a minibatch = 1, backward pass = 2",
                         "dataset_sizes": [len(dataset.train.labels), len(dataset.validation.labels),
                                           len(dataset.test.labels)]}}


FIG_LEFT = ("baseline", "stack2_ce_soft", "stack2_ce_true", "stack2_euclid_soft", "stack2_random_soft")
FIG_RIGHT = ("baseline", "stack2_ce_soft", "stack5_ce_soft", "stack5_ce_true", "stack5_learn_true")
LABELS = {"baseline": "baseline (no teacher, true labels)", "stack2_ce_soft": "stack 2, cross-entropy, soft labels",
          "stack2_ce_true": "stack 2, cross-entropy, true labels",
          "stack2_euclid_soft": "stack 2, Euclidean, soft labels", "stack2_random_soft": "stack 2, random, soft labels",
          "stack5_ce_soft": "stack 5, cross-entropy, soft labels",
          "stack5_ce_true": "stack 5, cross-entropy, true labels",
          "stack5_learn_true": "stack 5, learnability, true labels (beyond thesis)"}


def _mean_band(students: list[dict]) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Steps, mean, min and max of validation accuracy over seeds, up to the shortest curve."""
    length = min(len(s["steps"]) for s in students)
    acc = np.asarray([s["val_accuracy"][:length] for s in students])
    return np.asarray(students[0]["steps"][:length]), acc.mean(0), acc.min(0), acc.max(0)


def plot_fig3_1(curves: list[dict], path: pathlib.Path) -> None:
    """Thesis Fig. 3.1: validation accuracy vs student backward passes, mean over seeds, min-max band."""
    plt = experiment.pyplot()

    table = [c for c in curves if c["group"] == "table"]
    fig, axes = plt.subplots(1, 2, figsize=(13, 5), sharey=True)
    for ax, rows, title in ((axes[0], FIG_LEFT, "stack of 2 minibatches"),
                            (axes[1], FIG_RIGHT, "stack of 5 minibatches")):
        for row in rows:
            students = [c for c in table if c["row"] == row]
            if not students:
                continue
            steps, mean, low, high = _mean_band(students)
            style = "--" if row == "stack5_learn_true" else "-"
            line, = ax.plot(steps, mean, style, color=f"C{list(LABELS).index(row)}",
                            label=f"{LABELS[row]} ({len(students)} seeds)")
            ax.fill_between(steps, low, high, color=line.get_color(), alpha=0.15, linewidth=0)
        for threshold in THRESHOLDS:
            ax.axhline(threshold, color="grey", linewidth=0.6, linestyle=":")
        ax.set_ylim(92, 98)
        ax.set_xlabel("student backward passes (parameter updates)")
        ax.set_title(title)
        ax.legend(fontsize=8, loc="lower right")
        ax.grid(alpha=0.3)
    axes[0].set_ylabel("validation accuracy (%)  mean over seeds, band = min..max")
    fig.suptitle("Teacher selects the student's minibatch (MNIST, student 784-32-32-10, m = 32); "
                 "dotted: 96.5 % and 96.8 %", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def study_rows(summary: dict) -> list[tuple[int, str | None, str | None]]:
    """(n, row without warm-up, row with warm-up) of the stack-size study, n = 1, 2, 5 from the table."""
    rows = summary["rows"]
    sizes = sorted({r["stack_size"] for r in rows.values()})
    out = []
    for n in sizes:
        plain = {1: "baseline"}.get(n, f"stack{n}_ce_soft")
        warm = f"stack{n}_ce_soft_warmup"
        out.append((n, plain if plain in rows else None, warm if warm in rows else None))
    return out


def plot_stack_sizes(summary: dict, path: pathlib.Path) -> None:
    """Updates and compute to the baseline's accuracy level (96.5 %) vs stack size n, with and without warm-up."""
    plt = experiment.pyplot()

    rows, study = summary["rows"], study_rows(summary)
    fig, axes = plt.subplots(1, 2, figsize=(12, 4.8))
    for key, ax, ylabel in (("updates_to_96_5", axes[0], "median backward passes to 96.5 % validation"),
                            ("compute_units_to_96_5", axes[1], "median compute to 96.5 % (forward 1, backward 2)")):
        notes = []
        for variant, marker, label in ((1, "o-", "no warm-up"),
                                       (2, "s--", f"warm-up: {summary['config']['warmup_updates']} plain updates")):
            points = [(n, rows[names[variant]]) for names in study for n in [names[0]] if names[variant] is not None]
            if variant == 2 and points:  # n = 1 has nothing to warm up: start from the baseline
                points = [(1, rows["baseline"])] + points
            reached = [(n, r[key]) for n, r in points if r[key] is not None]
            if reached:
                ax.plot(*zip(*reached, strict=True), marker, label=label, color=f"C{variant - 1}")
            for n, r in points:
                text = ("not reached; " if r[key] is None else "") + (
                    f"{r['collapsed_seeds']}/{r['seeds']} collapsed" if r["collapsed_seeds"] else "")
                if text:
                    notes.append((n, r[key], text.rstrip("; "), variant))
        base = rows["baseline"][key]
        if base is not None:
            ax.axhline(base, color="grey", linewidth=0.8, linestyle=":", label="baseline")
        for n, value, text, variant in notes:
            if value is not None:
                ax.annotate(text, (n, value), fontsize=7, color=f"C{variant - 1}", textcoords="offset points",
                            xytext=(4, -12 * variant + 6))
            else:  # vertical, side by side: one column per variant
                ax.annotate(text, (n, 0.35), xycoords=ax.get_xaxis_transform(), fontsize=7, rotation=90,
                            color=f"C{variant - 1}", textcoords="offset points", xytext=(-10 + 10 * variant, 0))
        ax.set_xscale("log")
        ax.set_xlim(0.8, 2.5 * max(n for n, _, _ in study))  # room for the notes right of the last n
        ax.set_xticks([n for n, _, _ in study], [str(n) for n, _, _ in study])
        ax.set_xlabel("teacher stack size n (minibatches the teacher chooses from)")
        ax.set_ylabel(ylabel, fontsize=9)
        ax.set_ylim(bottom=0)
        ax.grid(alpha=0.3)
        if ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize=8)
    fig.suptitle("Stack-size study: cross-entropy selection, soft labels (median over seeds; n = 1 is the "
                 "baseline)", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def _fmt(value: Any, digits: int = 0) -> str:
    return experiment.cell(value, digits, missing="n.r.")


def table_markdown(summary: dict) -> str:
    """table.md: thesis Table 3.1 beside the measured numbers, the study, and the choices made."""
    rows, config, teacher_info = summary["rows"], summary["config"], summary["teacher"]
    lines = ["# Chapter 3: a teacher selects the student's training data (MNIST): Table 3.1 and Figure 3.1", "",
             f"Command: `{summary['command']}`  ", f"Preset `{summary['preset']}`, wall time "
             f"{summary['wall_seconds']:.0f} s on {summary['device']} (2-core CPU, no GPU); commit "
             f"`{summary['git_commit']}`.  ",
             f"Teacher {'loaded from the cache' if teacher_info.get('cached') else 'trained in this run'} "
             f"(784-{'-'.join(map(str, config['teacher_hidden']))}-10, dropout {config['teacher_dropout']}, "
             f"{teacher_info['epochs']} epochs, best at epoch {teacher_info['best_epoch']}, "
             f"{teacher_info['seconds']:.0f} s to train): validation {teacher_info['val_accuracy']:.2f} %, test "
             f"{teacher_info['test_accuracy']:.2f} %, training-set {teacher_info['train_accuracy']:.2f} %.", "",
             "## Table 3.1", "",
             "Test accuracy at the best-validation parameters (mean ± std over seeds); backward passes = median "
             "updates at the best validation accuracy (the thesis' column); then the robust headline: median "
             "updates until validation accuracy first reaches 96.5 % / 96.8 % (evaluated every "
             f"{config['eval_every']} updates), their speedup over the baseline, student forward passes "
             "(minibatches) to 96.5 %, compute speedup to 96.5 % (forward = 1, backward = 2 units, teacher "
             "predictions cached), wall-clock seconds to 96.5 % of one student alone, and seeds whose best "
             "validation accuracy stayed under 90 % (collapsed). n.r. = not reached by at least half the seeds.", "",
             "| configuration | thesis acc. | thesis backward | acc. (%) | backward at best val | updates to 96.5 | "
             "updates to 96.8 | speedup 96.5 / 96.8 | forward to 96.5 | compute speedup | wall s to 96.5 "
             "(speedup) | collapsed |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for row in TABLE_ROWS:
        if row not in rows:
            continue
        r = rows[row]
        thesis = THESIS_TABLE.get(row)
        lines.append(
            f"| {LABELS[row]} | {thesis[0] if thesis else '-'} | {_fmt(thesis[1]) if thesis else '-'} | "
            f"{r['test_accuracy']:.2f} ± {r['test_accuracy_std']:.2f} | {_fmt(r['backward_passes'])} | "
            f"{_fmt(r['updates_to_96_5'])} ({r['seeds_reaching_96_5']}/{r['seeds']}) | "
            f"{_fmt(r['updates_to_96_8'])} ({r['seeds_reaching_96_8']}/{r['seeds']}) | "
            f"{_fmt(r['update_speedup_96_5'], 2)} / {_fmt(r['update_speedup_96_8'], 2)} | "
            f"{_fmt(r['forward_passes_to_96_5'])} | {_fmt(r['compute_speedup_96_5'], 2)} | "
            f"{_fmt(r['wall_seconds_to_96_5'], 1)} ({_fmt(r['wall_speedup_96_5'], 2)}) | "
            f"{r['collapsed_seeds']}/{r['seeds']} |")
    lines += ["", "## Stack-size study (cross-entropy, soft labels)", "",
              f"n = 1, 2, 5 are the table's rows (baseline, stack 2 and stack 5 CE soft); n >= 10 ran as one "
              f"population per n with {config['study_seeds']} seeds, without and with a warm-up of "
              f"{config['warmup_updates']} plain updates (random minibatch, true labels) before selection starts, "
              f"for at most {config['study_max_updates']:,} updates, stopping once every student had reached "
              f"{max(THRESHOLDS)} % (so their test accuracy is at an early best-validation point).", "",
              "| n | warm-up | seeds | collapsed | best val. (%) | updates to 96.5 | updates to 96.8 | "
              "update speedup 96.5 | forward to 96.5 | compute speedup 96.5 | wall s to 96.5 |",
              "|---|---|---|---|---|---|---|---|---|---|---|"]
    for n, plain, warm in study_rows(summary):
        for name in (plain, warm):
            if name is None:
                continue
            r = rows[name]
            lines.append(f"| {n} | {r['warmup_updates']} | {r['seeds']} | {r['collapsed_seeds']} | "
                         f"{r['best_val_accuracy']:.2f} | {_fmt(r['updates_to_96_5'])} "
                         f"({r['seeds_reaching_96_5']}/{r['seeds']}) | {_fmt(r['updates_to_96_8'])} "
                         f"({r['seeds_reaching_96_8']}/{r['seeds']}) | {_fmt(r['update_speedup_96_5'], 2)} | "
                         f"{_fmt(r['forward_passes_to_96_5'])} | {_fmt(r['compute_speedup_96_5'], 2)} | "
                         f"{_fmt(r['wall_seconds_to_96_5'], 1)} |")
    spu = ", ".join(f"n={n}: {1e3 * t:.2f} ms" for n, t in summary["seconds_per_update"].items())
    groups = ", ".join(f"{name}: {g['students']} students, {g['updates_done']:,} updates, {g['seconds']:.0f} s"
                       for name, g in summary["groups"].items())
    lines += ["", f"Wall time per update of one student alone (after compilation): {spu}.  ",
              f"Populations (one jitted step each): {groups}.", "",
              "## Choices where the thesis is silent", "",
              "- Data: MNIST official training set split 50,000 / 10,000 (the last 10,000 as validation), "
              "official 10,000 test (§3.2.2.1); pixels scaled to [0, 1], no augmentation.",
              f"- Teacher: dropout {config['teacher_dropout']} after each hidden layer (Srivastava et al.'s hidden "
              f"rate), no input dropout, Adam 1e-3, batch {config['teacher_batch_size']}, early stopping on "
              f"validation accuracy checked each epoch with patience {config['teacher_patience']} epochs (max "
              f"{config['teacher_max_epochs']}), best-validation parameters kept; cached on disk by its config.",
              "- Initialisation: Flax defaults (LeCun-normal kernels, zero biases) for teacher and students; "
              "seed s gets the same initialisation and data stream in every row (paired comparison).",
              "- Minibatches are drawn uniformly with replacement from the 50,000 training images (for the "
              "baseline and for every minibatch the student sends to the stack).",
              "- Soft labels: the teacher's softmax at temperature 1; the student's loss is the cross-entropy to "
              "the targets (eq. 2.2.2); the teacher's predictions on the training set are computed once.",
              f"- Validation accuracy is evaluated every {config['eval_every']} updates; \"updates to X\" is the "
              "first evaluation at or above X, so it has that resolution.",
              f"- Stop rule: {config['patience_epochs']} epochs ({config['patience_epochs']} x 50,000 / 32 updates) "
              f"without validation improvement, or the preset's budget of {config['max_updates']:,} updates, "
              "whichever comes first; on 2 CPU cores the budget comes first, so the thesis' \"backward passes at "
              "best validation\" is capped by it.",
              "- Counting: one update = one backward pass of m = 32 samples; a selecting update forwards n "
              "minibatches and reuses the chosen samples' forward pass for the gradient (\"a gain of (n-1)*m "
              "backward passes\", §3.2.3.3), so a plain update costs 1 forward + 1 backward.",
              "- Stack of n = 1 with true labels is exactly the baseline (the teacher returns the only minibatch).",
              f"- Collapse: best validation accuracy under {COLLAPSE_ACCURACY} %.", ""]
    return "\n".join(lines)


def write_report(out_dir: pathlib.Path) -> None:
    """Writes table.md, fig3_1.png and stack_size.png from ``summary.json`` and ``curves.jsonl`` in ``out_dir``."""
    summary, curves = experiment.read_run(out_dir)
    plot_fig3_1(curves, out_dir / "fig3_1.png")
    plot_stack_sizes(summary, out_dir / "stack_size.png")
    experiment.write_table(out_dir, table_markdown(summary))


def cli(argv: Sequence[str] | None = None) -> int:
    """``report DIR`` redraws plots and table from a run's files; anything else runs the experiment."""
    return experiment.cli(argv, experiment=EXPERIMENT, presets=PRESETS, run=run,
                          description=__doc__.split("\n\n")[0], write_report=write_report)


if __name__ == "__main__":
    sys.exit(cli())
