"""Run a pure step function for many steps: ``lax.scan`` over chunks inside jit.

The Python side only touches the state between chunks (evaluation, logging,
the progress bar), so one dispatch covers ``chunk_size`` steps. Every
experiment drives its training through :func:`run_in_chunks`.
"""

from __future__ import annotations

import json
import signal
import threading
import time
from collections.abc import Callable
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from tqdm.auto import tqdm

from jaxcomm.checkpoint import Checkpointer
from jaxcomm.population import to_host

PyTree = Any


class RunResult(NamedTuple):
    """What :func:`run_in_chunks` hands back.

    Attributes:
      state: the state after the last completed chunk.
      steps_done: steps completed (< the number asked for if interrupted).
      interrupted: True if a KeyboardInterrupt stopped the run between chunks.
      seconds: wall time spent in training chunks (excluding ``on_chunk``).
      stopped: True if ``on_chunk`` ended the run early with :class:`StopRun`.
      resumed_from: steps restored from a checkpoint (0 for a fresh run).
    """

    state: PyTree
    steps_done: int
    interrupted: bool
    seconds: float
    stopped: bool = False
    resumed_from: int = 0


class StopRun(Exception):
    """Raised from ``on_chunk`` to end a run early; the chunk it judged is kept."""


class Interrupted(KeyboardInterrupt):
    """A checkpointed run was stopped by SIGINT/SIGTERM after saving; ``--resume`` continues it."""

    def __init__(self, steps_done: int, directory: str):
        super().__init__(f"interrupted after {steps_done} steps; checkpoint saved in {directory}")
        self.steps_done, self.directory = steps_done, directory


class NonFiniteLoss(FloatingPointError):
    """A loss became NaN or infinite; ``step`` (0-based, of the run) and ``node`` (or None) name the first."""

    def __init__(self, step: int, node: int | None, value: float, *, good_step: int, saved: str | None):
        where = f"node {node} at step {step}" if node is not None else f"step {step}"
        kept = f"; the last good state (after {good_step} steps) is checkpointed in {saved}" if saved else ""
        super().__init__(f"non-finite loss ({value}) at {where}{kept}")
        self.step, self.node, self.value = step, node, value


def first_non_finite(losses: np.ndarray) -> tuple[int, int | None, float] | None:
    """``(step index, node or None, value)`` of the first non-finite entry of ``losses [L]`` or ``[L, N]``."""
    losses = np.asarray(losses)
    bad = ~np.isfinite(losses)
    if not bad.any():
        return None
    flat = bad.reshape(len(losses), -1)
    step = int(np.argmax(flat.any(axis=1)))
    node = int(np.argmax(flat[step])) if losses.ndim > 1 else None
    value = float(losses.reshape(len(losses), -1)[step, node or 0])
    return step, node, value


class _TermAsInterrupt:
    """Within the block, SIGTERM raises KeyboardInterrupt like SIGINT (main thread only)."""

    def __enter__(self):
        self._old = None
        if threading.current_thread() is threading.main_thread():
            self._old = signal.signal(signal.SIGTERM, self._raise)
        return self

    @staticmethod
    def _raise(signum, frame):
        raise KeyboardInterrupt(f"signal {signum}")

    def __exit__(self, *exc):
        if self._old is not None:
            signal.signal(signal.SIGTERM, self._old)
        return False


def scan_steps(step_fn: Callable, summarize: Callable = lambda info: info) -> Callable:
    """Jitted ``run(state, data, length) -> (state, infos)`` of ``length`` steps.

    Args:
      step_fn: ``step_fn(state, data) -> (state, info)``, pure.
      summarize: maps one step's ``info`` to what is kept per step; keep it
        small (XLA drops whatever the summary does not use).

    Returns:
      A function compiled once per distinct ``length``; ``infos`` has a leading
      ``[length]`` axis.
    """

    def run(state, data, length):
        def body(carry, _):
            carry, info = step_fn(carry, data)
            return carry, summarize(info)

        return jax.lax.scan(body, state, None, length=length)

    return jax.jit(run, static_argnums=2)


def dispatch_steps(step_fn: Callable, summarize: Callable = lambda info: info) -> Callable:
    """Like :func:`scan_steps`, but one jitted call per step, no loop in the program.

    On CPU, XLA runs convolutions inside a loop body far slower than at the top
    level (see :mod:`jaxcomm.speed`); a step that costs milliseconds loses
    nothing to the per-call dispatch.
    """

    @jax.jit
    def step(state, data):
        state, info = step_fn(state, data)
        return state, summarize(info)

    def run(state, data, length):
        infos = []
        for _ in range(length):
            state, info = step(state, data)
            infos.append(info)
        return state, jax.tree_util.tree_map(lambda *leaves: jnp.stack(leaves), *infos)

    return run


def run_in_chunks(
    step_fn: Callable,
    state: PyTree,
    data: PyTree,
    *,
    num_steps: int,
    chunk_size: int,
    summarize: Callable = lambda info: info,
    on_chunk: Callable[[int, PyTree, PyTree], dict | None] | None = None,
    progress: bool = True,
    desc: str | None = None,
    scan: bool = True,
    loss_of: Callable[[PyTree], Any] | None = None,
    checkpointer: Checkpointer | None = None,
    metrics: Callable[[], dict] | None = None,
    restore_metrics: Callable[[dict], None] | None = None,
    aux: Callable[[], PyTree] | None = None,
    restore_aux: Callable[[PyTree], None] | None = None,
) -> RunResult:
    """Runs ``num_steps`` steps of ``step_fn`` in jitted chunks.

    Args:
      step_fn: ``step_fn(state, data) -> (state, info)``, pure.
      state: the initial state (also the template a checkpoint is restored into).
      data: constant arrays the step reads (passed as an argument so they are
        not baked into the compiled program).
      num_steps: total steps.
      chunk_size: steps per jitted ``lax.scan``; the last chunk may be shorter
        (one more compilation).
      summarize: see :func:`scan_steps`.
      on_chunk: called after each chunk as ``on_chunk(steps_done, state, infos)``;
        a returned dict is shown beside the progress bar; raising
        :class:`StopRun` ends the run with this chunk kept.
      progress: draw a tqdm bar.
      desc: the bar's label.
      scan: run each chunk as one ``lax.scan`` (:func:`scan_steps`); False
        dispatches one jitted call per step (:func:`dispatch_steps`).
      loss_of: maps a chunk's summarized infos to its losses ``[L]`` or ``[L, N]``;
        a non-finite one raises :class:`NonFiniteLoss` naming the step and node,
        with the state before that chunk checkpointed (if checkpointing).
      checkpointer: saves the state and ``metrics()`` every ``checkpointer.every``
        steps (at chunk ends), on SIGINT/SIGTERM and at the end; with
        ``checkpointer.resume`` the run starts from its latest checkpoint.
      metrics: the caller's JSON-able record of the run so far (saved with the state).
      restore_metrics: gets that record back when the run resumes.
      aux: arrays the caller keeps between chunks (say, the best parameters so
        far), with a fixed structure; saved with the state.
      restore_aux: gets them back when the run resumes.

    Returns:
      A :class:`RunResult`. Without a checkpointer, Ctrl-C (or SIGTERM) stops the
      run and returns the state of the last completed chunk (a chunk is complete
      once its ``on_chunk`` has returned, so the state and the caller's records
      stay in step); with a checkpointer, it saves that state and raises
      :class:`Interrupted`.
    """
    if num_steps < 0 or chunk_size < 1:
        raise ValueError(f"need num_steps >= 0 and chunk_size >= 1, got {num_steps}, {chunk_size}")
    # What goes into a checkpoint beside the state; only taken when checkpointing.
    snapshot = lambda: json.loads(json.dumps(metrics() if metrics and checkpointer else {}))
    kept = lambda: aux() if aux is not None and checkpointer is not None else None
    done, resumed_from = 0, 0
    if checkpointer is not None and checkpointer.resume and checkpointer.latest_step() is not None:
        done, (state, saved_aux), saved = checkpointer.restore((state, aux() if aux is not None else None))
        resumed_from = done
        if restore_metrics is not None:
            restore_metrics(saved["metrics"])
        if restore_aux is not None:
            restore_aux(saved_aux)
        if saved.get("finished"):
            return RunResult(state, done, False, 0.0, saved.get("stopped", False), resumed_from)
    run = (scan_steps if scan else dispatch_steps)(step_fn, summarize)
    committed, committed_aux = snapshot(), kept()  # what goes with ``state``
    last_saved, seconds, interrupted, stopped = done, 0.0, False, False

    def save(finished: bool = False) -> None:
        if checkpointer is not None:
            checkpointer.save(done, (state, committed_aux),
                              {"metrics": committed, "finished": finished, "stopped": stopped})

    with _TermAsInterrupt(), tqdm(total=num_steps, initial=done, desc=desc, disable=not progress, leave=False) as bar:
        try:
            while done < num_steps:
                length = min(chunk_size, num_steps - done)
                start = time.perf_counter()
                new_state, infos = run(state, data, length)
                jax.block_until_ready(new_state)
                seconds += time.perf_counter() - start
                if loss_of is not None:
                    bad = first_non_finite(to_host(loss_of(infos)))  # gathers across processes too
                    if bad is not None:
                        save()
                        raise NonFiniteLoss(done + bad[0], bad[1], bad[2], good_step=done,
                                            saved=str(checkpointer.directory) if checkpointer else None)
                postfix = None
                try:
                    if on_chunk is not None:
                        postfix = on_chunk(done + length, new_state, infos)
                except StopRun:
                    stopped = True
                state, done = new_state, done + length
                committed, committed_aux = snapshot(), kept()
                bar.update(length)
                if postfix:
                    bar.set_postfix(postfix, refresh=False)
                if stopped:
                    break
                if checkpointer is not None and done - last_saved >= checkpointer.every and done < num_steps:
                    save()
                    last_saved = done
        except KeyboardInterrupt:
            interrupted = True
    if checkpointer is not None:
        save(finished=not interrupted)
        if interrupted:
            raise Interrupted(done, str(checkpointer.directory))
    return RunResult(state, done, interrupted, seconds, stopped, resumed_from)
