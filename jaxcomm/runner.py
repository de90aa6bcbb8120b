"""Run a pure step function for many steps: ``lax.scan`` over chunks inside jit.

The Python side only touches the state between chunks (evaluation, logging,
the progress bar), so one dispatch covers ``chunk_size`` steps. Every
experiment drives its training through :func:`run_in_chunks`.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
from tqdm.auto import tqdm

PyTree = Any


class RunResult(NamedTuple):
    """What :func:`run_in_chunks` hands back.

    Attributes:
      state: the state after the last completed chunk.
      steps_done: steps completed (< the number asked for if interrupted).
      interrupted: True if a KeyboardInterrupt stopped the run between chunks.
      seconds: wall time spent in training chunks (excluding ``on_chunk``).
    """

    state: PyTree
    steps_done: int
    interrupted: bool
    seconds: float


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
) -> RunResult:
    """Runs ``num_steps`` steps of ``step_fn`` in jitted chunks.

    Args:
      step_fn: ``step_fn(state, data) -> (state, info)``, pure.
      state: the initial state.
      data: constant arrays the step reads (passed as an argument so they are
        not baked into the compiled program).
      num_steps: total steps.
      chunk_size: steps per jitted ``lax.scan``; the last chunk may be shorter
        (one more compilation).
      summarize: see :func:`scan_steps`.
      on_chunk: called after each chunk as ``on_chunk(steps_done, state, infos)``;
        a returned dict is shown beside the progress bar.
      progress: draw a tqdm bar.
      desc: the bar's label.
      scan: run each chunk as one ``lax.scan`` (:func:`scan_steps`); False
        dispatches one jitted call per step (:func:`dispatch_steps`).

    Returns:
      A :class:`RunResult`. Ctrl-C between or during chunks stops the run and
      returns the state of the last completed chunk, so nothing already
      computed is lost.
    """
    if num_steps < 0 or chunk_size < 1:
        raise ValueError(f"need num_steps >= 0 and chunk_size >= 1, got {num_steps}, {chunk_size}")
    run = (scan_steps if scan else dispatch_steps)(step_fn, summarize)
    done, seconds, interrupted = 0, 0.0, False
    with tqdm(total=num_steps, desc=desc, disable=not progress, leave=False) as bar:
        try:
            while done < num_steps:
                length = min(chunk_size, num_steps - done)
                start = time.perf_counter()
                new_state, infos = run(state, data, length)
                jax.block_until_ready(new_state)
                seconds += time.perf_counter() - start
                state, done = new_state, done + length
                bar.update(length)
                if on_chunk is not None:
                    postfix = on_chunk(done, state, infos)
                    if postfix:
                        bar.set_postfix(postfix, refresh=False)
        except KeyboardInterrupt:
            interrupted = True
    return RunResult(state, done, interrupted, seconds)
