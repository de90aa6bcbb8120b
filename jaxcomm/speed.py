"""Which way of running is fastest for a model: the automatic choices, from measurements.

Two choices depend on the model and the device, and no single answer is right:

* the backend of :func:`jaxcomm.population.lift`: vmap wins for small MLPs,
  unrolling for CNNs on CPU, where vmapped convolution kernels become slow
  grouped convolutions;
* whether a chunk of steps runs as one ``lax.scan`` or as one jitted call per
  step ("dispatch"): on CPU, XLA runs convolutions inside a loop body about 20x
  slower than the same convolutions at the top level of a program (measured:
  0.9 s against 0.04 s for one step of the chapter-2 CNN), and wide matmuls
  lose too, while small MLP steps are dominated by the per-call overhead that
  a scan removes.

``experiments/benchmark.py --write-choices`` measures every (backend, step loop)
pair per model family and N and records the ranking in
``jaxcomm/assets/backends.json``; :func:`choose` reads it.
"""

from __future__ import annotations

import json
import pathlib
from typing import Any

import jax
import numpy as np

from jaxcomm.population import AUTO, BACKENDS

UNROLL_LIMIT = 64  # "auto" never unrolls more nodes than this: compile time grows with N
STEP_LOOPS = ("scan", "dispatch")
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


def rule_of_thumb(family: str, num_nodes: int, *, platform: str) -> tuple[str, str]:
    """The choice without measurements: see the module docstring."""
    if platform != "cpu":
        return "vmap", "scan"
    if family == "cnn":
        return ("unrolled" if num_nodes <= UNROLL_LIMIT else "vmap"), "dispatch"
    return "vmap", "scan"


def choose(
    family: str,
    num_nodes: int,
    *,
    batch_size: int = 32,
    platform: str | None = None,
    backend: str = AUTO,
    step_loop: str = AUTO,
) -> tuple[str, str]:
    """The fastest (backend, step loop) measured for the nearest benchmark row.

    The measured row nearest in log N and log batch size decides; its ranking
    is read from the fastest down, skipping pairs that contradict a choice the
    caller fixed (``backend`` or ``step_loop`` other than "auto") and
    "unrolled" above :data:`UNROLL_LIMIT` nodes. Without measurements for this
    platform and family, :func:`rule_of_thumb`.

    Args:
      family: from :func:`model_family`.
      num_nodes: N.
      batch_size: per-node minibatch.
      platform: "cpu", "gpu", "tpu"; default ``jax.default_backend()``.
      backend: "auto" or a fixed backend.
      step_loop: "auto" or a fixed step loop.

    Returns:
      ``(backend, step_loop)``, neither "auto".
    """
    platform = platform or jax.default_backend()
    fits = lambda b, s: ((backend in (AUTO, b)) and (step_loop in (AUTO, s))
                         and (b != "unrolled" or num_nodes <= UNROLL_LIMIT or backend == b))
    measured = _load_choices().get(platform, {}).get(family)
    if measured:
        distance = lambda e: abs(np.log(e["num_nodes"] / num_nodes)) + abs(np.log(e["batch_size"] / batch_size))
        for b, s in min(measured, key=distance)["ranking"]:
            if fits(b, s):
                return b, s
    default_backend, default_loop = rule_of_thumb(family, num_nodes, platform=platform)
    return (default_backend if backend == AUTO else backend), (default_loop if step_loop == AUTO else step_loop)


def write_backend_choices(summary: dict, platform: str | None = None) -> pathlib.Path:
    """Records a benchmark summary's rankings for :func:`choose` (other platforms kept)."""
    platform = platform or jax.default_backend()
    table: dict[str, list] = {}
    for row in summary["rows"].values():
        if "error" in row:
            continue
        speeds = {(b, s): row.get(f"{b}_{s}_node_steps_per_s") for b in BACKENDS for s in STEP_LOOPS}
        speeds = {pair: v for pair, v in speeds.items() if v}
        if speeds:
            table.setdefault(row["workload"], []).append({
                "num_nodes": row["num_nodes"], "batch_size": row["batch_size"],
                "ranking": [list(pair) for pair in sorted(speeds, key=speeds.get, reverse=True)]})
    choices = _load_choices()
    choices[platform] = table
    _CHOICES_FILE.write_text(json.dumps(choices, indent=1) + "\n")
    return _CHOICES_FILE
