"""The one training driver: any system, in jitted chunks, with evaluation, checkpoints and stops.

A *system* is a :class:`System`, a value of pure functions (``init``, ``step``)
and a host-side ``evaluate``. :func:`train` runs it:

* steps run in chunks, as one jitted ``lax.scan``, one jitted call per step, or
  a step run in Python whose own jitted pieces stay separate calls
  (``System.step_loop``); the Python side only touches the state between
  chunks (evaluation, the progress bar, checkpoints);
* after every ``eval_every`` steps, ``evaluate`` adds a record to the history;
* a :class:`Tracker` keeps each member's best-by-validation values (the
  parameters at its best score), with per-member patience and a common target;
* a non-finite loss, or one past ``divergence`` x the mean loss of the run's
  first step (the untrained system), stops the run naming the node and step;
* with a :class:`jaxcomm.checkpoint.Checkpointer` the state, history and best
  values are saved every ``checkpointer.every`` steps and on SIGINT/SIGTERM, and
  a resumed run ends with exactly the history of an uninterrupted one;
* SIGINT/SIGTERM are honoured between steps of a dispatched chunk; a scanned
  chunk measured to run longer than ``max_block_seconds`` is cut into pieces
  that divide ``eval_every`` (a length's first call, mostly compilation, is not
  judged);
* :func:`interruptible` extends that guard over a whole call (building a system,
  choosing its backend by timing, compiling, training, evaluating): a signal at
  any moment stops the call at the next check, never inside JAX.

Every system of jaxcomm (chapter 2's network, data-parallel SGD, chapter 3's
teacher and students, chapter 4's agents) and research code's own systems
train through :func:`train`.
"""

from __future__ import annotations

import functools
import json
import os
import signal
import sys
import threading
import time
from collections.abc import Callable
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax.experimental import multihost_utils
from tqdm.auto import tqdm

from jaxcomm import compiling, curves
from jaxcomm.checkpoint import Checkpointer
from jaxcomm.population import to_host, where

PyTree = Any
STEP_LOOPS = ("scan", "dispatch", "eager")
DIVERGENCE = 100.0
"""The default divergence watch: a loss past this multiple of the mean loss at the run's first step stops the run
(an untrained classifier's cross-entropy is about log C; a hundredfold is far past any wobble of training)."""


def _identity(info):
    return info


class Layout(NamedTuple):
    """How the "eager" and "dispatch" step loops hold a state within a chunk of steps, and back.

    Attributes:
      apart: ``apart(state) -> state`` at a chunk's start, e.g. node states as
        :class:`jaxcomm.population.Unstacked` (one set of buffers per node).
      together: ``together(state) -> state`` at its end: the state evaluations,
        checkpoints and the caller see (stacked).
    """

    apart: Callable[[PyTree], PyTree]
    together: Callable[[PyTree], PyTree]


class System(NamedTuple):
    """A training system the driver runs: pure functions plus a host-side evaluation.

    Attributes:
      init: ``init(key) -> state``, pure.
      step: ``step(state, data) -> (state, info)``, pure; ``data`` holds the
        constant arrays the step reads (passed as an argument, never baked in).
      evaluate: ``evaluate(state, infos, steps_done) -> dict``, on the host after
        every ``eval_every`` steps; ``infos`` are the chunk's summarized infos
        (leading axis ``[L]``). The dict (JSON-able) becomes a history record.
      losses: ``losses(infos) -> [L] or [L, N]``: the losses the non-finite and
        divergence stops watch (None: no watch).
      summarize: maps one step's ``info`` to what is kept per step; keep it small
        (XLA drops whatever the summary does not use).
      step_loop: "scan" (a chunk is one ``lax.scan``), "dispatch" (one jitted
        call per step: faster for convolutions on CPU, see :mod:`jaxcomm.speed`)
        or "eager" (the step is not jitted: its pieces, e.g. the "loop" lift's one
        compiled call per node, run as they are; see :func:`dispatch_steps`).
      postfix: ``postfix(record) -> dict`` shown beside the progress bar.
      layout: how the "eager" and "dispatch" step loops hold the state within a chunk (None: as it is; a
        "scan" keeps it as it is).
    """

    init: Callable[[jax.Array], PyTree]
    step: Callable[[PyTree, PyTree], tuple[PyTree, PyTree]]
    evaluate: Callable[[PyTree, PyTree, int], dict]
    losses: Callable[[PyTree], jax.Array] | None = None
    summarize: Callable[[PyTree], PyTree] = _identity
    step_loop: str = "scan"
    postfix: Callable[[dict], dict] | None = None
    layout: Layout | None = None


class Tracker(NamedTuple):
    """Per-member best-by-validation: what to score, what to keep, when a member or the run stops.

    Attributes:
      score: ``score(record) -> [R]`` validation scores of the R members (higher
        is better) from an evaluation record.
      keep: ``keep(state) -> PyTree`` with leaves ``[R, ...]``: the values kept at
        each member's best score (its parameters, say).
      patience: a member whose best is ``patience`` or more steps old stops: its
        later evaluations no longer change its best (None: never).
      stop_at: the run ends once every member's best score is >= this (None: never).
    """

    score: Callable[[dict], Any]
    keep: Callable[[PyTree], PyTree]
    patience: int | None = None
    stop_at: float | None = None


class Best(NamedTuple):
    """What a :class:`Tracker` holds.

    Attributes:
      score: ``[R] float64`` best score so far, -inf before the first evaluation.
      step: ``[R] int64`` steps done at that score.
      stop: ``[R] int64`` step at which the member ran out of patience, -1 while active.
      kept: the tracker's ``keep`` at each member's best, leaves ``[R, ...]``.
    """

    score: np.ndarray
    step: np.ndarray
    stop: np.ndarray
    kept: PyTree


def start_best(tracker: Tracker, state: PyTree) -> Best:
    """The tracker's state before any evaluation (sized from ``tracker.keep(state)``)."""
    kept = tracker.keep(state)
    size = jax.tree_util.tree_leaves(kept)[0].shape[0]
    return Best(np.full(size, -np.inf), np.zeros(size, np.int64), np.full(size, -1, np.int64), kept)


def update_best(tracker: Tracker, best: Best, record: dict, state: PyTree, steps_done: int) -> tuple[Best, bool]:
    """``(best, finished)`` after an evaluation: active members that improved keep their values.

    ``finished`` is True once every member has stopped or every best reaches ``tracker.stop_at``.
    """
    scores = np.asarray(tracker.score(record), np.float64).reshape(best.score.shape)
    active = best.stop < 0
    improved = active & (scores > best.score)
    kept = best.kept
    if improved.any():
        kept = where(jnp.asarray(improved), tracker.keep(state), best.kept)
    step = np.where(improved, steps_done, best.step)
    stop = best.stop
    if tracker.patience is not None:
        stop = np.where(active & (steps_done - step >= tracker.patience), steps_done, best.stop)
    best = Best(np.where(improved, scores, best.score), step, stop, kept)
    finished = bool((best.stop >= 0).all()) or (tracker.stop_at is not None
                                                 and bool((best.score >= tracker.stop_at).all()))
    return best, finished


class Interrupted(KeyboardInterrupt):
    """A checkpointed run was stopped by SIGINT/SIGTERM after saving; ``--resume`` continues it."""

    def __init__(self, steps_done: int, directory: str):
        super().__init__(f"interrupted after {steps_done} steps; checkpoint saved in {directory}")
        self.steps_done, self.directory = steps_done, directory


class LossStop(FloatingPointError):
    """A loss left its bounds; ``step`` (0-based, of the run) and ``node`` (or None) name the first."""

    def __init__(self, what: str, step: int, node: int | None, value: float, *, good_step: int, saved: str | None):
        where_ = f"node {node} at step {step}" if node is not None else f"step {step}"
        kept = f"; the last good state (after {good_step} steps) is checkpointed in {saved}" if saved else ""
        super().__init__(f"{what} ({value:.6g}) at {where_}{kept}")
        self.step, self.node, self.value = step, node, value


class NonFiniteLoss(LossStop):
    """A loss became NaN or infinite."""

    def __init__(self, step: int, node: int | None, value: float, **kwargs):
        super().__init__("non-finite loss", step, node, value, **kwargs)


class Diverged(LossStop):
    """A loss grew past ``bound`` (``divergence`` x the loss at the run's first step)."""

    def __init__(self, step: int, node: int | None, value: float, *, bound: float, **kwargs):
        super().__init__(f"diverged: loss above {bound:.6g}", step, node, value, **kwargs)
        self.bound = bound


def first_bad(losses: np.ndarray, bound: float = np.inf) -> tuple[int, int | None, float] | None:
    """``(step index, node or None, value)`` of the first entry of ``losses [L]`` or ``[L, N]`` that is
    non-finite or whose magnitude exceeds ``bound``."""
    losses = np.asarray(losses, np.float64)
    flat = losses.reshape(len(losses), -1)
    bad = ~np.isfinite(flat) | (np.abs(flat) > bound)
    if not bad.any():
        return None
    step = int(np.argmax(bad.any(axis=1)))
    node = int(np.argmax(bad[step])) if losses.ndim > 1 else None
    return step, node, float(flat[step, node or 0])


_SIGNALS = (signal.SIGINT, signal.SIGTERM)


class _Flag:
    """What every guard of the main thread shares while the outermost one is active: the first signal that
    came (``signum``, None before), and whether a check acted on it (``acted``: raised for it)."""

    __slots__ = ("signum", "acted")

    def __init__(self):
        self.signum: int | None = None
        self.acted = False


_outermost: _StopOnSignal | None = None  # the main thread's guard that installed the handlers, while active


class _StopOnSignal:
    """Within the block, SIGINT and SIGTERM set a flag that the loop checks between steps and pieces.

    A KeyboardInterrupt raised while JAX dispatches or compiles can crash the
    interpreter on exit, so the first signal only asks the run to stop at the
    next check; a second one raises at once. A signal caught after the last
    check is passed on to the previous handler by :meth:`pass_on` (main thread only).

    Guards nest (main thread only): the outermost one installs the handlers (also over SIG_IGN, which a job
    started in the background of a non-interactive shell inherits) and restores the previous ones on exit; an
    inner one (:func:`train` within :func:`interruptible`) shares its flag, installs nothing, and leaves the
    passing on to the outermost one. Outside the main thread a guard catches nothing (Python delivers signals
    to the main thread only).

    Across processes (``jax.distributed``) every process must run the same programs, so a signal to
    one (a preempted host) stops all of them together at the next chunk boundary
    (:meth:`check_together`, one all-gather per chunk); the checks between steps and pieces wait.
    """

    def __init__(self, processes: int | None = None):
        self._processes = processes  # None: jax.process_count(), read when first needed
        self.flag, self._old, self._owner = _Flag(), {}, False

    @property
    def processes(self) -> int:
        if self._processes is None:
            self._processes = jax.process_count()
        return self._processes

    @property
    def signum(self) -> int | None:
        return self.flag.signum

    @signum.setter
    def signum(self, value: int | None) -> None:
        self.flag.signum = value

    @property
    def acted(self) -> bool:
        return self.flag.acted

    @acted.setter
    def acted(self, value: bool) -> None:
        self.flag.acted = value

    def __enter__(self):
        global _outermost  # pylint: disable=global-statement
        self.flag, self._old, self._owner = _Flag(), {}, False
        if threading.current_thread() is threading.main_thread():
            if _outermost is not None:
                self.flag = _outermost.flag  # nested: one flag, the outer handlers
            else:
                for signum in _SIGNALS:
                    self._old[signum] = signal.signal(signum, self._handle)
                _outermost, self._owner = self, True
        return self

    def _handle(self, signum, frame):
        if self.flag.signum is not None:
            self.flag.acted = True  # raised for: nothing left to pass on
            if "ipykernel" in sys.modules:  # a notebook's kernel lives on: it gets the interrupt
                raise KeyboardInterrupt(f"signal {signum}")
            # a KeyboardInterrupt raised inside XLA (a compile in progress) can end the process in a segmentation
            # fault: exit at once instead, with the shell's status for the signal; saved checkpoints stay
            print(f"jaxcomm: signal {signum} again: exiting now (status {128 + signum})", file=sys.stderr,
                  flush=True)
            sys.stdout.flush()
            _exit(128 + signum)
        self.flag.signum = signum
        if signum == signal.SIGINT:  # someone at the keyboard waits for an answer (a scheduler's SIGTERM does not)
            print("jaxcomm: interrupted: stopping at the next check (after the compilation or chunk in progress); "
                  "Ctrl-C again exits at once", file=sys.stderr, flush=True)

    def check(self) -> None:
        """Raises KeyboardInterrupt (from Python, between JAX calls) once a signal came (one process only)."""
        if self.signum is not None and self.processes == 1:
            self.acted = True
            raise KeyboardInterrupt(f"signal {self.signum}")

    def check_together(self) -> None:
        """At a chunk boundary: raises KeyboardInterrupt in every process once any process has a signal."""
        if self.processes == 1:
            return self.check()
        signals = np.asarray(multihost_utils.process_allgather(np.int32(self.signum or 0)))
        if signals.any():
            self.signum, self.acted = self.signum or int(signals.max()), True
            raise KeyboardInterrupt(f"signal {self.signum}")
        return None

    def __exit__(self, *exc):
        global _outermost  # pylint: disable=global-statement
        if self._owner:
            for signum, old in self._old.items():
                # None: a handler not installed from Python, which cannot be put back; the default instead
                signal.signal(signum, signal.SIG_DFL if old is None else old)
            _outermost = None
        return False

    def pass_on(self) -> None:
        """After the block: delivers a signal that no check acted on to the handler the block replaced.

        Only the outermost guard passes on (an inner one leaves it to it). Where that handler ignored the
        signal (SIG_IGN) or was not Python's, a KeyboardInterrupt is raised instead: a signal that came while
        the guard held it is never dropped.
        """
        if not self._owner or self.signum is None or self.acted:
            return
        self.acted = True  # passed on once
        old = self._old.get(self.signum)
        if old is None or old == signal.SIG_IGN:
            raise KeyboardInterrupt(f"signal {self.signum}")
        signal.raise_signal(self.signum)


_exit = os._exit  # how a second signal ends the process (tests in-process replace it)


def interruptible(fn: Callable | None = None):
    """Guards a whole call against SIGINT and SIGTERM: they stop it at the next check, never inside JAX.

    ``@driver.interruptible`` on a function, or ``with driver.interruptible():`` around a block. Within it
    (main thread only), the first SIGINT/SIGTERM only sets a flag (a SIGINT says so on stderr), so a signal while a
    network is built, its backend is timed, or its first program compiles no longer raises KeyboardInterrupt
    inside XLA (after which the interpreter could die of a segmentation fault); a second one ends the process at
    once with status 128 + the signal (130 for SIGINT; checkpoints already saved stay), or, in a notebook's kernel,
    raises KeyboardInterrupt. The flag is honoured at the next check:

    * every :func:`train` within the call shares it (its own guard nests, installing nothing): a signal that came
      before or during a run stops it at its next check, before its first chunk if it came earlier, and the run
      returns with status "interrupted" (or raises :class:`Interrupted` when checkpointed); later runs of the
      call (a sweep's) stop likewise, after 0 steps;
    * :func:`interruption_point`, which code within the call may place between long steps of its own
      (between the builds of a sweep, say), raises KeyboardInterrupt there;
    * on leaving the block normally, a signal that no check acted on (it came after the last one, or no
      :func:`train` ran) is delivered to the handler the guard replaced: Python's default for SIGINT raises
      KeyboardInterrupt there, the default for SIGTERM ends the process; where SIGINT was ignored (SIG_IGN: a
      job started in the background of a non-interactive shell) a KeyboardInterrupt is raised instead. So a
      signal at any moment ends the call interrupted, never with a complete result.

    Guards nest: only the outermost one installs handlers (also over SIG_IGN) and restores the previous ones
    on exit. Across processes, runs stop together at a chunk boundary as in :func:`train`.

    Returns:
      ``interruptible(fn)``: ``fn`` guarded (one guard per call); ``interruptible()``: a guard, a context
      manager whose ``signum`` is the first signal that came within it (None before).

    Raises:
      KeyboardInterrupt: a signal no run acted on (on leaving the block), a second signal in a notebook (at
        once), or a signal at an :func:`interruption_point`.
    """
    if fn is None:
        return _Guard()

    @functools.wraps(fn)
    def guarded(*args, **kwargs):
        with _Guard():
            return fn(*args, **kwargs)

    return guarded


class _Guard:
    """The context manager of :func:`interruptible`."""

    def __init__(self):
        self._stopper = _StopOnSignal()

    def __enter__(self) -> _Guard:
        self._stopper.__enter__()
        return self

    def __exit__(self, exc_type, exc, tb) -> bool:
        self._stopper.__exit__(exc_type, exc, tb)
        if exc_type is None:  # an exception already ends the call unfinished: it goes on as it is
            self._stopper.pass_on()
        return False

    @property
    def signum(self) -> int | None:
        """The first signal that came within the block, or None."""
        return self._stopper.signum


def interruption_point() -> None:
    """Raises KeyboardInterrupt once a signal came within the main thread's :func:`interruptible` block (in a
    single-process run; across processes only :func:`train`'s chunk boundaries stop, all together). Elsewhere,
    or with no signal, it does nothing. Place it between long steps that are not a :func:`train`."""
    if _outermost is not None and threading.current_thread() is threading.main_thread():
        _outermost.check()


@functools.lru_cache(maxsize=32)
def scan_steps(step_fn: Callable, summarize: Callable = _identity, donate: bool = False) -> Callable:
    """Jitted ``run(state, data, length) -> (state, infos)`` of ``length`` steps as one ``lax.scan``.

    Compiled once per distinct ``length`` and shapes; ``infos`` has a leading ``[length]`` axis. Cached
    per ``(step_fn, summarize, donate)``: training the same system again (a sweep's runs one by one) does
    not compile again. ``donate``: the input state's buffers are given to the output state (the caller's
    ``state`` is unusable afterwards), so a large population is not held twice on the device.
    """

    def run(state, data, length):
        def body(carry, _):
            carry, info = step_fn(carry, data)
            return carry, summarize(info)

        return jax.lax.scan(body, state, None, length=length)

    return compiling.jit(run, static_argnums=2, donate_argnums=0 if donate else ())


def dispatch_steps(step_fn: Callable, summarize: Callable = _identity, *,
                   check: Callable[[], None] = lambda: None, donate: bool = False, jit: bool = True,
                   layout: Layout | None = None) -> Callable:
    """Like :func:`scan_steps`, but one jitted call per step, no loop in the program.

    On CPU, XLA runs convolutions inside a loop body far slower than at the top
    level (see :mod:`jaxcomm.speed`); a step that costs milliseconds loses
    nothing to the per-call dispatch. ``check()`` runs before every step (the
    driver's stop on a signal). ``jit=False`` (the "eager" step loop) calls
    ``step_fn`` as it is: a step whose heavy parts are jitted pieces of their
    own (a "loop" population's one compiled call per node, on CPU faster for
    convolutions than any single program of N nodes past a few tens of nodes,
    and compiled once whatever N) pays only the dispatch of its small ops;
    nothing is donated. ``layout`` (if any) holds the state apart for the
    chunk's steps, jitted or not (a jitted step compiles for the state as the
    layout holds it).
    """

    step = _jitted_step(step_fn, summarize, donate) if jit else _summarized(step_fn, summarize)
    apart, together = layout if layout is not None else (_identity, _identity)

    def run(state, data, length):
        infos = []
        state = apart(state)
        for _ in range(length):
            check()
            # Waiting on every step keeps a signal from queueing behind a whole chunk of dispatched steps.
            state, info = jax.block_until_ready(step(state, data))
            infos.append(info)
        return together(state), jax.tree_util.tree_map(lambda *leaves: jnp.stack(leaves), *infos)

    return run


def chunk_runner(step_fn: Callable, summarize: Callable, step_loop: str, *,
                 check: Callable[[], None] = lambda: None, donate: bool = False,
                 layout: Layout | None = None) -> Callable:
    """``run(state, data, length) -> (state, infos)`` of the step loop :class:`System` names: :func:`scan_steps`
    for "scan" (``layout`` unused), :func:`dispatch_steps` for "dispatch" and, not jitted, for "eager"."""
    if step_loop == "scan":
        return scan_steps(step_fn, summarize, donate)
    return dispatch_steps(step_fn, summarize, check=check, donate=donate, jit=step_loop == "dispatch",
                          layout=layout)


def _summarized(step_fn: Callable, summarize: Callable) -> Callable:
    def step(state, data):
        state, info = step_fn(state, data)
        return state, summarize(info)

    return step


@functools.lru_cache(maxsize=32)
def _jitted_step(step_fn: Callable, summarize: Callable, donate: bool = False) -> Callable:
    """One jitted step (summarized), cached like :func:`scan_steps`."""
    return compiling.jit(_summarized(step_fn, summarize), donate_argnums=0 if donate else ())


def own_buffers(tree):
    """A copy of every array of ``tree``: a donated run then consumes buffers of its own, never the caller's
    (an ``init`` may return arrays it also keeps), and never one buffer twice, which XLA refuses (a network's
    first state holds one array as both ``up`` and ``alive``)."""
    return jax.tree.map(lambda leaf: jnp.copy(leaf) if isinstance(leaf, jax.Array) else leaf, tree)


def donation(donate: bool | None) -> bool:
    """``donate``, or for None (auto) whether this is a single-process run. On an accelerator a large
    population's second copy is what runs out of memory; on a CPU a donated step updates the optimizer's
    buffers in place instead of allocating new ones (1.08x for 64 student nodes,
    ``results/benchmark/vs_pytorch/notes.md``), and the host copy :func:`train` keeps instead (one per evaluation)
    costs what the second device copy did. Across processes a global array has no host copy: what a stop falls
    back to would be a second device copy, so such a run donates only when asked."""
    return jax.process_count() == 1 if donate is None else bool(donate)


def _pieces(length: int, seconds_per_step: float, max_block_seconds: float) -> int:
    """The largest divisor of ``length`` whose scan should take at most ``max_block_seconds``, never 1 where
    ``length`` has another: XLA compiles a scan of one step without its loop, to other float rounding than a
    longer piece, so a run cut that far on a slow or loaded machine would not equal the same run on a fast one
    (a chapter-4 member, cut to single steps, ended 0.1 points apart)."""
    fits = int(max_block_seconds / max(seconds_per_step, 1e-9))
    divisors = [d for d in range(2, length + 1) if length % d == 0] or [1]
    return max([d for d in divisors if d <= fits] or divisors[:1])


def _jsonable(value: Any) -> Any:
    return json.loads(json.dumps(value, default=lambda v: v.tolist() if hasattr(v, "tolist") else str(v)))


class _Progress(NamedTuple):
    """Where a :func:`train` run stands: what a checkpoint holds.

    Attributes:
      state: the system's state after ``done`` steps.
      done: steps done.
      records: records of the history that belong to it.
      best: the tracker's :class:`Best`, or None.
      reference: the mean loss magnitude at the run's first step (None before it).
      seconds: seconds in training chunks.
      finished: whether the tracker ended the run.
    """

    state: PyTree
    done: int
    records: int
    best: Best | None
    reference: float | None
    seconds: float
    finished: bool


@interruptible
def train(
    system: System,
    data: PyTree,
    *,
    num_steps: int,
    eval_every: int,
    key: jax.Array,
    tracker: Tracker | None = None,
    divergence: float | None = DIVERGENCE,
    progress: bool = True,
    desc: str | None = None,
    checkpointer: Checkpointer | None = None,
    max_block_seconds: float = 10.0,
    donate: bool | None = None,
) -> dict:
    """Trains ``system`` from ``system.init(key)`` for ``num_steps`` steps, evaluating every ``eval_every``.

    Args:
      system: what to train.
      data: the constant arrays its step reads.
      num_steps: total steps (the last chunk may be shorter).
      eval_every: steps between evaluations (one chunk).
      key: the PRNG key of ``system.init``.
      tracker: per-member best-by-validation (and early stops); None keeps none.
      divergence: stop once a loss's magnitude exceeds this multiple of the mean
        loss magnitude at the run's first step; None watches only non-finite losses.
      progress: draw a progress bar.
      desc: its label.
      checkpointer: saves state, history and best values every
        ``checkpointer.every`` steps (at chunk ends), on SIGINT/SIGTERM and at the
        end; with ``checkpointer.resume`` the run continues from its latest checkpoint.
      max_block_seconds: a scanned chunk measured to take longer is cut into
        pieces, so that a signal waits at most about this long.
      donate: give each chunk's input state buffers to its output (``donate_argnums``), so the
        device holds one copy of the state, not two; the state a divergence or an interrupt
        falls back to is then kept in host memory (one device-to-host copy per evaluation).
        The first state is copied once (:func:`own_buffers`): the caller's arrays are never consumed.
        None: :func:`donation` (on every backend of a single-process run).

    The whole call is :func:`interruptible` (``init``'s compilation and a resumed run's restore included): a first
    SIGINT/SIGTERM stops the run at the next check, between steps or pieces of a chunk; within an outer
    :func:`interruptible` call (a network's build, a sweep), a signal that came earlier stops it before its first
    chunk. One that came after the last check is passed on as the run returns (see :func:`interruptible`).

    Raises:
      NonFiniteLoss, Diverged: a loss left its bounds (the state before that
        chunk is checkpointed, if checkpointing).
      Interrupted: a checkpointed run was stopped by SIGINT/SIGTERM (after saving).

    Returns:
      A dict: ``history`` (one record per evaluation: ``step``, the evaluation's
      metrics, ``seconds`` since the start), ``final`` (the last record, None if
      there is none), ``status`` ("complete", "stopped" by the tracker, or
      "interrupted"), ``interrupted``, ``state``, ``steps_done``,
      ``train_seconds`` (in training chunks, over all parts of a resumed run),
      ``resumed_from`` and ``best`` (a :class:`Best`, or None).
    """
    if num_steps < 0 or eval_every < 1:
        raise ValueError(f"need num_steps >= 0 and eval_every >= 1, got {num_steps}, {eval_every}")
    if system.step_loop not in STEP_LOOPS:
        raise ValueError(f"step_loop must be one of {STEP_LOOPS}, got {system.step_loop!r}")
    state = system.init(key)
    best = start_best(tracker, state) if tracker is not None else None
    initial, history, ended = _Progress(state, 0, 0, best, None, 0.0, False), [], False
    if checkpointer is not None and checkpointer.resume and checkpointer.latest_step() is not None:
        initial, history, ended = _restore(checkpointer, state, best)
    if ended:
        return _result(history, initial.state, initial.done, initial.seconds, initial.done, initial.best,
                       "stopped" if initial.finished else "complete")
    donate = donation(donate)
    if donate:
        initial = initial._replace(state=own_buffers(initial.state))
    live, committed, interrupted = _run_chunks(
        system, data, initial, history, donate=donate, num_steps=num_steps, eval_every=eval_every, tracker=tracker,
        divergence=divergence, checkpointer=checkpointer, max_block_seconds=max_block_seconds, desc=desc,
        progress=progress)
    return _finish(checkpointer, history, live, committed, interrupted, initial.done, num_steps)


def _restore(checkpointer: Checkpointer, state: PyTree, best: Best | None) -> tuple[_Progress, list[dict], bool]:
    """``(progress, history, ended)`` of the run in ``checkpointer``'s latest checkpoint: where it stands, its
    records so far, and whether it had ended. ``state`` and ``best`` (a fresh run's) are what it restores into."""
    done, (state, kept), saved = checkpointer.restore((state, best.kept if best is not None else None))
    if best is not None:
        b = saved["best"]
        best = Best(np.asarray(b["score"], np.float64), np.asarray(b["step"], np.int64),
                    np.asarray(b["stop"], np.int64), kept)
    progress = _Progress(state, done, len(saved["history"]), best, saved["reference"], saved["seconds"],
                         saved["tracker_finished"])
    return progress, list(saved["history"]), saved["finished"]


def _keeper(donate: bool) -> Callable[[PyTree], PyTree]:
    """How a run holds the state a stop falls back to, and the tracker's kept values (which may alias the state).

    With donation the next chunk consumes the device state: they live on the host (a global array of several
    processes has no host copy: a device copy there). Without, they are held as they are.
    """
    if not donate:
        return _identity
    return jax.device_get if jax.process_count() == 1 else own_buffers


def _run_chunks(system: System, data: PyTree, initial: _Progress, history: list[dict], *, donate: bool,
                num_steps: int, eval_every: int, tracker: Tracker | None, divergence: float | None,
                checkpointer: Checkpointer | None, max_block_seconds: float, desc: str | None,
                progress: bool) -> tuple[_Progress, _Progress, bool]:
    """``(live, committed, interrupted)``: :func:`train`'s chunks from ``initial``, ``history`` extended in place.

    ``live`` is where the run stands, ``committed`` what its last whole chunk left (what a checkpoint holds; its
    state held by :func:`_keeper`). A loss out of bounds checkpoints ``committed`` and raises; a KeyboardInterrupt
    (a signal at a check, a second one at once) ends the chunks with ``interrupted`` True.
    """
    stopper = _StopOnSignal(jax.process_count())
    run = chunk_runner(system.step, system.summarize, system.step_loop, check=stopper.check, donate=donate,
                       layout=system.layout)
    keep = _keeper(donate)
    state, done, _, best, reference, seconds, finished = initial
    if best is not None:
        best = best._replace(kept=keep(best.kept))
    piece = eval_every  # steps per scan call; cut down if one call takes too long to honour a signal
    timed: set[int] = set()  # scan lengths already run (compiled)
    # Processes must cut alike (each runs the same programs): across processes, never cut.
    cut = system.step_loop == "scan" and stopper.processes == 1
    # What a checkpoint holds, taken together after each chunk: a signal between the updates of the state and
    # of the history never saves one without the other.
    committed = _Progress(keep(state), done, len(history), best, reference, seconds, finished)
    last_saved, interrupted, start = done, False, time.perf_counter() - seconds
    with stopper, tqdm(total=num_steps, initial=done, desc=desc, disable=not progress, leave=False) as bar:
        try:
            while done < num_steps and not finished:
                stopper.check_together()
                length = min(eval_every, num_steps - done)
                begun = time.perf_counter()
                new_state, infos, piece = _run_chunk(run, state, data, length, piece, timed, check=stopper.check,
                                                     cut=cut, eval_every=eval_every,
                                                     max_block_seconds=max_block_seconds)
                seconds += time.perf_counter() - begun
                if system.losses is not None:
                    losses = to_host(system.losses(infos))  # gathers across processes too
                    reference, bound = _loss_bound(losses, reference, divergence)
                    bad = first_bad(losses, bound)
                    if bad is not None:
                        _save(checkpointer, committed, history)
                        raise _loss_stop(bad, bound, done, checkpointer)
                record = {"step": done + length, **system.evaluate(new_state, infos, done + length)}
                record["seconds"] = time.perf_counter() - start
                new_best, finished = _track(tracker, keep, best, finished, record, new_state, done + length)
                state, done, best = new_state, done + length, new_best
                history.append(record)
                curves.emit(desc, record)  # TensorBoard, inside a curves.tensorboard(...) only
                committed = _Progress(keep(state), done, len(history), best, reference, seconds, finished)
                _advance(bar, system.postfix, record, length)
                if checkpointer is not None and done - last_saved >= checkpointer.every and done < num_steps:
                    _save(checkpointer, committed, history)
                    last_saved = done
        except KeyboardInterrupt:
            interrupted = True
    return _Progress(state, done, len(history), best, reference, seconds, finished), committed, interrupted


def _run_chunk(run: Callable, state: PyTree, data: PyTree, length: int, piece: int, timed: set[int], *,
               check: Callable[[], None], cut: bool, eval_every: int,
               max_block_seconds: float) -> tuple[PyTree, PyTree, int]:
    """``(state, infos, piece)`` after ``length`` steps in calls of ``run`` of at most ``piece`` steps; ``infos``
    has a leading ``[length]`` axis.

    ``check()`` runs before every call; ``timed`` (updated in place) holds the call lengths already run. Where
    ``cut``, a call that took longer than ``max_block_seconds`` cuts ``piece`` down to a divisor of ``eval_every``
    (:func:`_pieces`), for this chunk's later calls and the next chunks.
    """
    parts, remaining = [], length
    while remaining:
        check()
        size = min(piece, remaining)
        tick = time.perf_counter()
        state, infos = run(state, data, size)
        jax.block_until_ready(state)
        took = time.perf_counter() - tick
        compiled = size in timed  # the first call of a length is mostly compilation: not judged
        timed.add(size)
        if cut and size > 1 and compiled and took > max_block_seconds:
            piece = _pieces(eval_every, took / size, max_block_seconds)
        parts.append(infos)
        remaining -= size
    infos = parts[0] if len(parts) == 1 else jax.tree_util.tree_map(lambda *leaves: jnp.concatenate(leaves), *parts)
    return state, infos, piece


def _loss_bound(losses: np.ndarray, reference: float | None, divergence: float | None) -> tuple[float, float]:
    """``(reference, bound)`` for a chunk's ``losses [L]`` or ``[L, N]``: the reference (the mean magnitude of the
    first step's losses when there is none yet, over the nodes that stepped: at their own pace a node that held
    reports 0) and the magnitude past which a loss stops the run."""
    if reference is None:  # the untrained system's loss: a run can blow up within its first chunk
        first = np.abs(np.asarray(losses, np.float64)[0]).ravel()
        reference = float(np.mean(first[first != 0])) if np.any(first != 0) else 0.0
    bound = np.inf if divergence is None or not np.isfinite(reference) else divergence * max(reference, 1e-12)
    return reference, bound


def _loss_stop(bad: tuple[int, int | None, float], bound: float, done: int,
               checkpointer: Checkpointer | None) -> LossStop:
    """The error for :func:`first_bad`'s ``bad`` in the chunk that began after ``done`` steps (the state then is
    the one ``checkpointer``, if any, holds)."""
    where_ = str(checkpointer.directory) if checkpointer else None
    if np.isfinite(bad[2]):
        return Diverged(done + bad[0], bad[1], bad[2], bound=bound, good_step=done, saved=where_)
    return NonFiniteLoss(done + bad[0], bad[1], bad[2], good_step=done, saved=where_)


def _track(tracker: Tracker | None, keep: Callable[[PyTree], PyTree], best: Best | None, finished: bool,
           record: dict, state: PyTree, steps_done: int) -> tuple[Best | None, bool]:
    """``(best, finished)`` after an evaluation (:func:`update_best`, its kept values held by ``keep``); without a
    tracker, as they were."""
    if tracker is None:
        return best, finished
    best, finished = update_best(tracker, best, record, state, steps_done)
    return best._replace(kept=keep(best.kept)), finished


def _advance(bar: tqdm, postfix: Callable[[dict], dict] | None, record: dict, steps: int) -> None:
    """Moves the progress bar on by ``steps``, with ``postfix(record)`` beside it."""
    if postfix is not None:  # before the update, which redraws: the bar shows this evaluation
        bar.set_postfix(postfix(record), refresh=False)
    bar.update(steps)


def _save(checkpointer: Checkpointer | None, committed: _Progress, history: list[dict], complete: bool = False) -> None:
    """Checkpoints ``committed`` with its records of ``history`` (nothing without a checkpointer); ``complete``: the
    run ended."""
    if checkpointer is None:
        return
    best = committed.best
    saved_best = None if best is None else {"score": best.score.tolist(), "step": best.step.tolist(),
                                            "stop": best.stop.tolist()}
    meta = {"history": history[:committed.records], "best": saved_best, "reference": committed.reference,
            "seconds": committed.seconds, "finished": complete, "tracker_finished": committed.finished}
    checkpointer.save(committed.done, (committed.state, best.kept if best is not None else None), _jsonable(meta))


def _finish(checkpointer: Checkpointer | None, history: list[dict], live: _Progress, committed: _Progress,
            interrupted: bool, resumed_from: int, num_steps: int) -> dict:
    """:func:`train`'s result from what :func:`_run_chunks` returned, after the last checkpoint.

    Raises:
      Interrupted: a checkpointed run was interrupted (after saving).
    """
    if checkpointer is not None:
        _save(checkpointer, committed, history, complete=not interrupted)
        if interrupted:
            raise Interrupted(live.done, str(checkpointer.directory))
    # A signal no check acted on (after the last one) is passed on by train's own guard (@interruptible), on
    # return: the run is complete and saved, the caller still hears of the signal.
    status = "interrupted" if interrupted else "stopped" if live.finished and live.done < num_steps else "complete"
    # interrupted: the state of the last whole chunk (a donated one was consumed by the chunk cut short)
    state = committed.state if interrupted else live.state
    return _result(history, state, live.done, live.seconds, resumed_from, live.best, status)


def first_reaching(history: list[dict], target: float, read: Callable[[dict], float]) -> dict | None:
    """The first record of a run's ``history`` whose ``read(record)`` is >= ``target``; None if none reaches it."""
    return next((record for record in history if read(record) >= target), None)


def _result(history, state, done, seconds, resumed_from, best, status) -> dict:
    return {"history": history, "final": history[-1] if history else None, "status": status,
            "interrupted": status == "interrupted", "state": state, "steps_done": done, "train_seconds": seconds,
            "resumed_from": resumed_from, "best": best}
