"""Checkpoints of a whole simulation with orbax: every k steps, on SIGINT/SIGTERM, at the end.

A checkpoint holds one run's state pytree (parameters, optimiser states,
inboxes, counters, RNG keys, step: whatever the step function carries) and a
JSON dict of the metrics recorded so far. The state's leaves are saved flat and
restored into the structure of a template (the freshly initialised state), so
NamedTuples, ``None`` subtrees and custom nodes come back exactly as they were.

An experiment holds one :class:`Checkpoints` folder with a sub-folder per run
(``Checkpoints.run(name)``); :func:`jaxcomm.driver.train` saves and
resumes through it.
"""

from __future__ import annotations

import os
import pathlib
import shutil
from typing import Any

import jax
import numpy as np
import orbax.checkpoint as ocp

PyTree = Any


class Checkpointer:
    """Saves and restores one run under ``directory`` (keeps the newest ``keep``).

    Attributes:
      directory: absolute path of the run's checkpoints.
      every: save every ``every`` steps (rounded up to whole chunks by the driver).
      resume: whether :func:`jaxcomm.driver.train` starts from the latest
        checkpoint; if False, existing checkpoints of this run are deleted first.
    """

    def __init__(self, directory: str | os.PathLike, *, every: int, resume: bool = False, keep: int = 2):
        if not isinstance(every, int) or every < 1:
            raise ValueError(f"checkpoint every must be an integer >= 1, got {every!r}")
        self.directory = pathlib.Path(directory).expanduser().absolute()
        self.every, self.resume = every, resume
        if not resume and self.directory.exists():
            shutil.rmtree(self.directory)
        options = ocp.CheckpointManagerOptions(max_to_keep=keep, create=True)
        self._manager = ocp.CheckpointManager(self.directory, options=options)

    def latest_step(self) -> int | None:
        """Steps done at the newest checkpoint, or None."""
        return self._manager.latest_step()

    def save(self, step: int, state: PyTree, meta: dict) -> None:
        """Writes ``state`` and the JSON ``meta`` at ``step`` and waits until it is on disk."""
        if self._manager.latest_step() == step:
            return
        leaves = {str(i): np.asarray(leaf) for i, leaf in enumerate(jax.tree_util.tree_leaves(jax.device_get(state)))}
        self._manager.save(step, args=ocp.args.Composite(state=ocp.args.StandardSave(leaves),
                                                         meta=ocp.args.JsonSave(meta)), force=True)
        self._manager.wait_until_finished()

    def restore(self, template: PyTree, step: int | None = None) -> tuple[int, PyTree, dict]:
        """``(step, state, meta)`` of checkpoint ``step`` (default the latest), shaped like ``template``.

        Raises:
          FileNotFoundError: no checkpoint here.
          ValueError: the checkpoint does not fit the template (another config).
        """
        step = self._manager.latest_step() if step is None else step
        if step is None:
            raise FileNotFoundError(f"no checkpoint in {self.directory}")
        flat, treedef = jax.tree_util.tree_flatten(template)
        restored = self._manager.restore(step, args=ocp.args.Composite(state=ocp.args.StandardRestore(),
                                                                       meta=ocp.args.JsonRestore()))
        saved = restored["state"]
        if len(saved) != len(flat):
            raise ValueError(f"checkpoint {self.directory}/{step} holds {len(saved)} arrays, the run expects "
                             f"{len(flat)}: it was written by another configuration")
        leaves = []
        for i, like in enumerate(flat):
            value = np.asarray(saved[str(i)])
            if value.shape != np.shape(like) or value.dtype != np.asarray(like).dtype:
                raise ValueError(f"checkpoint {self.directory}/{step}: array {i} is {value.dtype}{list(value.shape)}, "
                                 f"the run expects {np.asarray(like).dtype}{list(np.shape(like))}")
            sharding = getattr(like, "sharding", None)
            leaves.append(jax.device_put(value, sharding) if sharding is not None else value)
        return int(step), jax.tree_util.tree_unflatten(treedef, leaves), dict(restored["meta"])

    def close(self) -> None:
        self._manager.close()


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


class Checkpoints:
    """One experiment's checkpoint folder: a :class:`Checkpointer` per named run."""

    def __init__(self, directory: str | os.PathLike, *, every: int, resume: bool = False):
        self.directory = pathlib.Path(directory).expanduser().absolute()
        self.every, self.resume = every, resume

    def run(self, name: str) -> Checkpointer:
        """The checkpointer of run ``name`` (a folder name: letters, digits, ``-_.``)."""
        if not name or any(not (c.isalnum() or c in "-_.") for c in name):
            raise ValueError(f"checkpoint run name must be letters, digits, '-', '_' or '.', got {name!r}")
        return Checkpointer(self.directory / name, every=self.every, resume=self.resume)
