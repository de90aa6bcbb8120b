"""Sweeps: R runs of one structure trained together, returned as R results.

This module is the core (:func:`train_runs`, :func:`stack_runs`, :func:`population_step`,
:func:`choose_mode`): it takes any :class:`jaxcomm.driver.System` and R initial states and data of one
structure, and imports no system and re-exports none. :func:`jaxcomm.methods.sweep` sweeps any method on it;
:func:`jaxcomm.network_sweep.train_networks` is the chapter-2 network's own entry point.

A table's rows times its seeds are runs of the same shape: same number of nodes,
model, exchange, batch size, inbox and schedule. A sweep trains
them with ONE compiled step. What may differ from run to run is data to that
step: the seed (shards, initialisation, every draw), the :class:`jaxcomm.kit.RunSettings`
(the learning rate; a method's ``hyper``: output sharing's p_c, p_b, q, D, tau, consumed weight), the partition and a
static graph (a per-run adjacency, or a named static topology). Every other field
of :class:`jaxcomm.network.NetworkConfig` is structure, and a sweep whose runs
disagree on one is refused with an error naming the field.

Two ways to run a sweep, each equal to the runs alone (tested):

* ``"population"``: the R runs as one population of R x N nodes, the network
  step vmapped over runs (per-run settings and shards as ``[R]``-leading arrays,
  each run's graph its own block). One program fills an accelerator that one
  10-node network leaves 97-99 % idle, and on CPU pays compilation, dispatch and
  evaluation set-up once.
* ``"sequential"``: run after run through :func:`jaxcomm.driver.train`, sharing
  one compiled step (settings and shards are arguments, not constants).

``mode="auto"`` follows the device and what the nodes compute: "sequential" on a
CPU, where one run's nodes already keep the cores busy and a population of R x N
only makes every array R times larger (measured on 2 cores, each arm a fresh
process: 16 student networks of 10 nodes 40.6 s run by run against 54.4 s as one
population, ``results/benchmark/sweep_arms/``; CNN nodes, whose vmapped
convolutions become slow grouped ones, the more so),
and for the eager step loop anywhere; "population" on an accelerator (one H100 ran
CNN sweeps 1.2-1.8x faster as one population). Without a family, the node backend
decides off the CPU: "sequential" under "unrolled"/"loop". A method whose runs
share one model per run (synchronous SGD) names "population" itself
(:attr:`jaxcomm.methods.Built.sweep_mode`).

References:
  Lacaille (2018), §2.3 (Table 2.1: six rows, here times seeds).
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence

import jax
import jax.numpy as jnp
import numpy as np

from jaxcomm import driver, population
from jaxcomm.checkpoint import Checkpointer

MODES = ("auto", "population", "sequential")
SEQUENTIAL_BACKENDS = ("unrolled", "loop")


def choose_mode(backend: str, mode: str = "auto", step_loop: str = "scan", family: str | None = None) -> str:
    """"population" or "sequential" for nodes of speed ``family`` (:func:`jaxcomm.speed.family_of`; None: the node
    ``backend`` decides off the CPU) under ``backend`` (see the module docstring): run by run on a CPU and for an
    "eager" ``step_loop``, as one population on an accelerator."""
    if mode not in MODES:
        raise ValueError(f"mode must be one of {MODES}, got {mode!r}")
    if mode == "auto":
        sequential = (step_loop == "eager" or jax.default_backend() == "cpu"
                      or (family is None and backend in SEQUENTIAL_BACKENDS))
        mode = "sequential" if sequential else "population"
    if mode == "population" and step_loop == "eager":
        raise ValueError("an 'eager' step loop runs one compiled call per node, op by op around them: a sweep of it "
                         "runs mode='sequential' (vmapped over runs it would run op by op)")
    return mode


@jax.jit
def _run_of(stacked, r):
    """Run ``r``'s slice of a sweep's stacked state (leaves ``[R, ...]``) in one program: sliced eagerly, every leaf
    shape compiles an op of its own (seconds for a BiGAN network's thousand leaves)."""
    return jax.tree_util.tree_map(lambda leaf: leaf[r], stacked)


def _infos_of_run(infos, r: int):
    """Run ``r``'s slice of a chunk's infos (leaves ``[L, R, ...]``; :func:`_run_of` of a state)."""
    return jax.tree_util.tree_map(lambda x: x[:, r], infos)


# --------------------------------------------------------------------------- the core: any system


def stack_runs(datas: Sequence) -> tuple:
    """``(data, axes)``: R runs' data (one pytree structure) as one pytree and its vmap axes.

    A leaf every run holds as the same object (the training images and labels) is shared (axis None); the
    others are stacked on a new leading run axis (axis 0). Integer leaves of different widths (shards of
    different sizes) are padded on their last axis by repeating their last value: a node's padded row
    repeats a real index of its shard, and positions drawn stay below each node's size, as alone.
    """
    leaves = [jax.tree_util.tree_leaves(d) for d in datas]
    treedef = jax.tree_util.tree_structure(datas[0])
    out, axes = [], []
    for column in zip(*leaves, strict=True):
        if all(leaf is column[0] for leaf in column):
            out.append(column[0])
            axes.append(None)
            continue
        width = max(np.shape(leaf)[-1] if np.ndim(leaf) else 0 for leaf in column)
        padded = [np.pad(np.asarray(leaf), [(0, 0)] * (np.ndim(leaf) - 1) + [(0, width - np.shape(leaf)[-1])],
                         mode="edge") if np.ndim(leaf) and np.shape(leaf)[-1] != width else leaf for leaf in column]
        out.append(jnp.stack([jnp.asarray(leaf) for leaf in padded]))
        axes.append(0)
    return jax.tree_util.tree_unflatten(treedef, out), jax.tree_util.tree_unflatten(treedef, axes)


def data_of_run(data, axes, r: int):
    """Run ``r``'s data of a :func:`stack_runs` result."""
    return jax.tree_util.tree_map(lambda leaf, axis: leaf if axis is None else leaf[r], data, axes,
                                  is_leaf=lambda x: x is None)


@functools.lru_cache(maxsize=32)  # one per step and axes: the driver's compiled chunks are reused
def population_step(step: Callable, axes) -> Callable:
    """``step(states, data) -> (states, infos)`` of R runs: ``step`` vmapped over the run axis of the states and of
    ``data``'s leaves whose axis in ``axes`` is 0 (:func:`stack_runs`), named :data:`jaxcomm.population.RUNS_AXIS`
    (the runs step in lockstep: :func:`jaxcomm.population.when_due` runs a schedule's rounds only on the steps some
    run is due)."""
    return jax.vmap(step, in_axes=(0, axes), axis_name=population.RUNS_AXIS)


@driver.interruptible
def train_runs(systems: Sequence[driver.System], states: Sequence, datas: Sequence, seeds: Sequence[int], *,
               mode: str, num_steps: int, eval_every: int, nodes_per_run: int, progress: bool = True,
               desc: str | None = None, checkpointer: Checkpointer | None = None,
               divergence: float | None = driver.DIVERGENCE, donate: bool | None = None) -> list[dict]:
    """Trains R runs of one structure, one population of R x N nodes (``mode="population"``) or one after another
    (``"sequential"``); R results of :func:`jaxcomm.driver.train`, each equal to the run alone.

    Args:
      systems: each run's system (the same step; its own ``evaluate``); ``init`` is not called.
      states: each run's initial state (one structure).
      datas: each run's data (one structure; shared arrays as the same objects, see :func:`stack_runs`).
      seeds: each run's seed (the driver's key; the sequential checkpoint folders are per run).
      mode: "population" or "sequential" (:func:`choose_mode`).
      num_steps, eval_every, progress, desc, divergence, donate: as :func:`jaxcomm.driver.train`.
      nodes_per_run: N, to name the run and node of a loss stop.
      checkpointer: saves and resumes the sweep, bit-identically ("sequential": one sub-folder per run).

    Returns:
      R dicts of :func:`jaxcomm.driver.train` (history, final, state, ...), each with ``sweep`` =
      ``{"runs": R, "mode": mode}``; ``train_seconds`` is the whole sweep's in "population" mode.
    """
    info = {"runs": len(states), "mode": mode}
    data, axes = stack_runs(datas)  # run by run too: one width of shards, one compiled step for every run
    if mode == "sequential":
        out = []
        for r, (system, state, seed) in enumerate(zip(systems, states, seeds, strict=True)):
            ckpt = checkpointer.sub(f"run_{r}") if checkpointer is not None else None
            try:
                result = driver.train(system._replace(init=lambda key, state=state: state), data_of_run(data, axes, r),
                                      num_steps=num_steps,
                                      eval_every=eval_every, key=jax.random.PRNGKey(seed), progress=progress,
                                      desc=f"{desc or 'sweep'} run {r + 1}" if len(states) > 1 else desc,
                                      checkpointer=ckpt,
                                      divergence=divergence, donate=donate)
            except driver.LossStop as stop:
                stop.add_note(f"in the sweep: run {r}")
                raise
            out.append(result | {"sweep": info})
        return out

    def evaluate(stacked, infos, steps_done: int) -> dict:
        return {"runs": [s.evaluate(_run_of(stacked, r), _infos_of_run(infos, r), steps_done)
                         for r, s in enumerate(systems)]}

    def postfix(record: dict) -> dict:
        averages = [r["avg_accuracy"] for r in record["runs"] if r.get("avg_accuracy") is not None]
        return {"avg": f"{np.mean(averages):.1f}"} if averages else {}

    stacked, first = population.stack_jitted(tuple(states)), systems[0]
    system = driver.System(lambda key: stacked, population_step(first.step, axes), evaluate,
                           losses=None if first.losses is None else
                           lambda infos: (lambda x: x.reshape(x.shape[0], -1))(first.losses(infos)),
                           summarize=first.summarize, step_loop=first.step_loop, postfix=postfix)
    try:
        result = driver.train(system, data, num_steps=num_steps, eval_every=eval_every,
                              key=jax.random.PRNGKey(seeds[0]), progress=progress,
                              desc=desc or f"sweep of {len(states)}", checkpointer=checkpointer,
                              divergence=divergence, donate=donate)
    except driver.LossStop as stop:
        if stop.node is not None:
            stop.add_note(f"in the sweep: run {stop.node // nodes_per_run}, node {stop.node % nodes_per_run}")
        raise
    out = []
    for r in range(len(states)):
        history = [{"step": rec["step"], **rec["runs"][r], "seconds": rec["seconds"]} for rec in result["history"]]
        out.append({**result, "history": history, "final": history[-1] if history else None,
                    "state": _run_of(result["state"], r), "sweep": info})
    return out
