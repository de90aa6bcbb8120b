"""Checkpoints of a whole simulation with orbax: every k steps, on SIGINT/SIGTERM, at the end.

A checkpoint holds one run's state pytree (parameters, optimiser states,
inboxes, counters, RNG keys, step: whatever the step function carries) and a
JSON dict of the metrics recorded so far. The state's leaves are saved flat and
restored into the structure of a template (the freshly initialised state), so
NamedTuples, ``None`` subtrees and custom nodes come back exactly as they were.

Across processes (``jax.distributed``, the "sharded" backend over several hosts) a
leaf spans devices one process cannot read: every process then writes and reads
only its own shards (orbax's multi-process save and restore), so a pod run
resumes from its last periodic checkpoint after a preemption. Every process must
make the same calls, in the same order.

An experiment holds one :class:`Checkpoints` folder with a sub-folder per run
(``Checkpoints.run(name)``); :func:`jaxcomm.driver.train` saves and
resumes through it.
"""

from __future__ import annotations

import json
import os
import pathlib
import shutil
from collections.abc import Callable
from typing import Any

import jax
import numpy as np
import orbax.checkpoint as ocp
from jax.experimental import multihost_utils

from jaxcomm.population import AUTO

PyTree = Any
LIFT_FILE = "lift.json"
"""Beside a run's checkpoints: ``{"backend", "step_loop"}`` it trains under (:func:`record_lift`, :func:`pinned`)."""


class Checkpointer:
    """Saves and restores one run under ``directory`` (keeps the newest ``keep``).

    Attributes:
      directory: absolute path of the run's checkpoints.
      every: save every ``every`` steps (rounded up to whole chunks by the driver).
      resume: whether :func:`jaxcomm.driver.train` starts from the latest
        checkpoint; if False, existing checkpoints of this run are deleted first.
      on_save: called after every checkpoint is on disk (the harness records the wall time so far).
    """

    def __init__(self, directory: str | os.PathLike, *, every: int, resume: bool = False, keep: int = 2,
                 on_save: Callable[[], None] | None = None):
        if not isinstance(every, int) or every < 1:
            raise ValueError(f"checkpoint every must be an integer >= 1, got {every!r}")
        self.directory = pathlib.Path(directory).expanduser().absolute()
        self.every, self.resume, self.on_save = every, resume, on_save
        if not resume and self.directory.exists() and jax.process_index() == 0:
            shutil.rmtree(self.directory)
        if jax.process_count() > 1:  # no process may look at the folder while the first still deletes it
            _barrier(f"jaxcomm-checkpointer-{self.directory}")
        options = ocp.CheckpointManagerOptions(max_to_keep=keep, create=True)
        # Handlers named up front: a resumed manager reads the stored arrays' metadata before any save.
        handlers = {"state": ocp.StandardCheckpointHandler(), "meta": ocp.JsonCheckpointHandler()}
        self._manager = ocp.CheckpointManager(self.directory, options=options, item_handlers=handlers)

    def sub(self, name: str) -> Checkpointer:
        """The checkpointer of a part of this run (a sweep's run ``r``), in a folder ``name`` below this one, with
        this one's schedule, resume flag and ``on_save`` (the harness' wall time is recorded by every part)."""
        return Checkpointer(self.directory / _folder(name), every=self.every, resume=self.resume,
                            on_save=self.on_save)

    def latest_step(self) -> int | None:
        """Steps done at the newest checkpoint, or None."""
        return self._manager.latest_step()

    def save(self, step: int, state: PyTree, meta: dict) -> None:
        """Writes ``state`` and the JSON ``meta`` at ``step`` and waits until it is on disk."""
        if self._manager.latest_step() == step:
            return
        leaves = [_key_data(leaf) for leaf in jax.tree_util.tree_leaves(state)]  # typed keys as their uint32 data
        if not any(_spans_processes(leaf) for leaf in leaves):
            leaves = jax.device_get(leaves)
        # A leaf spanning processes stays a jax.Array: each process writes the shards it holds.
        saved = {str(i): leaf if _spans_processes(leaf) else np.asarray(leaf) for i, leaf in enumerate(leaves)}
        self._manager.save(step, args=ocp.args.Composite(state=ocp.args.StandardSave(saved),
                                                         meta=ocp.args.JsonSave(meta)), force=True)
        self._manager.wait_until_finished()
        if self.on_save is not None:
            self.on_save()

    def restore(self, template: PyTree, step: int | None = None) -> tuple[int, PyTree, dict]:
        """``(step, state, meta)`` of checkpoint ``step`` (default the latest), shaped like ``template``.

        Each leaf comes back where the template's is: a committed jax.Array on its sharding (across
        processes, each process reads only its own shards), an uncommitted one uncommitted on the default
        device, anything else as a numpy array.

        Raises:
          FileNotFoundError: no checkpoint here.
          ValueError: the checkpoint does not fit the template (another config).
        """
        step = self._manager.latest_step() if step is None else step
        if step is None:
            raise FileNotFoundError(f"no checkpoint in {self.directory}")
        flat, treedef = jax.tree_util.tree_flatten(template)
        stored = self._manager.item_metadata(step)["state"].tree
        if len(stored) != len(flat):
            raise ValueError(f"checkpoint {self.directory}/{step} holds {len(stored)} arrays, the run expects "
                             f"{len(flat)}: it was written by another configuration")
        targets = {}
        for i, key_like in enumerate(flat):
            like = _key_data(key_like)  # a typed key is stored as its data (:meth:`save`)
            shape = np.shape(like)
            dtype = np.dtype(like.dtype if isinstance(like, jax.Array) else np.asarray(like).dtype)
            saved = stored[str(i)]
            if tuple(saved.shape) != tuple(shape) or np.dtype(saved.dtype) != dtype:
                raise ValueError(f"checkpoint {self.directory}/{step}: array {i} is {np.dtype(saved.dtype)}"
                                 f"{list(saved.shape)}, the run expects {dtype}{list(shape)}")
            targets[str(i)] = (jax.ShapeDtypeStruct(shape, dtype, sharding=like.sharding) if _placed(like)
                               else np.zeros(shape, dtype))
        restored = self._manager.restore(step, args=ocp.args.Composite(state=ocp.args.StandardRestore(targets),
                                                                       meta=ocp.args.JsonRestore()))
        # An uncommitted template leaf (jit may move it, e.g. onto a mesh spanning processes) comes back
        # uncommitted on the default device: committing it there would clash with the sharded leaves.
        leaves = [jax.device_put(restored["state"][str(i)]) if isinstance(like, jax.Array) and not _placed(like)
                  else restored["state"][str(i)] for i, like in enumerate(flat)]
        leaves = [jax.random.wrap_key_data(leaf, impl=jax.random.key_impl(like)) if _is_typed_key(like) else leaf
                  for leaf, like in zip(leaves, flat, strict=True)]
        return int(step), jax.tree_util.tree_unflatten(treedef, leaves), dict(restored["meta"])

    def close(self) -> None:
        self._manager.close()


def _is_typed_key(leaf: Any) -> bool:
    """Whether ``leaf`` is an array of typed PRNG keys (``jax.random.key``), which numpy cannot hold."""
    return hasattr(leaf, "dtype") and jax.dtypes.issubdtype(leaf.dtype, jax.dtypes.prng_key)


def _key_data(leaf: Any) -> Any:
    """A typed key array's ``uint32`` data (``[..., 2]`` for threefry), anything else as it is."""
    if not _is_typed_key(leaf):
        return leaf
    if isinstance(leaf, jax.ShapeDtypeStruct):
        return jax.eval_shape(jax.random.key_data, leaf)
    return jax.random.key_data(leaf)


def _spans_processes(leaf: Any) -> bool:
    """Whether ``leaf`` is a jax.Array with shards on devices of other processes."""
    return isinstance(leaf, jax.Array) and not leaf.is_fully_addressable


def _placed(leaf: Any) -> bool:
    """Whether ``leaf`` is a jax.Array committed to its devices (a restored copy goes back there)."""
    return isinstance(leaf, jax.Array) and leaf.committed


def _barrier(name: str) -> None:
    """Waits until every process reaches the barrier ``name``."""
    multihost_utils.sync_global_devices(name)


def encode(value: Any) -> Any:
    """JSON-able copy of nested dicts/lists/tuples holding numpy or jax arrays (dtype kept)."""
    if isinstance(value, dict):
        return {str(k): encode(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [encode(v) for v in value]
    if isinstance(value, (np.ndarray, np.generic, jax.Array)):
        array = np.asarray(value)
        return {"__array__": array.tolist(), "dtype": str(array.dtype)}
    return value


def decode(value: Any) -> Any:
    """Inverse of :func:`encode`: arrays come back bit for bit with their dtype (tuples as lists)."""
    if isinstance(value, dict):
        if set(value) == {"__array__", "dtype"}:
            return np.asarray(value["__array__"], dtype=value["dtype"])
        return {k: decode(v) for k, v in value.items()}
    if isinstance(value, list):
        return [decode(v) for v in value]
    return value


def record_lift(checkpointer: Checkpointer | None, built) -> None:
    """Writes the backend and step loop ``built`` (a network, a method's built run) trains under beside the run's
    checkpoints (:data:`LIFT_FILE`), for :func:`pinned` to read when the run resumes; nothing without a checkpointer."""
    if checkpointer is not None and jax.process_index() == 0:
        checkpointer.directory.mkdir(parents=True, exist_ok=True)
        lift = {"backend": built.backend, "step_loop": built.step_loop}
        (checkpointer.directory / LIFT_FILE).write_text(json.dumps(lift) + "\n")


def pinned(checkpointer: Checkpointer | None, config):
    """``config`` with the backend and step loop the run's checkpoints trained under where it leaves them to "auto",
    when ``checkpointer`` resumes: a choice measured afresh (another day's timings, a cache of another version)
    could pick another lift, whose float32 rounding differs (README, "Determinism"), and the resumed run would not
    be the run it continues. ``config`` has ``backend``, ``step_loop`` and ``replace``."""
    if checkpointer is None or not checkpointer.resume or not (checkpointer.directory / LIFT_FILE).is_file():
        return config
    saved = json.loads((checkpointer.directory / LIFT_FILE).read_text())
    backend = saved["backend"] if config.backend == AUTO else config.backend
    # the step loop only with its own backend: another backend's loop may not be one of its pairs
    step_loop = saved["step_loop"] if config.step_loop == AUTO and backend == saved["backend"] else config.step_loop
    return config.replace(backend=backend, step_loop=step_loop)


class Checkpoints:
    """One experiment's checkpoint folder: a :class:`Checkpointer` per named run."""

    def __init__(self, directory: str | os.PathLike, *, every: int, resume: bool = False,
                 on_save: Callable[[], None] | None = None):
        self.directory = pathlib.Path(directory).expanduser().absolute()
        self.every, self.resume, self.on_save = every, resume, on_save

    def run(self, name: str) -> Checkpointer:
        """The checkpointer of run ``name`` (a folder name: letters, digits, ``-_.``)."""
        return Checkpointer(self.directory / _folder(name), every=self.every, resume=self.resume, on_save=self.on_save)

    def sub(self, name: str) -> Checkpoints:
        """The checkpoints of a part of the experiment, in a folder ``name`` of their own."""
        return Checkpoints(self.directory / _folder(name), every=self.every, resume=self.resume, on_save=self.on_save)


def _folder(name: str) -> str:
    """``name`` as a folder of checkpoints: letters, digits, ``-_.`` only (ValueError otherwise)."""
    if not name or any(not (c.isalnum() or c in "-_.") for c in name):
        raise ValueError(f"checkpoint run name must be letters, digits, '-', '_' or '.', got {name!r}")
    return name
