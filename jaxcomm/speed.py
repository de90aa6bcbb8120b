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

A model's family is read from what its step computes (:func:`family_of`):
"conv" (any convolution), "wide_mlp" (a dense layer of >= 512 outputs) or
"mlp". ``experiments/benchmark.py --write-choices`` measures every (backend,
step loop) pair per family and N and records the ranking in
``jaxcomm/assets/backends.json``; :func:`choose` reads it.
"""

from __future__ import annotations

import functools
import json
import os
import pathlib
from collections.abc import Callable, Mapping
from typing import Any

import jax
import jax.extend.core
import numpy as np

from jaxcomm.population import AUTO, BACKENDS

UNROLL_LIMIT = 64  # "auto" never unrolls more nodes than this: compile time grows with N
STEP_LOOPS = ("scan", "dispatch")
_CHOICES_FILE = pathlib.Path(__file__).parent / "assets" / "backends.json"
FAMILIES = ("conv", "wide_mlp", "mlp")
WIDE = 512  # a matmul with this many output features or more makes a "wide_mlp"


def _walk(jaxpr: jax.extend.core.Jaxpr):
    """Every equation of ``jaxpr`` and of its sub-jaxprs (jit, custom_jvp/vjp, scan, cond, while...)."""
    for eqn in jaxpr.eqns:
        yield eqn
        for sub in jax.extend.core.jaxprs_in_params(eqn.params):
            yield from _walk(sub)


def _feature_width(eqn) -> int:
    """Output features of a ``dot_general`` in the ``x @ W`` form of a dense layer, else 0.

    The form: ``x`` contracts its trailing dimensions and ``W``'s last dimension
    is free (the layer's outputs). This skips the matmuls of a backward pass
    (weight gradients ``g^T x`` contract the batch, input gradients ``g W^T``
    contract ``W``'s outputs), whose widths are the inputs' or the batch's.
    """
    (lhs_contract, rhs_contract), (_, rhs_batch) = eqn.params["dimension_numbers"]
    lhs, rhs = (v.aval.shape for v in eqn.invars)
    trailing = sorted(lhs_contract) == list(range(len(lhs) - len(lhs_contract), len(lhs)))
    last = len(rhs) - 1
    if not trailing or last < 0 or last in rhs_contract or last in rhs_batch:
        return 0
    return int(rhs[last])


def family_of(fn: Callable[..., Any], *example_args: Any) -> str:
    """The benchmark family whose speed ``fn`` resembles, from what it computes.

    Traces ``jax.make_jaxpr(fn)(*example_args)`` (nothing runs; arguments may be
    pytrees, PRNG keys or ``jax.ShapeDtypeStruct``) and looks through every
    equation, sub-jaxprs included: "conv" if any ``conv_general_dilated``; else
    "wide_mlp" if a dense layer (``x @ W``) has >= :data:`WIDE` output features;
    else "mlp". E.g. ``family_of(train_step, state, images, ..., key)`` of one
    node, unlifted.

    Args:
      fn: a function JAX can trace.
      *example_args: its arguments (or their shapes and dtypes).

    Returns:
      One of :data:`FAMILIES`, the key of :func:`choose`'s measurements.
    """
    width = 0
    for eqn in _walk(jax.make_jaxpr(fn)(*example_args).jaxpr):
        if eqn.primitive.name == "conv_general_dilated":
            return "conv"
        if eqn.primitive.name == "dot_general":
            width = max(width, _feature_width(eqn))
    return "wide_mlp" if width >= WIDE else "mlp"


def model_family(model: Any, example_input: Any) -> str:
    """:func:`family_of` a Flax model's forward pass (``model.init``) on ``example_input`` (an array or
    ``jax.ShapeDtypeStruct``)."""
    return family_of(functools.partial(model.init, jax.random.PRNGKey(0)), example_input)


DETERMINISTIC_FLAG = "--xla_gpu_deterministic_ops=true"


def deterministic() -> None:
    """Asks XLA for bitwise-repeatable GPU runs; call before the first JAX computation.

    Sets ``--xla_gpu_deterministic_ops=true`` in ``XLA_FLAGS``: no atomics in reductions and scatters,
    no autotuning between kernels of different numerics. The price is speed on a GPU (reductions and
    scatter-adds lose their fastest kernels). CPU runs are already repeatable and are unaffected.

    Raises:
      RuntimeError: JAX's backends are already initialised (the flag would be ignored).
    """
    from jax._src import xla_bridge  # noqa: PLC0415  (no public test for an initialised backend)

    if xla_bridge.backends_are_initialized():
        raise RuntimeError("deterministic() must run before the first JAX computation: XLA reads its flags once")
    flags = os.environ.get("XLA_FLAGS", "")
    if DETERMINISTIC_FLAG not in flags.split():
        os.environ["XLA_FLAGS"] = f"{flags} {DETERMINISTIC_FLAG}".strip()


def _load_choices() -> dict:
    try:
        return json.loads(_CHOICES_FILE.read_text())
    except (OSError, ValueError):
        return {}


def rule_of_thumb(family: str, num_nodes: int, *, platform: str) -> tuple[str, str]:
    """The choice without measurements: see the module docstring."""
    if platform != "cpu":
        return "vmap", "scan"
    if family == "conv":
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
      family: one of :data:`FAMILIES`, from :func:`family_of`.
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


def write_backend_choices(summary: dict, platform: str | None = None, *,
                          families: Mapping[str, str] | None = None) -> pathlib.Path:
    """Records a benchmark summary's rankings for :func:`choose` (other platforms kept).

    Args:
      summary: rows with ``workload``, ``num_nodes``, ``batch_size`` and
        ``<backend>_<step loop>_node_steps_per_s``.
      platform: default ``jax.default_backend()``.
      families: the family of each workload name (default: the workload is the family).
    """
    platform = platform or jax.default_backend()
    families = families or {}
    table: dict[str, list] = {}
    for row in summary["rows"].values():
        if "error" in row:
            continue
        speeds = {(b, s): row.get(f"{b}_{s}_node_steps_per_s") for b in BACKENDS for s in STEP_LOOPS}
        speeds = {pair: v for pair, v in speeds.items() if v}
        if speeds:
            table.setdefault(families.get(row["workload"], row["workload"]), []).append({
                "num_nodes": row["num_nodes"], "batch_size": row["batch_size"],
                "ranking": [list(pair) for pair in sorted(speeds, key=speeds.get, reverse=True)]})
    choices = _load_choices()
    choices[platform] = table
    _CHOICES_FILE.write_text(json.dumps(choices, indent=1) + "\n")
    return _CHOICES_FILE
