"""Which way of running is fastest for a model: the automatic choices, from measurements.

Two choices depend on the model and the device, and no single answer is right:

* the backend of :func:`jaxcomm.population.lift` (measured by
  ``experiments/benchmark.py``: vmap wins for small MLPs, unrolling for CNNs on
  CPU, where vmapped convolution kernels become slow grouped convolutions);
* whether a chunk of steps runs as one ``lax.scan`` or as one jitted call per
  step: on CPU, XLA runs convolutions inside a loop body about 20x slower than
  the same convolutions at the top level of a program (measured: 0.9 s against
  0.04 s for one step of the chapter-2 CNN), so CNN steps are dispatched one
  call at a time there, while MLP steps run in ``lax.scan``.
"""

from __future__ import annotations

import json
import pathlib
from typing import Any

import jax
import numpy as np

from jaxcomm.population import BACKENDS

UNROLL_LIMIT = 64  # "auto" never unrolls more nodes than this: compile time grows with N
STEP_LOOPS = ("auto", "scan", "dispatch")
_CHOICES_FILE = pathlib.Path(__file__).parent / "assets" / "backends.json"


def model_family(model: Any) -> str:
    """The benchmark workload a model's speed resembles: "cnn", "teacher" (wide MLP) or "student"."""
    from jaxcomm.models import MLP, StridedCNN  # noqa: PLC0415

    if isinstance(model, StridedCNN):
        return "cnn"
    if isinstance(model, MLP):
        return "teacher" if max(model.hidden, default=0) >= 512 else "student"
    return "other"


def _load_choices() -> dict:
    try:
        return json.loads(_CHOICES_FILE.read_text())
    except (OSError, ValueError):
        return {}


def choose_backend(family: str, num_nodes: int, *, batch_size: int = 32, platform: str | None = None) -> str:
    """The fastest backend measured for the nearest benchmark row, or a rule of thumb.

    ``experiments/benchmark.py --write-choices`` records, per platform and model
    family, every backend's speed ranking at each measured (N, batch size); the
    row nearest in log N and log batch size decides. "unrolled" is skipped
    above :data:`UNROLL_LIMIT` nodes (compile time grows with N). Without
    measurements: "unrolled" for CNNs on CPU (vmapped convolutions become slow
    grouped convolutions), "vmap" otherwise.

    Args:
      family: from :func:`model_family`.
      num_nodes: N.
      batch_size: per-node minibatch.
      platform: "cpu", "gpu", "tpu"; default ``jax.default_backend()``.
    """
    platform = platform or jax.default_backend()
    allowed = [b for b in BACKENDS if b != "unrolled" or num_nodes <= UNROLL_LIMIT]
    measured = _load_choices().get(platform, {}).get(family)
    if measured:
        distance = lambda entry: abs(np.log(entry["num_nodes"] / num_nodes)) + abs(np.log(entry["batch_size"] /
                                                                                         batch_size))
        ranking = min(measured, key=distance)["ranking"]
        for backend in ranking:
            if backend in allowed:
                return backend
    if family == "cnn" and platform == "cpu" and "unrolled" in allowed:
        return "unrolled"
    return "vmap"


def write_backend_choices(summary: dict, platform: str | None = None) -> pathlib.Path:
    """Records a benchmark summary's rankings for :func:`choose_backend` (other platforms kept)."""
    platform = platform or jax.default_backend()
    table: dict[str, list] = {}
    for row in summary["rows"].values():
        speeds = {b: row.get(f"{b}_node_steps_per_s") for b in BACKENDS}
        speeds = {b: v for b, v in speeds.items() if v}
        if "error" in row or not speeds:
            continue
        table.setdefault(row["workload"], []).append({
            "num_nodes": row["num_nodes"], "batch_size": row["batch_size"],
            "ranking": sorted(speeds, key=speeds.get, reverse=True)})
    choices = _load_choices()
    choices[platform] = table
    _CHOICES_FILE.write_text(json.dumps(choices, indent=1) + "\n")
    return _CHOICES_FILE


def choose_step_loop(family: str, *, platform: str | None = None) -> str:
    """ "dispatch" (one jitted call per step) for CNNs on CPU, else "scan"."""
    platform = platform or jax.default_backend()
    return "dispatch" if family == "cnn" and platform == "cpu" else "scan"
